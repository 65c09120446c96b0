/**
 * "Looks like English" for the output of a small byte-level model trained on the Brown corpus:
 * it misspells and wanders, but its text is mostly ASCII letters and spaces, its words have
 * English lengths, and the commonest English words make up a good share of them. Random
 * bytes (an untrained model) or random letters fail every one of these.
 */

/** The most frequent words of written English (Brown corpus order, roughly). */
const COMMON_WORDS = new Set(
  `the of and to a in that is was he for it with as his on be at by i had not are but from or have
  an they which one you were her all she there would their we him been has when who will more no if
  out so said what up its about into than them can only other new some could time these two may then
  do first any my now such like our over man me even most made after also did many before must
  through back years where much your way well down should because each just those people mr how too
  little state good very make world still own see men work long get here between both life being
  under never day same another know while last might us great old year off come since against go
  came right used take three`.split(/\s+/),
);

export interface EnglishVerdict {
  ok: boolean;
  /** Each measure and the bound it was held to, for the failure message. */
  measures: string[];
}

export function englishVerdict(text: string): EnglishVerdict {
  const chars = [...text];
  const share = (pattern: RegExp) => (chars.length === 0 ? 0 : chars.filter((c) => pattern.test(c)).length / chars.length);
  const plain = share(/[A-Za-z0-9\s.,;:'"!?()&$%-]/);
  const letters = share(/[A-Za-z]/);
  const words = text.toLowerCase().match(/[a-z]+/g) ?? [];
  const common = words.filter((word) => COMMON_WORDS.has(word));
  const distinctCommon = new Set(common).size;
  const meanLength = words.length === 0 ? 0 : words.reduce((sum, word) => sum + word.length, 0) / words.length;
  const checks: [string, boolean][] = [
    [`${chars.length} characters (>= 40)`, chars.length >= 40],
    [`${(plain * 100).toFixed(0)}% plain ASCII text (>= 90%)`, plain >= 0.9],
    [`${(letters * 100).toFixed(0)}% letters (>= 60%)`, letters >= 0.6],
    [`${words.length} words (>= 8)`, words.length >= 8],
    [`mean word length ${meanLength.toFixed(1)} (2 to 9)`, meanLength >= 2 && meanLength <= 9],
    [`${distinctCommon} distinct common words (>= 3)`, distinctCommon >= 3],
    [`${((common.length / Math.max(1, words.length)) * 100).toFixed(0)}% of words common (>= 15%)`, common.length >= 0.15 * words.length],
  ];
  return { ok: checks.every(([, passed]) => passed), measures: checks.map(([what, passed]) => `${passed ? "ok" : "FAIL"}: ${what}`) };
}
