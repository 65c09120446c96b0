"""Export GPT weights to a serving checkpoint (docs/checkpoint.md), then verify it.

Sources:
  trainer  a checkpoint written by train_gpt.py ({"model", "config", ...})
  nanogpt  nanoGPT's ckpt.pt ({"model", "model_args", ...}; `_orig_mod.` prefixes stripped;
           exact GELU; bias=False models get zero LayerNorm biases)
  hf-gpt2  a Hugging Face GPT-2 style state dict (pytorch_model.bin: transformer.h.N.attn.
           c_attn.weight ...; Conv1D weights are [in, out], transposed here; tanh GELU)
  auto     guess from the file's keys

    /usr/bin/python3 scripts/model/export_gpt.py SOURCE OUT.pt [--kind auto]
        [--tokenizer tokenizer.json] [--n-head N | --hf-config config.json]
        [--eos-token-id ID] [--bos-token-id ID] [--pad-token-id ID] [--add-bos]

Writes OUT.pt (TorchScript + extra files config.json [+ tokenizer.json]) and OUT.pt.sha256,
after checking that the scripted, reloaded module's cached forward reproduces the source
model's plain forward on random tokens (prefill of rows of different lengths, then one
decode step).
"""

import argparse
import hashlib
import json
import math
import os
import re
import sys
from typing import Callable, Dict, List, Optional, Tuple

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch
import torch.nn.functional as F

from .gpt import GPT, GPTConfig, INTERFACE_VERSION

FORMAT = "torchserve-node/causal-lm"
BYTE_TOKENIZER = {"kind": "byte", "bos_token_id": 256, "eos_token_id": 257,
                  "pad_token_id": 258, "add_bos": False}


class ExportError(Exception):
    pass


# ---------------------------------------------------------------------------- sources

StateDict = Dict[str, torch.Tensor]


def _load_torch(path: str):
    try:
        return torch.load(path, map_location="cpu")
    except Exception as e:  # noqa: BLE001 - turn any unpickling failure into one message
        raise ExportError(f"{path}: cannot be read by torch.load ({e})") from e


def detect_kind(obj) -> str:
    if isinstance(obj, dict) and "model" in obj and "model_args" in obj:
        return "nanogpt"
    if isinstance(obj, dict) and "model" in obj and "config" in obj:
        return "trainer"
    if isinstance(obj, dict) and any(re.match(r"(transformer\.)?h\.\d+\.attn\.c_attn\.weight$", k)
                                     for k in obj):
        return "hf-gpt2"
    raise ExportError("cannot tell the checkpoint kind: expected a train_gpt.py checkpoint "
                      "({'model','config'}), a nanoGPT ckpt.pt ({'model','model_args'}) or a "
                      "GPT-2 state dict (h.N.attn.c_attn.weight); pass --kind")


class _Mapper:
    """Copies source tensors to target parameter names, with clear errors."""

    def __init__(self, src: StateDict, origin: str):
        self.src = src
        self.origin = origin
        self.used = set()
        self.out: StateDict = {}
        self.errors: List[str] = []

    def take(self, src_key: str, dst_key: str, shape: Tuple[int, ...], transpose=False,
             optional_zero=False):
        if src_key not in self.src:
            if optional_zero:
                self.out[dst_key] = torch.zeros(shape)
                return
            self.errors.append(f"missing key {src_key!r} (for {dst_key})")
            return
        self.used.add(src_key)
        t = self.src[src_key]
        if not isinstance(t, torch.Tensor):
            self.errors.append(f"{src_key!r} is not a tensor")
            return
        t = t.detach().float()
        if transpose:
            if t.dim() != 2:
                self.errors.append(f"{src_key!r}: expected a 2-d weight, got shape {list(t.shape)}")
                return
            t = t.t()
        if tuple(t.shape) != tuple(shape):
            how = " after transposing the Conv1D weight" if transpose else ""
            self.errors.append(f"shape mismatch for {src_key!r} -> {dst_key}: expected "
                               f"{list(shape)}, got {list(t.shape)}{how}")
            return
        self.out[dst_key] = t.contiguous()

    def finish(self, ignore: Callable[[str], bool]):
        unexpected = sorted(k for k in self.src if k not in self.used and not ignore(k))
        if unexpected:
            more = f" (+{len(unexpected) - 8} more)" if len(unexpected) > 8 else ""
            self.errors.append(f"unexpected keys: {unexpected[:8]}{more}")
        if self.errors:
            raise ExportError(f"{self.origin}: " + "; ".join(self.errors))
        return self.out


