"""Tiny random-weight Llama-family checkpoints for the native runtime's tests and benchmarks.

A minimal Llama / Qwen2 decoder with the serving checkpoint's KV-cache interface
(docs/checkpoint.md), written from Hugging Face's LlamaForCausalLM and Qwen2ForCausalLM:
RMSNorm, rotary embeddings in the rotate-half convention with `rope_theta` and Llama 3.1's
`rope_scaling` type "llama3", grouped-query attention, SwiGLU MLP, optional q/k/v biases,
tied or untied output head. Parameter names and config.json fields are those of the
project's llama checkpoints (embed, layers.N.{attn_norm,q_proj,k_proj,v_proj,o_proj,
mlp_norm,gate_proj,up_proj,down_proj}, norm, lm_head).

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
from typing import List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor


def rope_inv_freq(head_dim: int, theta: float, scaling: Optional[dict]) -> Tensor:
    """transformers' _compute_default_rope_parameters / _compute_llama3_parameters."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    if not scaling:
        return inv_freq
    if scaling.get("rope_type", scaling.get("type")) != "llama3":
        raise ValueError("rope_scaling type must be llama3")
    factor = scaling["factor"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    old = scaling["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old / low, old / high
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


class RMSNorm(nn.Module):
    def __init__(self, width: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        dtype = x.dtype
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)


def rotate_half(x: Tensor) -> Tensor:
    half = x.size(-1) // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Layer(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        d, h, kv = cfg["n_embd"], cfg["n_head"], cfg["n_kv_head"]
        self.n_head, self.n_kv_head, self.head_dim = h, kv, d // h
        self.attn_norm = RMSNorm(d, cfg["rms_norm_eps"])
        self.q_proj = nn.Linear(d, h * self.head_dim, bias=cfg["qkv_bias"])
        self.k_proj = nn.Linear(d, kv * self.head_dim, bias=cfg["qkv_bias"])
        self.v_proj = nn.Linear(d, kv * self.head_dim, bias=cfg["qkv_bias"])
        self.o_proj = nn.Linear(h * self.head_dim, d, bias=False)
        self.mlp_norm = RMSNorm(d, cfg["rms_norm_eps"])
        self.gate_proj = nn.Linear(d, cfg["intermediate_size"], bias=False)
        self.up_proj = nn.Linear(d, cfg["intermediate_size"], bias=False)
        self.down_proj = nn.Linear(cfg["intermediate_size"], d, bias=False)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, layer_cache: Tensor, bias: Tensor,
                rows: Tensor, steps: Tensor, slots: Tensor, span: int) -> Tensor:
        B, T, _ = x.shape
        H, KV, hd = self.n_head, self.n_kv_head, self.head_dim
        h = self.attn_norm(x)
        q = self.q_proj(h).view(B, T, H, hd).transpose(1, 2)
        k = self.k_proj(h).view(B, T, KV, hd).transpose(1, 2)
        v = self.v_proj(h).view(B, T, KV, hd)
        q = q * cos + rotate_half(q) * sin
        k = (k * cos + rotate_half(k) * sin).transpose(1, 2)
        layer_cache[0].transpose(1, 2).index_put_((rows, slots), k[rows, steps])
        layer_cache[1].transpose(1, 2).index_put_((rows, slots), v[rows, steps])
        keys = layer_cache[0, :, :, :span].repeat_interleave(H // KV, dim=1)
        values = layer_cache[1, :, :, :span].repeat_interleave(H // KV, dim=1)
        att = torch.matmul(q, keys.transpose(-2, -1)) * (1.0 / math.sqrt(hd)) + bias
        att = torch.softmax(att.float(), dim=-1).to(q.dtype)
        y = torch.matmul(att, values).transpose(1, 2).reshape(B, T, H * hd)
        x = x + self.o_proj(y)
        m = self.mlp_norm(x)
        return x + self.down_proj(F.silu(self.gate_proj(m)) * self.up_proj(m))


class Llama(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        self.n_layer, self.n_kv_head = cfg["n_layer"], cfg["n_kv_head"]
        self.head_dim = cfg["n_embd"] // cfg["n_head"]
        self.block_size = cfg["block_size"]
        self.embed = nn.Embedding(cfg["vocab_size"], cfg["n_embd"])
        self.layers = nn.ModuleList([Layer(cfg) for _ in range(cfg["n_layer"])])
        self.norm = RMSNorm(cfg["n_embd"], cfg["rms_norm_eps"])
        self.lm_head = nn.Linear(cfg["n_embd"], cfg["vocab_size"], bias=False)
        if cfg["tie_word_embeddings"]:
            self.lm_head.weight = self.embed.weight
        self.register_buffer("inv_freq", rope_inv_freq(self.head_dim, cfg["rope_theta"], cfg.get("rope_scaling")),
                             persistent=False)

    @torch.jit.export
    def interface_version(self) -> int:
        return 1

    @torch.jit.export
    def cache_shape(self, batch_size: int) -> List[int]:
        return [self.n_layer, 2, batch_size, self.n_kv_head, self.block_size, self.head_dim]

    def forward(self, idx: Tensor, pos: Tensor, lengths: Tensor, cache: Tensor) -> Tuple[Tensor, Tensor]:
        B, T = idx.shape
        device = idx.device
        steps_1d = torch.arange(T, device=device)
        positions = pos.unsqueeze(1) + steps_1d.unsqueeze(0)
        valid = steps_1d.unsqueeze(0) < lengths.unsqueeze(1)
        nz = valid.nonzero()
        rows, steps = nz[:, 0], nz[:, 1]
        slots = positions[rows, steps]
        span = int((pos + lengths).max())
        allowed = torch.arange(span, device=device).view(1, 1, span) <= positions.unsqueeze(2)
        bias = torch.zeros(allowed.shape, device=device, dtype=cache.dtype)
        bias = bias.masked_fill(allowed.logical_not(), float("-inf")).unsqueeze(1)
        freqs = positions.float().unsqueeze(2) * self.inv_freq.float().view(1, 1, -1)   # [B,T,hd/2]
        emb = torch.cat((freqs, freqs), dim=-1).unsqueeze(1)                           # [B,1,T,hd]
        cos, sin = emb.cos().to(cache.dtype), emb.sin().to(cache.dtype)
        x = self.embed(idx).to(cache.dtype)
        i = 0
        for layer in self.layers:
            x = layer(x, cos, sin, cache[i], bias, rows, steps, slots, span)
            i += 1
        x = x[torch.arange(B, device=device), (lengths - 1).clamp(min=0)]
        return self.lm_head(self.norm(x)).float(), cache


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


def build(cfg: dict, seed: int) -> Llama:
    torch.manual_seed(seed)
    model = Llama(cfg)
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
def greedy(model: Llama, ids: List[int], count: int) -> Tuple[List[int], List[float], List[float]]:
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
    model = model.to(dtype)
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
