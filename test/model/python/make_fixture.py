"""Generate every test fixture under test/fixtures, deterministically (one command):

    /usr/bin/python3 test/model/python/make_fixture.py [--out-dir test/fixtures]

Writes
  tiny-gpt.pt (+ .sha256)        random GPT: byte tokenizer (259), context 64, 2 layers,
                                 2 heads, d=32
  tiny-gpt-eos.pt (+ .sha256)    same weights, the <eos> embedding row scaled so that
                                 greedy decoding stops on eos early for some prompts
  tiny-gpt-hf.pt (+ .sha256)     random GPT with vocab 297 carrying tiny-bpe.tokenizer.json
  tiny-bpe.tokenizer.json        hand-written GPT-2-style byte-level BPE (256 bytes,
                                 40 merges, <|endoftext|>), also embedded in tiny-gpt-hf.pt
  tiny-gpt.golden.json           greedy continuations from reference.py, single rows and
                                 one mixed batch (asserted equal), first-step logits
  broken/                        fixtures for error paths (see BROKEN below)

Weights are drawn with larger scales than training init so that continuations depend on
context, positions and the cache (a near-zero random GPT just repeats its last token).
"""

import argparse
import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
if __name__ == "__main__" and os.environ.get("PYTHONHASHSEED") != "0":
    # TorchScript writes some module constants in set order, which follows string hashing:
    # fixed hashing keeps the archives byte-identical from run to run.
    os.environ["PYTHONHASHSEED"] = "0"
    os.execv(sys.executable, [sys.executable] + sys.argv)

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
START_CWD = os.getcwd()     # _load_relative changes directory; resolve --out-dir from here
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.join(ROOT, "python"))


def _load_relative(relpath: str, name: str):
    """Import ROOT/relpath as module `name` (a package's module too), recording the
    repo-relative path in its code objects. TorchScript archives embed the source file name
    in their debug info; a relative name keeps the fixtures byte-identical whichever
    checkout generates them."""
    if name in sys.modules:
        return sys.modules[name]
    os.chdir(ROOT)
    with open(relpath, encoding="utf-8") as f:
        source = f.read()
    spec = importlib.util.spec_from_loader(name, loader=None, origin=relpath)
    module = importlib.util.module_from_spec(spec)
    module.__file__ = relpath
    sys.modules[name] = module
    exec(compile(source, relpath, "exec"), module.__dict__)
    package, _, leaf = name.rpartition(".")
    if package:
        setattr(sys.modules[package], leaf, module)
    return module


import torchserve_node  # noqa: E402  (the package first, then its gpt module by hand)
gpt = _load_relative("python/torchserve_node/gpt.py", "torchserve_node.gpt")
from torchserve_node import export_gpt, reference  # noqa: E402  (use the gpt loaded above)
from torchserve_node.hf_tokenizer import bytes_to_unicode  # noqa: E402

SEED = 20240611
TINY = dict(vocab_size=259, block_size=64, n_layer=2, n_head=2, n_embd=32, bias=True,
            gelu="tanh")
EOS = 257
N_LOGITS = 8
# Cross-CPU tolerance of the computed floats in the goldens (logits of order 1; float32 BLAS
# kernels of different CPUs agree to ~1e-6). Greedy margins must be 10x this.
FLOAT_TOLERANCE = 1e-4

# (name, prompt text or None, prompt ids when no text, max_new_tokens)
LONG_TEXT = ("It was the best of times, it was the worst of times, it was the age of wisdom, "
             "it was the age of foolishness.")          # 104 bytes > context 64
CASES = [
    ("ascii", "Hello, world!", None, 16),
    ("utf8", "héllo wörld ☃ 😀", None, 12),
    ("one-token", "A", None, 20),
    ("longer-than-context", LONG_TEXT, None, 8),        # keeps the last 64 - 8 = 56 tokens
    ("slides", "The quick brown fox", None, 100),       # reserve 32; re-prefills twice
    ("long-and-slides", LONG_TEXT, None, 40),           # prompt cut to 32, then slides
    ("one-new-token", "ok", None, 1),
]
EOS_SCALE = 4.5      # eos-row norm for tiny-gpt-eos.pt (eos starts winning from about 1.75)

