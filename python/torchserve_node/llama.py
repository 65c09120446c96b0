"""Llama-family decoder (Llama 2/3, Mistral, Qwen2, TinyLlama, SmolLM) with the serving
checkpoint's KV-cache interface (docs/checkpoint.md, interface version 1).

Same contract as gpt.py:

    forward(idx[B,T] int64, pos[B] int64, lengths[B] int64, cache) -> (logits[B,V] f32, cache)
    cache_shape(batch_size: int) -> List[int]        # [L, 2, B, n_kv_head, C, head_dim]
    interface_version() -> int

The arithmetic follows Hugging Face's LlamaForCausalLM / Qwen2ForCausalLM (eager attention)
step by step, including where it changes dtype, so that a bfloat16 checkpoint computes what
transformers computes in bfloat16:

- RMSNorm in float32, the result cast back to the activation dtype before the weight;
- rotary embeddings in the rotate-half convention, cos/sin computed in float32 from
  `rope_inv_freq` (with Llama 3.1's `rope_scaling` type "llama3" applied) and cast to the
  activation dtype;
- grouped-query attention: query head h reads key/value head h // (n_head // n_kv_head);
  scores scaled after the matmul, softmax in float32, cast back;
- SwiGLU MLP down(silu(gate(x)) * up(x)); optional q/k/v biases (Qwen2);
- output head untied (`lm_head.weight`) or tied to `embed.weight`.

The cache and the weights have the checkpoint's dtype. Torch 1.13 has no CPU kernels for
float16 matmul, bmm, softmax or silu: on the CPU a float16 checkpoint therefore computes in
float32 (weights and cache stay float16 in memory and are widened per call); on CUDA it
computes in float16 like transformers.

Parameter names (read by name by a native runtime; docs/checkpoint.md lists them):
embed.weight, layers.N.{attn_norm, q_proj, k_proj, v_proj, o_proj, mlp_norm, gate_proj,
up_proj, down_proj}.weight (+ q/k/v_proj.bias when qkv_bias), norm.weight, lm_head.weight
(absent when tied); buffer rope_inv_freq [head_dim/2] float32: the rope scaling is computed
here once, and the native runtime rotates by this buffer too.
"""

import math
from dataclasses import dataclass, asdict, field
from typing import List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

INTERFACE_VERSION = 1


@dataclass
class LlamaConfig:
    vocab_size: int
    block_size: int                  # context C the server uses (cache slots per row)
    n_layer: int
    n_head: int
    n_kv_head: int
    n_embd: int
    intermediate_size: int
    head_dim: int = 0                # 0 = n_embd // n_head
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: Optional[dict] = None   # None or {"rope_type": "llama3", ...}
    qkv_bias: bool = False
    tie_word_embeddings: bool = False
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        if not self.head_dim:
            self.head_dim = self.n_embd // self.n_head

    def to_dict(self):
        d = asdict(self)
        d.pop("extra")
        return d


def rope_inv_freq(head_dim: int, theta: float, scaling: Optional[dict]) -> Tensor:
    """Inverse frequencies [head_dim/2] in float32, as transformers' rope init functions
    compute them ("default" and "llama3")."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    if scaling is None:
        return inv_freq
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind == "default":
        return inv_freq
    if kind != "llama3":
        raise ValueError(f"rope_scaling type {kind!r} is not supported (only 'llama3')")
    factor = float(scaling["factor"])
    low_freq_factor = float(scaling["low_freq_factor"])
    high_freq_factor = float(scaling["high_freq_factor"])
    old_context_len = float(scaling["original_max_position_embeddings"])
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    # Long wavelengths are divided by the factor, short ones kept, the middle interpolated.
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(medium, smoothed, scaled)


def _linear(x: Tensor, w: Tensor, b: Optional[Tensor]) -> Tensor:
    """F.linear in x's dtype; 16-bit weights are widened when x computes in float32."""
    if w.dtype != x.dtype:
        w = w.to(x.dtype)
    if b is not None and b.dtype != x.dtype:
        b = b.to(x.dtype)
    return F.linear(x, w, b)


def _rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight.to(x.dtype) * h.to(x.dtype)


def _rotate_half(x: Tensor) -> Tensor:
    half = x.size(-1) // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Linear(nn.Linear):
    """nn.Linear computing in the input's dtype (_linear); quant.QuantLinear takes its place
    in a quantized checkpoint."""

    def forward(self, x: Tensor) -> Tensor:
        return _linear(x, self.weight, self.bias)


