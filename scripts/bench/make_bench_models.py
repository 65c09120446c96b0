"""Random-weight models of real shapes for scripts/bench/vs-llamacpp.ts, each written as project
checkpoints (float32 and bfloat16; gpt.py and llama.py, the models export_hf.py writes) and as
GGUF (float32 and float16, by scripts/model/export_gguf.py --vocabulary ids) with the same
weights.

    /usr/bin/python3 scripts/bench/make_bench_models.py [--out .cache/bench/models]

  gpt2-small:  GPT-2 small (124M): 12 layers, d=768, 12 heads, vocabulary 50257, context 1024.
  llama-135m:  SmolLM-135M's shape: 30 layers, d=576, 9 heads over 3 kv heads (GQA), SwiGLU
               width 1536, vocabulary 49152, context 1024, tied head.

Files already present are kept (delete the folder to rebuild). Prints the files as JSON.
"""

import argparse
import json
import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
from torchserve_node import export_gguf  # noqa: E402
from torchserve_node.gpt import GPT, GPTConfig  # noqa: E402
from torchserve_node.llama import INTERFACE_VERSION, LlamaConfig, LlamaLM  # noqa: E402

BYTE_TOKENIZER = {"kind": "byte", "bos_token_id": None, "eos_token_id": None, "pad_token_id": None, "add_bos": False}


def gpt2_small():
    cfg = GPTConfig(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768)
    return GPT(cfg), dict(architecture="gpt", **cfg.to_dict())


def llama_135m():
    cfg = LlamaConfig(vocab_size=49152, block_size=1024, n_layer=30, n_head=9, n_kv_head=3, n_embd=576,
                      intermediate_size=1536, rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True)
    model = LlamaLM(cfg)
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.02)
    return model, dict(architecture="llama", **cfg.to_dict())


def write(out_dir: str, name: str, make) -> dict:
    paths = {f"{kind}": os.path.join(out_dir, f"{name}-{kind}") for kind in ("f32.pt", "bf16.pt", "f32.gguf", "f16.gguf")}
    if all(os.path.exists(p) for p in paths.values()):
        return paths
    torch.manual_seed(0)
    model, cfg = make()
    model.eval()
    cfg = dict(cfg, format="torchserve-node/causal-lm", interface_version=INTERFACE_VERSION, tokenizer=BYTE_TOKENIZER)
    for dtype, key in ((torch.float32, "f32.pt"), (torch.bfloat16, "bf16.pt")):
        config = dict(cfg, dtype="float32" if dtype == torch.float32 else "bfloat16")
        scripted = torch.jit.script(model.to(dtype))
        torch.jit.save(scripted, paths[key], _extra_files={"config.json": json.dumps(config)})
    # The GGUF files hold the float32 checkpoint's weights (f16 rounded from them); the
    # benchmark feeds token ids, so a placeholder vocabulary stands in for a tokenizer.
    for key, dtype in (("f32.gguf", "f32"), ("f16.gguf", "f16")):
        export_gguf.export(paths["f32.pt"], paths[key], dtype, quiet=True, vocabulary="ids")
    return paths


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, ".cache", "bench", "models"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    print(json.dumps({"gpt2-small": write(args.out, "gpt2-small", gpt2_small),
                      "llama-135m": write(args.out, "llama-135m", llama_135m)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
