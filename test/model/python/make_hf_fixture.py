"""Tiny random-weight models in Hugging Face layout, as a user downloads them, for tests.

    /usr/bin/python3 test/model/python/make_hf_fixture.py OUT_DIR [--only NAME ...] [--export]
    /usr/bin/python3 test/model/python/make_hf_fixture.py OUT_DIR --native-set

Writes OUT_DIR/NAME/ with config.json (architectures, torch_dtype, ...), safetensors weights
(sharded with model.safetensors.index.json where noted), tokenizer.json,
tokenizer_config.json (special tokens, add_bos_token, chat_template) and
generation_config.json (eos as a list where noted); with --export also OUT_DIR/NAME.pt, the
checkpoint export_hf.py makes of it (in the same process, which saves the tests seconds of
Python start-up per model). Deterministic: fixed seeds, so the
files are the same on every run and machine (the weights are generated in float64 on the
CPU, then rounded).

  llama-gqa   LlamaForCausalLM, 4 heads / 2 kv heads, untied head, SentencePiece-style
              tokenizer (byte fallback, add_bos_token), F32, 2 shards + index
  llama3-bf16 LlamaForCausalLM, rope_theta 500000 + rope_scaling llama3, 4 heads / 1 kv
              head, tied head, byte-level BPE, BOS from the post-processor, eos list
              [<|end_of_text|>, <|eot_id|>], BF16, 2 shards + index
  qwen2       Qwen2ForCausalLM, q/k/v biases, tied head, use_sliding_window false, byte-level
              BPE with <|im_start|>/<|im_end|>, no bos, chat template, F32, one file
  mistral     MistralForCausalLM, sliding_window null, untied, SentencePiece-style, F16
  gpt2        GPT2LMHeadModel (keys without "transformer.", as openai-community/gpt2), F32

--native-set writes the native runtime's test set instead (test/native/llama.test.ts): the
NATIVE_SPECS directories, each exported to OUT_DIR/NAME.pt, with weights drawn larger
("gain") so that greedy choices are decisive; the committed tiny GPT fixture rounded to bf16
and fp16 (gpt-bf16, gpt-fp16); and OUT_DIR/reference.json: for each checkpoint, greedy
continuations of a few byte-id prompts by the plain uncached float32 forward (hf_reference.py
on the rounded weights; the GPT's own forward for the GPT) with the margin between the best
and second-best logit and the largest |logit| at every step.
"""

import argparse
import json
import os
import sys
from typing import Dict, List, Optional

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.join(ROOT, "python"))
from torchserve_node import export_hf, hf_reference, hf_tokenizer  # noqa: E402
from torchserve_node.safetensors_io import load_model_dir, save_file, save_sharded  # noqa: E402

LLAMA2_TEMPLATE = ("{% for message in messages %}{% if message['role'] == 'user' %}"
                   "{{ bos_token + '[INST] ' + message['content'] + ' [/INST]' }}"
                   "{% else %}{{ ' ' + message['content'] + eos_token }}{% endif %}{% endfor %}")
LLAMA3_TEMPLATE = ("{{ bos_token }}{% for message in messages %}"
                   "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + "
                   "message['content'] + '<|eot_id|>' }}{% endfor %}"
                   "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
CHATML_TEMPLATE = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + "
                   "message['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
                   "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")