class Embedding(nn.Embedding):
    """nn.Embedding that is also the tied output head (linear); quant.QuantEmbedding takes
    its place in a quantized checkpoint."""

    def linear(self, x: Tensor) -> Tensor:
        return _linear(x, self.weight, None)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float, device=None):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim, device=device))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        return _rms_norm(x, self.weight, self.eps)


class Layer(nn.Module):
    def __init__(self, cfg: LlamaConfig, device=None):
        super().__init__()
        dev = {"device": device}
        D, H, KV, hd = cfg.n_embd, cfg.n_head, cfg.n_kv_head, cfg.head_dim
        self.n_head, self.n_kv_head, self.head_dim = H, KV, hd
        self.scale = 1.0 / math.sqrt(hd)
        self.attn_norm = RMSNorm(D, cfg.rms_norm_eps, device)
        self.q_proj = Linear(D, H * hd, bias=cfg.qkv_bias, **dev)
        self.k_proj = Linear(D, KV * hd, bias=cfg.qkv_bias, **dev)
        self.v_proj = Linear(D, KV * hd, bias=cfg.qkv_bias, **dev)
        self.o_proj = Linear(H * hd, D, bias=False, **dev)
        self.mlp_norm = RMSNorm(D, cfg.rms_norm_eps, device)
        self.gate_proj = Linear(D, cfg.intermediate_size, bias=False, **dev)
        self.up_proj = Linear(D, cfg.intermediate_size, bias=False, **dev)
        self.down_proj = Linear(cfg.intermediate_size, D, bias=False, **dev)

    def forward(self, x: Tensor, layer_cache: Tensor, cos: Tensor, sin: Tensor, bias: Tensor,
                rows: Tensor, steps: Tensor, slots: Tensor, span: int) -> Tensor:
        B, T, _ = x.shape
        H, KV, hd = self.n_head, self.n_kv_head, self.head_dim
        h = self.attn_norm(x)
        q = self.q_proj(h).view(B, T, H, hd).transpose(1, 2)
        k = self.k_proj(h).view(B, T, KV, hd).transpose(1, 2)
        v = self.v_proj(h).view(B, T, KV, hd)
        q = q * cos + _rotate_half(q) * sin                       # [B,H,T,hd]
        k = (k * cos + _rotate_half(k) * sin).transpose(1, 2)     # [B,T,KV,hd]
        # Write only the real (non-padding) positions into the cache, in place.
        store = layer_cache.dtype
        layer_cache[0].transpose(1, 2).index_put_((rows, slots), k[rows, steps].to(store))
        layer_cache[1].transpose(1, 2).index_put_((rows, slots), v[rows, steps].to(store))
        keys = layer_cache[0, :, :, :span].to(x.dtype)            # [B,KV,S,hd]
        values = layer_cache[1, :, :, :span].to(x.dtype)
        # Grouped-query attention without copying the cache: the G query heads sharing a
        # key/value head are stacked along the query axis.
        G = H // KV
        qg = q.reshape(B, KV, G * T, hd)
        att = torch.matmul(qg, keys.transpose(-2, -1)) * self.scale
        att = att.view(B, H, T, span) + bias
        att = torch.softmax(att, dim=-1, dtype=torch.float32).to(x.dtype)
        y = torch.matmul(att.view(B, KV, G * T, span), values)    # [B,KV,G*T,hd]
        y = y.view(B, H, T, hd).transpose(1, 2).reshape(B, T, H * hd)
        x = x + self.o_proj(y)
        h = self.mlp_norm(x)
        gate = self.gate_proj(h)
        up = self.up_proj(h)
        return x + self.down_proj(F.silu(gate) * up)


