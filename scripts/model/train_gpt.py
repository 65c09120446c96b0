"""Train the demo byte-level GPT (python/torchserve_node/gpt.py) on the Brown corpus.

    OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 scripts/model/train_gpt.py \
        --steps 2800 --short-frac 0.75

Reproducible from --seed (data order, init, dropout). Prints step, loss, tokens/s and ETA;
held-out bits/byte on a fixed subset every --eval-every steps; writes a training checkpoint
(`--ckpt`, default .cache/brown-gpt.train.pt: {"model", "config", "optimizer", "step",
"args", "history"}) at each evaluation and at the end; then measures bits/byte on the whole
held-out split and exports the serving checkpoint with export_gpt.py.

`--bench N` only times N optimizer steps for the given settings and exits.

Resuming (a continuation phase):

    OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 scripts/model/train_gpt.py \
        --resume .cache/brown-gpt.phase2.train.pt --steps 900 --lr 1e-3 --warmup 0 \
        --min-lr-frac 0.05 --short-frac 0

(the demo model's last phase; models/README.md has the commands of every phase)

loads the model, the AdamW state, the step/token/wall-time counters and the history from a
training checkpoint and trains `--steps` MORE steps (steps are numbered globally) under a
new schedule: linear warmup from the learning rate the checkpoint ended at to `--lr` over
`--warmup` steps, then cosine decay to `--min-lr-frac * --lr` at the phase's last step.
The architecture comes from the checkpoint (the --n-* flags are ignored). The data order
and torch RNG of a resumed phase are seeded from (`--seed`, start step), so a phase is
reproducible from its input checkpoint and its flags. Each phase is recorded in the
checkpoint's "phases" list (start/end step, tokens, wall time, flags); "tokens" and
"train_wall_s" are the totals over all phases. SIGTERM (or SIGINT) ends a run after the
current step: it evaluates the subset, saves the checkpoint at that step and exits without
the final evaluation or export (so a constant-learning-rate phase can be ended at a time
chosen while it runs, then decayed by another --resume phase). Do not pass the same path to --resume and
--ckpt if you want to keep the input checkpoint (the run overwrites --ckpt at each eval).
"""

import argparse
import json
import math
import os
import signal
import sys
import time

# Before torch/numpy load their thread pools: OpenMP threads sleep instead of spinning
# (2 shared cores), and OpenBLAS stays single-threaded (bf16 matmuls go through oneDNN on
# the torch threads; a second OpenBLAS team only competes with them).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [HERE, os.path.join(ROOT, "python")]
from torchserve_node.gpt import GPT, GPTConfig  # noqa: E402
import brown  # noqa: E402


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description="train the byte-level Brown GPT")
    ap.add_argument("--steps", type=int, default=2800)
    ap.add_argument("--batch", type=int, default=8, help="sequences per step")
    ap.add_argument("--seq", type=int, default=512, help="training sequence length")
    ap.add_argument("--short-seq", type=int, default=256,
                    help="sequence length of the first phase (same tokens per step; 0 = off)")
    ap.add_argument("--short-frac", type=float, default=0.75,
                    help="fraction of steps trained at --short-seq, each batch at a random "
                         "position offset so every position embedding is trained")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1, help="cosine floor, fraction of lr")
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--beta2", type=float, default=0.99)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=256)
    ap.add_argument("--block-size", type=int, default=512)
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="bfloat16",
                    help="compute dtype for matmuls (bfloat16 = CPU autocast; weights stay fp32)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--eval-windows", type=int, default=48, help="held-out windows per periodic eval")
    ap.add_argument("--log-every", type=int, default=25)
    ap.add_argument("--ckpt", default=os.path.join(ROOT, ".cache", "brown-gpt.train.pt"))
    ap.add_argument("--out", default=os.path.join(ROOT, "models", "brown-gpt.pt"))
    ap.add_argument("--no-export", action="store_true")
    ap.add_argument("--bench", type=int, default=0, help="time this many steps and exit")
    ap.add_argument("--resume", default=None, metavar="PATH",
                    help="continue from this training checkpoint for --steps more steps")
    return ap.parse_args(argv)