SPECS = {
    "llama-gqa": dict(arch="LlamaForCausalLM", tokenizer="spm", layers=2, hidden=64, heads=4,
                      kv=2, inter=96, tied=False, dtype="float32", shards=2, ctx=128,
                      rope_theta=10000.0),
    "llama3-bf16": dict(arch="LlamaForCausalLM", tokenizer="llama3", layers=2, hidden=64,
                        heads=4, kv=1, inter=128, tied=True, dtype="bfloat16", shards=2,
                        ctx=256, rope_theta=500000.0,
                        rope_scaling={"factor": 8.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0,
                                      "original_max_position_embeddings": 64,
                                      "rope_type": "llama3"}),
    "qwen2": dict(arch="Qwen2ForCausalLM", tokenizer="qwen2", layers=2, hidden=64, heads=4,
                  kv=2, inter=96, tied=True, dtype="float32", shards=1, ctx=128,
                  rope_theta=1000000.0),
    "mistral": dict(arch="MistralForCausalLM", tokenizer="spm", layers=2, hidden=64, heads=4,
                    kv=2, inter=96, tied=False, dtype="float16", shards=1, ctx=128,
                    rope_theta=10000.0),
    "gpt2": dict(arch="GPT2LMHeadModel", tokenizer="gpt2", layers=2, hidden=64, heads=4,
                 dtype="float32", shards=1, ctx=128),
}
# Tool calling: the same models with their real chat templates (test/fixtures/chat-templates),
# which render `tools` and tool-call histories. Only on request (--only): SPECS is the set
# every architecture test walks.
TOOL_SPECS = {
    "llama3-tools": dict(SPECS["llama3-bf16"], tokenizer="llama3-tools", dtype="float32", ctx=512),
    "qwen2-tools": dict(SPECS["qwen2"], tokenizer="qwen2-tools", ctx=512),
}
TOOL_TEMPLATES = {"llama3": "llama-3.2-instruct.jinja", "qwen2": "qwen2.5-instruct.jinja"}

LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 16}
# The native runtime's test set: byte-sized vocabulary (259 rows, the prompts are UTF-8 byte
# ids), 64 positions, every projection drawn with std gain / sqrt(fan_in).
NATIVE_BASE = dict(arch="LlamaForCausalLM", tokenizer="spm-bytes", layers=2, hidden=64, heads=4, kv=2,
                   inter=160, tied=False, dtype="float32", shards=1, ctx=64, rope_theta=10000.0,
                   vocab=259, gain=1.5)
NATIVE_SPECS = {
    "llama-gqa": NATIVE_BASE,
    "qwen-bias-tied": dict(NATIVE_BASE, arch="Qwen2ForCausalLM", tied=True, kv=1, rope_theta=1000000.0),
    "llama3-scaled": dict(NATIVE_BASE, rope_theta=500000.0, rope_scaling=LLAMA3_SCALING, kv=4),
    "llama-gqa-bf16": dict(NATIVE_BASE, dtype="bfloat16"),
    "llama-gqa-fp16": dict(NATIVE_BASE, dtype="float16"),
}
# Quantized exports (export_hf.py --dtype) of NATIVE_SPECS entries: name -> (spec, quantization).
# The K-quants need widths that are multiples of 256.
QUANT_SPECS = {"llama-wide": dict(NATIVE_BASE, hidden=256, inter=512)}
# llama-gqa-q4_k_m is llama.cpp's Q4_K_M of 64- and 160-wide matrices: the fallback types Q5_0
# (for Q4_K) and Q8_0 (for Q6_K), as in real files of Qwen2.5-0.5B or SmolLM2.
NATIVE_QUANTIZED = {"llama-gqa-q8_0": ("llama-gqa", "q8_0"), "qwen-bias-tied-q8_0": ("qwen-bias-tied", "q8_0"),
                    "llama-wide-q4_k_m": ("llama-wide", "q4_k_m"), "llama-gqa-q4_k_m": ("llama-gqa", "q4_k_m"),
                    "llama-wide-q4_0": ("llama-wide", "q4_0"), "llama-wide-q5_k_m": ("llama-wide", "q5_k_m")}
# The last fills the 64 positions with its 20 new tokens: four key tiles of 16, so attention
# takes several passes over the cache (and asks for the next pass's keys) on every family.
NATIVE_PROMPTS = ["Hello, world!", "The quick brown fox", "a", "It was the best of times, it was the worst"]
NATIVE_NEW_TOKENS = 20


