"""Random-weight models of real shapes for scripts/bench/vs-llamacpp.ts, each written as project
checkpoints (float32 and bfloat16; gpt.py and llama.py, the models export_hf.py writes) and as
GGUF (float32 and float16, by scripts/model/export_gguf.py --vocabulary ids) with the same
weights; the llama models also quantized (q8_0, q4_0, q4_k_m and q5_k_m: llama.py's
quantize_llama, as export_hf.py --dtype does) as checkpoints and as GGUF holding the same bytes.
q5_k_m is offered where every width is a multiple of 256 (llama-1b, llama-3b, llama-8b): at
llama-135m's 576, llama.cpp's Q5_K_M falls back to Q5_1, which the project does not serve.

    /usr/bin/python3 scripts/bench/make_bench_models.py [--out .cache/bench/models] [--models gpt2-small,llama-135m,llama-1b]
        [--precisions f32,bf16,q8_0,q4_0,q4_k_m,q5_k_m]

  gpt2-small:  GPT-2 small (124M): 12 layers, d=768, 12 heads, vocabulary 50257, context 1024.
  llama-135m:  SmolLM-135M's shape: 30 layers, d=576, 9 heads over 3 kv heads (GQA), SwiGLU
               width 1536, vocabulary 49152, context 1024, tied head.
  llama-1b:    Llama-3.2-1B's shape: 16 layers, d=2048, 32 heads over 8 kv heads, SwiGLU width
               8192, vocabulary 128256, context 1024, tied head, rope theta 500000 (2.47 GB in
               16 bits). Written in 16 bits only (bf16 checkpoint, f16 GGUF): its float32 files
               would take 10 GB of disk for a comparison the smaller models already make.
  llama-3b:    Llama-3.2-3B's shape: 28 layers, d=3072, 24 heads over 8 kv heads, SwiGLU width
               8192, vocabulary 128256, context 1024, tied head (6.4 GB in 16 bits), for
               load-memory.ts at a size where loading libtorch is a small part of a load. Not
               in the default list: building it holds the float32 model (12.9 GB) in memory.

  llama-8b:    Llama-3.1-8B's shape: 32 layers, d=4096, 32 heads over 8 kv heads, SwiGLU width
               14336, vocabulary 128256, context 1024, untied head (4.9 GB Q4_K_M, 8.5 GB Q8_0),
               for load-memory.ts at the size the quantized formats are for. Quantized
               checkpoints only, and built without a float model (32 GB): each matrix is one
               quantized block of 256 random rows repeated, so its bytes are a real format's
               but its rows are not all different. Load timing only (no GGUF written).

  llama-chat-2k: a small Llama shape for scripts/bench/prefix-cache.ts: 12 layers, d=384, 6 heads
               over 2 kv heads, SwiGLU width 1024, context 2048, tied head, with Llama 2's
               real tokenizer (32,000 tokens, test/helpers/real_tokenizers.mjs); a float32
               checkpoint only (no GGUF). Needs --llama-tokenizer PATH (that script's output).
  llama-135m-chat-2k: the same with SmolLM-135M's shape (llama-135m above) at context 2048.

Files already present are kept (delete the folder to rebuild). Prints the files as JSON.
"""

import argparse
import json
import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np
import torch
from torch import nn

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
from torchserve_node import export_gguf, export_gpt  # noqa: E402
from torchserve_node.gpt import GPT, GPTConfig  # noqa: E402
from torchserve_node.llama import INTERFACE_VERSION, LlamaConfig, LlamaLM, quantize_llama  # noqa: E402

BYTE_TOKENIZER = {"kind": "byte", "bos_token_id": None, "eos_token_id": None, "pad_token_id": None, "add_bos": False}


def gpt2_small():
    cfg = GPTConfig(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768)
    return GPT(cfg), dict(architecture="gpt", **cfg.to_dict())


def random_llama(cfg: LlamaConfig):
    """A LlamaLM of this shape with N(0, 0.02) matrices (GPT-2's initialisation)."""
    model = LlamaLM(cfg)
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.02)
    return model, dict(architecture="llama", **cfg.to_dict())


def llama_135m():
    return random_llama(LlamaConfig(vocab_size=49152, block_size=1024, n_layer=30, n_head=9, n_kv_head=3, n_embd=576,
                                    intermediate_size=1536, rms_norm_eps=1e-5, rope_theta=10000.0,
                                    tie_word_embeddings=True))