def lr_at(step, args, start_lr=0.0):
    """Linear warmup (from start_lr; 0 for a fresh run), then cosine decay to
    min_lr_frac * lr at the last step. `step` counts from the start of the phase."""
    if step < args.warmup:
        return start_lr + (args.lr - start_lr) * (step + 1) / args.warmup
    progress = (step - args.warmup) / max(1, args.steps - args.warmup)
    floor = args.lr * args.min_lr_frac
    return floor + 0.5 * (args.lr - floor) * (1.0 + math.cos(math.pi * min(1.0, progress)))


def make_optimizer(model, args):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        # Matrices decay; biases, LayerNorm gains and the position table do not.
        (decay if p.dim() >= 2 and not name.startswith("wpe") else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": args.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, args.beta2), eps=1e-8)


def autocast(args):
    if args.dtype == "bfloat16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return torch.autocast("cpu", enabled=False)


@torch.no_grad()
def heldout_bits_per_byte(model, data: np.ndarray, seq: int, args, max_windows=None, batch=8):
    """Bits/byte over held-out bytes. Windows of `seq` bytes with stride seq/2; each byte is
    scored once, with at least seq/2 bytes of context (except at the very start)."""
    model.eval()
    stride = seq // 2
    n = len(data)
    starts = list(range(0, max(1, n - seq), stride))
    if starts[-1] + seq < n - 1:
        starts.append(n - 1 - seq)
    if max_windows is not None and len(starts) > max_windows:
        pick = np.linspace(0, len(starts) - 1, max_windows).round().astype(int)
        starts = [starts[i] for i in pick]
        full_windows = True
    else:
        full_windows = False
    total_nats, total_bytes = 0.0, 0
    scored_until = 0  # first target index not yet scored (for the full sweep)
    for i in range(0, len(starts), batch):
        chunk = starts[i:i + batch]
        x = torch.from_numpy(np.stack([data[s:s + seq] for s in chunk]).astype(np.int64))
        y = torch.from_numpy(np.stack([data[s + 1:s + seq + 1] for s in chunk]).astype(np.int64))
        with autocast(args):
            logits = model.training_logits(x)
        nll = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1),
                              reduction="none").view(len(chunk), seq)
        for r, s in enumerate(chunk):
            if full_windows:
                lo = 0  # sampled windows: score every position of the window
            else:
                lo = max(0, scored_until - (s + 1))
                scored_until = s + 1 + seq
            total_nats += float(nll[r, lo:].sum())
            total_bytes += seq - lo
    model.train()
    return total_nats / total_bytes / math.log(2), total_bytes


def fmt_time(sec):
    sec = int(sec)
    return f"{sec // 3600}:{sec % 3600 // 60:02d}:{sec % 60:02d}"


