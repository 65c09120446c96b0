"""Export a Hugging Face model directory, as downloaded, to a serving checkpoint
(docs/checkpoint.md), then verify it.

    /usr/bin/python3 scripts/model/export_hf.py HF_DIR OUT.pt [--dtype float32|bfloat16|float16|q8_0|q4_0|q4_k_m|q5_k_m]
        [--context N]

HF_DIR holds config.json (architectures: one of architectures.json's, LlamaForCausalLM,
MistralForCausalLM, Qwen2ForCausalLM or GPT2LMHeadModel), model.safetensors or shards with
model.safetensors.index.json (F32/BF16/F16), tokenizer.json, tokenizer_config.json
(special tokens, add_bos_token, chat_template) and optionally generation_config.json (eos,
possibly a list) and chat_template.jinja.

Writes OUT.pt (the scripted model of llama.py or gpt.py in the chosen dtype, default the
model's torch_dtype, with config.json, tokenizer.json and tokenizer_config.json inside) and
OUT.pt.sha256, after reloading OUT.pt and checking its cached forward (two rows of
different lengths, then a decode step) against hf_reference.py's plain forward of the
source weights. Anything not implemented (a rope_scaling type, a sliding window shorter
than the context, mixture of experts, a missing or misshapen tensor, an unknown
architecture) stops the export with an error naming the field or tensor.
"""

import argparse
import json
import os
import re
import sys
from typing import Dict, List, Optional, Tuple

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch

from . import export_gpt, hf_reference, hf_tokenizer
from .architectures import HUGGINGFACE
from .export_gpt import ExportError
from .gpt import GPT
from .llama import INTERFACE_VERSION, LlamaConfig, LlamaLM, quantize_llama
from .quant import SCHEMES as QTYPES, QuantError, dequantize
from .safetensors_io import SafetensorsError, load_model_dir

SUPPORTED = tuple(HUGGINGFACE)          # Hugging Face architectures, from architectures.json
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# Quantized exports (quant.py): the matrices in GGUF's layout of the type, norms and biases,
# the activations and the KV cache float32 (config.json: "dtype": "float32", "quantization").
DEFAULT_CONTEXT = 4096
MOE_FIELDS = ("num_local_experts", "num_experts", "num_experts_per_tok", "moe_intermediate_size")

StateDict = Dict[str, torch.Tensor]


def _read_json(path: str, required: bool = True) -> Optional[dict]:
    if not os.path.exists(path):
        if required:
            raise ExportError(f"{path} is missing")
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise ExportError(f"{path}: not valid JSON ({e})") from e


def _field(cfg: dict, name: str, kind=int):
    if name not in cfg or cfg[name] is None:
        raise ExportError(f"config.json: field {name!r} is missing")
    value = cfg[name]
    if kind is int and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise ExportError(f"config.json: field {name!r} must be a positive integer, got {value!r}")
    if kind is float and (not isinstance(value, (int, float)) or isinstance(value, bool)):
        raise ExportError(f"config.json: field {name!r} must be a number, got {value!r}")
    return value


def architecture_of(cfg: dict) -> str:
    archs = cfg.get("architectures")
    if not isinstance(archs, list) or len(archs) != 1:
        raise ExportError(f"config.json: field 'architectures' must name one architecture, "
                          f"got {archs!r} (supported: {', '.join(SUPPORTED)})")
    arch = archs[0]
    if arch not in SUPPORTED:
        raise ExportError(f"config.json: architectures {arch!r} is not supported "
                          f"(supported: {', '.join(SUPPORTED)})")
    return arch


def context_of(cfg: dict, key: str, context: Optional[int]) -> int:
    limit = _field(cfg, key)
    if context is None:
        return min(limit, DEFAULT_CONTEXT)
    if context < 2 or context > limit:
        raise ExportError(f"--context {context} must be between 2 and the model's {key} ({limit})")
    return context