def _map_gpt2_layout(src: StateDict, cfg: GPTConfig, prefix: str, conv1d: bool,
                     origin: str) -> StateDict:
    """nanoGPT and HF GPT-2 share key names under `prefix`; HF stores Conv1D [in, out]."""
    D, V, C = cfg.n_embd, cfg.vocab_size, cfg.block_size
    m = _Mapper(src, origin)
    m.take(f"{prefix}wte.weight", "wte.weight", (V, D))
    m.take(f"{prefix}wpe.weight", "wpe.weight", (C, D))
    lin = {"attn.c_attn": (3 * D, D), "attn.c_proj": (D, D),
           "mlp.c_fc": (4 * D, D), "mlp.c_proj": (D, 4 * D)}
    for i in range(cfg.n_layer):
        s, d = f"{prefix}h.{i}.", f"blocks.{i}."
        for ln in ("ln_1", "ln_2"):
            m.take(s + ln + ".weight", d + ln + ".weight", (D,))
            m.take(s + ln + ".bias", d + ln + ".bias", (D,), optional_zero=not cfg.bias)
        for name, (o, n) in lin.items():
            m.take(s + name + ".weight", d + name + ".weight", (o, n), transpose=conv1d)
            if cfg.bias:
                m.take(s + name + ".bias", d + name + ".bias", (o,))
    m.take(f"{prefix}ln_f.weight", "ln_f.weight", (D,))
    m.take(f"{prefix}ln_f.bias", "ln_f.bias", (D,), optional_zero=not cfg.bias)
    if "lm_head.weight" in src:
        m.used.add("lm_head.weight")
        head = src["lm_head.weight"].float()
        wte = src.get(f"{prefix}wte.weight")
        if wte is not None and (head.shape != wte.shape or not torch.equal(head, wte.float())):
            m.errors.append("lm_head.weight differs from wte.weight: untied output "
                            "embeddings are not supported by this architecture")

    def ignore(k):   # causal-mask buffers, not weights
        return bool(re.search(r"\.attn\.(bias|masked_bias)$", k))
    out = m.finish(ignore)
    out["lm_head.weight"] = out["wte.weight"]
    return out


def _count_layers(keys, pattern) -> int:
    idx = {int(mt.group(1)) for k in keys for mt in [re.match(pattern, k)] if mt}
    if not idx:
        raise ExportError("no transformer layers found (no keys like h.0.attn.c_attn.weight)")
    if idx != set(range(len(idx))):
        raise ExportError(f"layer indices are not contiguous: {sorted(idx)}")
    return len(idx)


def from_trainer(obj) -> Tuple[StateDict, GPTConfig, str]:
    cfg_dict = dict(obj["config"])
    cfg = GPTConfig(**{k: v for k, v in cfg_dict.items() if k in GPTConfig.__dataclass_fields__})
    cfg.dropout = 0.0
    sd = {k: v.float() for k, v in obj["model"].items()}
    expected = GPT(cfg).state_dict()
    missing = sorted(set(expected) - set(sd))
    unexpected = sorted(set(sd) - set(expected))
    bad = [f"{k}: expected {list(expected[k].shape)}, got {list(sd[k].shape)}"
           for k in expected if k in sd and sd[k].shape != expected[k].shape]
    if missing or unexpected or bad:
        raise ExportError(f"trainer checkpoint does not match its config: missing {missing}, "
                          f"unexpected {unexpected}, shape mismatches {bad}")
    return sd, cfg, "gpt"


def from_nanogpt(obj) -> Tuple[StateDict, GPTConfig, str]:
    args = obj["model_args"]
    for k in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size"):
        if k not in args:
            raise ExportError(f"nanoGPT checkpoint: model_args lacks {k!r}")
    src = {k[len("_orig_mod."):] if k.startswith("_orig_mod.") else k: v
           for k, v in obj["model"].items()}
    cfg = GPTConfig(vocab_size=int(args["vocab_size"]), block_size=int(args["block_size"]),
                    n_layer=int(args["n_layer"]), n_head=int(args["n_head"]),
                    n_embd=int(args["n_embd"]), dropout=0.0, bias=bool(args.get("bias", True)),
                    gelu="none")
    n = _count_layers(src, r"transformer\.h\.(\d+)\.")
    if n != cfg.n_layer:
        raise ExportError(f"nanoGPT checkpoint: model_args.n_layer={cfg.n_layer} but the "
                          f"state dict has {n} layers")
    if cfg.n_embd % cfg.n_head:
        raise ExportError(f"n_embd {cfg.n_embd} is not divisible by n_head {cfg.n_head}")
    return _map_gpt2_layout(src, cfg, "transformer.", False, "nanoGPT checkpoint"), cfg, "gpt"


