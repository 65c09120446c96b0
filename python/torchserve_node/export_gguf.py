"""Write the weights of a serving checkpoint (architecture "llama" or "gpt") as GGUF, the file
format of llama.cpp, so both engines can be run on the same weights.

    /usr/bin/python3 scripts/model/export_gguf.py CKPT.pt OUT.gguf [--dtype f32|f16] [--vocabulary tokenizer|ids]

GGUF v3 (llama.cpp's gguf-py is not installed here, so the format is written directly):
"GGUF", version 3, tensor count, metadata count, the metadata key/values, the tensor infos
(name, dims innermost first, ggml type, offset), padding to 32 bytes, the tensor data (each
tensor 32-byte aligned). The layout and names follow llama.cpp's convert_hf_to_gguf.py:

- llama: token_embd, blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm,
  ffn_gate, ffn_up, ffn_down}, output_norm, output (absent when tied), q/k/v biases when
  the model has them, rope_freqs (Llama 3.1 "llama3" rope scaling as per-frequency divisors).
  llama.cpp rotates adjacent pairs (GPT-J style) where Hugging Face rotates halves: the rows
  of q and k (and their biases) are permuted per head as convert_hf_to_gguf.py does.
- gpt: arch "gpt2": token_embd, position_embd, blk.N.{attn_norm, attn_qkv, attn_output,
  ffn_norm, ffn_up, ffn_down} with biases, output_norm, output (= token_embd). llama.cpp's
  GPT-2 uses the tanh GELU; a checkpoint with exact GELU ("gelu": "none") is written with a
  warning.

--dtype f16 stores matrices as float16 (norms, biases and rope_freqs stay float32, as
llama.cpp requires). A quantized checkpoint's matrices (export_hf.py --dtype
q8_0|q4_0|q4_k_m|q5_k_m: types Q8_0, Q4_0, Q5_0, Q4_K, Q5_K, Q6_K) are written in their own
GGUF types, their bytes as they are (q/k rows permuted whole), so both engines run the same
quantized weights. Tokenizer metadata: byte-level BPE as tokenizer.ggml.model "gpt2" (tokens,
token types, merges, pre-tokenizer "gpt-2"); SentencePiece-style BPE (byte fallback) as
"llama" (tokens, scores = minus the merge rank that makes each token, token types); the byte
tokenizer of the demo model has no GGUF equivalent and is refused.

--vocabulary ids writes a placeholder vocabulary instead of the checkpoint's tokenizer, for
models driven by token ids only (the random-weight models of scripts/bench/): a
SentencePiece-style "llama" vocabulary of the model's size, <unk> <s> </s> (ids 0-2, </s> the
end of generation), the 256 byte tokens, then tok_N. Any checkpoint can be written this way,
the demo model's byte tokenizer included.
"""

import argparse
import json
import os
import struct
import sys
from typing import Dict, List, Optional, Tuple

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch

from .gguf import LLAMA_FTYPES
from .llama import rope_inv_freq

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
ALIGNMENT = 32
# gguf metadata value types
T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, T_ARRAY = 4, 5, 6, 7, 8, 9
# ggml tensor types
GGML_F32, GGML_F16 = 0, 1
# llama.cpp token types
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


class GgufError(Exception):
    pass


# ------------------------------------------------------------------------------ writer

def _string(s: str) -> bytes:
    raw = s.encode("utf-8")
    return struct.pack("<Q", len(raw)) + raw


def _value(v) -> Tuple[int, bytes]:
    """(gguf type, encoded value) of a Python value; ints are uint32, floats float32."""
    if isinstance(v, bool):
        return T_BOOL, struct.pack("<?", v)
    if isinstance(v, int):
        return (T_UINT32, struct.pack("<I", v)) if v >= 0 else (T_INT32, struct.pack("<i", v))
    if isinstance(v, float):
        return T_FLOAT32, struct.pack("<f", v)
    if isinstance(v, str):
        return T_STRING, _string(v)
    if isinstance(v, tuple) and len(v) == 2 and v[0] == "f32[]":
        body = struct.pack("<IQ", T_FLOAT32, len(v[1])) + struct.pack(f"<{len(v[1])}f", *v[1])
        return T_ARRAY, body
    if isinstance(v, tuple) and len(v) == 2 and v[0] == "i32[]":
        body = struct.pack("<IQ", T_INT32, len(v[1])) + struct.pack(f"<{len(v[1])}i", *v[1])
        return T_ARRAY, body
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return T_ARRAY, struct.pack("<IQ", T_STRING, len(v)) + b"".join(_string(x) for x in v)
    raise TypeError(f"no GGUF encoding for {type(v)}")