class LlamaLM(nn.Module):
    tied: torch.jit.Final[bool]

    def __init__(self, cfg: LlamaConfig, device=None):
        super().__init__()
        self.n_layer = cfg.n_layer
        self.n_kv_head = cfg.n_kv_head
        self.head_dim = cfg.head_dim
        self.block_size = cfg.block_size
        self.tied = cfg.tie_word_embeddings
        self.embed = Embedding(cfg.vocab_size, cfg.n_embd, device=device)
        self.layers = nn.ModuleList([Layer(cfg, device) for _ in range(cfg.n_layer)])
        self.norm = RMSNorm(cfg.n_embd, cfg.rms_norm_eps, device)
        if not self.tied:
            self.lm_head = Linear(cfg.n_embd, cfg.vocab_size, bias=False, device=device)
        self.register_buffer("rope_inv_freq",
                             rope_inv_freq(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling))

    @staticmethod
    def from_state(cfg: LlamaConfig, state: dict) -> "LlamaLM":
        """A model whose parameters are the given tensors themselves (no copy, no random
        initialisation: built on the meta device first), so exporting an 8B model needs
        its weights once in memory, not three times."""
        with torch.no_grad():
            model = LlamaLM(cfg, device="meta")
            names = {name for name, _ in model.named_parameters()}
            if names != set(state):
                raise ValueError(f"state does not match the parameters: missing "
                                 f"{sorted(names - set(state))}, unexpected {sorted(set(state) - names)}")
            for name in names:
                owner_name, _, leaf = name.rpartition(".")
                owner = model.get_submodule(owner_name)
                owner._parameters[leaf] = nn.Parameter(state[name], requires_grad=False)
            model.rope_inv_freq = rope_inv_freq(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling)
        return model.eval()

    @torch.jit.export
    def interface_version(self) -> int:
        return 1

    @torch.jit.export
    def cache_shape(self, batch_size: int) -> List[int]:
        return [self.n_layer, 2, batch_size, self.n_kv_head, self.block_size, self.head_dim]

    def _head(self, x: Tensor) -> Tensor:
        if self.tied:
            return self.embed.linear(x)
        return self.lm_head(x)

    def forward(self, idx: Tensor, pos: Tensor, lengths: Tensor,
                cache: Tensor) -> Tuple[Tensor, Tensor]:
        B, T = idx.shape
        C = cache.size(4)
        device = idx.device
        # float16 has no CPU matmul kernels in torch 1.13: compute in float32 there.
        compute = cache.dtype
        if compute == torch.float16 and cache.device.type == "cpu":
            compute = torch.float32
        steps_1d = torch.arange(T, device=device)
        positions = pos.unsqueeze(1) + steps_1d.unsqueeze(0)               # [B,T]
        valid = steps_1d.unsqueeze(0) < lengths.unsqueeze(1)              # [B,T]
        nz = valid.nonzero()
        rows, steps = nz[:, 0], nz[:, 1]
        slots = positions[rows, steps]
        span = int((pos + lengths).max())
        keys_1d = torch.arange(span, device=device)
        allowed = keys_1d.view(1, 1, span) <= positions.unsqueeze(2)      # [B,T,S]
        bias = torch.zeros(allowed.shape, device=device, dtype=compute)
        bias = bias.masked_fill(allowed.logical_not(), float("-inf")).unsqueeze(1)
        freqs = positions.clamp(0, C - 1).float().unsqueeze(2) * self.rope_inv_freq.float()
        emb = torch.cat((freqs, freqs), dim=-1).unsqueeze(1)             # [B,1,T,hd]
        cos = emb.cos().to(compute)
        sin = emb.sin().to(compute)
        x = self.embed(idx).to(compute)
        i = 0
        for layer in self.layers:
            x = layer(x, cache[i], cos, sin, bias, rows, steps, slots, span)
            i += 1
        last = (lengths - 1).clamp(min=0)
        x = x[torch.arange(B, device=device), last]                        # [B,D]
        x = self.norm(x)
        return self._head(x).float(), cache


def _use_more_bits(layer: int, layers: int) -> bool:
    """llama.cpp's use_more_bits: the first and last eighth of the layers and every third between."""
    return layer < layers // 8 or layer >= 7 * layers // 8 or (layer - layers // 8) % 3 == 2


def tensor_type_fallback(qtype: str, width: int) -> Optional[str]:
    """llama.cpp's tensor_type_fallback (llama-quant.cpp): a matrix whose input width is not
    a multiple of its type's block takes a 32-value type instead (Q4_K -> Q5_0, Q5_K -> Q5_1,
    Q6_K -> Q8_0; a 32-value type keeps its type), and stays float (None; llama.cpp writes
    F16) when the width is not a multiple of 32 either. Q5_1 ("q5_1") is llama.cpp's answer
    but no type of quant.py: quantization_plan refuses it."""
    from . import quant
    if width % quant.BLOCKS[qtype][1]:
        qtype = {"q4_k": "q5_0", "q5_k": "q5_1", "q6_k": "q8_0"}.get(qtype, qtype)
        if width % 32:
            return None
    return qtype


