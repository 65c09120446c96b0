"""Import a GGUF file (llama.cpp's format) as a serving checkpoint (docs/checkpoint.md).

    /usr/bin/python3 scripts/model/import_gguf.py MODEL.gguf OUT.pt [--context N]

Architectures: general.architecture "llama" (Llama 2/3, Mistral, TinyLlama, SmolLM: llama.cpp
writes Mistral as llama) and "qwen2". Tensors F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q4_K, Q5_K,
Q6_K, used as they are: a quantized matrix keeps its GGUF bytes (quant.QuantLinear), a float
one its values (llama.cpp's Q4_K_M files hold Q5_0 and Q8_0 matrices where a width is not a
multiple of 256, and F16 ones where it is not a multiple of 32; its Q5_K_M files hold Q5_1
where those hold Q5_0, and are refused by name). llama.cpp's converter permutes the rows of
attn_q and attn_k of "llama" models per head (its rotary pairs adjacent dimensions where
Hugging Face rotates halves); the import undoes that permutation (on whole rows, so quantized
rows move as they are). "qwen2" is stored unpermuted (NEOX rope).
Rope: rope.freq_base, and rope_freqs.weight (Llama 3.1's per-frequency divisors) when present.

Tokenizer, from the metadata, written as a Hugging Face tokenizer.json: tokenizer.ggml.model
"gpt2" (byte-level BPE: tokens, merges, token types; pre-tokenizer "gpt-2"/"default",
"llama-bpe" (Llama 3), "qwen2", "smollm") or "llama" (SentencePiece BPE with byte fallback:
tokens and scores; merges rebuilt from the scores as transformers' converter does). BOS/EOS
(eos, eot), padding, add_bos_token, and tokenizer.chat_template.

Anything else (another architecture, tensor type, rope scaling type, pre-tokenizer, a missing
key or tensor) is an ImportError_ naming it. The written checkpoint is reloaded and its cached
forward checked against its own uncached forward and for finite logits.
"""

import argparse
import json
import os
import sys
from typing import Dict, List, Optional, Tuple

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np
import torch
import torch.nn as nn

from . import export_gpt, quant
from .gguf import LLAMA_FTYPES, GgufError, GgufFile
from .hf_tokenizer import bytelevel_tokenizer_json
from .llama import INTERFACE_VERSION, LlamaConfig, LlamaLM, Linear, Embedding, rope_inv_freq

ARCHITECTURES = ("llama", "qwen2")
QUANTIZED = {"Q8_0": "q8_0", "Q4_0": "q4_0", "Q5_0": "q5_0", "Q4_K": "q4_k", "Q5_K": "q5_k", "Q6_K": "q6_k"}
FLOATS = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
DEFAULT_CONTEXT = 4096
# llama.cpp file types (general.file_type) -> config.json "quantization".
FILE_TYPES = {ftype: name for name, ftype in LLAMA_FTYPES.items()}

# llama.cpp's pre-tokenizer regexes (llama-vocab.cpp) for byte-level BPE.
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
PRE_REGEX = {"llama-bpe": LLAMA3_REGEX, "llama3": LLAMA3_REGEX, "smaug-bpe": LLAMA3_REGEX, "qwen2": QWEN2_REGEX}
# token types
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


class ImportError_(ValueError):
    """A GGUF file the importer cannot serve; the message names the key, type or tensor."""


def _need(md: dict, key: str, kinds=(int,)):
    if key not in md:
        raise ImportError_(f"metadata key {key!r} is missing")
    v = md[key]
    if isinstance(v, (np.integer, np.floating)):
        v = v.item()
    if kinds and not isinstance(v, kinds):
        raise ImportError_(f"metadata key {key!r} has the value {v!r} of the wrong type")
    return v


