"""Tiny random-weight Llama-family checkpoints for the native runtime's tests.

The model is llama.py's LlamaLM, the one export_hf.py writes for Hugging Face Llama, Mistral
and Qwen2 directories, with random weights drawn so that greedy choices are decisive: GQA,
q/k/v biases with a tied head (Qwen2), Llama 3.1's "llama3" rope scaling, and bf16/fp16
weights. Parameter names and config.json fields are those of the project's llama checkpoints.

    /usr/bin/python3 scripts/model/llama_fixture.py OUT_DIR

writes one checkpoint per variant (VARIANTS, and the committed tiny GPT fixture converted to
bf16 and fp16 for the "gpt" runtime's 16-bit path) and OUT_DIR/reference.json: for each, greedy
continuations of a few prompts by the plain uncached forward in float32 (the reference),
with the margin between the best and second-best logit at every step.
"""

import json
import math
import os
import sys
from typing import List, Tuple

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama import LlamaConfig, LlamaLM  # noqa: E402


BASE = dict(architecture="llama", vocab_size=259, block_size=64, n_layer=2, n_head=4, n_kv_head=2, n_embd=64,
            intermediate_size=160, rms_norm_eps=1e-5, rope_theta=10000.0, qkv_bias=False, tie_word_embeddings=False,
            dtype="float32")
LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 16}
# name -> config overrides
VARIANTS = {
    "llama-gqa": {},
    "qwen-bias-tied": dict(qkv_bias=True, tie_word_embeddings=True, n_kv_head=1, rope_theta=1000000.0),
    "llama3-scaled": dict(rope_theta=500000.0, rope_scaling=LLAMA3_SCALING, n_kv_head=4),
    "llama-gqa-bf16": dict(dtype="bfloat16"),
    "llama-gqa-fp16": dict(dtype="float16"),
}
PROMPTS = ["Hello, world!", "The quick brown fox", "a"]
NEW_TOKENS = 20


def build(cfg: dict, seed: int) -> LlamaLM:
    torch.manual_seed(seed)
    fields = {k: v for k, v in cfg.items() if k not in ("architecture", "dtype")}
    model = LlamaLM(LlamaConfig(**fields))
    # Weights scaled so that a random model's next-token choice is decisive (logits spread
    # over several units), not a near-tie that rounding could flip.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.8, 1.2)
            elif name.endswith(".bias"):
                p.normal_(0.0, 0.5)
            elif p.dim() == 2:
                p.normal_(0.0, 1.0 if name == "embed.weight" else 1.5 / math.sqrt(p.size(1)))
    return model.eval()


@torch.no_grad()
def greedy(model: torch.nn.Module, ids: List[int], count: int) -> Tuple[List[int], List[float], List[float]]:
    """Uncached: every step runs the whole sequence from position 0 in float32."""
    out, margins, scales = [], [], []
    seq = list(ids)
    for _ in range(count):
        cache = torch.zeros(model.cache_shape(1), dtype=torch.float32)
        logits, _ = model(torch.tensor([seq]), torch.tensor([0]), torch.tensor([len(seq)]), cache)
        top = logits[0].topk(2)
        out.append(int(top.indices[0]))
        margins.append(float(top.values[0] - top.values[1]))
        scales.append(float(logits[0].abs().max()))
        seq.append(out[-1])
    return out, margins, scales


def write(out_dir: str, name: str, overrides: dict, seed: int) -> dict:
    cfg = dict(BASE, **overrides)
    model = build(cfg, seed)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[cfg["dtype"]]
    inv_freq = model.rope_inv_freq.clone()
    model = model.to(dtype)
    model.rope_inv_freq = inv_freq  # float32 in any dtype, as export_hf.py writes it
    config = dict(cfg, format="torchserve-node/causal-lm", interface_version=1,
                  tokenizer={"kind": "byte", "bos_token_id": 256, "eos_token_id": 257, "pad_token_id": 258,
                             "add_bos": False})
    path = os.path.join(out_dir, name + ".pt")
    torch.jit.save(torch.jit.script(model), path, _extra_files={"config.json": json.dumps(config, indent=2)})
    reference = model.float()  # the 16-bit weights, exactly, computed in float32
    cases = []
    for prompt in PROMPTS:
        ids = list(prompt.encode("utf-8"))
        output, margins, scales = greedy(reference, ids, NEW_TOKENS)
        cases.append(dict(prompt=prompt, prompt_ids=ids, output_ids=output, margins=margins, scales=scales))
    return dict(file=path, dtype=cfg["dtype"], architecture="llama", cases=cases)


def write_gpt16(out_dir: str, name: str, dtype: str) -> dict:
    """test/fixtures/tiny-gpt.pt with its weights rounded to a 16-bit dtype."""
    source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "test", "fixtures", "tiny-gpt.pt")
    files = {"config.json": ""}
    model = torch.jit.load(source, map_location="cpu", _extra_files=files)
    config = dict(json.loads(files["config.json"]), dtype=dtype)
    model = model.to({"bfloat16": torch.bfloat16, "float16": torch.float16}[dtype])
    path = os.path.join(out_dir, name + ".pt")
    torch.jit.save(model, path, _extra_files={"config.json": json.dumps(config, indent=2)})
    reference = model.float()
    cases = []
    for prompt in PROMPTS:
        ids = list(prompt.encode("utf-8"))
        output, margins, scales = greedy(reference, ids, NEW_TOKENS)
        cases.append(dict(prompt=prompt, prompt_ids=ids, output_ids=output, margins=margins, scales=scales))
    return dict(file=path, dtype=dtype, architecture="gpt", cases=cases)


def main() -> None:
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    torch.set_num_threads(1)
    result = {name: write(out_dir, name, overrides, seed) for seed, (name, overrides) in enumerate(VARIANTS.items())}
    result["gpt-bf16"] = write_gpt16(out_dir, "gpt-bf16", "bfloat16")
    result["gpt-fp16"] = write_gpt16(out_dir, "gpt-fp16", "float16")
    with open(os.path.join(out_dir, "reference.json"), "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
