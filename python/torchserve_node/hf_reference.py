"""Plain forwards of Hugging Face causal LMs, written from transformers' definitions
(modeling_llama.py, modeling_qwen2.py, modeling_mistral.py, modeling_gpt2.py and
modeling_rope_utils.py's "default" and "llama3" rope init), straight from a Hugging Face
state dict and config.json. No cache, the whole sequence at once, eager attention.

transformers cannot be installed here; this file is the independent check of the export:
it shares no code with llama.py or export_hf.py (its own rotary frequencies, repeat_kv,
causal mask, weight names), so a mistake in the key mapping or in the scripted forward
shows up as a difference.

    logits = llama_logits(hf_config, state_dict, idx, dtype=torch.float64)   # [B, T, V]
    logits = gpt2_logits(hf_config, state_dict, idx, dtype=torch.float64)

`dtype` is the compute dtype: float64 gives the exact function of the weights; bfloat16
reproduces transformers running the model in bfloat16 (RMSNorm and softmax in float32,
rotary cos/sin computed in float32 and cast, as transformers does).
"""

import math
from typing import Dict, Optional

import torch
import torch.nn.functional as F
from torch import Tensor


def default_inv_freq(base: float, dim: int) -> Tensor:
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim))


def llama3_inv_freq(base: float, dim: int, rope_scaling: dict) -> Tensor:
    inv_freq = default_inv_freq(base, dim)
    factor = rope_scaling["factor"]
    low_freq_factor = rope_scaling["low_freq_factor"]
    high_freq_factor = rope_scaling["high_freq_factor"]
    old_context_len = rope_scaling["original_max_position_embeddings"]
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)


def rotary_cos_sin(config: dict, head_dim: int, T: int, dtype: torch.dtype):
    base = config.get("rope_theta", 10000.0)
    scaling = config.get("rope_scaling")
    if scaling and scaling.get("rope_type", scaling.get("type")) == "llama3":
        inv_freq = llama3_inv_freq(base, head_dim, scaling)
    else:
        inv_freq = default_inv_freq(base, head_dim)
    position_ids = torch.arange(T)[None, :]
    inv_freq_expanded = inv_freq[None, :, None].float()
    position_ids_expanded = position_ids[:, None, :].float()
    freqs = (inv_freq_expanded @ position_ids_expanded).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    if dtype == torch.float64:   # the exact function: no float32 rounding of the angles
        freqs = position_ids[0].double()[:, None] * inv_freq.double()[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)[None]
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x: Tensor) -> Tensor:
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def repeat_kv(hidden_states: Tensor, n_rep: int) -> Tensor:
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


def rms_norm(hidden_states: Tensor, weight: Tensor, eps: float) -> Tensor:
    input_dtype = hidden_states.dtype
    hidden_states = hidden_states.to(torch.float32 if input_dtype != torch.float64 else input_dtype)
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + eps)
    return weight * hidden_states.to(input_dtype)