def llama_config(cfg: dict, arch: str, context: Optional[int]) -> LlamaConfig:
    """config.json of a Llama-family model -> LlamaConfig, refusing what llama.py does not
    compute."""
    for f in MOE_FIELDS:
        if cfg.get(f):
            raise ExportError(f"config.json: field {f!r} is set: mixture-of-experts models are "
                              "not supported")
    act = cfg.get("hidden_act", "silu")
    if act != "silu":
        raise ExportError(f"config.json: hidden_act {act!r} is not supported (only 'silu')")
    if cfg.get("mlp_bias"):
        raise ExportError("config.json: mlp_bias=true is not supported")
    if cfg.get("partial_rotary_factor", 1.0) != 1.0:
        raise ExportError("config.json: partial_rotary_factor other than 1.0 is not supported")
    block_size = context_of(cfg, "max_position_embeddings", context)
    if arch == "LlamaForCausalLM" and cfg.get("attention_bias"):
        raise ExportError("config.json: attention_bias=true (a bias on o_proj too) is not supported")
    window = cfg.get("sliding_window")
    if arch == "Qwen2ForCausalLM":
        if cfg.get("use_sliding_window") and window is not None and window < block_size:
            raise ExportError(f"config.json: use_sliding_window=true with sliding_window {window} "
                              f"shorter than the context {block_size} is not supported")
    elif window is not None and window < block_size:
        raise ExportError(f"config.json: sliding_window {window} is shorter than the context "
                          f"{block_size}: sliding-window attention is not supported (export with "
                          f"--context {window} to stay inside the window)")
    scaling = cfg.get("rope_scaling")
    if scaling is not None:
        if not isinstance(scaling, dict):
            raise ExportError(f"config.json: rope_scaling must be an object or null, got {scaling!r}")
        kind = scaling.get("rope_type", scaling.get("type"))
        if kind == "default":
            scaling = None
        elif kind != "llama3":
            raise ExportError(f"config.json: rope_scaling type {kind!r} is not supported "
                              "(only 'llama3' or none)")
        else:
            for k in ("factor", "low_freq_factor", "high_freq_factor",
                      "original_max_position_embeddings"):
                if not isinstance(scaling.get(k), (int, float)):
                    raise ExportError(f"config.json: rope_scaling.{k} is missing")
    n_embd = _field(cfg, "hidden_size")
    n_head = _field(cfg, "num_attention_heads")
    n_kv = cfg.get("num_key_value_heads") or n_head
    if n_head % n_kv:
        raise ExportError(f"config.json: num_attention_heads {n_head} is not a multiple of "
                          f"num_key_value_heads {n_kv}")
    head_dim = cfg.get("head_dim") or n_embd // n_head
    if not cfg.get("head_dim") and n_embd % n_head:
        raise ExportError(f"config.json: hidden_size {n_embd} is not divisible by "
                          f"num_attention_heads {n_head}")
    if head_dim % 2:
        raise ExportError(f"config.json: head_dim {head_dim} must be even for rotary embeddings")
    return LlamaConfig(
        vocab_size=_field(cfg, "vocab_size"), block_size=block_size,
        n_layer=_field(cfg, "num_hidden_layers"), n_head=n_head, n_kv_head=n_kv,
        n_embd=n_embd, intermediate_size=_field(cfg, "intermediate_size"), head_dim=head_dim,
        rms_norm_eps=float(_field(cfg, "rms_norm_eps", float)),
        rope_theta=float(cfg.get("rope_theta", 10000.0)), rope_scaling=scaling,
        qkv_bias=arch == "Qwen2ForCausalLM" or bool(cfg.get("attention_bias")),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)))


