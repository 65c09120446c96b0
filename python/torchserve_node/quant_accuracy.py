"""How much quantization changes a model's next-token distributions, as llama.cpp's
`perplexity --kl-divergence` reports it, on fixed prompts.

    /usr/bin/python3 scripts/model/quant_accuracy.py CKPT.pt [--schemes q8_0,q4_0,q4_k_m,q5_k_m] [--prompts 8]
        [--prompt-tokens 32] [--new-tokens 32] [--json OUT.json]

CKPT.pt: a float "llama" checkpoint (export_hf.py). Each scheme quantizes a copy of its
matrices (llama.py's quantize_llama, as export_hf.py --dtype does). The float model first
continues each prompt greedily; then, at every position of prompt + continuation, both models
score the same tokens (teacher forcing) and the script reports per scheme:

- mean KL(P_float || P_quant) of the next-token distributions (nats), and its 99th percentile;
- top-1 agreement: the fraction of positions where both models' most likely tokens are equal;
- greedy agreement: tokens of the quantized model's own greedy continuation equal to the
  float model's, up to each prompt's first difference (as a fraction of all new tokens).

Both run the checkpoint's TorchScript forward in float32 (the quantized one on its dequantized
weights: the weights' error alone; the native runtime also quantizes activations to 8 bits,
as llama.cpp does). Prompts are token ids drawn from a fixed seed (no tokenizer needed).
"""

import argparse
import json
import os
import sys
from typing import Dict, List

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch

from .llama import LlamaConfig, LlamaLM, quantization_plan, quantize_llama
from .quant import SCHEMES, QuantError


def load_float(path: str):
    files = {"config.json": ""}
    scripted = torch.jit.load(path, map_location="cpu", _extra_files=files)
    cfg = json.loads(files["config.json"])
    if cfg.get("architecture") != "llama" or cfg.get("quantization"):
        raise SystemExit(f"{path}: a float 'llama' checkpoint is needed (architecture "
                         f"{cfg.get('architecture')!r}, quantization {cfg.get('quantization')!r})")
    fields = {f for f in LlamaConfig.__dataclass_fields__} - {"extra"}
    lc = LlamaConfig(**{k: cfg[k] for k in fields if k in cfg})
    model = LlamaLM(lc).eval()
    state = {k: v.float() for k, v in scripted.state_dict().items()}
    model.load_state_dict(state, strict=False)
    model.rope_inv_freq = state["rope_inv_freq"]
    return model, cfg


def all_logits(model, seq: List[int]) -> torch.Tensor:
    """Logits after every prefix of seq ([len - 1, V]), one cached forward per token."""
    cache = torch.zeros(model.cache_shape(1))
    out = []
    for t, token in enumerate(seq[:-1]):
        logits, cache = model(torch.tensor([[token]]), torch.tensor([t]), torch.tensor([1]), cache)
        out.append(logits[0])
    return torch.stack(out)


def greedy(model, prompt: List[int], n: int) -> List[int]:
    cache = torch.zeros(model.cache_shape(1))
    logits, cache = model(torch.tensor([prompt]), torch.tensor([0]), torch.tensor([len(prompt)]), cache)
    out = []
    for _ in range(n):
        out.append(int(logits[0].argmax()))
        logits, cache = model(torch.tensor([[out[-1]]]), torch.tensor([len(prompt) + len(out) - 1]),
                              torch.tensor([1]), cache)
    return out


@torch.no_grad()
def measure(path: str, schemes: List[str], prompts: int, prompt_tokens: int, new_tokens: int,
            skip_ruled_out: bool = False) -> Dict[str, dict]:
    """Each scheme's figures. A scheme the model's widths rule out (QuantError: Q5_K_M at a width
    llama.cpp gives Q5_1) stops the run before any is measured, or with `skip_ruled_out` is left
    out with a note on stderr."""
    torch.manual_seed(0)
    base, cfg = load_float(path)
    kept = []
    for scheme in schemes:
        try:
            quantization_plan(base, scheme)
            kept.append(scheme)
        except QuantError as e:
            if not skip_ruled_out:
                raise
            print(f"{scheme} left out: {e}", file=sys.stderr)
    schemes = kept
    g = torch.Generator().manual_seed(1234)
    vocab = cfg["vocab_size"]
    prompt_ids = [torch.randint(0, vocab, (prompt_tokens,), generator=g).tolist() for _ in range(prompts)]
    sequences = [p + greedy(base, p, new_tokens) for p in prompt_ids]
    reference = [all_logits(base, s).log_softmax(-1) for s in sequences]
    results = {}
    for scheme in schemes:
        model, _ = load_float(path)
        quantize_llama(model, scheme)
        kls, top1, agreed = [], [], 0
        for p, seq, ref in zip(prompt_ids, sequences, reference):
            q = all_logits(model, seq).log_softmax(-1)
            kls.append((ref.exp() * (ref - q)).sum(-1))
            top1.append((ref.argmax(-1) == q.argmax(-1)).float())
            own = greedy(model, p, new_tokens)
            k = 0
            while k < new_tokens and own[k] == seq[len(p) + k]:
                k += 1
            agreed += k
        kl = torch.cat(kls)
        results[scheme] = {"mean_kl": float(kl.mean()), "p99_kl": float(kl.quantile(0.99)),
                           "top1_agreement": float(torch.cat(top1).mean()),
                           "greedy_agreement": agreed / (prompts * new_tokens), "positions": int(kl.numel())}
    return results


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint")
    ap.add_argument("--schemes", help=f"comma-separated (default: every one the model's widths allow of {','.join(SCHEMES)})")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    schemes = args.schemes.split(",") if args.schemes else list(SCHEMES)
    for s in schemes:
        if s not in SCHEMES:
            ap.error(f"unknown scheme {s!r} (one of {', '.join(SCHEMES)})")
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    try:
        results = measure(args.checkpoint, schemes, args.prompts, args.prompt_tokens, args.new_tokens,
                          skip_ruled_out=not args.schemes)
    except QuantError as e:
        ap.error(f"{e}; leave it out of --schemes")
    print(f"{args.checkpoint}: {args.prompts} prompts of {args.prompt_tokens} token ids + {args.new_tokens} "
          f"greedy tokens of the float model\n")
    print("| scheme | mean KL (nats) | 99th pct KL | top-1 agreement | greedy agreement |")
    print("|---|---:|---:|---:|---:|")
    for s, r in results.items():
        print(f"| {s} | {r['mean_kl']:.5f} | {r['p99_kl']:.4f} | {100 * r['top1_agreement']:.1f}% | "
              f"{100 * r['greedy_agreement']:.1f}% |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
