"""Baseline for scripts/bench/engine-decode.ts (and device-decode.ts --baseline): the same
checkpoint driven by a plain Python TorchScript loop (one forward per step, argmax), and the
machine's measured matmul rate (on the CPU).

    /usr/bin/python3 scripts/bench/engine_decode_baseline.py CKPT --threads 2 \
        [--batches 1,8,32 --new-tokens 128 --prompt-len 16 --prefill-len 500] [--device cuda]

On a GPU each step brings its chosen ids back to the host, as a server must to stream them
(without that the loop would only queue kernels and measure nothing a client sees).

Prints one JSON object. Decode time per step is (t(1 + N tokens) - t(1 token)) / N, so the
prefill is not counted; prefill is the time of a prompt of --prefill-len tokens and one new
token, batch 1.
"""

import argparse
import json
import os
import time


def parse_args():
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--prefill-len", type=int, default=500)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--optimize", choices=["on", "off"], default="on",
                    help="torch's graph optimiser for the forward (device-decode.ts --optimize off)")
    return ap.parse_args()


ARGS = parse_args() if __name__ == "__main__" else None
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
if ARGS is not None:
    # OpenBLAS (the BLAS of Debian's torch) sizes its own thread pool from this variable when
    # it loads and ignores torch.set_num_threads: without it a "1-thread" baseline, and the
    # matmul rate, would use every core.
    os.environ["OPENBLAS_NUM_THREADS"] = str(ARGS.threads)

import torch  # noqa: E402


def generate(module, batch: int, prompt_len: int, new_tokens: int, device: str = "cpu",
             dtype: torch.dtype = torch.float32) -> float:
    """Seconds for a greedy generation of new_tokens tokens per row."""
    on_device = device != "cpu"
    start = time.perf_counter()
    with torch.inference_mode():
        cache = torch.zeros(module.cache_shape(batch), dtype=dtype, device=device)
        idx = (torch.arange(prompt_len, device=device) % 26 + 65).repeat(batch, 1)
        lengths = torch.full((batch,), prompt_len, dtype=torch.long, device=device)
        pos = torch.zeros(batch, dtype=torch.long, device=device)
        for _ in range(new_tokens):
            logits, cache = module(idx, pos, lengths, cache)
            pos = pos + lengths
            idx = logits.argmax(-1, keepdim=True)
            if on_device:
                idx.view(-1).tolist()
            lengths = torch.ones(batch, dtype=torch.long, device=device)
    return time.perf_counter() - start


def matmul_gflops(n: int = 512, repeats: int = 50) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(5):
        a @ b
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * n ** 3 * repeats / (time.perf_counter() - start) / 1e9


def main():
    args = ARGS
    torch.set_num_threads(args.threads)
    torch._C._set_graph_executor_optimize(args.optimize == "on")
    extra = {"config.json": ""}
    module = torch.jit.load(args.checkpoint, map_location=args.device, _extra_files=extra)
    module.eval()
    config = json.loads(extra["config.json"])

    def run(batch: int, prompt_len: int, new_tokens: int) -> float:
        return generate(module, batch, prompt_len, new_tokens, args.device,
                        getattr(torch, config.get("dtype", "float32")))

    run(1, args.prompt_len, 4)  # TorchScript's profiling runs
    decode = {}
    for batch in [int(b) for b in args.batches.split(",")]:
        run(batch, args.prompt_len, 4)
        one = min(run(batch, args.prompt_len, 1) for _ in range(2))
        many = run(batch, args.prompt_len, 1 + args.new_tokens)
        decode[batch] = (many - one) / args.new_tokens
    prefill = min(run(1, args.prefill_len, 1) for _ in range(2))
    print(json.dumps({
        "torch": torch.__version__,
        "device": args.device,
        "threads": args.threads,
        "config": config,
        "decode_step_seconds": decode,
        "prefill_seconds": prefill,
        "matmul_gflops": matmul_gflops() if args.device == "cpu" else None,
    }))


if __name__ == "__main__":
    main()