def map_llama(src: StateDict, c: LlamaConfig, dtype: torch.dtype,
              names: Optional[Dict[str, str]] = None) -> StateDict:
    """Hugging Face names -> llama.py names, every shape checked (`names`, when given,
    receives llama.py name -> Hugging Face name)."""
    D, hd, I = c.n_embd, c.head_dim, c.intermediate_size
    out: StateDict = {}
    errors: List[str] = []
    used = set()

    def take(key: str, dst: str, shape: Tuple[int, ...]):
        t = src.get(key)
        if t is None:
            errors.append(f"missing tensor {key!r}")
            return
        used.add(key)
        if names is not None:
            names[dst] = key
        if not t.is_floating_point():
            errors.append(f"tensor {key!r} has dtype {t.dtype}, not a float")
        elif tuple(t.shape) != tuple(shape):
            errors.append(f"tensor {key!r} has shape {list(t.shape)}, expected {list(shape)}")
        else:
            out[dst] = t.to(dtype).contiguous()

    take("model.embed_tokens.weight", "embed.weight", (c.vocab_size, D))
    for i in range(c.n_layer):
        s, d = f"model.layers.{i}.", f"layers.{i}."
        take(s + "input_layernorm.weight", d + "attn_norm.weight", (D,))
        for name, rows in (("q", c.n_head * hd), ("k", c.n_kv_head * hd), ("v", c.n_kv_head * hd)):
            take(f"{s}self_attn.{name}_proj.weight", f"{d}{name}_proj.weight", (rows, D))
            if c.qkv_bias:
                take(f"{s}self_attn.{name}_proj.bias", f"{d}{name}_proj.bias", (rows,))
        take(s + "self_attn.o_proj.weight", d + "o_proj.weight", (D, c.n_head * hd))
        take(s + "post_attention_layernorm.weight", d + "mlp_norm.weight", (D,))
        take(s + "mlp.gate_proj.weight", d + "gate_proj.weight", (I, D))
        take(s + "mlp.up_proj.weight", d + "up_proj.weight", (I, D))
        take(s + "mlp.down_proj.weight", d + "down_proj.weight", (D, I))
    take("model.norm.weight", "norm.weight", (D,))
    if c.tie_word_embeddings:
        used.add("lm_head.weight")          # transformers ignores it too when tied
    else:
        take("lm_head.weight", "lm_head.weight", (c.vocab_size, D))
    unexpected = sorted(k for k in src if k not in used
                        and not re.search(r"rotary_emb\.inv_freq$", k))
    if unexpected:
        more = f" (+{len(unexpected) - 6} more)" if len(unexpected) > 6 else ""
        layers = [k for k in unexpected if re.match(rf"model\.layers\.{c.n_layer}\.", k)]
        hint = f"; num_hidden_layers is {c.n_layer} but there are more layers" if layers else ""
        errors.append(f"unexpected tensors {unexpected[:6]}{more}{hint}")
    if errors:
        raise ExportError("; ".join(errors))
    return out


# --------------------------------------------------------------------- tokenizer files

def _token_content(value) -> Optional[str]:
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def _ids(value) -> List[int]:
    if value is None:
        return []
    if isinstance(value, list):
        return [int(v) for v in value]
    return [int(value)]


def chat_template_of(hf_dir: str, tok_cfg: dict) -> Optional[str]:
    jinja = os.path.join(hf_dir, "chat_template.jinja")
    if os.path.exists(jinja):
        with open(jinja, encoding="utf-8") as f:
            return f.read()
    side = _read_json(os.path.join(hf_dir, "chat_template.json"), required=False)
    if side and isinstance(side.get("chat_template"), str):
        return side["chat_template"]
    tpl = tok_cfg.get("chat_template")
    if isinstance(tpl, list):      # named templates: [{"name": "default", "template": ...}]
        named = {t.get("name"): t.get("template") for t in tpl if isinstance(t, dict)}
        tpl = named.get("default") or next(iter(named.values()), None)
    return tpl if isinstance(tpl, str) else None