class Quantized:
    """A quantized matrix as GGUF stores it: uint8 rows [N, row bytes] of `qtype` (quant.py),
    K values per row."""

    def __init__(self, rows: torch.Tensor, qtype: str, k: int):
        self.rows, self.qtype, self.k = rows, qtype, k

    def permuted(self, n_head: int) -> "Quantized":
        return Quantized(permute_rotary(self.rows, n_head).contiguous(), self.qtype, self.k)


def write_gguf(path: str, metadata: Dict[str, object], tensors: List[Tuple[str, object]]) -> None:
    """Tensors: (name, contiguous float32 or float16 CPU tensor, or Quantized), in file order."""
    from .quant import GGML_TYPE
    infos, blobs, offset = [], [], 0
    for name, t in tensors:
        if isinstance(t, Quantized):
            data = t.rows.contiguous().numpy().tobytes()
            dims, kind = [t.k, t.rows.shape[0]], GGML_TYPE[t.qtype]
        else:
            if t.dtype not in (torch.float32, torch.float16):
                raise GgufError(f"{name}: dtype {t.dtype} (only float32/float16 are written)")
            t = t.detach().contiguous().cpu()
            data = (t.view(torch.int16) if t.dtype == torch.float16 else t).numpy().tobytes()
            dims = list(reversed(t.shape))                 # ggml: innermost dimension first
            kind = GGML_F16 if t.dtype == torch.float16 else GGML_F32
        infos.append(_string(name) + struct.pack("<I", len(dims)) +
                     struct.pack(f"<{len(dims)}Q", *dims) +
                     struct.pack("<IQ", kind, offset))
        pad = -len(data) % ALIGNMENT
        blobs.append(data + b"\0" * pad)
        offset += len(data) + pad
    head = GGUF_MAGIC + struct.pack("<IQQ", GGUF_VERSION, len(tensors), len(metadata))
    for key, v in metadata.items():
        kind, body = _value(v)
        head += _string(key) + struct.pack("<I", kind) + body
    head += b"".join(infos)
    head += b"\0" * (-len(head) % ALIGNMENT)
    with open(path, "wb") as f:
        f.write(head)
        for blob in blobs:
            f.write(blob)


# --------------------------------------------------------------------------- weights