def llama_tensor_qtype(scheme: str, name: str, n_layer: int, tied: bool,
                       width: Optional[int] = None) -> Optional[str]:
    """The type llama.cpp's quantize (llama_tensor_get_type) gives a llama.py matrix under
    `scheme`, a llama.cpp file type:

    - "q8_0": every matrix Q8_0.
    - "q4_0": every matrix Q4_0, but the output head (the embedding table when tied) Q6_K.
    - "q4_k_m": Q4_K, with Q6_K for the output head (the embedding table when tied) and for
      attn_v and ffn_down in the layers use_more_bits picks.
    - "q5_k_m": the same with Q5_K for Q4_K.

    With the matrix's input `width`, the fallback for a width that is not a multiple of the
    type's block applies (tensor_type_fallback; None: the matrix stays float)."""
    base = {"q8_0": "q8_0", "q4_0": "q4_0", "q4_k_m": "q4_k", "q5_k_m": "q5_k"}
    if scheme not in base:
        raise ValueError(f"unknown quantization scheme {scheme!r}")
    qtype = base[scheme]
    # The output head, and the token embedding when it is the head too: llama.cpp gives it
    # Q6_K unless the file type's own type is Q8_0 (llama_tensor_get_type_impl's first branch).
    if name == "lm_head.weight" or (tied and name == "embed.weight"):
        if qtype != "q8_0":
            qtype = "q6_k"
    elif scheme in ("q4_k_m", "q5_k_m"):
        parts = name.split(".")
        if parts[0] == "layers" and parts[2] in ("v_proj", "down_proj") and _use_more_bits(int(parts[1]), n_layer):
            qtype = "q6_k"
    return qtype if width is None else tensor_type_fallback(qtype, width)


def quantization_plan(model: LlamaLM, scheme: str) -> List[Tuple[str, nn.Module, str]]:
    """(module name, Linear or Embedding, type) of every matrix llama.cpp's quantize quantizes
    under `scheme` (llama_tensor_qtype, the width fallback included; a matrix it leaves float
    is not listed). A matrix whose fallback has no type here (Q5_K's, Q5_1) is a
    quant.QuantError naming the matrix, its width and the type, so quantize_llama stops
    before it has quantized anything."""
    from . import quant
    plan = []
    for name, module in model.named_modules():
        if not isinstance(module, (Linear, Embedding)):
            continue
        width = module.weight.size(1)
        qtype = llama_tensor_qtype(scheme, name + ".weight", model.n_layer, model.tied, width)
        if qtype is None:
            continue
        if qtype not in quant.BLOCKS:
            raise quant.QuantError(f"{name}.weight is {width} wide, not a multiple of 256: llama.cpp's "
                                   f"{scheme.upper()} gives it {qtype.upper()}, which is not supported "
                                   f"(q4_k_m and q8_0 quantize it)")
        plan.append((name, module, qtype))
    return plan


def quantize_llama(model: LlamaLM, scheme: str, rows=None) -> List[str]:
    """Replaces the model's matrices (every layer's projections, the embedding table and the
    output head) by quant.QuantLinear / QuantEmbedding of the types llama.cpp's quantize
    gives them under `scheme` (quantization_plan), in place; norms and biases stay float32
    as llama.cpp keeps them. A matrix whose input width is not a multiple of its type's block
    takes llama.cpp's fallback (Q4_K -> Q5_0, Q6_K -> Q8_0), or stays float if the width is
    not a multiple of 32; Q5_K's fallback, Q5_1, is a quant.QuantError. `rows(qtype, weight)`
    gives a matrix's quantized rows (default: quant.quantize of its weight; a model built on
    the meta device has no values to quantize, so its builder gives rows of its own). Returns
    the names of the quantized weights."""
    from . import quant
    done: List[str] = []
    with torch.no_grad():
        for name, module, qtype in quantization_plan(model, scheme):
            n, k = module.weight.shape
            data = torch.from_numpy((rows or quant.quantize)(qtype, module.weight))
            if isinstance(module, Embedding):
                replacement = quant.QuantEmbedding(qtype, data, n, k)
            else:
                replacement = quant.QuantLinear(qtype, data, k, n, module.bias)
            owner_name, _, leaf = name.rpartition(".")
            setattr(model.get_submodule(owner_name) if owner_name else model, leaf, replacement)
            done.append(name + ".weight")
    return done