def tokenizer_entry(hf_dir: str, cfg: dict, vocab_size: int) -> Tuple[dict, str, Optional[str], Optional[str]]:
    """(config.json "tokenizer", tokenizer.json text, tokenizer_config.json text, chat template)."""
    path = os.path.join(hf_dir, "tokenizer.json")
    if not os.path.exists(path):
        vocab, merges = os.path.join(hf_dir, "vocab.json"), os.path.join(hf_dir, "merges.txt")
        if os.path.exists(vocab) and os.path.exists(merges) and \
                HUGGINGFACE[architecture_of(cfg)] == "gpt":
            with open(vocab, encoding="utf-8") as f, open(merges, encoding="utf-8") as g:
                text = json.dumps(hf_tokenizer.gpt2_tokenizer_json(json.load(f), g.read()))
        else:
            raise ExportError(f"{path} is missing (the fast-tokenizer file is needed)")
    else:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    tok = export_gpt.parse_tokenizer_json(text, path)
    top = hf_tokenizer.max_token_id(tok)
    if top >= vocab_size:
        raise ExportError(f"{path}: token id {top} does not fit the model's vocab_size {vocab_size}")
    tc_path = os.path.join(hf_dir, "tokenizer_config.json")
    tok_cfg = _read_json(tc_path, required=False) or {}
    tok_cfg_text = json.dumps(tok_cfg) if tok_cfg else None
    gen = _read_json(os.path.join(hf_dir, "generation_config.json"), required=False) or {}

    def lookup(field: str) -> Optional[int]:
        content = _token_content(tok_cfg.get(field))
        if content is None:
            return None
        tid = hf_tokenizer.token_id(tok, content)
        if tid is None:
            raise ExportError(f"tokenizer_config.json: {field} {content!r} is not a token of "
                              "tokenizer.json")
        return tid

    template_bos = hf_tokenizer.template_bos(tok)
    bos = lookup("bos_token")
    if bos is None and template_bos is not None:
        bos = hf_tokenizer.token_id(tok, template_bos)
    if bos is None and cfg.get("bos_token_id") is not None:
        bos = int(cfg["bos_token_id"])
    if "add_bos_token" in tok_cfg:
        add_bos = bool(tok_cfg["add_bos_token"])
    else:                   # Llama 3: the post-processor adds <|begin_of_text|>
        add_bos = template_bos is not None
    if add_bos and bos is None:
        raise ExportError("tokenizer_config.json: add_bos_token is true but no bos_token is known")
    # generation_config's ids first (what transformers' generate stops on), then config's,
    # then the tokenizer's eos_token (what chat templates end a turn with).
    eos: List[int] = []
    for tid in _ids(gen.get("eos_token_id")) + _ids(cfg.get("eos_token_id")) + _ids(lookup("eos_token")):
        if tid not in eos:
            eos.append(tid)
    pad = lookup("pad_token")
    for name, v in [("bos_token_id", bos), ("pad_token_id", pad)] + [("eos_token_id", e) for e in eos]:
        if v is not None and not 0 <= v < vocab_size:
            raise ExportError(f"{name} {v} is outside the vocabulary (size {vocab_size})")
    entry = {"kind": "huggingface", "file": "tokenizer.json", "bos_token_id": bos,
             "eos_token_id": eos[0] if eos else None, "eos_token_ids": eos,
             "pad_token_id": pad, "add_bos": add_bos}
    return entry, text, tok_cfg_text, chat_template_of(hf_dir, tok_cfg)


# ----------------------------------------------------------------------------- export

def _dtype_name(cfg: dict, override: Optional[str]) -> str:
    if override is not None:
        if override not in DTYPES and override not in QTYPES:
            raise ExportError(f"--dtype {override!r}: choose one of {', '.join(list(DTYPES) + list(QTYPES))}")
        return override
    name = cfg.get("torch_dtype", cfg.get("dtype")) or "float32"
    if name not in DTYPES:
        raise ExportError(f"config.json: torch_dtype {name!r} is not supported "
                          f"(one of {', '.join(DTYPES)}); pass --dtype")
    return name