def llama_1b():
    return random_llama(LlamaConfig(vocab_size=128256, block_size=1024, n_layer=16, n_head=32, n_kv_head=8,
                                    n_embd=2048, intermediate_size=8192, rms_norm_eps=1e-5, rope_theta=500000.0,
                                    tie_word_embeddings=True))


def llama_3b():
    return random_llama(LlamaConfig(vocab_size=128256, block_size=1024, n_layer=28, n_head=24, n_kv_head=8,
                                    n_embd=3072, intermediate_size=8192, rms_norm_eps=1e-5, rope_theta=500000.0,
                                    tie_word_embeddings=True))


def llama_8b_config() -> LlamaConfig:
    return LlamaConfig(vocab_size=128256, block_size=1024, n_layer=32, n_head=32, n_kv_head=8, n_embd=4096,
                       intermediate_size=14336, rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False)


def write_tiled(out_dir: str, name: str, cfg: LlamaConfig, wanted) -> dict:
    """Quantized checkpoints of `cfg`'s shape built on the meta device: every matrix is the
    quantization of 256 random N(0, 0.02) rows, repeated to its height (see llama-8b above)."""
    from torchserve_node import quant
    paths = {}
    for scheme in ("q8_0", "q4_k_m", "q5_k_m"):
        if scheme not in wanted:
            continue
        path = paths[f"{scheme}.pt"] = os.path.join(out_dir, f"{name}-{scheme}.pt")
        if os.path.exists(path):
            continue
        torch.manual_seed(0)
        blocks = {}

        def tiled(qtype: str, weight) -> np.ndarray:
            n, k = weight.shape
            if (qtype, k) not in blocks:
                blocks[qtype, k] = quant.quantize(qtype, torch.randn(256, k) * 0.02)
            assert n % 256 == 0, f"{n} rows, not a whole number of blocks of 256"
            return np.tile(blocks[qtype, k], (n // 256, 1))

        with torch.no_grad():
            model = LlamaLM(cfg, device="meta")
            quantize_llama(model, scheme, rows=tiled)
            for param_name, param in list(model.named_parameters()):
                owner_name, _, leaf = param_name.rpartition(".")
                model.get_submodule(owner_name)._parameters[leaf] = nn.Parameter(torch.ones(param.shape), requires_grad=False)
        config = dict(architecture="llama", **cfg.to_dict(), format="torchserve-node/causal-lm",
                      interface_version=INTERFACE_VERSION, tokenizer=BYTE_TOKENIZER, dtype="float32",
                      quantization=scheme)
        export_gpt.save_module(model.eval(), path, config)
        del model
    return paths


TILED_MODELS = {"llama-8b": llama_8b_config}


def llama_chat_2k():
    return random_llama(LlamaConfig(vocab_size=32000, block_size=2048, n_layer=12, n_head=6, n_kv_head=2, n_embd=384,
                                    intermediate_size=1024, rms_norm_eps=1e-5, rope_theta=10000.0,
                                    tie_word_embeddings=True))


MODELS = {"gpt2-small": (gpt2_small, ("f32", "bf16")),
          "llama-135m": (llama_135m, ("f32", "bf16", "q8_0", "q4_0", "q4_k_m")),
          "llama-1b": (llama_1b, ("bf16", "q8_0", "q4_0", "q4_k_m", "q5_k_m")),
          "llama-3b": (llama_3b, ("bf16", "q8_0", "q4_k_m", "q5_k_m"))}
QUANTIZED = ("q8_0", "q4_0", "q4_k_m", "q5_k_m")
# Llama 2's tokenizer: <s> 1, </s> 2, a BOS in front of every prompt.
LLAMA2_TOKENIZER = {"kind": "huggingface", "file": "tokenizer.json", "bos_token_id": 1, "eos_token_id": 2,
                    "pad_token_id": None, "add_bos": True}


def llama_135m_chat_2k():
    return random_llama(LlamaConfig(vocab_size=32000, block_size=2048, n_layer=30, n_head=9, n_kv_head=3, n_embd=576,
                                    intermediate_size=1536, rms_norm_eps=1e-5, rope_theta=10000.0,
                                    tie_word_embeddings=True))


CHAT_MODELS = {"llama-chat-2k": llama_chat_2k, "llama-135m-chat-2k": llama_135m_chat_2k}


def write_chat_model(out_dir: str, name: str, tokenizer_path: str) -> dict:
    path = os.path.join(out_dir, f"{name}-f32.pt")
    if os.path.exists(path):
        return {"f32.pt": path}
    if not tokenizer_path:
        raise SystemExit(f"{name} needs --llama-tokenizer PATH (node test/helpers/real_tokenizers.mjs llama PATH)")
    torch.manual_seed(0)
    model, cfg = CHAT_MODELS[name]()
    config = dict(cfg, format="torchserve-node/causal-lm", interface_version=INTERFACE_VERSION,
                  tokenizer=LLAMA2_TOKENIZER, dtype="float32")
    with open(tokenizer_path, encoding="utf-8") as f:
        tokenizer = f.read()
    export_gpt.save_module(model.eval(), path, config, tokenizer)
    return {"f32.pt": path}


def write(out_dir: str, name: str, wanted) -> dict:
    make, offered = MODELS[name]
    precisions = [p for p in offered if p in wanted]
    kinds = [f"{p}.pt" for p in precisions] + [
        {"f32": "f32", "bf16": "f16"}.get(p, p) + ".gguf" for p in precisions]
    paths = {kind: os.path.join(out_dir, f"{name}-{kind}") for kind in kinds}
    missing = [k for k, p in paths.items() if not os.path.exists(p)]
    if not missing:
        return paths
    torch.manual_seed(0)
    model, cfg = make()
    model.eval()
    cfg = dict(cfg, format="torchserve-node/causal-lm", interface_version=INTERFACE_VERSION, tokenizer=BYTE_TOKENIZER)
    for dtype, key in ((torch.float32, "f32.pt"), (torch.bfloat16, "bf16.pt")):
        if key not in missing:
            continue
        config = dict(cfg, dtype="float32" if dtype == torch.float32 else "bfloat16")
        export_gpt.save_module(model.to(dtype), paths[key], config)
    del model  # the quantized files below start from a fresh float32 model: hold one at a time
    # The GGUF files hold the checkpoint's weights (f16 rounded from the float32 ones where
    # there are any; bf16 values of this scale are exact in f16); the benchmark feeds token
    # ids, so a placeholder vocabulary stands in for a tokenizer.
    source = paths.get("f32.pt", paths.get("bf16.pt"))
    for key, dtype in (("f32.gguf", "f32"), ("f16.gguf", "f16")):
        if key in missing:
            export_gguf.export(source, paths[key], dtype, quiet=True, vocabulary="ids")
    # Quantized: the float32 weights quantized once; the GGUF file holds the checkpoint's bytes.
    for scheme in QUANTIZED:
        if f"{scheme}.pt" not in missing and f"{scheme}.gguf" not in missing:
            continue
        if f"{scheme}.pt" not in paths:
            continue
        torch.manual_seed(0)
        quantized, _ = make()
        quantize_llama(quantized.float().eval(), scheme)
        config = dict(cfg, dtype="float32", quantization=scheme)
        export_gpt.save_module(quantized, paths[f"{scheme}.pt"], config)
        del quantized
        export_gguf.export(paths[f"{scheme}.pt"], paths[f"{scheme}.gguf"], "f32", quiet=True, vocabulary="ids")
    return paths


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, ".cache", "bench", "models"))
    ap.add_argument("--models", default="gpt2-small,llama-135m,llama-1b")
    ap.add_argument("--llama-tokenizer", default="", help="Llama 2's tokenizer.json, for llama-chat-2k")
    ap.add_argument("--precisions", default="f32,bf16,q8_0,q4_0,q4_k_m,q5_k_m")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    names = args.models.split(",")
    for name in names:
        if name not in MODELS and name not in CHAT_MODELS and name not in TILED_MODELS:
            ap.error(f"unknown model {name!r} (known: {', '.join([*MODELS, *CHAT_MODELS, *TILED_MODELS])})")
    wanted = args.precisions.split(",")
    print(json.dumps({name: write_chat_model(args.out, name, args.llama_tokenizer) if name in CHAT_MODELS
                      else write_tiled(args.out, name, TILED_MODELS[name](), wanted) if name in TILED_MODELS
                      else write(args.out, name, wanted) for name in names}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
