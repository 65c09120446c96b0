"""Reference generator: a plain Python loop over a serving checkpoint (docs/checkpoint.md).

It implements the serving policy exactly, one batched forward per step, and is the source
of the golden outputs in test/fixtures and the "plain TorchScript loop" baseline of the
benchmarks. Nothing here is clever on purpose.

Policy, for each row (C = block_size, M = its max_new_tokens):
- reserve = min(M, C // 2); the prompt keeps its most recent C - reserve tokens;
- an empty prompt is fed as one <bos> (or <eos> when the tokenizer has no bos);
- every step feeds each active row its pending tokens at its own position (prefill and
  decode are the same call; shorter rows are padded with pad_token_id, lengths say how many
  are real; finished rows are fed lengths = 0 and stay idle);
- sampling settings (SamplingSettings, one per row), in this order: repetition penalty
  (prompt and generated tokens: positive logits divided, negative multiplied), then
  frequency and presence penalties (generated tokens only: count * frequency + presence
  subtracted); greedy = argmax of the penalised logits, ties to the lowest id; otherwise
  temperature, top-k, top-p over what top-k kept, min-p (relative to the most likely token);
- log-probabilities are those of the raw logits (before penalties and temperature);
- a row stops after M tokens or when it samples an end-of-sequence id (any of the
  tokenizer's eos_token_ids; it is not part of the output);
- when the next token would land at position C, the row is re-prefilled with its most
  recent C // 2 tokens (prompt + generated so far) at positions 0..C//2-1.

    /usr/bin/python3 scripts/model/reference.py models/brown-gpt.pt \
        --prompt "The jury said" --max-new-tokens 80 [--temperature 0.8 --top-k 40 --seed 0]
"""

import argparse
import json
import os
import sys
from dataclasses import dataclass, field
from typing import Collection, List, Optional, Sequence, Union

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch

GREEDY_TEMPERATURE = 1e-5   # temperatures at or below this are greedy (no NaN from 1/T)


@dataclass
class SamplingSettings:
    """How one row chooses tokens: the Python face of src/types.ts SamplingSettings and
    native/runtime/Sampler.h SamplingSettings (wire names of the HTTP schema)."""
    temperature: float = 0.0
    top_k: Optional[int] = None
    top_p: float = 1.0
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    seed: Optional[int] = None
    logprobs: Optional[int] = None   # report the raw log-probability and this many alternatives

    @property
    def penalised(self) -> bool:
        return (self.presence_penalty != 0.0 or self.frequency_penalty != 0.0
                or self.repetition_penalty != 1.0)


def penalise(logits: torch.Tensor, s: SamplingSettings, prompt: Sequence[int],
             generated: Sequence[int]) -> torch.Tensor:
    """One row's logits [V] after the repetition, frequency and presence penalties."""
    if not s.penalised:
        return logits
    logits = logits.clone()
    if s.repetition_penalty != 1.0:
        seen = torch.tensor(sorted(set(prompt) | set(generated)), dtype=torch.long)
        picked = logits[seen]
        logits[seen] = torch.where(picked > 0, picked / s.repetition_penalty, picked * s.repetition_penalty)
    counts = {}
    for t in generated:
        counts[t] = counts.get(t, 0) + 1
    for t, n in counts.items():
        logits[t] -= n * s.frequency_penalty + s.presence_penalty
    return logits


def filtered_probs(logits: torch.Tensor, s: SamplingSettings) -> torch.Tensor:
    """The distribution [V] one (penalised) row samples from: temperature, top-k, top-p over
    what top-k kept (the smallest most-likely set reaching top_p, at least one token), then
    min-p relative to the most likely token."""
    logits = logits / s.temperature
    if s.top_k is not None and 0 < s.top_k < logits.size(-1):
        kth = torch.topk(logits, s.top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits.double(), dim=-1)
    if s.top_p < 1.0:
        order = sorted(range(probs.numel()), key=lambda v: (-float(probs[v]), v))
        cumulative, kept = 0.0, []
        for v in order:
            if kept and cumulative >= s.top_p:
                break
            if probs[v] <= 0:
                break
            kept.append(v)
            cumulative += float(probs[v])
        mask = torch.zeros_like(probs, dtype=torch.bool)
        mask[kept] = True
        probs = torch.where(mask, probs, torch.zeros_like(probs))
        probs = probs / probs.sum()
    if s.min_p > 0.0:
        probs = torch.where(probs >= s.min_p * probs.max(), probs, torch.zeros_like(probs))
        probs = probs / probs.sum()
    return probs