def tokenizer_files(kind: str):
    """(tokenizer.json, tokenizer_config.json, generation eos ids, config bos/eos)."""
    if kind.endswith("-tools"):
        base = kind[:-len("-tools")]
        tok, tc, gen_eos, bos, eos = tokenizer_files(base)
        here = os.path.dirname(os.path.abspath(__file__))
        with open(os.path.join(here, "..", "..", "fixtures", "chat-templates", TOOL_TEMPLATES[base])) as f:
            tc = dict(tc, chat_template=f.read())
        return tok, tc, gen_eos, bos, eos
    if kind == "spm":
        tok = hf_tokenizer.tiny_sentencepiece(120)
        tc = {"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>",
              "eos_token": "</s>", "unk_token": "<unk>", "pad_token": None,
              "chat_template": LLAMA2_TEMPLATE, "tokenizer_class": "LlamaTokenizer",
              "legacy": True, "model_max_length": 1000000000000000019884624838656}
        return tok, tc, [2], 1, 2
    if kind == "spm-bytes":   # only <unk>, <s>, </s> and the 256 byte-fallback tokens
        tok = hf_tokenizer.tiny_sentencepiece(0)
        tok["model"]["vocab"] = {t: i for t, i in tok["model"]["vocab"].items() if i < 259}
        tok["model"]["merges"] = []
        tc = {"add_bos_token": False, "add_eos_token": False, "bos_token": "<s>",
              "eos_token": "</s>", "unk_token": "<unk>", "tokenizer_class": "LlamaTokenizer"}
        return tok, tc, [2], 1, 2
    if kind == "llama3":
        specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                    "<|end_header_id|>", "<|eot_id|>"]
        tok = hf_tokenizer.tiny_bytelevel(80, specials)
        ids = {t["content"]: t["id"] for t in tok["added_tokens"]}
        bos = ids["<|begin_of_text|>"]
        tok["post_processor"] = {"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                        {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                      {"Sequence": {"id": "A", "type_id": 0}},
                      {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}},
                      {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [bos],
                                                      "tokens": ["<|begin_of_text|>"]}}}]}
        tc = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
              "chat_template": LLAMA3_TEMPLATE, "tokenizer_class": "PreTrainedTokenizerFast",
              "clean_up_tokenization_spaces": True}
        return tok, tc, [ids["<|end_of_text|>"], ids["<|eot_id|>"]], bos, ids["<|end_of_text|>"]
    if kind == "qwen2":
        tok = hf_tokenizer.tiny_bytelevel(80, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
        ids = {t["content"]: t["id"] for t in tok["added_tokens"]}
        tc = {"add_prefix_space": False, "bos_token": None, "eos_token": "<|im_end|>",
              "pad_token": "<|endoftext|>", "chat_template": CHATML_TEMPLATE,
              "tokenizer_class": "Qwen2Tokenizer", "errors": "replace"}
        return tok, tc, [ids["<|im_end|>"], ids["<|endoftext|>"]], None, ids["<|im_end|>"]
    if kind == "gpt2":
        tok = hf_tokenizer.tiny_bytelevel(60, ["<|endoftext|>"])
        eot = tok["added_tokens"][0]["id"]
        tc = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
              "unk_token": "<|endoftext|>", "add_prefix_space": False,
              "tokenizer_class": "GPT2Tokenizer", "model_max_length": 1024}
        return tok, tc, [eot], eot, eot
    raise ValueError(kind)


def _randn(g: torch.Generator, *shape, std: float) -> torch.Tensor:
    return torch.randn(*shape, generator=g, dtype=torch.float64) * std