def from_hf_gpt2(sd: StateDict, n_head: Optional[int], hf_config: Optional[dict]):
    if hf_config:
        act = hf_config.get("activation_function", "gelu_new")
        if act not in ("gelu_new", "gelu_pytorch_tanh", "gelu"):
            raise ExportError(f"unsupported activation_function {act!r}")
        eps = hf_config.get("layer_norm_epsilon", 1e-5)
        if abs(eps - 1e-5) > 1e-9:
            raise ExportError(f"layer_norm_epsilon {eps} is not supported (only 1e-5)")
        for flag in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"):
            if hf_config.get(flag):
                raise ExportError(f"GPT-2 option {flag}=true is not supported")
        if hf_config.get("scale_attn_weights", True) is False:
            raise ExportError("GPT-2 option scale_attn_weights=false is not supported")
        n_head = n_head or hf_config.get("n_head")
        gelu = "none" if act == "gelu" else "tanh"
    else:
        gelu = "tanh"
    if not n_head:
        raise ExportError("a GPT-2 state dict does not record the number of heads: pass "
                          "--n-head N or --hf-config config.json")
    prefix = "transformer." if any(k.startswith("transformer.") for k in sd) else ""
    for key in (f"{prefix}wte.weight", f"{prefix}wpe.weight"):
        if key not in sd:
            raise ExportError(f"GPT-2 state dict: missing key {key!r}")
    V, D = sd[f"{prefix}wte.weight"].shape
    C = sd[f"{prefix}wpe.weight"].shape[0]
    n_layer = _count_layers(sd, re.escape(prefix) + r"h\.(\d+)\.")
    if D % n_head:
        raise ExportError(f"n_embd {D} is not divisible by n_head {n_head}")
    bias = f"{prefix}h.0.attn.c_attn.bias" in sd
    cfg = GPTConfig(vocab_size=int(V), block_size=int(C), n_layer=n_layer, n_head=int(n_head),
                    n_embd=int(D), dropout=0.0, bias=bias, gelu=gelu)
    return _map_gpt2_layout(sd, cfg, prefix, True, "GPT-2 state dict"), cfg, "gpt"


# ------------------------------------------------ independent plain forwards (for checks)

def _ln(x, sd, key, eps=1e-5):
    b = sd.get(key + ".bias")
    return F.layer_norm(x, (x.size(-1),), sd[key + ".weight"].float(),
                        None if b is None else b.float(), eps)


def gpt2_layout_logits(sd: StateDict, prefix: str, n_head: int, conv1d: bool, gelu: str,
                       idx: torch.Tensor) -> torch.Tensor:
    """Plain causal forward straight from a nanoGPT / HF GPT-2 state dict."""
    def linear(x, key):
        w = sd[key + ".weight"].float()
        b = sd.get(key + ".bias")
        y = x @ w if conv1d else x @ w.t()
        return y if b is None else y + b.float()

    B, T = idx.shape
    x = sd[prefix + "wte.weight"].float()[idx] + sd[prefix + "wpe.weight"].float()[:T]
    D = x.size(-1)
    hd = D // n_head
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    i = 0
    while f"{prefix}h.{i}.ln_1.weight" in sd:
        p = f"{prefix}h.{i}."
        h = _ln(x, sd, p + "ln_1")
        q, k, v = linear(h, p + "attn.c_attn").split(D, dim=-1)
        q, k, v = (t.view(B, T, n_head, hd).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, D)
        x = x + linear(y, p + "attn.c_proj")
        h = _ln(x, sd, p + "ln_2")
        x = x + linear(F.gelu(linear(h, p + "mlp.c_fc"), approximate=gelu), p + "mlp.c_proj")
        i += 1
    x = _ln(x, sd, prefix + "ln_f")
    return x @ sd[prefix + "wte.weight"].float().t()


# ---------------------------------------------------------------------------- export