def _source_logits(cfg: dict, src: StateDict, dtype: torch.dtype):
    """The plain forward the export is checked against: float64 on the weights rounded to
    the export dtype (float32 for big models, to bound the memory the check needs)."""
    n_params = sum(t.numel() for t in src.values())
    ref_dtype = torch.float64 if n_params <= 50_000_000 else torch.float32
    rounded = {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in src.items()}
    return lambda idx: hf_reference.hf_logits(cfg, rounded, idx, ref_dtype).float()


# Largest relative logit difference accepted by the check, per dtype: float32 computes the
# same function in another order; bfloat16 and float16 round activations and the cache.
# A quantized export is checked against the forward of its own dequantized weights, so it
# computes the same function as float32 does.
VERIFY_TOLERANCE = {"float32": 1e-4, "bfloat16": 6e-2, "float16": 1e-2}


def export(hf_dir: str, out: str, dtype: Optional[str] = None, context: Optional[int] = None,
           quiet: bool = False) -> dict:
    hf_dir = os.path.abspath(hf_dir)
    cfg = _read_json(os.path.join(hf_dir, "config.json"))
    arch = architecture_of(cfg)
    dtype_name = _dtype_name(cfg, dtype)
    quantization = None
    if dtype_name in QTYPES:
        if HUGGINGFACE[arch] != "llama":
            raise ExportError(f"--dtype {dtype_name} is implemented for the llama family "
                              f"(Llama, Mistral, Qwen2), not {arch}")
        quantization, dtype_name = dtype_name, "float32"
    tdtype = DTYPES[dtype_name]
    try:
        src = load_model_dir(hf_dir)
    except SafetensorsError as e:
        raise ExportError(str(e)) from e
    for k, t in src.items():
        if not t.is_floating_point() and not k.endswith("inv_freq"):
            raise ExportError(f"tensor {k!r} has dtype {t.dtype}: weights must be F32, BF16 or F16")
    vocab_size = int(_field(cfg, "vocab_size"))
    tokenizer, tok_text, tok_cfg_text, chat_template = tokenizer_entry(hf_dir, cfg, vocab_size)
    common = {"format": export_gpt.FORMAT, "interface_version": INTERFACE_VERSION}
    model, config = BUILDERS[HUGGINGFACE[arch]](cfg, src, arch, context, tdtype)
    config = {**common, **config}
    model.eval()
    reference = src
    if quantization is not None:
        config["quantization"] = quantization
        reference = _quantize(model, cfg, src, arch, context, quantization)
    config.update({"dtype": dtype_name, "tokenizer": tokenizer, "chat_template": chat_template,
                   "model_name": os.path.basename(hf_dir.rstrip(os.sep))})
    if os.path.exists(out + ".sha256"):
        os.remove(out + ".sha256")              # never leave a digest of an older export
    export_gpt.save_module(model, out, config, tok_text,
                           {"tokenizer_config.json": tok_cfg_text} if tok_cfg_text else None)
    del model        # the check below loads the file again: one copy of the weights at a time
    try:
        err = export_gpt.verify(out, _source_logits(cfg, reference, tdtype),
                                tol=VERIFY_TOLERANCE[dtype_name])
    except Exception:
        os.remove(out)                          # an unverified export is not left behind
        raise
    digest = export_gpt.write_sha256(out)
    if not quiet:
        size = os.path.getsize(out) / 2**20
        print(f"exported {arch} {hf_dir} -> {out} ({size:.1f} MiB)\n"
              f"  {config['n_layer']} layers, d={config['n_embd']}, {config['n_head']} heads"
              f"{', ' + str(config['n_kv_head']) + ' kv heads' if 'n_kv_head' in config else ''}, "
              f"context {config['block_size']}, vocab {config['vocab_size']}, "
              f"{quantization or dtype_name}\n"
              f"  tokenizer: bos {tokenizer['bos_token_id']} (add_bos {tokenizer['add_bos']}), "
              f"eos {tokenizer['eos_token_ids']}, chat template "
              f"{'yes' if chat_template else 'no'}\n"
              f"  verified against the source forward (max relative error {err:.2e})\n"
              f"  sha256 {digest}  -> {out}.sha256")
    return config