def permute_rotary(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """Rows of q/k (or their bias) from Hugging Face's rotate-half order to llama.cpp's
    adjacent pairs, per head (convert_hf_to_gguf.py's LlamaModel.permute)."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def _matrix(t, f16: bool):
    if isinstance(t, Quantized):
        return t                          # written as it is stored
    return t.to(torch.float16 if f16 else torch.float32)


def _rotary(t, n_head: int):
    return t.permuted(n_head) if isinstance(t, Quantized) else permute_rotary(t, n_head)


def llama_tensors(sd: Dict[str, torch.Tensor], cfg: dict, f16: bool,
                  inv_freq: torch.Tensor) -> List[Tuple[str, torch.Tensor]]:
    H, KV = cfg["n_head"], cfg["n_kv_head"]
    out = [("token_embd.weight", _matrix(sd["embed.weight"], f16))]
    if cfg.get("rope_scaling"):
        plain = rope_inv_freq(cfg["head_dim"], cfg["rope_theta"], None)
        out.append(("rope_freqs.weight", (plain / inv_freq.float()).float()))
    for i in range(cfg["n_layer"]):
        p, b = f"layers.{i}.", f"blk.{i}."
        out.append((b + "attn_norm.weight", sd[p + "attn_norm.weight"].float()))
        out.append((b + "attn_q.weight", _matrix(_rotary(sd[p + "q_proj.weight"], H), f16)))
        out.append((b + "attn_k.weight", _matrix(_rotary(sd[p + "k_proj.weight"], KV), f16)))
        out.append((b + "attn_v.weight", _matrix(sd[p + "v_proj.weight"], f16)))
        if p + "q_proj.bias" in sd:
            out.append((b + "attn_q.bias", permute_rotary(sd[p + "q_proj.bias"], H).float()))
            out.append((b + "attn_k.bias", permute_rotary(sd[p + "k_proj.bias"], KV).float()))
            out.append((b + "attn_v.bias", sd[p + "v_proj.bias"].float()))
        out.append((b + "attn_output.weight", _matrix(sd[p + "o_proj.weight"], f16)))
        out.append((b + "ffn_norm.weight", sd[p + "mlp_norm.weight"].float()))
        out.append((b + "ffn_gate.weight", _matrix(sd[p + "gate_proj.weight"], f16)))
        out.append((b + "ffn_up.weight", _matrix(sd[p + "up_proj.weight"], f16)))
        out.append((b + "ffn_down.weight", _matrix(sd[p + "down_proj.weight"], f16)))
    out.append(("output_norm.weight", sd["norm.weight"].float()))
    if "lm_head.weight" in sd:
        out.append(("output.weight", _matrix(sd["lm_head.weight"], f16)))
    return out


def llama_metadata(cfg: dict) -> Dict[str, object]:
    a = "llama"
    md: Dict[str, object] = {
        f"{a}.vocab_size": cfg["vocab_size"],
        f"{a}.context_length": cfg["block_size"],
        f"{a}.embedding_length": cfg["n_embd"],
        f"{a}.block_count": cfg["n_layer"],
        f"{a}.feed_forward_length": cfg["intermediate_size"],
        f"{a}.rope.dimension_count": cfg["head_dim"],
        f"{a}.attention.head_count": cfg["n_head"],
        f"{a}.attention.head_count_kv": cfg["n_kv_head"],
        f"{a}.attention.layer_norm_rms_epsilon": float(cfg["rms_norm_eps"]),
        f"{a}.rope.freq_base": float(cfg["rope_theta"]),
    }
    if cfg["head_dim"] * cfg["n_head"] != cfg["n_embd"]:
        md[f"{a}.attention.key_length"] = cfg["head_dim"]
        md[f"{a}.attention.value_length"] = cfg["head_dim"]
    return md


def gpt_tensors(sd: Dict[str, torch.Tensor], cfg: dict, f16: bool) -> List[Tuple[str, torch.Tensor]]:
    def bias(key: str, n: int) -> torch.Tensor:
        return sd[key].float() if key in sd else torch.zeros(n)

    D = cfg["n_embd"]
    out = [("token_embd.weight", _matrix(sd["wte.weight"], f16)),
           ("position_embd.weight", sd["wpe.weight"].float())]
    for i in range(cfg["n_layer"]):
        p, b = f"blocks.{i}.", f"blk.{i}."
        for src, dst, n in (("ln_1", "attn_norm", D), ("attn.c_attn", "attn_qkv", 3 * D),
                            ("attn.c_proj", "attn_output", D), ("ln_2", "ffn_norm", D),
                            ("mlp.c_fc", "ffn_up", 4 * D), ("mlp.c_proj", "ffn_down", D)):
            w = sd[p + src + ".weight"]
            out.append((b + dst + ".weight", _matrix(w, f16) if w.dim() == 2 else w.float()))
            out.append((b + dst + ".bias", bias(p + src + ".bias", n)))
    out.append(("output_norm.weight", sd["ln_f.weight"].float()))
    out.append(("output_norm.bias", bias("ln_f.bias", D)))
    out.append(("output.weight", _matrix(sd.get("lm_head.weight", sd["wte.weight"]), f16)))
    return out


def gpt_metadata(cfg: dict) -> Dict[str, object]:
    a = "gpt2"
    return {f"{a}.context_length": cfg["block_size"], f"{a}.embedding_length": cfg["n_embd"],
            f"{a}.feed_forward_length": 4 * cfg["n_embd"], f"{a}.block_count": cfg["n_layer"],
            f"{a}.attention.head_count": cfg["n_head"],
            f"{a}.attention.layer_norm_epsilon": 1e-5}


# ------------------------------------------------------------------------- tokenizer

def _is_byte_level(tok: dict) -> bool:
    def has(node, kind):
        if not isinstance(node, dict):
            return False
        if node.get("type") == kind:
            return True
        return any(has(n, kind) for n in node.get("pretokenizers", []) + node.get("decoders", []))
    return has(tok.get("pre_tokenizer"), "ByteLevel") or has(tok.get("decoder"), "ByteLevel")


def tokenizer_metadata(tok: dict, entry: dict, vocab_size: int, pre: Optional[str]) -> Dict[str, object]:
    model = tok.get("model", {})
    if model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
        raise GgufError(f"tokenizer model {model.get('type')!r}: only BPE tokenizers are written")
    id_to_tok: Dict[int, str] = {int(i): t for t, i in model["vocab"].items()}
    added = {int(t["id"]): t for t in tok.get("added_tokens", [])}
    for i, t in added.items():
        id_to_tok[i] = t["content"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    md: Dict[str, object] = {}
    tokens, types = [], []
    if _is_byte_level(tok):
        md["tokenizer.ggml.model"] = "gpt2"
        md["tokenizer.ggml.pre"] = pre or _guess_pre(tok)
        for i in range(vocab_size):
            if i not in id_to_tok:
                tokens.append(f"[PAD{i}]")
                types.append(USER_DEFINED)
            else:
                tokens.append(id_to_tok[i])
                types.append((CONTROL if added[i].get("special") else USER_DEFINED) if i in added else NORMAL)
        md["tokenizer.ggml.tokens"] = tokens
        md["tokenizer.ggml.token_type"] = ("i32[]", types)
        md["tokenizer.ggml.merges"] = merges
    elif model.get("byte_fallback"):
        md["tokenizer.ggml.model"] = "llama"
        rank: Dict[str, int] = {}
        for r, m in enumerate(merges):
            rank.setdefault(m.replace(" ", ""), r)
        scores = []
        for i in range(vocab_size):
            t = id_to_tok.get(i)
            if t is None:
                tokens.append(f"[PAD{i}]")
                types.append(UNUSED)
                scores.append(-1e9)
                continue
            tokens.append(t)
            scores.append(-float(rank[t]) if t in rank else 0.0)
            if t == model.get("unk_token"):
                types.append(UNKNOWN)
            elif i in added:
                types.append(CONTROL if added[i].get("special") else USER_DEFINED)
            elif len(t) == 6 and t.startswith("<0x") and t.endswith(">"):
                types.append(BYTE)
            else:
                types.append(NORMAL)
        md["tokenizer.ggml.tokens"] = tokens
        md["tokenizer.ggml.scores"] = ("f32[]", scores)
        md["tokenizer.ggml.token_type"] = ("i32[]", types)
        unk = model.get("unk_token")
        if unk is not None and unk in model["vocab"]:
            md["tokenizer.ggml.unknown_token_id"] = int(model["vocab"][unk])
        md["tokenizer.ggml.add_space_prefix"] = True
    else:
        raise GgufError("tokenizer.json is neither byte-level BPE nor SentencePiece-style BPE "
                        "with byte fallback")
    if entry.get("bos_token_id") is not None:
        md["tokenizer.ggml.bos_token_id"] = int(entry["bos_token_id"])
    eos = entry.get("eos_token_ids") or ([entry["eos_token_id"]] if entry.get("eos_token_id") is not None else [])
    if eos:
        md["tokenizer.ggml.eos_token_id"] = int(eos[0])
    if len(eos) > 1:
        md["tokenizer.ggml.eot_token_id"] = int(eos[1])
    if entry.get("pad_token_id") is not None:
        md["tokenizer.ggml.padding_token_id"] = int(entry["pad_token_id"])
    md["tokenizer.ggml.add_bos_token"] = bool(entry.get("add_bos"))
    md["tokenizer.ggml.add_eos_token"] = False
    return md


def placeholder_metadata(vocab_size: int) -> Dict[str, object]:
    """--vocabulary ids: tokens that only name ids, for models fed token ids (no text)."""
    if vocab_size < 259:
        raise GgufError(f"vocab_size {vocab_size}: a placeholder vocabulary needs at least 259 "
                        "ids (<unk>, <s>, </s> and the 256 byte tokens)")
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    tokens += [f"tok_{i}" for i in range(len(tokens), vocab_size)]
    types = [UNKNOWN, CONTROL, CONTROL] + [BYTE] * 256 + [NORMAL] * (vocab_size - 259)
    return {"tokenizer.ggml.model": "llama",
            "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.scores": ("f32[]", [-float(i) for i in range(vocab_size)]),
            "tokenizer.ggml.token_type": ("i32[]", types),
            "tokenizer.ggml.unknown_token_id": 0,
            "tokenizer.ggml.bos_token_id": 1,
            "tokenizer.ggml.eos_token_id": 2,
            "tokenizer.ggml.add_bos_token": False,
            "tokenizer.ggml.add_eos_token": False}


def _guess_pre(tok: dict) -> str:
    pre = tok.get("pre_tokenizer") or {}
    if pre.get("type") == "ByteLevel" and pre.get("use_regex", True):
        return "gpt-2"
    raise GgufError("cannot tell llama.cpp's pre-tokenizer for this tokenizer.json (a Split "
                    "regex: Llama 3 is 'llama-bpe', Qwen2 'qwen2'); pass --pre NAME")


# ----------------------------------------------------------------------------- export

def export(ckpt: str, out: str, dtype: str = "f32", pre: Optional[str] = None,
           quiet: bool = False, vocabulary: str = "tokenizer") -> dict:
    if dtype not in ("f32", "f16"):
        raise GgufError(f"--dtype {dtype!r}: f32 or f16")
    if vocabulary not in ("tokenizer", "ids"):
        raise GgufError(f"--vocabulary {vocabulary!r}: tokenizer or ids")
    extra = {"config.json": "", "tokenizer.json": ""}
    module = torch.jit.load(ckpt, map_location="cpu", _extra_files=extra)
    if not extra["config.json"]:
        raise GgufError(f"{ckpt}: no config.json in the archive")
    cfg = json.loads(extra["config.json"])
    arch = cfg.get("architecture")
    sd = {k: v.detach() for k, v in module.named_parameters()}
    # Quantized matrices (quant.py's modules) are written in their own GGUF type, as stored.
    quantized = {}
    for mname, sub in module.named_modules():
        if hasattr(sub, "qtype") and hasattr(sub, "qweight"):
            k = sub.in_features if hasattr(sub, "in_features") else sub.embedding_dim
            sd[mname + ".weight"] = Quantized(sub.qweight.detach(), sub.qtype, k)
            quantized[sub.qtype] = quantized.get(sub.qtype, 0) + 1
    f16 = dtype == "f16"
    tok_entry = cfg["tokenizer"]
    if vocabulary == "tokenizer" and (tok_entry.get("kind") != "huggingface" or not extra["tokenizer.json"]):
        raise GgufError(f"{ckpt}: the {tok_entry.get('kind')!r} tokenizer has no GGUF form; "
                        "only checkpoints carrying a Hugging Face tokenizer.json are written "
                        "(--vocabulary ids writes a placeholder vocabulary for id-only use)")
    name = cfg.get("model_name") or os.path.splitext(os.path.basename(ckpt))[0]
    md: Dict[str, object] = {}
    if arch == "llama":
        buffers = dict(module.named_buffers())
        md["general.architecture"] = "llama"
        md["general.name"] = name
        md["general.file_type"] = 1 if f16 else 0
        if quantized:   # llama.cpp's LLAMA_FTYPE_MOSTLY_ of the scheme (export_hf.py's or a GGUF's)
            md["general.file_type"] = LLAMA_FTYPES.get(cfg.get("quantization"), 7)
        md.update(llama_metadata(cfg))
        tensors = llama_tensors(sd, cfg, f16, buffers["rope_inv_freq"])
    elif arch == "gpt":
        if quantized:
            raise GgufError("quantized 'gpt' checkpoints are not written (only 'llama')")
        if cfg.get("gelu") == "none":
            print("warning: exact GELU checkpoint; llama.cpp's gpt2 computes the tanh GELU",
                  file=sys.stderr)
        md["general.architecture"] = "gpt2"
        md["general.name"] = name
        md["general.file_type"] = 1 if f16 else 0
        md.update(gpt_metadata(cfg))
        tensors = gpt_tensors(sd, cfg, f16)
    else:
        raise GgufError(f"architecture {arch!r}: only 'llama' and 'gpt' are written")
    if vocabulary == "ids":
        md.update(placeholder_metadata(cfg["vocab_size"]))
    else:
        md.update(tokenizer_metadata(json.loads(extra["tokenizer.json"]), tok_entry, cfg["vocab_size"], pre))
    write_gguf(out, md, tensors)
    if not quiet:
        print(f"wrote {out}: {md['general.architecture']} {cfg.get('quantization') or dtype}, {len(tensors)} tensors, "
              f"{os.path.getsize(out) / 2**20:.1f} MiB, tokenizer {md['tokenizer.ggml.model']}")
    return md


def main(argv=None):
    ap = argparse.ArgumentParser(description="write a checkpoint's weights as GGUF (llama.cpp)")
    ap.add_argument("checkpoint")
    ap.add_argument("out")
    ap.add_argument("--dtype", default="f32", choices=["f32", "f16"])
    ap.add_argument("--pre", help="llama.cpp pre-tokenizer name for byte-level BPE "
                                  "(default: 'gpt-2' when the tokenizer uses GPT-2's regex)")
    ap.add_argument("--vocabulary", default="tokenizer", choices=["tokenizer", "ids"],
                    help="the checkpoint's tokenizer (default), or a placeholder vocabulary "
                         "for models fed token ids only")
    args = ap.parse_args(argv)
    try:
        export(args.checkpoint, args.out, args.dtype, args.pre, vocabulary=args.vocabulary)
    except (GgufError, OSError, KeyError) as e:
        print(f"export failed: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