def build_config(cfg: GPTConfig, architecture: str, tokenizer: dict) -> dict:
    return {"format": FORMAT, "interface_version": INTERFACE_VERSION,
            "architecture": architecture, "vocab_size": cfg.vocab_size,
            "block_size": cfg.block_size, "n_layer": cfg.n_layer, "n_head": cfg.n_head,
            "n_embd": cfg.n_embd, "bias": cfg.bias, "gelu": cfg.gelu, "dtype": "float32",
            "tokenizer": tokenizer}


def parse_tokenizer_json(text: str, origin: str) -> dict:
    """The parsed tokenizer.json, or an ExportError naming `origin`."""
    try:
        tj = json.loads(text)
    except json.JSONDecodeError as e:
        raise ExportError(f"{origin}: not valid JSON ({e})") from e
    if not isinstance(tj, dict) or "model" not in tj:
        raise ExportError(f"{origin}: not a Hugging Face tokenizer.json (no 'model')")
    return tj


def tokenizer_config(vocab_size: int, tokenizer_path: Optional[str], eos=None, bos=None,
                     pad=None, add_bos=False) -> Tuple[dict, Optional[str]]:
    """(tokenizer entry of config.json, tokenizer.json text or None)."""
    if tokenizer_path is None:
        if vocab_size != 259:
            raise ExportError(f"vocab_size is {vocab_size}: the byte tokenizer needs 259 "
                              "(256 bytes + bos, eos, pad); pass --tokenizer tokenizer.json")
        return dict(BYTE_TOKENIZER), None
    with open(tokenizer_path, encoding="utf-8") as f:
        text = f.read()
    tj = parse_tokenizer_json(text, tokenizer_path)
    ids = list(tj["model"].get("vocab", {}).values()) if isinstance(tj["model"].get("vocab"), dict) else []
    ids += [t["id"] for t in tj.get("added_tokens", [])]
    if ids and max(ids) >= vocab_size:
        raise ExportError(f"{tokenizer_path}: token id {max(ids)} does not fit the model's "
                          f"vocab_size {vocab_size}")
    if eos is None:
        for t in tj.get("added_tokens", []):
            if t.get("content") in ("<|endoftext|>", "</s>", "<eos>"):
                eos = t["id"]
                break
    for name, v in (("eos", eos), ("bos", bos), ("pad", pad)):
        if v is not None and not 0 <= v < vocab_size:
            raise ExportError(f"{name}_token_id {v} is outside the vocabulary (size {vocab_size})")
    if add_bos and bos is None:
        raise ExportError("--add-bos needs --bos-token-id")
    return ({"kind": "huggingface", "file": "tokenizer.json", "eos_token_id": eos,
             "bos_token_id": bos, "pad_token_id": pad, "add_bos": bool(add_bos)}, text)


def write_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    digest = h.hexdigest()
    with open(path + ".sha256", "w", encoding="ascii", newline="\n") as f:
        f.write(f"{digest}  {os.path.basename(path)}\n")
    return digest


def read_tokenizer_config(path: Optional[str]) -> Optional[str]:
    """A Hugging Face tokenizer_config.json (its chat_template, bos_token, eos_token are
    what the server reads), checked to be a JSON object; None when not given."""
    if path is None:
        return None
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as e:
        raise ExportError(f"{path}: not valid JSON ({e})") from e
    if not isinstance(parsed, dict):
        raise ExportError(f"{path}: a tokenizer_config.json must be a JSON object")
    template = parsed.get("chat_template")
    if template is not None and not isinstance(template, (str, list)):
        raise ExportError(f"{path}: chat_template must be a string or a list of named templates")
    return text


# The load-time check's reference logits, computed at export (see load_check_reference).
LOAD_CHECK_FILE = "load_check.bin"
_LOAD_CHECK_MAGIC = b"TSNLCHK1"