def raw_logprobs(logits: torch.Tensor, token: int, n: int) -> dict:
    """The raw distribution's log-probability of `token` and its n most likely tokens."""
    lp = torch.log_softmax(logits.double(), dim=-1)
    top = sorted(range(lp.numel()), key=lambda v: (-float(lp[v]), v))[:n]
    return {"token": token, "logprob": float(lp[token]),
            "top": [[v, float(lp[v])] for v in top]}


@dataclass
class Checkpoint:
    module: torch.jit.ScriptModule
    config: dict
    tokenizer_json: Optional[str] = None
    path: str = ""

    @property
    def block_size(self) -> int:
        return int(self.config["block_size"])

    @property
    def tokenizer(self) -> dict:
        return self.config["tokenizer"]

    def encode(self, text: str) -> List[int]:
        """Byte tokenizer only (UTF-8 bytes, no bos unless add_bos)."""
        tok = self.tokenizer
        if tok["kind"] != "byte":
            raise ValueError(f"reference.py encodes text only for the byte tokenizer, "
                             f"not {tok['kind']!r}; pass token ids instead")
        ids = list(text.encode("utf-8"))
        if tok.get("add_bos") and tok.get("bos_token_id") is not None:
            ids = [tok["bos_token_id"]] + ids
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        """Byte tokenizer: ids < 256 are bytes; special ids produce no text."""
        if self.tokenizer["kind"] != "byte":
            raise ValueError("reference.py decodes only the byte tokenizer")
        return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")


def load(path: str, device: str = "cpu") -> Checkpoint:
    extra = {"config.json": "", "tokenizer.json": ""}
    module = torch.jit.load(path, map_location=device, _extra_files=extra)
    module.eval()
    if not extra["config.json"]:
        raise ValueError(f"{path}: no config.json in the archive (extra file missing)")
    config = json.loads(extra["config.json"])
    tok_json = extra["tokenizer.json"].decode("utf-8") if extra["tokenizer.json"] else None
    return Checkpoint(module, config, tok_json, path)