HF_MERGES = ["Ġ t", "Ġ a", "h e", "i n", "r e", "o n", "Ġt he", "e r", "Ġ s", "a t",
             "Ġ w", "Ġ o", "e n", "Ġ c", "i t", "i s", "a n", "o r", "e s", "Ġ b",
             "e d", "Ġ f", "in g", "Ġ p", "o u", "Ġa n", "a l", "a r", "Ġt o", "Ġ m",
             "Ġo f", "Ġ in", "Ġ d", "Ġ h", "Ġan d", "i c", "a s", "l e", "Ġt h", "i on"]
HF_EOS_TEXT = "<|endoftext|>"
HF_VOCAB = 256 + len(HF_MERGES) + 1
HF_CASES = [  # ids only: text encoding is the TS tokenizer's job
    ("hf-short", None, [84, 258, 220, 68], 10),
    ("hf-one-token", None, [40], 24),
    ("hf-slides", None, list(range(256, 256 + 20)), 80),
]

BROKEN = {
    "truncated.pt": "the first half of tiny-gpt.pt: not a readable archive",
    "corrupt.pt": "tiny-gpt.pt with 8 bytes flipped inside the wte tensor data; it still "
                  "loads (TorchScript does not check the zip CRC) and its .sha256 holds the "
                  "ORIGINAL digest, so only sha256 verification catches it",
    "no-cache-shape.pt": "a valid GPT module (config.json present) without the exported "
                         "cache_shape method",
    "bad-version.pt": "interface_version() returns 99 while config.json says 1",
    "no-config.pt": "the tiny GPT saved without the config.json extra file",
}


# ------------------------------------------------------------------------- models

def random_gpt(cfg: dict, seed: int):
    """Seeded random weights, scaled so that greedy output varies with context: a small
    token embedding (the tied head would otherwise favour repeating the last token) and
    strong attention/MLP branches."""
    model = gpt.GPT(gpt.GPTConfig(**cfg))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():   # lm_head.weight is tied to wte
            if name == "wte.weight":
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
            elif name == "wpe.weight":
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            elif p.dim() == 1 and name.endswith("weight"):          # LayerNorm gains
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif p.dim() == 1:                                       # biases
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            else:
                gain = 3.0 if name.endswith("c_proj.weight") else 2.0
                p.copy_(gain * torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
    model.eval()
    return model


# Interface-breaking variants: loaded like gpt.py, so their scripted code records a
# repo-relative file name (not the absolute path this script was started with).
fixture_models = _load_relative("test/model/python/fixture_models.py", "fixture_models")
NoCacheShapeGPT = fixture_models.NoCacheShapeGPT
BadVersionGPT = fixture_models.BadVersionGPT


def _variant(cls, model):
    v = cls(gpt.GPTConfig(**TINY))
    v.load_state_dict(model.state_dict())
    v.eval()
    return v


# ---------------------------------------------------------------------- tokenizer

def tiny_bpe_tokenizer() -> dict:
    vocab = {}
    for i, ch in enumerate(bytes_to_unicode().values()):
        vocab[ch] = i
    for merge in HF_MERGES:
        a, b = merge.split(" ")
        assert a in vocab and b in vocab, merge
        vocab[a + b] = len(vocab)
    eos_id = len(vocab)
    assert eos_id + 1 == HF_VOCAB
    vocab[HF_EOS_TEXT] = eos_id
    byte_level = {"add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": eos_id, "content": HF_EOS_TEXT, "single_word": False,
                          "lstrip": False, "rstrip": False, "normalized": True,
                          "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", **byte_level},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True,
                           "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "",
                  "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                  "merges": HF_MERGES},
    }