def load_resume(path):
    """The training checkpoint to continue from, with its counters normalised (checkpoints
    written before --resume existed have no "tokens"/"train_wall_s"/"phases")."""
    ck = torch.load(path, map_location="cpu")
    step = int(ck["step"])
    prev = ck["args"]
    final = next((h["final"] for h in reversed(ck["history"]) if "final" in h), None)
    phases = ck.get("phases")
    if phases is None:  # a first-run checkpoint: one phase, rebuilt from its args/summary
        phases = [{"phase": 1, "start_step": 0, "end_step": step,
                   "tokens": step * prev["batch"] * prev["seq"],
                   "train_wall_s": final["train_wall_s"] if final else None,
                   "heldout_bpb": final["heldout_bpb"] if final else None,
                   "args": prev}]
    tokens = ck.get("tokens", sum(p["tokens"] for p in phases))
    wall = ck.get("train_wall_s", sum(p["train_wall_s"] or 0.0 for p in phases))
    last_lr = ck["optimizer"]["param_groups"][0]["lr"]
    return ck, step, tokens, wall, phases, last_lr


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)

    resume = None
    start_step, prior_tokens, prior_wall, phases, start_lr = 0, 0, 0.0, [], 0.0
    history = []
    if args.resume:
        resume, start_step, prior_tokens, prior_wall, phases, start_lr = load_resume(args.resume)
        # A resumed phase draws fresh (but reproducible) data: seeded from (seed, start step).
        torch.manual_seed(args.seed * 1_000_003 + start_step)
        rng = np.random.default_rng([args.seed, start_step])
    else:
        torch.manual_seed(args.seed)
        rng = np.random.default_rng(args.seed)

    splits = brown.load()
    train = np.frombuffer(splits["train"], dtype=np.uint8)
    held = np.frombuffer(splits["heldout"], dtype=np.uint8)
    print(f"data: train {len(train):,} bytes, held-out {len(held):,} bytes", flush=True)

    if resume is not None:
        cfg = GPTConfig(**resume["config"])
    else:
        cfg = GPTConfig(vocab_size=259, block_size=args.block_size, n_layer=args.n_layer,
                        n_head=args.n_head, n_embd=args.n_embd, dropout=args.dropout,
                        bias=True, gelu="tanh")
    model = GPT(cfg)
    opt = make_optimizer(model, args)
    if resume is not None:
        model.load_state_dict(resume["model"])
        opt.load_state_dict(resume["optimizer"])
        # The saved param groups carry the old run's hyperparameters; use this run's.
        for g, wd in zip(opt.param_groups, (args.weight_decay, 0.0)):
            g["weight_decay"] = wd
            g["betas"] = (0.9, args.beta2)
        args.block_size = cfg.block_size
        print(f"resumed {args.resume}: step {start_step}, {prior_tokens:,} tokens, "
              f"{fmt_time(prior_wall)} training wall so far, lr was {start_lr:.2e}", flush=True)
        history = list(resume["history"])
        del resume
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    tokens_per_step = args.batch * args.seq
    short_steps = int(args.short_frac * args.steps) if args.short_seq else 0
    print(f"model: {n_params:,} parameters; {tokens_per_step:,} tokens/step, "
          f"{args.steps} steps = {tokens_per_step * args.steps / 1e6:.1f}M tokens "
          f"({tokens_per_step * args.steps / len(train):.2f} epochs); dtype {args.dtype}, "
          f"threads {args.threads}; first {short_steps} steps at length {args.short_seq}; "
          f"lr {start_lr:.2e} -> {args.lr:.2e} over {args.warmup} steps, cosine to "
          f"{args.lr * args.min_lr_frac:.2e}", flush=True)

    def batch(step):
        """(x, y, position offset). Short phase: more, shorter rows at a random offset."""
        seq, rows, offset = args.seq, args.batch, 0
        if step < short_steps:
            seq = args.short_seq
            rows = tokens_per_step // seq
            offset = int(rng.integers(0, args.block_size - seq + 1))
        ix = rng.integers(0, len(train) - seq - 1, size=rows)
        x = np.stack([train[i:i + seq] for i in ix]).astype(np.int64)
        y = np.stack([train[i + 1:i + 1 + seq] for i in ix]).astype(np.int64)
        return torch.from_numpy(x), torch.from_numpy(y), offset

    total_steps = args.bench or args.steps
    last_step = start_step + total_steps  # global numbering
    t0 = time.time()
    t_last, tok_last = t0, 0
    eval_time = 0.0
    loss_acc, loss_n = 0.0, 0

    def record(done, wall):
        """Counters for the checkpoint: totals over all phases, and this phase's entry."""
        here = {"phase": len(phases) + 1, "start_step": start_step,
                "end_step": start_step + done, "tokens": done * tokens_per_step,
                "train_wall_s": wall, "start_lr": start_lr, "args": vars(args)}
        return {"tokens": prior_tokens + done * tokens_per_step,
                "train_wall_s": prior_wall + wall, "phases": phases + [here]}

    stop = []  # set by SIGTERM/SIGINT: save at the end of the current step and exit
    if not args.bench:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda signum, frame: stop.append(signum))

    for step in range(total_steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args, start_lr)
        x, y, offset = batch(step)
        with autocast(args):
            logits = model.training_logits(x, offset)
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if args.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        loss_acc += float(loss)
        loss_n += 1

        done = step + 1
        gstep = start_step + done
        if done % args.log_every == 0 or done == total_steps:
            now = time.time()
            tps = (done * tokens_per_step - tok_last) / max(1e-9, now - t_last)
            train_time = now - t0 - eval_time
            eta = train_time / done * (total_steps - done)
            print(f"step {gstep:5d}/{last_step}  loss {loss_acc / loss_n:.4f} "
                  f"({loss_acc / loss_n / math.log(2):.3f} bits/byte)  lr {lr_at(step, args, start_lr):.2e}  "
                  f"{tps:,.0f} tok/s  elapsed {fmt_time(now - t0)}  eta {fmt_time(eta)}", flush=True)
            t_last, tok_last = now, done * tokens_per_step
            loss_acc, loss_n = 0.0, 0
        if args.bench:
            continue
        if gstep % args.eval_every == 0 or done == total_steps or stop:
            te = time.time()
            bpb, _ = heldout_bits_per_byte(model, held, args.seq, args, max_windows=args.eval_windows)
            history.append({"step": gstep, "heldout_bpb_subset": bpb,
                            "elapsed_s": prior_wall + te - t0})
            save_checkpoint(args, model, cfg, opt, gstep, history, **record(done, te - t0))
            eval_time += time.time() - te
            t_last = time.time()
            print(f"eval  step {gstep:5d}  held-out {bpb:.4f} bits/byte (subset of "
                  f"{args.eval_windows} windows)  [{time.time() - te:.1f}s]", flush=True)
            if stop:
                print(f"stopped by signal {stop[0]} after step {gstep} ({done} steps, "
                      f"{done * tokens_per_step:,} tokens, {fmt_time(te - t0)} in this phase); "
                      f"checkpoint {args.ckpt}; no final evaluation or export", flush=True)
                return

    train_wall = time.time() - t0
    if args.bench:
        print(f"bench: {total_steps * tokens_per_step / train_wall:,.0f} tok/s overall", flush=True)
        return

    te = time.time()
    bpb, nbytes = heldout_bits_per_byte(model, held, args.block_size, args)
    print(f"final held-out: {bpb:.4f} bits/byte over all {nbytes:,} held-out bytes "
          f"(windows of {args.block_size}, stride {args.block_size // 2}) [{time.time() - te:.0f}s]",
          flush=True)
    rec = record(args.steps, train_wall)
    rec["phases"][-1]["heldout_bpb"] = bpb
    summary = {"heldout_bpb": bpb, "heldout_bytes": nbytes, "train_wall_s": rec["train_wall_s"],
               "steps": last_step, "tokens": rec["tokens"], "parameters": n_params}
    if args.resume:
        summary["phase"] = {"steps": args.steps, "tokens": args.steps * tokens_per_step,
                            "train_wall_s": train_wall}
    history.append({"step": last_step, "final": summary})
    save_checkpoint(args, model, cfg, opt, last_step, history, **rec)
    print("summary: " + json.dumps(summary), flush=True)

    if not args.no_export:
        from torchserve_node import export_gpt  # late: the exporter may change during a run
        export_gpt.export_file("trainer", args.ckpt, args.out)


def save_checkpoint(args, model, cfg, opt, step, history, **counters):
    os.makedirs(os.path.dirname(os.path.abspath(args.ckpt)), exist_ok=True)
    tmp = args.ckpt + ".tmp"
    torch.save({"model": model.state_dict(), "config": cfg.to_dict(), "optimizer": opt.state_dict(),
                "step": step, "args": vars(args), "history": history, **counters}, tmp)
    os.replace(tmp, args.ckpt)


if __name__ == "__main__":
    main()