def _llama_model(cfg: dict, src: StateDict, arch: str, context: Optional[int], dtype: torch.dtype):
    lc = llama_config(cfg, arch, context)
    model = LlamaLM.from_state(lc, map_llama(src, lc, dtype))
    config = {"architecture": "llama", "hf_architecture": arch,
              "vocab_size": lc.vocab_size, "block_size": lc.block_size,
              "n_layer": lc.n_layer, "n_head": lc.n_head, "n_kv_head": lc.n_kv_head,
              "n_embd": lc.n_embd, "head_dim": lc.head_dim,
              "intermediate_size": lc.intermediate_size, "rms_norm_eps": lc.rms_norm_eps,
              "rope_theta": lc.rope_theta, "rope_scaling": lc.rope_scaling,
              "qkv_bias": lc.qkv_bias, "tie_word_embeddings": lc.tie_word_embeddings}
    return model, config


def _quantize(model: LlamaLM, cfg: dict, src: StateDict, arch: str, context: Optional[int],
              qtype: str) -> StateDict:
    """Quantizes the model's matrices in place; returns the source state with those weights
    replaced by their dequantized values (what the export is verified against)."""
    names: Dict[str, str] = {}
    map_llama(src, llama_config(cfg, arch, context), torch.float32, names)
    reference = dict(src)
    try:
        quantized = quantize_llama(model, qtype)
    except QuantError as e:
        raise ExportError(str(e)) from e
    for name in quantized:
        module = model.get_submodule(name[:-len(".weight")])
        k = module.in_features if hasattr(module, "in_features") else module.embedding_dim
        reference[names[name]] = dequantize(module.qtype, module.qweight, k)
    return reference


def _gpt2_model(cfg: dict, src: StateDict, arch: str, context: Optional[int], dtype: torch.dtype):
    if dtype == torch.float16:
        raise ExportError("--dtype float16 is not implemented for GPT2LMHeadModel (gpt.py has no "
                          "float32 fallback for CPU float16 kernels); use float32 or bfloat16")
    floats = {k: v.float() for k, v in src.items()}
    state, gcfg, _ = export_gpt.from_hf_gpt2(floats, None, cfg)
    block = context_of(cfg, "n_positions", context)
    if block < gcfg.block_size:            # the server's context: the first positions only
        state["wpe.weight"] = state["wpe.weight"][:block].contiguous()
        gcfg.block_size = block
    model = GPT(gcfg)
    model.load_state_dict(state, strict=True)
    model.to(dtype)
    config = export_gpt.build_config(gcfg, "gpt", {})
    config.pop("tokenizer")
    config["hf_architecture"] = arch
    return model, config


# The module and config.json of each architecture of the table, from a Hugging Face
# config.json and state: (config, state, HF architecture, context, dtype) -> (model, config).
BUILDERS = {"gpt": _gpt2_model, "llama": _llama_model}


def main(argv=None):
    ap = argparse.ArgumentParser(description="export a Hugging Face model directory "
                                             "(safetensors) to a serving checkpoint")
    ap.add_argument("hf_dir")
    ap.add_argument("out")
    ap.add_argument("--dtype", choices=sorted(DTYPES) + list(QTYPES),
                    help="weights and KV cache dtype (default: the model's torch_dtype); q8_0, "
                         "q4_0, q4_k_m and q5_k_m quantize the matrices as llama.cpp's quantize does "
                         "(GGUF layouts; norms, biases, activations and the KV cache float32)")
    ap.add_argument("--context", type=int,
                    help=f"context the server uses (default: min(max_position_embeddings, "
                         f"{DEFAULT_CONTEXT}))")
    args = ap.parse_args(argv)
    try:
        export(args.hf_dir, args.out, args.dtype, args.context)
    except (ExportError, OSError) as e:
        print(f"export failed: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