def llama_logits(config: dict, sd: Dict[str, Tensor], idx: Tensor,
                 dtype: torch.dtype = torch.float64) -> Tensor:
    """LlamaForCausalLM / MistralForCausalLM / Qwen2ForCausalLM, eager attention."""
    def w(key: str) -> Tensor:
        return sd[key].to(dtype)

    def lin(x: Tensor, key: str) -> Tensor:
        b = sd.get(key + ".bias")
        return F.linear(x, w(key + ".weight"), None if b is None else b.to(dtype))

    hidden = config["hidden_size"]
    n_heads = config["num_attention_heads"]
    n_kv = config.get("num_key_value_heads") or n_heads
    head_dim = config.get("head_dim") or hidden // n_heads
    eps = config["rms_norm_eps"]
    B, T = idx.shape
    x = F.embedding(idx, w("model.embed_tokens.weight"))
    cos, sin = rotary_cos_sin(config, head_dim, T, dtype)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    causal = torch.full((T, T), float("-inf"), dtype=dtype).triu(1)
    scaling = head_dim ** -0.5
    softmax_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        residual = x
        h = rms_norm(x, w(p + "input_layernorm.weight"), eps)
        q = lin(h, p + "self_attn.q_proj").view(B, T, -1, head_dim).transpose(1, 2)
        k = lin(h, p + "self_attn.k_proj").view(B, T, -1, head_dim).transpose(1, 2)
        v = lin(h, p + "self_attn.v_proj").view(B, T, -1, head_dim).transpose(1, 2)
        q = (q * cos) + (rotate_half(q) * sin)
        k = (k * cos) + (rotate_half(k) * sin)
        k = repeat_kv(k, n_heads // n_kv)
        v = repeat_kv(v, n_heads // n_kv)
        attn = torch.matmul(q, k.transpose(2, 3)) * scaling + causal
        attn = F.softmax(attn, dim=-1, dtype=softmax_dtype).to(q.dtype)
        out = torch.matmul(attn, v).transpose(1, 2).reshape(B, T, -1)
        x = residual + lin(out, p + "self_attn.o_proj")
        residual = x
        h = rms_norm(x, w(p + "post_attention_layernorm.weight"), eps)
        down = lin(F.silu(lin(h, p + "mlp.gate_proj")) * lin(h, p + "mlp.up_proj"), p + "mlp.down_proj")
        x = residual + down
    x = rms_norm(x, w("model.norm.weight"), eps)
    head = "lm_head.weight" if "lm_head.weight" in sd else "model.embed_tokens.weight"
    return F.linear(x, w(head)).float() if dtype != torch.float64 else F.linear(x, w(head))


def gpt2_logits(config: dict, sd: Dict[str, Tensor], idx: Tensor,
                dtype: torch.dtype = torch.float64) -> Tensor:
    """GPT2LMHeadModel (Conv1D weights [in, out]; tanh GELU; tied head)."""
    prefix = "transformer." if "transformer.wte.weight" in sd else ""

    def w(key: str) -> Tensor:
        return sd[prefix + key].to(dtype)

    def conv1d(x: Tensor, key: str) -> Tensor:
        return x @ w(key + ".weight") + w(key + ".bias")

    n_head = config["n_head"]
    eps = config.get("layer_norm_epsilon", 1e-5)
    B, T = idx.shape
    x = w("wte.weight")[idx] + w("wpe.weight")[:T]
    D = x.size(-1)
    hd = D // n_head
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for i in range(config["n_layer"]):
        p = f"h.{i}."
        h = F.layer_norm(x, (D,), w(p + "ln_1.weight"), w(p + "ln_1.bias"), eps)
        q, k, v = conv1d(h, p + "attn.c_attn").split(D, dim=-1)
        q, k, v = (t.view(B, T, n_head, hd).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        att = att.masked_fill(~causal, float("-inf")).softmax(-1)
        x = x + conv1d((att @ v).transpose(1, 2).reshape(B, T, D), p + "attn.c_proj")
        h = F.layer_norm(x, (D,), w(p + "ln_2.weight"), w(p + "ln_2.bias"), eps)
        x = x + conv1d(F.gelu(conv1d(h, p + "mlp.c_fc"), approximate="tanh"), p + "mlp.c_proj")
    x = F.layer_norm(x, (D,), w("ln_f.weight"), w("ln_f.bias"), eps)
    return x @ w("wte.weight").t()


def hf_logits(config: dict, sd: Dict[str, Tensor], idx: Tensor,
              dtype: torch.dtype = torch.float64) -> Tensor:
    arch = (config.get("architectures") or [""])[0]
    if arch == "GPT2LMHeadModel":
        return gpt2_logits(config, sd, idx, dtype)
    return llama_logits(config, sd, idx, dtype)


def greedy_continuation(config: dict, sd: Dict[str, Tensor], prompt, n: int,
                        eos_ids=(), dtype: torch.dtype = torch.float64,
                        context: Optional[int] = None, margins: Optional[list] = None):
    """Greedy ids after `prompt`, recomputing the whole sequence each step (no cache).
    Stops at an id in `eos_ids` (not included). Only for prompt + n <= context. If
    `margins` is a list, the top-1 minus top-2 logit of each step is appended to it."""
    ids = list(prompt)
    out = []
    for _ in range(n):
        if context is not None and len(ids) >= context:
            raise ValueError("greedy_continuation does not slide a window")
        logits = hf_logits(config, sd, torch.tensor([ids]), dtype)[0, -1].double()
        best = logits.max()
        t = int(torch.nonzero(logits == best)[0])           # ties to the lowest id
        if margins is not None:
            top = logits.topk(2).values
            margins.append(float(top[0] - top[1]))
        if t in eos_ids:
            break
        out.append(t)
        ids.append(t)
    return out