def unpermute_rotary(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """Inverse of export_gguf.permute_rotary: rows from llama.cpp's adjacent pairs back to
    Hugging Face's rotate-half order, per head (any trailing shape: float or byte rows)."""
    return (w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


# ------------------------------------------------------------------------- tokenizer

def _spm_merges(tokens: List[str], scores: List[float], types: List[int]) -> List[str]:
    """Merges of a SentencePiece BPE vocabulary, as transformers' SentencePieceExtractor
    rebuilds them: every split of a piece into two pieces of the vocabulary, ordered by the
    score of the merged piece (best first), then by the ids of its parts."""
    vocab = {t: i for i, t in enumerate(tokens)}
    found: List[Tuple[float, int, int, str]] = []
    for i, piece in enumerate(tokens):
        if types[i] not in (NORMAL, USER_DEFINED) or len(piece) < 2:
            continue
        for cut in range(1, len(piece)):
            a, b = piece[:cut], piece[cut:]
            if a in vocab and b in vocab:
                found.append((-scores[i], vocab[a], vocab[b], f"{a} {b}"))
    found.sort()
    return [m for *_, m in found]


def tokenizer_json(md: dict) -> dict:
    model = _need(md, "tokenizer.ggml.model", (str,))
    tokens = md.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list) or not tokens:
        raise ImportError_("metadata key 'tokenizer.ggml.tokens' is missing or empty")
    types = [int(t) for t in md.get("tokenizer.ggml.token_type", [NORMAL] * len(tokens))]
    specials = [(i, t) for i, t in enumerate(tokens) if types[i] in (CONTROL, USER_DEFINED)]
    if model == "gpt2":
        pre = md.get("tokenizer.ggml.pre", "default")
        merges = md.get("tokenizer.ggml.merges")
        if not isinstance(merges, list):
            raise ImportError_("metadata key 'tokenizer.ggml.merges' is missing (byte-level BPE needs it)")
        vocab = {t: i for i, t in enumerate(tokens) if types[i] not in (CONTROL, USER_DEFINED)}
        tok = bytelevel_tokenizer_json(vocab, merges, specials)
        for added, (i, _) in zip(tok["added_tokens"], specials):
            added["special"] = types[i] == CONTROL
        if pre in PRE_REGEX:
            tok["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": PRE_REGEX[pre]}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
        elif pre not in ("default", "gpt-2", "gpt2"):
            raise ImportError_(f"tokenizer.ggml.pre {pre!r} is not supported (gpt-2, default, llama-bpe, qwen2)")
        return tok
    if model == "llama":
        scores = [float(s) for s in md.get("tokenizer.ggml.scores", [0.0] * len(tokens))]
        vocab = {t: i for i, t in enumerate(tokens)}
        unk = md.get("tokenizer.ggml.unknown_token_id")
        unk_token = tokens[int(unk)] if unk is not None and 0 <= int(unk) < len(tokens) else None
        added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                  "normalized": False, "special": types[i] in (CONTROL, UNKNOWN)}
                 for i, t in enumerate(tokens) if types[i] in (CONTROL, USER_DEFINED, UNKNOWN)]
        normalizers = [{"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]
        if md.get("tokenizer.ggml.add_space_prefix", True):
            normalizers.insert(0, {"type": "Prepend", "prepend": "▁"})
        decoders = [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                    {"type": "ByteFallback"}, {"type": "Fuse"}]
        if md.get("tokenizer.ggml.add_space_prefix", True):
            decoders.append({"type": "Strip", "content": " ", "start": 1, "stop": 0})
        return {
            "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
            "normalizer": {"type": "Sequence", "normalizers": normalizers},
            "pre_tokenizer": None, "post_processor": None,
            "decoder": {"type": "Sequence", "decoders": decoders},
            "model": {"type": "BPE", "dropout": None, "unk_token": unk_token,
                      "continuing_subword_prefix": None, "end_of_word_suffix": None,
                      "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                      "vocab": vocab, "merges": _spm_merges(tokens, scores, types)},
        }
    raise ImportError_(f"tokenizer.ggml.model {model!r} is not supported (gpt2 or llama)")


def tokenizer_entry(md: dict, vocab_size: int) -> dict:
    def tid(key):
        v = md.get(key)
        if v is None:
            return None
        v = int(v)
        if not 0 <= v < vocab_size:
            raise ImportError_(f"{key} {v} is outside the vocabulary of {vocab_size}")
        return v
    bos = tid("tokenizer.ggml.bos_token_id")
    eos = [e for e in (tid("tokenizer.ggml.eos_token_id"), tid("tokenizer.ggml.eot_token_id"),
                       tid("tokenizer.ggml.eom_token_id")) if e is not None]
    eos = list(dict.fromkeys(eos))
    default_bos = md.get("tokenizer.ggml.model") == "llama"
    add_bos = bool(md.get("tokenizer.ggml.add_bos_token", default_bos)) and bos is not None
    return {"kind": "huggingface", "file": "tokenizer.json", "bos_token_id": bos,
            "eos_token_id": eos[0] if eos else None, "eos_token_ids": eos,
            "pad_token_id": tid("tokenizer.ggml.padding_token_id"), "add_bos": add_bos}


# --------------------------------------------------------------------------- weights

def _config(md: dict, arch: str, context: Optional[int]) -> Tuple[LlamaConfig, dict]:
    a = arch
    D = _need(md, f"{a}.embedding_length")
    H = _need(md, f"{a}.attention.head_count")
    KV = md.get(f"{a}.attention.head_count_kv", H)
    KV = int(KV.item() if hasattr(KV, "item") else KV)
    hd = int(md.get(f"{a}.attention.key_length", D // H))
    if int(md.get(f"{a}.attention.value_length", hd)) != hd:
        raise ImportError_(f"{a}.attention.value_length differs from key_length")
    if int(md.get(f"{a}.rope.dimension_count", hd)) != hd:
        raise ImportError_(f"{a}.rope.dimension_count {md[a + '.rope.dimension_count']} is not the head size "
                           f"{hd} (partial rotary is not supported)")
    scaling = md.get(f"{a}.rope.scaling.type", "none")
    if scaling not in ("none", None):
        raise ImportError_(f"{a}.rope.scaling.type {scaling!r} is not supported")
    if md.get(f"{a}.expert_count"):
        raise ImportError_(f"{a}.expert_count: mixture of experts is not supported")
    window = md.get(f"{a}.attention.sliding_window")
    trained = int(md.get(f"{a}.context_length", DEFAULT_CONTEXT))
    block = min(trained, DEFAULT_CONTEXT) if context is None else context
    if context is not None and context > trained:
        raise ImportError_(f"--context {context} is past {a}.context_length {trained}")
    if window and int(window) < block:
        raise ImportError_(f"{a}.attention.sliding_window {window} is shorter than the context {block}: "
                           f"pass --context {window}")
    cfg = LlamaConfig(
        vocab_size=0, block_size=block, n_layer=_need(md, f"{a}.block_count"), n_head=H, n_kv_head=KV,
        n_embd=D, intermediate_size=_need(md, f"{a}.feed_forward_length"), head_dim=hd,
        rms_norm_eps=float(_need(md, f"{a}.attention.layer_norm_rms_epsilon", (float, int))),
        rope_theta=float(md.get(f"{a}.rope.freq_base", 10000.0)), rope_scaling=None)
    return cfg, {"context_length": trained}


_LAYER = {"attn_norm.weight": "attn_norm.weight", "ffn_norm.weight": "mlp_norm.weight",
          "attn_q.weight": "q_proj.weight", "attn_k.weight": "k_proj.weight", "attn_v.weight": "v_proj.weight",
          "attn_q.bias": "q_proj.bias", "attn_k.bias": "k_proj.bias", "attn_v.bias": "v_proj.bias",
          "attn_output.weight": "o_proj.weight", "ffn_gate.weight": "gate_proj.weight",
          "ffn_up.weight": "up_proj.weight", "ffn_down.weight": "down_proj.weight"}
_TOP = {"token_embd.weight": "embed.weight", "output_norm.weight": "norm.weight", "output.weight": "lm_head.weight"}


def _llama_name(name: str) -> Optional[str]:
    if name in _TOP:
        return _TOP[name]
    parts = name.split(".", 2)
    if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit() and parts[2] in _LAYER:
        return f"layers.{parts[1]}.{_LAYER[parts[2]]}"
    return None


def build_model(f: GgufFile, context: Optional[int] = None) -> Tuple[LlamaLM, dict]:
    md = f.metadata
    arch = _need(md, "general.architecture", (str,))
    if arch not in ARCHITECTURES:
        raise ImportError_(f"general.architecture {arch!r} is not supported (supported: {', '.join(ARCHITECTURES)})")
    cfg, extra = _config(md, arch, context)
    if "token_embd.weight" not in f.tensors:
        raise ImportError_("tensor 'token_embd.weight' is missing")
    cfg.vocab_size = f.tensors["token_embd.weight"].shape[0]
    cfg.tie_word_embeddings = "output.weight" not in f.tensors
    cfg.qkv_bias = "blk.0.attn_q.bias" in f.tensors
    rope_freqs = None
    names: Dict[str, str] = {}
    for name, info in f.tensors.items():
        if name == "rope_freqs.weight":
            rope_freqs = name
            continue
        dst = _llama_name(name)
        if dst is None:
            raise ImportError_(f"tensor {name!r} is not part of the {arch} layout")
        if info.type_name not in QUANTIZED and info.type_name not in FLOATS:
            raise ImportError_(f"tensor {name!r} has the type {info.type_name}, which is not supported "
                               f"(F32, F16, BF16, {', '.join(QUANTIZED)})")
        names[dst] = name
    # The checkpoint dtype: the matrices' float type when every matrix is of that one type,
    # else float32 (a quantized file's few float matrices are widened).
    matrix_types = {f.tensors[n].type_name for d, n in names.items() if len(f.tensors[n].dims) == 2}
    quantized = sorted({QUANTIZED[t] for t in matrix_types if t in QUANTIZED})
    floats = {t for t in matrix_types if t in FLOATS}
    dtype = FLOATS[floats.pop()] if not quantized and len(floats) == 1 else torch.float32
    n_head = {"q_proj": cfg.n_head, "k_proj": cfg.n_kv_head}

    def rows(dst: str, t: torch.Tensor) -> torch.Tensor:
        leaf = dst.split(".")[-2]
        if arch == "llama" and leaf in n_head:
            return unpermute_rotary(t, n_head[leaf]).contiguous()
        return t

    with torch.no_grad():
        model = LlamaLM(cfg, device="meta")
        expected = {n for n, _ in model.named_parameters()}
        if set(names) != expected:
            missing = sorted(expected - set(names))
            raise ImportError_(f"tensors missing: {[_gguf_name(m) for m in missing[:6]]}")
        for dst, name in names.items():
            info = f.tensors[name]
            raw = f.data(name)
            if info.type_name in QUANTIZED:
                continue
            t = torch.from_numpy(np.array(raw.view(np.int16) if info.type_name == "BF16" else raw))
            if info.type_name == "BF16":
                t = t.view(torch.bfloat16)
            want = tuple(model.get_parameter(dst).shape)
            if tuple(t.shape) != want:
                raise ImportError_(f"tensor {name!r} has shape {list(t.shape)}, expected {list(want)}")
            is_matrix = t.dim() == 2
            t = rows(dst, t).to(dtype if is_matrix else torch.float32).contiguous()
            owner, _, leaf = dst.rpartition(".")
            model.get_submodule(owner)._parameters[leaf] = nn.Parameter(t, requires_grad=False)
        for dst, name in names.items():
            info = f.tensors[name]
            if info.type_name not in QUANTIZED:
                continue
            qtype = QUANTIZED[info.type_name]
            owner = dst[:-len(".weight")]
            module = model.get_submodule(owner)
            n, k = info.shape
            bytes_ = rows(dst, torch.from_numpy(np.array(f.data(name))))
            if isinstance(module, Embedding):
                if (n, k) != (cfg.vocab_size, cfg.n_embd):
                    raise ImportError_(f"tensor {name!r} has shape {[n, k]}")
                replacement = quant.QuantEmbedding(qtype, bytes_, n, k)
            else:
                if (n, k) != (module.out_features, module.in_features):
                    raise ImportError_(f"tensor {name!r} has shape {[n, k]}, expected "
                                       f"{[module.out_features, module.in_features]}")
                bias = module.bias if module.bias is not None and not module.bias.is_meta else None
                replacement = quant.QuantLinear(qtype, bytes_, k, n, bias)
            parent, _, leaf = owner.rpartition(".")
            setattr(model.get_submodule(parent) if parent else model, leaf, replacement)
        inv = rope_inv_freq(cfg.head_dim, cfg.rope_theta, None)
        if rope_freqs is not None:
            factors = torch.from_numpy(np.array(f.data(rope_freqs), dtype=np.float32)).reshape(-1)
            if factors.numel() != inv.numel():
                raise ImportError_(f"tensor 'rope_freqs.weight' has {factors.numel()} values, expected {inv.numel()}")
            inv = inv / factors
        model.rope_inv_freq = inv
    model.eval()
    dtype_name = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}[dtype]
    label = FILE_TYPES.get(int(md.get("general.file_type", -1)), "+".join(quantized)) if quantized else None
    config = {"format": export_gpt.FORMAT, "interface_version": INTERFACE_VERSION, "architecture": "llama",
              "gguf_architecture": arch, "vocab_size": cfg.vocab_size, "block_size": cfg.block_size,
              "n_layer": cfg.n_layer, "n_head": cfg.n_head, "n_kv_head": cfg.n_kv_head, "n_embd": cfg.n_embd,
              "head_dim": cfg.head_dim, "intermediate_size": cfg.intermediate_size,
              "rms_norm_eps": cfg.rms_norm_eps, "rope_theta": cfg.rope_theta, "rope_scaling": None,
              "rope_freqs": rope_freqs is not None, "qkv_bias": cfg.qkv_bias,
              "tie_word_embeddings": cfg.tie_word_embeddings, "dtype": dtype_name}
    if label:
        config["quantization"] = label
    return model, config


def _gguf_name(llama_name: str) -> str:
    for g, l in _TOP.items():
        if l == llama_name:
            return g
    parts = llama_name.split(".", 2)
    for g, l in _LAYER.items():
        if l == parts[2]:
            return f"blk.{parts[1]}.{g}"
    return llama_name


# ----------------------------------------------------------------------------- import

def import_gguf(path: str, out: str, context: Optional[int] = None, quiet: bool = False) -> dict:
    try:
        f = GgufFile(path)
    except GgufError as e:
        raise ImportError_(str(e)) from e
    try:
        model, config = build_model(f, context)
    finally:
        f.close()
    md = f.metadata
    tok = tokenizer_json(md)
    if len(md["tokenizer.ggml.tokens"]) > config["vocab_size"]:
        raise ImportError_(f"tokenizer.ggml.tokens has {len(md['tokenizer.ggml.tokens'])} tokens, "
                           f"more than token_embd's {config['vocab_size']} rows")
    config["tokenizer"] = tokenizer_entry(md, config["vocab_size"])
    template = md.get("tokenizer.chat_template")
    config["chat_template"] = template if isinstance(template, str) else None
    config["model_name"] = md.get("general.name") or os.path.splitext(os.path.basename(path))[0]
    if os.path.exists(out + ".sha256"):
        os.remove(out + ".sha256")
    export_gpt.save_module(model, out, config, json.dumps(tok, ensure_ascii=False), None)
    del model
    try:
        err = _check(out)
    except Exception:
        os.remove(out)
        raise
    digest = export_gpt.write_sha256(out)
    if not quiet:
        print(f"imported {config['gguf_architecture']} {path} -> {out} ({os.path.getsize(out) / 2**20:.1f} MiB)\n"
              f"  {config['n_layer']} layers, d={config['n_embd']}, {config['n_head']} heads, "
              f"{config['n_kv_head']} kv heads, context {config['block_size']}, vocab {config['vocab_size']}, "
              f"{config.get('quantization') or config['dtype']}\n"
              f"  tokenizer {md['tokenizer.ggml.model']}: bos {config['tokenizer']['bos_token_id']} "
              f"(add_bos {config['tokenizer']['add_bos']}), eos {config['tokenizer']['eos_token_ids']}, "
              f"chat template {'yes' if config['chat_template'] else 'no'}\n"
              f"  cached forward checked against the uncached one (max relative error {err:.2e})\n"
              f"  sha256 {digest}  -> {out}.sha256")
    return config


def _check(out: str) -> float:
    """The checkpoint's cached forward (two rows of different lengths, then a decode step)
    against its own uncached forward of each whole sequence: the cache and the interface
    work, and the logits are finite."""
    files = {"config.json": ""}
    m = torch.jit.load(out, map_location="cpu", _extra_files=files)
    cfg = json.loads(files["config.json"])
    dtype = getattr(torch, cfg["dtype"])
    g = torch.Generator().manual_seed(0)
    T = min(cfg["block_size"] - 1, 12)
    idx = torch.randint(0, cfg["vocab_size"], (2, T + 1), generator=g)
    lengths = torch.tensor([T, T // 2])

    def uncached(seq: torch.Tensor) -> torch.Tensor:
        cache = torch.zeros(m.cache_shape(1), dtype=dtype)
        logits, _ = m(seq.unsqueeze(0), torch.zeros(1, dtype=torch.long), torch.tensor([seq.numel()]), cache)
        return logits[0]

    with torch.no_grad():
        cache = torch.zeros(m.cache_shape(2), dtype=dtype)
        first, cache = m(idx[:, :T], torch.zeros(2, dtype=torch.long), lengths, cache)
        step = torch.stack([idx[0, T], idx[1, T // 2]]).unsqueeze(1)
        second, cache = m(step, lengths, torch.ones(2, dtype=torch.long), cache)
        got = torch.cat([first, second])
        want = torch.stack([uncached(idx[0, :T]), uncached(idx[1, :T // 2]),
                            uncached(idx[0, :T + 1]), uncached(idx[1, :T // 2 + 1])])
    if not torch.isfinite(got).all():
        raise ImportError_("the imported checkpoint's logits are not finite")
    err = float((got - want).abs().max() / want.abs().max().clamp(min=1.0))
    tol = 1e-3 if dtype == torch.float32 else 6e-2
    if not err <= tol:
        raise ImportError_(f"the cached forward differs from the uncached one by {err:.3g} (tolerance {tol:g})")
    return err


def main(argv=None):
    ap = argparse.ArgumentParser(description="import a GGUF file (llama.cpp) as a serving checkpoint")
    ap.add_argument("gguf")
    ap.add_argument("out")
    ap.add_argument("--context", type=int, help=f"context the server uses (default: min(context_length, "
                                                 f"{DEFAULT_CONTEXT}))")
    args = ap.parse_args(argv)
    try:
        import_gguf(args.gguf, args.out, args.context)
    except (ImportError_, OSError) as e:
        print(f"import failed: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
