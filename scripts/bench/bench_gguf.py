"""The benchmark's GGUF writer: the random-weight, byte-vocabulary models of
make_bench_models.py as GGUF for llama.cpp, with a placeholder vocabulary (the benchmark feeds
token ids, never text). scripts/model/export_gguf.py is the user-facing exporter, which
carries a checkpoint's real tokenizer and needs one.

    /usr/bin/python3 scripts/bench/bench_gguf.py CKPT.pt OUT.gguf [--dtype float32|float16|bfloat16]

Architectures: "gpt" (llama.cpp's gpt2) and "llama" (llama.cpp's llama; q and k rows permuted
from Hugging Face's rotate-half layout to llama.cpp's interleaved rotary pairs, as its
convert_hf_to_gguf.py does). Matrices are written in --dtype (default the checkpoint's);
norms and biases stay float32, as llama.cpp expects. The vocabulary is a placeholder
SentencePiece-style one (<unk>, <s>, </s>, the 256 byte tokens, then tok_N) of the model's
size: the benchmarks feed token ids, never text. GGUF version 3, little-endian.
"""

import argparse
import json
import struct
import sys

import numpy as np
import torch

GGUF_MAGIC = b"GGUF"
ALIGN = 32
# GGUF metadata value types
U32, I32, F32, BOOL, STRING, ARRAY = 4, 5, 6, 7, 8, 9
# ggml tensor types and llama_ftype values
TENSOR_TYPE = {"float32": 0, "float16": 1, "bfloat16": 30}
FILE_TYPE = {"float32": 0, "float16": 1, "bfloat16": 32}


def _string(s: str) -> bytes:
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _value(kind: int, value) -> bytes:
    if kind == U32:
        return struct.pack("<I", value)
    if kind == I32:
        return struct.pack("<i", value)
    if kind == F32:
        return struct.pack("<f", value)
    if kind == BOOL:
        return struct.pack("<?", value)
    if kind == STRING:
        return _string(value)
    raise ValueError(kind)


def _array(kind: int, values) -> bytes:
    head = struct.pack("<IQ", kind, len(values))
    if kind == F32:
        return head + np.asarray(values, dtype="<f4").tobytes()
    if kind == I32:
        return head + np.asarray(values, dtype="<i4").tobytes()
    return head + b"".join(_value(kind, v) for v in values)


def _raw(t: torch.Tensor, dtype: str) -> bytes:
    t = t.detach().contiguous()
    if dtype == "float32":
        return t.float().numpy().astype("<f4").tobytes()
    if dtype == "float16":
        return t.half().numpy().astype("<f2").tobytes()
    return t.bfloat16().view(torch.int16).numpy().astype("<i2").tobytes()