def llama_weights(spec: dict, vocab: int, g: torch.Generator) -> Dict[str, torch.Tensor]:
    D, H, KV, I = spec["hidden"], spec["heads"], spec["kv"], spec["inter"]
    hd = D // H
    qwen = spec["arch"] == "Qwen2ForCausalLM"
    # Tied heads score the residual against the embeddings: with the layers' outputs as
    # small as the embedding, greedy would just repeat the last token. Larger output
    # projections make the continuations depend on the context.
    # A "gain" (the native set) scales every projection, the head included, and the biases, so
    # that a random model's next-token choice is decisive (logits spread over several units),
    # not a near-tie that rounding could flip.
    gain = spec.get("gain", 1.0)
    out_gain = 4.0 if spec["tied"] and "gain" not in spec else gain
    bias_std = 0.5 if "gain" in spec else 0.3
    sd = {"model.embed_tokens.weight": _randn(g, vocab, D, std=1.0)}
    for i in range(spec["layers"]):
        p = f"model.layers.{i}."
        sd[p + "input_layernorm.weight"] = 1.0 + _randn(g, D, std=0.1)
        sd[p + "post_attention_layernorm.weight"] = 1.0 + _randn(g, D, std=0.1)
        for name, rows in (("q", H * hd), ("k", KV * hd), ("v", KV * hd)):
            sd[f"{p}self_attn.{name}_proj.weight"] = _randn(g, rows, D, std=gain * D ** -0.5)
            if qwen:
                sd[f"{p}self_attn.{name}_proj.bias"] = _randn(g, rows, std=bias_std)
        sd[p + "self_attn.o_proj.weight"] = _randn(g, D, H * hd, std=out_gain * (H * hd) ** -0.5)
        sd[p + "mlp.gate_proj.weight"] = _randn(g, I, D, std=gain * D ** -0.5)
        sd[p + "mlp.up_proj.weight"] = _randn(g, I, D, std=gain * D ** -0.5)
        sd[p + "mlp.down_proj.weight"] = _randn(g, D, I, std=out_gain * I ** -0.5)
    sd["model.norm.weight"] = 1.0 + _randn(g, D, std=0.1)
    if not spec["tied"]:
        sd["lm_head.weight"] = _randn(g, vocab, D, std=gain * D ** -0.5 if "gain" in spec else 0.5)
    return sd


def gpt2_weights(spec: dict, vocab: int, g: torch.Generator) -> Dict[str, torch.Tensor]:
    D = spec["hidden"]
    sd = {"wte.weight": _randn(g, vocab, D, std=0.5), "wpe.weight": _randn(g, spec["ctx"], D, std=0.1)}
    for i in range(spec["layers"]):
        p = f"h.{i}."
        for ln in ("ln_1", "ln_2"):
            sd[f"{p}{ln}.weight"] = 1.0 + _randn(g, D, std=0.1)
            sd[f"{p}{ln}.bias"] = _randn(g, D, std=0.1)
        for name, (n_in, n_out) in {"attn.c_attn": (D, 3 * D), "attn.c_proj": (D, D),
                                    "mlp.c_fc": (D, 4 * D), "mlp.c_proj": (4 * D, D)}.items():
            sd[f"{p}{name}.weight"] = _randn(g, n_in, n_out, std=n_in ** -0.5)   # Conv1D [in, out]
            sd[f"{p}{name}.bias"] = _randn(g, n_out, std=0.05)
        sd[f"{p}attn.bias"] = torch.ones(spec["ctx"], spec["ctx"]).tril().view(1, 1, spec["ctx"], spec["ctx"])
    sd["ln_f.weight"] = 1.0 + _randn(g, D, std=0.1)
    sd["ln_f.bias"] = _randn(g, D, std=0.1)
    return sd