# ------------------------------------------------------------------------ goldens

def sha256_of(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def run_cases(ckpt, cases):
    """Each case alone, then all in one batch (in reverse order); they must agree."""
    results = []
    for name, text, ids, m in cases:
        prompt = ckpt.encode(text) if text is not None else list(ids)
        first, trace = [], []
        out = reference.generate(ckpt, [prompt], [m], first_logits=first, trace=trace)[0]
        t = trace[0]
        rec = {"name": name, "prompt": text, "prompt_ids": prompt, "max_new_tokens": m,
               "prompt_ids_used": t["prompt_ids_used"], "output_ids": out}
        if ckpt.tokenizer["kind"] == "byte":
            rec["output_text"] = ckpt.decode(out)
        rec.update({"stopped_on_eos": t["stopped_on_eos"], "reprefills": t["reprefills"],
                    "min_margin": round(t["min_margin"], 6),
                    "first_logits": [round(float(x), 6) for x in first[0][:N_LOGITS]]})
        results.append((rec, first[0]))
    order = list(reversed(range(len(results))))
    prompts = [results[i][0]["prompt_ids"] for i in order]
    maxes = [results[i][0]["max_new_tokens"] for i in order]
    first = []
    outs = reference.generate(ckpt, prompts, maxes, first_logits=first)
    for j, i in enumerate(order):
        rec, single_first = results[i]
        if outs[j] != rec["output_ids"]:
            raise SystemExit(f"{ckpt.path}: case {rec['name']}: batched output {outs[j]} "
                             f"!= single-row output {rec['output_ids']}")
        if not torch.allclose(first[j], single_first, atol=1e-5, rtol=1e-5):
            raise SystemExit(f"{ckpt.path}: case {rec['name']}: batched first logits differ")
        if rec["min_margin"] < 10 * FLOAT_TOLERANCE:
            raise SystemExit(f"{ckpt.path}: case {rec['name']}: greedy margin "
                             f"{rec['min_margin']} is too small for a robust golden")
    return [r for r, _ in results], [results[i][0]["name"] for i in order]


def checkpoint_entry(path, ckpt, cases, order, extra=None):
    entry = {"file": os.path.basename(path), "sha256": sha256_of(path), "config": ckpt.config}
    if extra:
        entry.update(extra)
    entry["batch_order"] = order
    entry["batch_agrees_with_single_rows"] = True
    entry["cases"] = cases
    return entry


def export(model, path, tokenizer, tok_json=None):
    config = export_gpt.build_config(_cfg_of(model), "gpt", tokenizer)
    # No load-time reference logits: the committed files must match a fresh run on any CPU.
    export_gpt.save_module(model, path, config, tok_json, load_check=False)
    export_gpt.verify(path, model.training_logits)
    export_gpt.write_sha256(path)
    return reference.load(path)


def _cfg_of(model):
    return gpt.GPTConfig(vocab_size=model.wte.num_embeddings, block_size=model.block_size,
                         n_layer=model.n_layer, n_head=model.n_head,
                         n_embd=model.wte.embedding_dim, bias=model.blocks[0].attn.c_attn.bias
                         is not None, gelu=model.blocks[0].mlp.gelu)


def make_eos_variant(out_dir):
    """tiny-gpt.pt with the eos row of wte (tied to lm_head) set to EOS_SCALE x a random
    unit vector: eos then wins early for some prompts (once as the very first token) and
    never for others."""
    g = torch.Generator().manual_seed(SEED + 1)
    direction = torch.randn(TINY["n_embd"], generator=g)
    variant = random_gpt(TINY, SEED)
    with torch.no_grad():
        variant.wte.weight[EOS] = direction / direction.norm() * EOS_SCALE
    return export(variant, os.path.join(out_dir, "tiny-gpt-eos.pt"),
                  dict(export_gpt.BYTE_TOKENIZER))


def make_broken(model, out_dir):
    bdir = os.path.join(out_dir, "broken")
    os.makedirs(bdir, exist_ok=True)
    src = os.path.join(out_dir, "tiny-gpt.pt")
    with open(src, "rb") as f:
        good = f.read()
    # truncated
    with open(os.path.join(bdir, "truncated.pt"), "wb") as f:
        f.write(good[:len(good) // 2])
    export_gpt.write_sha256(os.path.join(bdir, "truncated.pt"))
    # corrupt: flip bytes in the middle of the first (largest: wte) tensor record
    import zipfile
    import struct
    with zipfile.ZipFile(src) as z:
        info = max((i for i in z.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    data = bytearray(good)
    off = info.header_offset
    name_len, extra_len = struct.unpack("<HH", data[off + 26:off + 30])
    start = off + 30 + name_len + extra_len + info.file_size // 2
    for i in range(8):
        data[start + i] ^= 0xFF
    corrupt = os.path.join(bdir, "corrupt.pt")
    with open(corrupt, "wb") as f:
        f.write(bytes(data))
    with open(corrupt + ".sha256", "w", encoding="ascii", newline="\n") as f:
        f.write(f"{hashlib.sha256(good).hexdigest()}  corrupt.pt\n")
    # interface violations
    config = export_gpt.build_config(_cfg_of(model), "gpt", dict(export_gpt.BYTE_TOKENIZER))
    for fname, cls in (("no-cache-shape.pt", NoCacheShapeGPT), ("bad-version.pt", BadVersionGPT)):
        export_gpt.save_module(_variant(cls, model), os.path.join(bdir, fname), config, load_check=False)
        export_gpt.write_sha256(os.path.join(bdir, fname))
    path = os.path.join(bdir, "no-config.pt")
    torch.jit.save(torch.jit.script(model), path)
    export_gpt.write_sha256(path)
    with open(os.path.join(bdir, "README.md"), "w", encoding="utf-8", newline="\n") as f:
        f.write("# Broken checkpoints for error-path tests\n\nGenerated by "
                "`test/model/python/make_fixture.py`. Each has a `.sha256` of its own bytes except "
                "`corrupt.pt`, whose `.sha256` holds the digest of the intact `tiny-gpt.pt`.\n\n")
        for k, v in BROKEN.items():
            f.write(f"- `{k}`: {v}\n")


def compact_json(value, indent=0) -> str:
    """JSON with one key per line but arrays of numbers on a single line."""
    pad = " " * (indent + 1)
    if isinstance(value, dict):
        if not value:
            return "{}"
        items = [f"{pad}{json.dumps(k)}: {compact_json(v, indent + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        items = [pad + compact_json(v, indent + 1) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"
    return json.dumps(value, ensure_ascii=False)


def generate_all(out_dir: str):
    torch.set_num_threads(1)
    os.makedirs(out_dir, exist_ok=True)
    model = random_gpt(TINY, SEED)
    byte_tok = dict(export_gpt.BYTE_TOKENIZER)

    tiny_path = os.path.join(out_dir, "tiny-gpt.pt")
    ckpt = export(model, tiny_path, byte_tok)
    cases, order = run_cases(ckpt, CASES)
    golden = {
        "about": "Greedy goldens from python/torchserve_node/reference.py (regenerate with "
                 "/usr/bin/python3 test/model/python/make_fixture.py). Each case was run alone "
                 "and all cases of a checkpoint as one mixed batch in batch_order; the "
                 "outputs agree. first_logits: the first 8 logits after the prompt; "
                 "min_margin: smallest top-1 minus top-2 logit over the row's greedy steps. "
                 "Floats depend on the CPU's BLAS kernels: compare them within "
                 "float_tolerance, never bit for bit; every min_margin is at least 10x "
                 "that, so the token ids are exact on any CPU.",
        "float_tolerance": FLOAT_TOLERANCE,
        "policy": "C = block_size, M = max_new_tokens: reserve = min(M, C // 2); the prompt "
                  "keeps its last C - reserve tokens (prompt_ids_used); when the next token "
                  "would sit at position C the row is re-prefilled with its last C // 2 tokens "
                  "at positions 0.. (reprefills counts this); a row stops after M tokens or on "
                  "eos (not part of output_ids); greedy = argmax, ties to the lowest id.",
        "torch_version": torch.__version__.split("+")[0],
        "checkpoints": {},
        "broken": {f"broken/{k}": v for k, v in BROKEN.items()},
    }
    golden["checkpoints"]["tiny-gpt.pt"] = checkpoint_entry(tiny_path, ckpt, cases, order)

    eos_ckpt = make_eos_variant(out_dir)
    cases, order = run_cases(eos_ckpt, CASES)
    lens = [(len(c["output_ids"]), c["stopped_on_eos"], c["max_new_tokens"]) for c in cases]
    if not (any(e and 1 <= n <= 8 for n, e, _ in lens) and any(e and n == 0 for n, e, _ in lens)
            and sum(1 for n, e, m in lens if not e and n == m) >= 2):
        raise SystemExit(f"tiny-gpt-eos.pt no longer mixes early, immediate and no eos: {lens}")
    golden["checkpoints"]["tiny-gpt-eos.pt"] = checkpoint_entry(
        eos_ckpt.path, eos_ckpt, cases, order,
        {"note": f"tiny-gpt.pt with the eos row of wte (tied lm_head) set to {EOS_SCALE} x a "
                 "random unit vector: some rows stop on eos (stopped_on_eos; one before any "
                 "token), others run to max_new_tokens"})

    tok = tiny_bpe_tokenizer()
    tok_text = json.dumps(tok, ensure_ascii=False, indent=2) + "\n"
    with open(os.path.join(out_dir, "tiny-bpe.tokenizer.json"), "w", encoding="utf-8",
              newline="\n") as f:
        f.write(tok_text)
    hf_cfg = dict(TINY, vocab_size=HF_VOCAB)
    hf_model = random_gpt(hf_cfg, SEED + 2)
    hf_tok, _ = export_gpt.tokenizer_config(HF_VOCAB, os.path.join(out_dir, "tiny-bpe.tokenizer.json"))
    hf_path = os.path.join(out_dir, "tiny-gpt-hf.pt")
    hf_ckpt = export(hf_model, hf_path, hf_tok, tok_text)
    cases, order = run_cases(hf_ckpt, HF_CASES)
    golden["checkpoints"]["tiny-gpt-hf.pt"] = checkpoint_entry(
        hf_path, hf_ckpt, cases, order,
        {"tokenizer_file": "tiny-bpe.tokenizer.json",
         "note": "prompts given as ids only; the embedded tokenizer.json is byte-identical "
                 "to tiny-bpe.tokenizer.json"})

    make_broken(model, out_dir)
    with open(os.path.join(out_dir, "tiny-gpt.golden.json"), "w", encoding="utf-8",
              newline="\n") as f:
        f.write(compact_json(golden) + "\n")
    return golden


def main(argv=None):
    ap = argparse.ArgumentParser(description="generate test/fixtures")
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "test", "fixtures"))
    args = ap.parse_args(argv)
    out_dir = os.path.normpath(os.path.join(START_CWD, args.out_dir))
    golden = generate_all(out_dir)
    for name, entry in golden["checkpoints"].items():
        size = os.path.getsize(os.path.join(out_dir, name))
        print(f"{name}: {size:,} bytes, {len(entry['cases'])} cases, sha256 {entry['sha256'][:16]}...")
        for c in entry["cases"]:
            print(f"  {c['name']:20s} M={c['max_new_tokens']:3d} out={len(c['output_ids']):3d} "
                  f"eos={c['stopped_on_eos']!s:5s} reprefills={c['reprefills']} "
                  f"margin={c['min_margin']:.3f}")
    print(f"wrote {out_dir}")


if __name__ == "__main__":
    main()