def _permute(w: torch.Tensor, heads: int) -> torch.Tensor:
    """convert_hf_to_gguf.py LlamaModel.permute: rotate-half pairs -> interleaved pairs."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_tensors(config: dict, params: dict):
    """(gguf name, tensor) in llama.cpp's naming for the checkpoint's architecture."""
    arch = config["architecture"]
    out = []
    if arch == "gpt":
        out += [("token_embd.weight", params["wte.weight"]), ("position_embd.weight", params["wpe.weight"])]
        for i in range(config["n_layer"]):
            p = f"blocks.{i}."
            for ours, theirs in [("ln_1", "attn_norm"), ("attn.c_attn", "attn_qkv"), ("attn.c_proj", "attn_output"),
                                 ("ln_2", "ffn_norm"), ("mlp.c_fc", "ffn_up"), ("mlp.c_proj", "ffn_down")]:
                out.append((f"blk.{i}.{theirs}.weight", params[p + ours + ".weight"]))
                if p + ours + ".bias" in params:
                    out.append((f"blk.{i}.{theirs}.bias", params[p + ours + ".bias"]))
        out += [("output_norm.weight", params["ln_f.weight"]), ("output_norm.bias", params["ln_f.bias"])]
        if "lm_head.weight" in params:
            out.append(("output.weight", params["lm_head.weight"]))
        return out
    if arch == "llama":
        if config.get("qkv_bias"):
            raise ValueError("qkv_bias: write llama.cpp's qwen2 architecture (not implemented here)")
        if config.get("rope_scaling"):
            raise ValueError("rope_scaling: not written to GGUF here")
        heads, kv = config["n_head"], config["n_kv_head"]
        out.append(("token_embd.weight", params["embed.weight"]))
        for i in range(config["n_layer"]):
            p = f"layers.{i}."
            out += [
                (f"blk.{i}.attn_norm.weight", params[p + "attn_norm.weight"]),
                (f"blk.{i}.attn_q.weight", _permute(params[p + "q_proj.weight"], heads)),
                (f"blk.{i}.attn_k.weight", _permute(params[p + "k_proj.weight"], kv)),
                (f"blk.{i}.attn_v.weight", params[p + "v_proj.weight"]),
                (f"blk.{i}.attn_output.weight", params[p + "o_proj.weight"]),
                (f"blk.{i}.ffn_norm.weight", params[p + "mlp_norm.weight"]),
                (f"blk.{i}.ffn_gate.weight", params[p + "gate_proj.weight"]),
                (f"blk.{i}.ffn_up.weight", params[p + "up_proj.weight"]),
                (f"blk.{i}.ffn_down.weight", params[p + "down_proj.weight"]),
            ]
        out.append(("output_norm.weight", params["norm.weight"]))
        if "lm_head.weight" in params:
            out.append(("output.weight", params["lm_head.weight"]))
        return out
    raise ValueError(f'architecture "{arch}" has no GGUF mapping')


def metadata(config: dict, dtype: str):
    arch = config["architecture"]
    d, heads = config["n_embd"], config["n_head"]
    kv = [("general.architecture", STRING, "gpt2" if arch == "gpt" else "llama"),
          ("general.name", STRING, f"torchserve-node {arch}"),
          ("general.file_type", U32, FILE_TYPE[dtype]),
          ("general.alignment", U32, ALIGN)]
    if arch == "gpt":
        a = "gpt2"
        kv += [(f"{a}.context_length", U32, config["block_size"]), (f"{a}.embedding_length", U32, d),
               (f"{a}.feed_forward_length", U32, 4 * d), (f"{a}.block_count", U32, config["n_layer"]),
               (f"{a}.attention.head_count", U32, heads), (f"{a}.attention.layer_norm_epsilon", F32, 1e-5)]
    else:
        a = "llama"
        kv += [(f"{a}.context_length", U32, config["block_size"]), (f"{a}.embedding_length", U32, d),
               (f"{a}.feed_forward_length", U32, config["intermediate_size"]),
               (f"{a}.block_count", U32, config["n_layer"]), (f"{a}.attention.head_count", U32, heads),
               (f"{a}.attention.head_count_kv", U32, config["n_kv_head"]),
               (f"{a}.rope.dimension_count", U32, d // heads),
               (f"{a}.rope.freq_base", F32, float(config.get("rope_theta", 10000.0))),
               (f"{a}.attention.layer_norm_rms_epsilon", F32, float(config.get("rms_norm_eps", 1e-6))),
               (f"{a}.vocab_size", U32, config["vocab_size"])]
    vocab = config["vocab_size"]
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    tokens += [f"tok_{i}" for i in range(len(tokens), vocab)]
    tokens = tokens[:vocab]
    types = [2, 3, 3] + [6] * 256 + [1] * (vocab - 259)   # unknown, control, byte, normal
    kv += [("tokenizer.ggml.model", STRING, "llama"),
           ("tokenizer.ggml.tokens", ARRAY, (STRING, tokens)),
           ("tokenizer.ggml.scores", ARRAY, (F32, [-float(i) for i in range(vocab)])),
           ("tokenizer.ggml.token_type", ARRAY, (I32, types[:vocab])),
           ("tokenizer.ggml.unknown_token_id", U32, 0),
           ("tokenizer.ggml.bos_token_id", U32, 1),
           ("tokenizer.ggml.eos_token_id", U32, 2),
           ("tokenizer.ggml.add_bos_token", BOOL, False)]
    return kv


def write_gguf(path: str, config: dict, params: dict, dtype: str) -> None:
    tensors = gguf_tensors(config, params)
    kv = metadata(config, dtype)
    header = bytearray(GGUF_MAGIC + struct.pack("<IQQ", 3, len(tensors), len(kv)))
    for key, kind, value in kv:
        header += _string(key) + struct.pack("<I", kind)
        header += _array(*value) if kind == ARRAY else _value(kind, value)
    blobs, offset = [], 0
    for name, t in tensors:
        kind = dtype if t.dim() == 2 else "float32"          # norms and biases stay float32
        blob = _raw(t, kind)
        header += _string(name) + struct.pack("<I", t.dim())
        header += b"".join(struct.pack("<Q", n) for n in reversed(t.shape))  # ggml: fastest dim first
        header += struct.pack("<IQ", TENSOR_TYPE[kind], offset)
        blobs.append(blob)
        offset += (len(blob) + ALIGN - 1) // ALIGN * ALIGN
    with open(path, "wb") as f:
        f.write(header)
        f.write(b"\0" * ((-len(header)) % ALIGN))
        for blob in blobs:
            f.write(blob)
            f.write(b"\0" * ((-len(blob)) % ALIGN))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ckpt")
    ap.add_argument("out")
    ap.add_argument("--dtype", choices=sorted(TENSOR_TYPE))
    args = ap.parse_args(argv)
    files = {"config.json": ""}
    module = torch.jit.load(args.ckpt, map_location="cpu", _extra_files=files)
    config = json.loads(files["config.json"])
    params = {name: p.detach() for name, p in module.named_parameters()}
    try:
        write_gguf(args.out, config, params, args.dtype or config.get("dtype", "float32"))
    except (ValueError, KeyError) as e:
        print(f"bench_gguf: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