@torch.no_grad()
def load_check_reference(scripted) -> bytes:
    """The logits the native runtime's load-time check compares its own forward with
    (native/runtime/Runtime.cc: Probe, ReferenceLogits), from the scripted module's forward
    as the check would run it at load: its 16-bit parameters widened to float32 (and put
    back after), a float32 cache, one call of four rows. Carried in the checkpoint, they
    spare every first load that forward (at 1B, seconds: a quantized forward dequantizes
    every weight). Little-endian: the magic, int64 first, second, rows (4) and vocabulary
    size, the probe's int64 tokens [2, first + 1], then float32 logits [4, vocabulary]."""
    context = int(scripted.cache_shape(1)[4])
    first = max(1, min(4, context - 2))
    second = max(1, first // 2)
    tokens = ((torch.arange(2 * (first + 1), dtype=torch.long) * 37 + 11) % 200).view(2, first + 1)
    widened, seen = [], set()
    scripted.eval()  # as the server runs it
    try:
        for tensor in scripted.parameters():
            if tensor.dtype in (torch.bfloat16, torch.float16) and tensor._cdata not in seen:
                seen.add(tensor._cdata)
                widened.append((tensor, tensor.data))
                tensor.data = tensor.data.float()
        cache = torch.zeros(scripted.cache_shape(4), dtype=torch.float32)
        lengths = torch.tensor([first, second, first + 1, second + 1], dtype=torch.long)
        logits, _ = scripted(torch.cat([tokens, tokens]), torch.zeros(4, dtype=torch.long), lengths, cache)
    finally:
        for tensor, data in reversed(widened):
            tensor.data = data
    logits = logits.float().contiguous()
    if logits.dim() != 2 or logits.size(0) != 4:
        raise ExportError(f"the forward returned logits of shape {tuple(logits.shape)} for 4 rows")
    header = torch.tensor([first, second, 4, logits.size(1)], dtype=torch.long)
    return (_LOAD_CHECK_MAGIC + header.numpy().astype("<i8").tobytes()
            + tokens.numpy().astype("<i8").tobytes() + logits.numpy().astype("<f4").tobytes())


def save_module(model: torch.nn.Module, path: str, config: dict,
                tokenizer_json: Optional[str] = None,
                more_files: Optional[Dict[str, str]] = None,
                load_check: bool = True) -> None:
    """Script and save with the extra files and, unless `load_check` is false, the load-time
    check's reference logits (no verification, no sha256). Without them a first load runs the
    forward for them; a file that must be the same to the bit on every CPU (a committed test
    fixture) holds no computed floats, so goes without."""
    extra = {"config.json": json.dumps(config, indent=2) + "\n"}
    if tokenizer_json is not None:
        extra[config["tokenizer"].get("file", "tokenizer.json")] = tokenizer_json
    extra.update(more_files or {})
    scripted = torch.jit.script(model)
    if load_check:
        extra[LOAD_CHECK_FILE] = load_check_reference(scripted)
    os.makedirs(os.path.dirname(os.path.abspath(path)) or ".", exist_ok=True)
    torch.jit.save(scripted, path, _extra_files=extra)


@torch.no_grad()
def verify(path: str, source_logits: Callable[[torch.Tensor], torch.Tensor],
           seed: int = 0, tol: float = 1e-4) -> float:
    """Reload `path` and compare its cached forward with the source's plain forward.
    Returns the largest relative error; raises ExportError above `tol`."""
    extra = {"config.json": ""}
    m = torch.jit.load(path, map_location="cpu", _extra_files=extra)
    m.eval()
    cfg = json.loads(extra["config.json"])
    if m.interface_version() != cfg["interface_version"]:
        raise ExportError("interface_version() disagrees with config.json")
    g = torch.Generator().manual_seed(seed)
    V, C = cfg["vocab_size"], cfg["block_size"]
    T = min(C - 1, 24)
    idx = torch.randint(0, V, (2, T + 1), generator=g)
    lengths = torch.tensor([T, max(1, T // 2)])
    ref = source_logits(idx)                                   # [2, T+1, V]
    cache = torch.zeros(m.cache_shape(2), dtype=getattr(torch, cfg.get("dtype", "float32")))
    pad = idx.clone()
    pad[1, lengths[1]:] = 0                                    # padding is ignored
    logits, cache = m(pad[:, :T], torch.zeros(2, dtype=torch.long), lengths, cache)
    want = torch.stack([ref[0, T - 1], ref[1, lengths[1] - 1]])
    worst = _rel_err(logits, want)
    # One decode step, rows at different positions.
    nxt = torch.stack([idx[0, T], idx[1, lengths[1]]]).unsqueeze(1)
    logits, cache = m(nxt, lengths, torch.ones(2, dtype=torch.long), cache)
    want = torch.stack([ref[0, T], ref[1, lengths[1]]])
    worst = max(worst, _rel_err(logits, want))
    if not worst <= tol:
        raise ExportError(f"verification failed: exported logits differ from the source "
                          f"model's forward by {worst:.3g} (relative, tolerance {tol:g})")
    return worst


def _rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp(min=1.0))


def export_state(sd: StateDict, cfg: GPTConfig, out: str, tokenizer: dict,
                 tokenizer_json: Optional[str], source_logits: Callable, architecture="gpt",
                 tokenizer_config_json: Optional[str] = None):
    model = GPT(cfg)
    model.load_state_dict(sd, strict=True)
    model.eval()
    config = build_config(cfg, architecture, tokenizer)
    if os.path.exists(out + ".sha256"):
        os.remove(out + ".sha256")          # never leave a digest of an older export
    more = {"tokenizer_config.json": tokenizer_config_json} if tokenizer_config_json is not None else None
    save_module(model, out, config, tokenizer_json, more)
    try:
        err = verify(out, source_logits)
    except Exception:
        os.remove(out)                      # an unverified export is not left behind
        raise
    digest = write_sha256(out)
    return config, err, digest


def export_file(kind: str, source: str, out: str, tokenizer_path: Optional[str] = None,
                n_head: Optional[int] = None, hf_config_path: Optional[str] = None,
                eos=None, bos=None, pad=None, add_bos=False, quiet=False,
                tokenizer_config_path: Optional[str] = None) -> dict:
    tokenizer_config_json = read_tokenizer_config(tokenizer_config_path)
    obj = _load_torch(source)
    if kind == "auto":
        kind = detect_kind(obj)
    if kind == "trainer":
        sd, cfg, arch = from_trainer(obj)
        ref_model = GPT(cfg)
        ref_model.load_state_dict(sd)
        ref_model.eval()
        source_logits = ref_model.training_logits
    elif kind == "nanogpt":
        sd, cfg, arch = from_nanogpt(obj)
        src = {k.replace("_orig_mod.", "", 1): v for k, v in obj["model"].items()}
        source_logits = (lambda idx: gpt2_layout_logits(src, "transformer.", cfg.n_head, False,
                                                        "none", idx))
    elif kind == "hf-gpt2":
        hf_cfg = None
        if hf_config_path:
            with open(hf_config_path, encoding="utf-8") as f:
                hf_cfg = json.load(f)
        if not isinstance(obj, dict):
            raise ExportError(f"{source}: not a state dict")
        sd, cfg, arch = from_hf_gpt2(obj, n_head, hf_cfg)
        prefix = "transformer." if any(k.startswith("transformer.") for k in obj) else ""
        source_logits = (lambda idx: gpt2_layout_logits(obj, prefix, cfg.n_head, True,
                                                        cfg.gelu, idx))
    else:
        raise ExportError(f"unknown kind {kind!r}")
    tokenizer, tok_json = tokenizer_config(cfg.vocab_size, tokenizer_path, eos, bos, pad, add_bos)
    config, err, digest = export_state(sd, cfg, out, tokenizer, tok_json, source_logits, arch,
                                       tokenizer_config_json)
    if not quiet:
        print(f"exported {kind} {source} -> {out}\n  {cfg.n_layer} layers, d={cfg.n_embd}, "
              f"{cfg.n_head} heads, context {cfg.block_size}, vocab {cfg.vocab_size}, "
              f"gelu {cfg.gelu}, tokenizer {tokenizer['kind']}\n  verified against the source "
              f"forward (max relative error {err:.2e})\n  sha256 {digest}  -> {out}.sha256")
    return config


def main(argv=None):
    ap = argparse.ArgumentParser(description="export GPT weights to a serving checkpoint")
    ap.add_argument("source")
    ap.add_argument("out")
    ap.add_argument("--kind", default="auto", choices=["auto", "trainer", "nanogpt", "hf-gpt2"])
    ap.add_argument("--tokenizer", help="Hugging Face tokenizer.json to embed")
    ap.add_argument("--n-head", type=int, help="heads (GPT-2 state dicts do not record it)")
    ap.add_argument("--hf-config", help="the model's Hugging Face config.json")
    ap.add_argument("--eos-token-id", type=int)
    ap.add_argument("--bos-token-id", type=int)
    ap.add_argument("--pad-token-id", type=int)
    ap.add_argument("--add-bos", action="store_true")
    ap.add_argument("--tokenizer-config",
                    help="Hugging Face tokenizer_config.json to embed (its chat_template serves /v1/chat/completions)")
    args = ap.parse_args(argv)
    try:
        export_file(args.kind, args.source, args.out, args.tokenizer, args.n_head,
                    args.hf_config, args.eos_token_id, args.bos_token_id, args.pad_token_id,
                    args.add_bos, tokenizer_config_path=args.tokenizer_config)
    except (ExportError, OSError) as e:
        print(f"export failed: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