@dataclass
class _Row:
    history: List[int]              # tokens fed or pending so far (prompt + generated)
    pending: List[int]              # tokens to feed at the next step
    pos: int                        # cache positions already written
    max_new: int
    out: List[int] = field(default_factory=list)
    done: bool = False

    def advance(self, t: int, eos: Union[None, int, Collection[int]], block_size: int) -> bool:
        """Takes the token sampled after a step (`eos`: one end-of-sequence id or several).
        True when the cache was full and the row slides its window: its recent half is
        re-prefilled at position 0."""
        self.pos += len(self.pending)
        if eos is not None and (t == eos if isinstance(eos, int) else t in eos):
            self.done = True
            return False
        self.out.append(t)
        self.history.append(t)
        if len(self.out) >= self.max_new:
            self.done = True
        elif self.pos >= block_size:
            self.pending = self.history[-(block_size // 2):]
            self.pos = 0
            return True
        else:
            self.pending = [t]
        return False


def eos_ids(tokenizer: dict) -> List[int]:
    """The end-of-sequence ids of a config.json tokenizer entry: `eos_token_ids` (a list,
    Llama 3 / Qwen2 instruct models stop on several) or the single `eos_token_id`."""
    ids = tokenizer.get("eos_token_ids")
    if isinstance(ids, list):
        return [int(i) for i in ids]
    one = tokenizer.get("eos_token_id")
    return [] if one is None else [int(one)]


def truncate_prompt(ids: Sequence[int], max_new_tokens: int, block_size: int) -> List[int]:
    reserve = min(max_new_tokens, block_size // 2)
    keep = block_size - reserve
    return list(ids[-keep:]) if len(ids) > keep else list(ids)


def step_inputs(rows: Sequence[_Row], pad: int):
    """(idx, pos, lengths) of one batched forward: each unfinished row's pending tokens,
    left-aligned and padded to the longest; a finished row has length 0."""
    B = len(rows)
    T = max(len(r.pending) for r in rows if not r.done)
    idx = torch.full((B, T), pad, dtype=torch.long)
    pos = torch.zeros(B, dtype=torch.long)
    lengths = torch.zeros(B, dtype=torch.long)
    for b, r in enumerate(rows):
        pos[b] = r.pos
        if not r.done:
            idx[b, :len(r.pending)] = torch.tensor(r.pending, dtype=torch.long)
            lengths[b] = len(r.pending)
    return idx, pos, lengths


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """argmax per row, ties to the lowest id (stated explicitly, not left to the kernel)."""
    best = logits.max(dim=-1, keepdim=True).values
    ids = torch.arange(logits.size(-1)).expand_as(logits)
    return torch.where(logits == best, ids, logits.size(-1)).min(dim=-1).values


def sample(logits: torch.Tensor, temperature: float, top_k: Optional[int],
           generator: Optional[torch.Generator]) -> torch.Tensor:
    if temperature <= GREEDY_TEMPERATURE:
        return greedy(logits)
    logits = logits / temperature
    if top_k is not None and top_k < logits.size(-1):
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)


def choose(logits: torch.Tensor, settings: Sequence[SamplingSettings], rows: Sequence["_Row"],
           prompts: Sequence[Sequence[int]], gens: Sequence[Optional[torch.Generator]]) -> List[int]:
    """One token per row under its own settings (penalties need each row's history)."""
    out = []
    for b, (s, r) in enumerate(zip(settings, rows)):
        if r.done:   # idle row: its logits are not looked at
            out.append(0)
            continue
        row = penalise(logits[b], s, prompts[b], r.out)
        if s.temperature <= GREEDY_TEMPERATURE:
            out.append(int(greedy(row.unsqueeze(0))[0]))
        else:
            probs = filtered_probs(row, s)
            out.append(int(torch.multinomial(probs, 1, generator=gens[b])[0]))
    return out


@torch.no_grad()
def generate(ckpt: Checkpoint, prompts: Sequence[Sequence[int]],
             max_new_tokens: Union[int, Sequence[int]], temperature: float = 0.0,
             top_k: Optional[int] = None, seed: Optional[int] = None,
             first_logits: Optional[List[torch.Tensor]] = None,
             trace: Optional[List[dict]] = None,
             sampling: Union[None, SamplingSettings, Sequence[SamplingSettings]] = None,
             logprobs: Optional[List[List[dict]]] = None) -> List[List[int]]:
    """Generated token ids for each prompt (a batch, one forward per step).

    If `first_logits` is a list, the logits of the first step (after each row's prompt)
    are appended to it, one [V] tensor per row. If `trace` is a list, one dict per row is
    appended: prompt_ids_used (after truncation), reprefills, stopped_on_eos,
    min_margin (smallest top-1 minus top-2 logit over the row's steps; small margins make
    greedy goldens fragile across BLAS builds; with penalties, of the penalised logits) and
    margins (that gap at each step).

    `sampling` (one SamplingSettings, or one per row) replaces temperature/top_k/seed. If
    `logprobs` is a list, one list per row is appended, one raw_logprobs() dict per
    generated token, for rows whose settings ask for them."""
    B = len(prompts)
    if B == 0:
        return []
    if isinstance(max_new_tokens, int):
        max_new_tokens = [max_new_tokens] * B
    if len(max_new_tokens) != B:
        raise ValueError("max_new_tokens: one per prompt")
    tok = ckpt.tokenizer
    C = ckpt.block_size
    eos_list = eos_ids(tok)
    eos = frozenset(eos_list)
    first_eos = eos_list[0] if eos_list else None
    pad = tok.get("pad_token_id")
    pad = pad if pad is not None else (first_eos if first_eos is not None else 0)
    start = tok.get("bos_token_id")
    start = start if start is not None else first_eos
    if sampling is None:
        sampling = SamplingSettings(temperature=temperature, top_k=top_k, seed=seed)
    settings = [sampling] * B if isinstance(sampling, SamplingSettings) else list(sampling)
    if len(settings) != B:
        raise ValueError("sampling: one per prompt")
    plain = all(not s.penalised and s.top_p >= 1.0 and s.min_p <= 0.0 for s in settings) and \
        len({(s.temperature, s.top_k, s.seed) for s in settings}) == 1
    gen = None
    if plain and settings[0].seed is not None:
        gen = torch.Generator().manual_seed(settings[0].seed)
    gens = [torch.Generator().manual_seed(s.seed) if s.seed is not None else None for s in settings]
    row_logprobs = [[] for _ in range(B)]

    rows = []
    for ids, m in zip(prompts, max_new_tokens):
        if m < 0:
            raise ValueError("max_new_tokens must be >= 0")
        ids = truncate_prompt(ids, m, C)
        if not ids:
            if start is None:
                raise ValueError("empty prompt and the tokenizer has neither bos nor eos")
            ids = [start]
        rows.append(_Row(history=list(ids), pending=list(ids), pos=0, max_new=m, done=(m == 0)))

    module = ckpt.module
    dtype = getattr(torch, ckpt.config.get("dtype", "float32"))
    cache = torch.zeros(module.cache_shape(B), dtype=dtype)
    reprefills = [0] * B
    margins = [float("inf")] * B
    step_margins: List[List[float]] = [[] for _ in range(B)]
    first = True
    while not all(r.done for r in rows):
        logits, cache = module(*step_inputs(rows, pad), cache)
        if first and first_logits is not None:
            first_logits.extend(logits[b].clone() for b in range(B))
        first = False
        if plain:   # the original one-draw-per-step path, which the older goldens hold
            next_ids = sample(logits, settings[0].temperature, settings[0].top_k, gen).tolist()
            scored = logits
        else:
            next_ids = choose(logits, settings, rows, prompts, gens)
            scored = torch.stack([logits[b] if rows[b].done else
                                  penalise(logits[b], settings[b], prompts[b], rows[b].out)
                                  for b in range(B)])
        top2 = torch.topk(scored, 2, dim=-1).values
        gaps = (top2[:, 0] - top2[:, 1]).tolist()
        for b, r in enumerate(rows):
            if r.done:
                continue
            margins[b] = min(margins[b], gaps[b])
            if settings[b].logprobs is not None:
                row_logprobs[b].append(raw_logprobs(logits[b], next_ids[b], settings[b].logprobs))
            step_margins[b].append(gaps[b])
            if r.advance(next_ids[b], eos, C):   # cache full: slid by re-prefilling the recent half
                reprefills[b] += 1
    if trace is not None:
        for b, r in enumerate(rows):
            used = r.history[:len(r.history) - len(r.out)]
            trace.append({"prompt_ids_used": used, "reprefills": reprefills[b],
                          "stopped_on_eos": r.done and len(r.out) < r.max_new,
                          "min_margin": margins[b], "margins": step_margins[b]})
    if logprobs is not None:
        # The token that ended a row on eos is not part of its output: nor its entry.
        logprobs.extend(entries[:len(r.out)] for entries, r in zip(row_logprobs, rows))
    return [r.out for r in rows]


def main(argv=None):
    ap = argparse.ArgumentParser(description="reference generation over a serving checkpoint")
    ap.add_argument("checkpoint")
    ap.add_argument("--prompt", action="append", default=[], help="text prompt (repeatable)")
    ap.add_argument("--ids", action="append", default=[],
                    help="prompt as comma-separated token ids (repeatable)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--top-k", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", action="store_true", help="print JSON lines with ids")
    ap.add_argument("--trace", action="store_true",
                    help="with --json: add each row's trace (per-step logit margins, eos, ...)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    ckpt = load(args.checkpoint)
    prompts = [ckpt.encode(p) for p in args.prompt]
    prompts += [[int(x) for x in s.split(",") if x.strip()] for s in args.ids]
    if not prompts:
        ap.error("give at least one --prompt or --ids")
    trace: List[dict] = []
    outs = generate(ckpt, prompts, args.max_new_tokens, args.temperature, args.top_k, args.seed,
                    trace=trace)
    for prompt, out, tr in zip(prompts, outs, trace):
        if args.json:
            rec = {"prompt_ids": prompt, "output_ids": out}
            if args.trace:
                rec.update(tr)
            if ckpt.tokenizer["kind"] == "byte":
                rec["output"] = ckpt.decode(out)
            print(json.dumps(rec, ensure_ascii=False))
        elif ckpt.tokenizer["kind"] == "byte":
            print(repr(ckpt.decode(prompt)) + " -> " + repr(ckpt.decode(out)))
        else:
            print(f"{prompt} -> {out}")


if __name__ == "__main__":
    sys.exit(main())
