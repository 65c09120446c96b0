"""GPT decoder with the serving checkpoint's KV-cache interface (interface version 1).

The serving contract (docs/checkpoint.md) is one TorchScript module with

    forward(idx[B,T] int64, pos[B] int64, lengths[B] int64, cache) -> (logits[B,V], cache)
    cache_shape(batch_size: int) -> List[int]
    interface_version() -> int

`cache` is preallocated by the server with `cache_shape(B)` ([L,2,B,H,C,hd]) and written
in place. Row b feeds `lengths[b]` tokens (idx[b,:lengths[b]], the rest padding) at
positions pos[b]..pos[b]+lengths[b]-1; the logits returned are those after its last fed
token. Prefill and decode are the same call, and rows may sit at different positions.

`training_logits` is the plain causal forward used for training; it is not scripted.
"""

import math
from dataclasses import dataclass, asdict
from typing import List, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

INTERFACE_VERSION = 1


@dataclass
class GPTConfig:
    vocab_size: int = 259          # 256 bytes + <bos>, <eos>, <pad>
    block_size: int = 512          # context length C
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 256
    dropout: float = 0.0
    bias: bool = True              # biases in Linear layers (LayerNorm always has one)
    gelu: str = "tanh"             # "tanh" (GPT-2) or "none" (exact erf GELU, nanoGPT)

    def to_dict(self):
        return asdict(self)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        assert cfg.n_embd % cfg.n_head == 0
        self.n_head = cfg.n_head
        self.head_dim = cfg.n_embd // cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.dropout = cfg.dropout

    def forward(self, x: Tensor, layer_cache: Tensor, bias: Tensor,
                rows: Tensor, steps: Tensor, slots: Tensor, span: int) -> Tensor:
        B, T, D = x.shape
        H, hd = self.n_head, self.head_dim
        q, k, v = self.c_attn(x).split(D, dim=2)
        k = k.view(B, T, H, hd)
        v = v.view(B, T, H, hd)
        # Write only the real (non-padding) positions into the cache, in place.
        layer_cache[0].transpose(1, 2).index_put_((rows, slots), k[rows, steps])
        layer_cache[1].transpose(1, 2).index_put_((rows, slots), v[rows, steps])
        keys = layer_cache[0, :, :, :span]                      # [B,H,S,hd] (a view)
        values = layer_cache[1, :, :, :span]
        q = q.view(B, T, H, hd).transpose(1, 2)                 # [B,H,T,hd]
        att = torch.matmul(q, keys.transpose(-2, -1)) * (1.0 / math.sqrt(hd)) + bias
        att = torch.softmax(att, dim=-1)
        y = torch.matmul(att, values)                           # [B,H,T,hd]
        y = y.transpose(1, 2).reshape(B, T, D)
        return self.c_proj(y)

    def training_forward(self, x: Tensor) -> Tensor:
        B, T, D = x.shape
        q, k, v = self.c_attn(x).split(D, dim=2)
        q = q.view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        k = k.view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        v = v.view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        mask = torch.full((T, T), float("-inf"), device=x.device).triu(1)
        scale = 1.0 / math.sqrt(self.head_dim)
        # One baddbmm carries scale and causal mask (faster than masked_fill + matmul).
        att = torch.baddbmm(mask.expand(B * self.n_head, T, T).to(q.dtype),
                            q.reshape(B * self.n_head, T, self.head_dim),
                            k.reshape(B * self.n_head, T, self.head_dim).transpose(1, 2),
                            beta=1.0, alpha=scale)
        att = torch.softmax(att.float(), dim=-1).to(q.dtype)
        att = F.dropout(att, p=self.dropout, training=self.training)
        y = torch.bmm(att, v.reshape(B * self.n_head, T, self.head_dim))
        y = y.view(B, self.n_head, T, self.head_dim).transpose(1, 2).reshape(B, T, D)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.gelu = cfg.gelu

    def forward(self, x: Tensor) -> Tensor:
        return self.c_proj(F.gelu(self.c_fc(x), approximate=self.gelu))

    def training_forward(self, x: Tensor) -> Tensor:
        # GELU in float32: under CPU bf16 autocast the bf16 GELU kernels are ~2x slower.
        return self.c_proj(F.gelu(self.c_fc(x).float(), approximate=self.gelu))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = MLP(cfg)

    def forward(self, x: Tensor, layer_cache: Tensor, bias: Tensor,
                rows: Tensor, steps: Tensor, slots: Tensor, span: int) -> Tensor:
        x = x + self.attn(self.ln_1(x), layer_cache, bias, rows, steps, slots, span)
        return x + self.mlp(self.ln_2(x))

    def training_forward(self, x: Tensor) -> Tensor:
        x = x + self.attn.training_forward(self.ln_1(x))
        return x + self.mlp.training_forward(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.n_layer = cfg.n_layer
        self.n_head = cfg.n_head
        self.head_dim = cfg.n_embd // cfg.n_head
        self.block_size = cfg.block_size
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)])
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    @torch.jit.export
    def interface_version(self) -> int:
        return 1

    @torch.jit.export
    def cache_shape(self, batch_size: int) -> List[int]:
        return [self.n_layer, 2, batch_size, self.n_head, self.block_size, self.head_dim]

    def forward(self, idx: Tensor, pos: Tensor, lengths: Tensor,
                cache: Tensor) -> Tuple[Tensor, Tensor]:
        B, T = idx.shape
        C = cache.size(4)
        device = idx.device
        steps_1d = torch.arange(T, device=device)
        positions = pos.unsqueeze(1) + steps_1d.unsqueeze(0)               # [B,T]
        valid = steps_1d.unsqueeze(0) < lengths.unsqueeze(1)              # [B,T]
        nz = valid.nonzero()
        rows, steps = nz[:, 0], nz[:, 1]
        slots = positions[rows, steps]
        span = int((pos + lengths).max())
        keys_1d = torch.arange(span, device=device)
        allowed = keys_1d.view(1, 1, span) <= positions.unsqueeze(2)      # [B,T,S]
        bias = torch.zeros(allowed.shape, device=device, dtype=cache.dtype)
        bias = bias.masked_fill(allowed.logical_not(), float("-inf")).unsqueeze(1)
        x = self.wte(idx) + self.wpe(positions.clamp(0, C - 1))
        x = x.to(cache.dtype)
        i = 0
        for block in self.blocks:
            x = block(x, cache[i], bias, rows, steps, slots, span)
            i += 1
        last = (lengths - 1).clamp(min=0)
        x = x[torch.arange(B, device=device), last]                        # [B,D]
        logits = self.lm_head(self.ln_f(x))
        return logits.float(), cache

    @torch.jit.ignore
    def training_logits(self, idx: Tensor, pos_offset: int = 0) -> Tensor:
        """Logits at every position; the window sits at positions pos_offset..+T-1."""
        B, T = idx.shape
        assert pos_offset + T <= self.block_size
        positions = torch.arange(pos_offset, pos_offset + T, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(positions))
        for block in self.blocks:
            x = block.training_forward(x)
        return self.lm_head(self.ln_f(x))