def make(name: str, out_dir: str, spec: Optional[dict] = None) -> str:
    spec = spec or SPECS.get(name) or TOOL_SPECS[name]
    path = os.path.join(out_dir, name)
    os.makedirs(path, exist_ok=True)
    tok, tc, gen_eos, bos, eos = tokenizer_files(spec["tokenizer"])
    # A few rows more than tokens, as real models have, unless the spec says.
    vocab = spec.get("vocab", hf_tokenizer.max_token_id(tok) + 1 + 3)
    g = torch.Generator().manual_seed(sum(map(ord, name)))
    dtype = getattr(torch, spec["dtype"])
    if spec["arch"] == "GPT2LMHeadModel":
        sd = gpt2_weights(spec, vocab, g)
        cfg = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": vocab,
               "n_positions": spec["ctx"], "n_ctx": spec["ctx"], "n_embd": spec["hidden"],
               "n_layer": spec["layers"], "n_head": spec["heads"], "activation_function": "gelu_new",
               "layer_norm_epsilon": 1e-5, "bos_token_id": bos, "eos_token_id": eos,
               "torch_dtype": spec["dtype"]}
    else:
        sd = llama_weights(spec, vocab, g)
        model_type = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2",
                      "MistralForCausalLM": "mistral"}[spec["arch"]]
        cfg = {"architectures": [spec["arch"]], "model_type": model_type, "vocab_size": vocab,
               "hidden_size": spec["hidden"], "intermediate_size": spec["inter"],
               "num_hidden_layers": spec["layers"], "num_attention_heads": spec["heads"],
               "num_key_value_heads": spec["kv"], "hidden_act": "silu",
               "max_position_embeddings": spec["ctx"], "rms_norm_eps": 1e-5,
               "rope_theta": spec["rope_theta"], "rope_scaling": spec.get("rope_scaling"),
               "tie_word_embeddings": spec["tied"], "bos_token_id": bos, "eos_token_id": eos,
               "torch_dtype": spec["dtype"], "use_cache": True, "attention_dropout": 0.0}
        if spec["arch"] == "LlamaForCausalLM":
            cfg.update({"attention_bias": False, "mlp_bias": False, "pretraining_tp": 1})
        if spec["arch"] == "Qwen2ForCausalLM":
            cfg.update({"use_sliding_window": False, "sliding_window": 32768, "max_window_layers": 21})
        if spec["arch"] == "MistralForCausalLM":
            cfg["sliding_window"] = None
    weights = {k: v.to(dtype) if v.is_floating_point() else v for k, v in sd.items()}
    for stale in os.listdir(path):
        if stale.endswith(".safetensors") or stale == "model.safetensors.index.json":
            os.remove(os.path.join(path, stale))
    if spec["shards"] > 1:
        save_sharded(weights, path, spec["shards"])
    else:
        save_file(weights, os.path.join(path, "model.safetensors"), {"format": "pt"})
    gen = {"bos_token_id": bos, "eos_token_id": gen_eos if len(gen_eos) > 1 else gen_eos[0],
           "do_sample": False}
    for fname, obj in (("config.json", cfg), ("tokenizer.json", tok),
                       ("tokenizer_config.json", tc), ("generation_config.json", gen)):
        with open(os.path.join(path, fname), "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=2, ensure_ascii=False)
            f.write("\n")
    return path


def _cases(logits_of) -> List[dict]:
    """Greedy continuations of NATIVE_PROMPTS (UTF-8 byte ids), uncached, with each step's
    top-1 minus top-2 margin and largest |logit|; logits_of(ids) -> last position's logits."""
    cases = []
    for prompt in NATIVE_PROMPTS:
        ids = list(prompt.encode("utf-8"))
        seq, out, margins, scales = list(ids), [], [], []
        for _ in range(NATIVE_NEW_TOKENS):
            logits = logits_of(seq)
            top = logits.topk(2)
            out.append(int(top.indices[0]))
            margins.append(float(top.values[0] - top.values[1]))
            scales.append(float(logits.abs().max()))
            seq.append(out[-1])
        cases.append(dict(prompt=prompt, prompt_ids=ids, output_ids=out, margins=margins, scales=scales))
    return cases


@torch.no_grad()
def native_llama(name: str, out_dir: str) -> dict:
    """NATIVE_SPECS[name] in Hugging Face layout, exported by export_hf.py; the reference is
    hf_reference.py in float32 on the weights as stored."""
    spec = NATIVE_SPECS[name]
    path = make(name, out_dir, spec)
    export_hf.export(path, path + ".pt", quiet=True)
    with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    sd = load_model_dir(path)
    cases = _cases(lambda seq: hf_reference.hf_logits(cfg, sd, torch.tensor([seq]), torch.float32)[0, -1])
    return dict(file=path + ".pt", dtype=spec["dtype"], architecture="llama", cases=cases)


@torch.no_grad()
def native_gpt16(out_dir: str, name: str, dtype: str) -> dict:
    """test/fixtures/tiny-gpt.pt with its weights rounded to a 16-bit dtype; the reference is
    its own forward in float32 on the rounded weights."""
    source = os.path.join(ROOT, "test", "fixtures", "tiny-gpt.pt")
    files = {"config.json": ""}
    model = torch.jit.load(source, map_location="cpu", _extra_files=files)
    config = dict(json.loads(files["config.json"]), dtype=dtype)
    model = model.to(getattr(torch, dtype))
    path = os.path.join(out_dir, name + ".pt")
    torch.jit.save(model, path, _extra_files={"config.json": json.dumps(config, indent=2)})
    reference = model.float()

    def logits_of(seq: List[int]) -> torch.Tensor:
        cache = torch.zeros(reference.cache_shape(1), dtype=torch.float32)
        logits, _ = reference(torch.tensor([seq]), torch.tensor([0]), torch.tensor([len(seq)]), cache)
        return logits[0]

    return dict(file=path, dtype=dtype, architecture="gpt", cases=_cases(logits_of))


@torch.no_grad()
def native_quantized(name: str, out_dir: str) -> dict:
    """NATIVE_QUANTIZED[name]: the spec's directory exported quantized; the reference is the
    checkpoint's own (dequantizing) TorchScript forward, uncached, in float32."""
    spec_name, qtype = NATIVE_QUANTIZED[name]
    path = make(spec_name, os.path.join(out_dir, name), {**NATIVE_SPECS, **QUANT_SPECS}[spec_name])
    file = os.path.join(out_dir, name + ".pt")
    export_hf.export(path, file, dtype=qtype, quiet=True)
    model = torch.jit.load(file, map_location="cpu")

    def logits_of(seq: List[int]) -> torch.Tensor:
        cache = torch.zeros(model.cache_shape(1), dtype=torch.float32)
        logits, _ = model(torch.tensor([seq]), torch.tensor([0]), torch.tensor([len(seq)]), cache)
        return logits[0]

    return dict(file=file, dtype="float32", quantization=qtype, architecture="llama", cases=_cases(logits_of))


def native_set(out_dir: str) -> None:
    os.makedirs(out_dir, exist_ok=True)
    torch.set_num_threads(1)
    result = {name: native_llama(name, out_dir) for name in NATIVE_SPECS}
    result.update({name: native_quantized(name, out_dir) for name in NATIVE_QUANTIZED})
    result["gpt-bf16"] = native_gpt16(out_dir, "gpt-bf16", "bfloat16")
    result["gpt-fp16"] = native_gpt16(out_dir, "gpt-fp16", "float16")
    with open(os.path.join(out_dir, "reference.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)


def main(argv=None):
    ap = argparse.ArgumentParser(description="tiny Hugging Face model directories for tests")
    ap.add_argument("out_dir")
    ap.add_argument("--only", action="append", choices=sorted({**SPECS, **TOOL_SPECS}))
    ap.add_argument("--export", action="store_true", help="also export each to OUT_DIR/NAME.pt")
    ap.add_argument("--native-set", action="store_true",
                    help="write the native runtime's test checkpoints and OUT_DIR/reference.json")
    args = ap.parse_args(argv)
    if args.native_set:
        native_set(args.out_dir)
        return 0
    for name in args.only or sorted(SPECS):
        path = make(name, args.out_dir)
        print(path)
        if args.export:
            export_hf.export(path, path + ".pt", quiet=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
