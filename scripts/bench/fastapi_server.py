"""The Python baseline for scripts/bench/vs-fastapi.ts: FastAPI + PyTorch serving the same
checkpoint with the same batching rule and the same endpoint shape as our server.

    /usr/bin/python3 scripts/bench/fastapi_server.py CHECKPOINT [--port 0]
        [--max-batch-size 8] [--max-wait-ms 5] [--threads 2] [--self-check]

- POST /generate {prompt, max_new_tokens, temperature, top_k} -> {text, latency_ms}, bodies
  validated by pydantic (the spec's limits), served by uvicorn (uvloop and httptools when
  installed, access log off: our server logs no requests either).
- POST /generate/stream, the same body -> server-sent events, one `data: {"text": piece}`
  per token as the batch loop makes it, then `data: [DONE]` (as our server's stream). Streams
  join the same batcher as /generate: the usual Python service's way (static batches).
- Dynamic batching, the rule of DESIGN.md section 2: a batch closes when it holds
  max_batch_size requests or max_wait_ms after its first request arrived; one batch in
  flight; while it runs the next one fills.
- Generation is the plain Python TorchScript loop of python/torchserve_node/reference.py (same
  policy: truncation, prefill and decode in one call, re-prefill at the context end, eos),
  minus its diagnostics, run on one worker thread so the event loop keeps serving requests.
  `--self-check` asserts it produces reference.generate's tokens and exits.
- Threads as in our server: torch intra-op threads = --threads (set on the worker thread,
  where they apply), OpenBLAS threads the same, OMP_WAIT_POLICY=PASSIVE.
- GET /metrics: generated_tokens_total, batch_size_sum/count, queue_depth, in_flight (text),
  so the benchmark counts tokens the same way for both servers. GET /health.

Prints one JSON line {"ready": true, "port": N} on stdout once warmed up and listening.
"""

import argparse
import asyncio
import collections
import ctypes
import json
import os
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import List, Optional

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
import uvicorn  # noqa: E402
from fastapi import FastAPI  # noqa: E402
from fastapi.responses import PlainTextResponse, StreamingResponse  # noqa: E402
from pydantic import BaseModel, confloat, conint, constr  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))
from torchserve_node import reference  # noqa: E402


# ------------------------------------------------------------------ generation (worker thread)

def set_threads(n: int) -> None:
    """Intra-op threads for the calling thread, and OpenBLAS's pool (which ignores torch's)."""
    torch.set_num_threads(n)
    with open("/proc/self/maps", encoding="utf-8") as f:
        libs = {line.split()[-1] for line in f if "openblas" in line and line.rstrip().endswith(".so")}
    for lib in libs:
        try:
            ctypes.CDLL(lib).openblas_set_num_threads(n)
        except (OSError, AttributeError):
            pass


@torch.inference_mode()
def generate(ckpt: reference.Checkpoint, prompts: List[List[int]], max_new: List[int],
             temperatures: List[float], top_ks: List[Optional[int]],
             gen: torch.Generator, on_token=None) -> List[List[int]]:
    """reference.generate's loop without its diagnostics, with per-row sampling settings."""
    B = len(prompts)
    tok = ckpt.tokenizer
    C = ckpt.block_size
    eos = tok.get("eos_token_id")
    pad = tok.get("pad_token_id")
    pad = pad if pad is not None else (eos if eos is not None else 0)
    start = tok.get("bos_token_id")
    start = start if start is not None else eos
    rows = []
    for ids, m in zip(prompts, max_new):
        ids = reference.truncate_prompt(ids, m, C) or [start]
        rows.append(reference._Row(history=list(ids), pending=list(ids), pos=0, max_new=m))
    all_greedy = all(t <= reference.GREEDY_TEMPERATURE for t in temperatures)
    module = ckpt.module
    dtype = getattr(torch, ckpt.config.get("dtype", "float32"))
    cache = torch.zeros(module.cache_shape(B), dtype=dtype)
    while not all(r.done for r in rows):
        logits, cache = module(*reference.step_inputs(rows, pad), cache)
        if all_greedy:
            next_ids = reference.greedy(logits).tolist()
        else:
            next_ids = [int(reference.sample(logits[b:b + 1], temperatures[b], top_ks[b], gen)[0])
                        for b in range(B)]
        for b, r in enumerate(rows):
            if not r.done:
                made = len(r.out)
                r.advance(next_ids[b], eos, C)
                if on_token is not None and len(r.out) > made:
                    on_token(b, r.out[-1])
    return [r.out for r in rows]


class Counters:
    def __init__(self):
        self.lock = threading.Lock()   # guards the fields below (worker thread and event loop)
        self.generated_tokens = 0
        self.batches = 0
        self.requests = 0


class Engine:
    """Owns the checkpoint and the one worker thread every batch runs on."""

    def __init__(self, path: str, threads: int):
        self.ckpt = reference.load(path)
        self.counters = Counters()
        self.gen = torch.Generator().manual_seed(0)
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="generate",
                                           initializer=set_threads, initargs=(threads,))

    def run_batch(self, items: list, sinks: Optional[list] = None) -> List[str]:
        """Worker thread: one batched generation for a list of GenerateBody; sinks[b], when
        given and not None, is called with each token of row b as it is made."""
        def on_token(b: int, token: int) -> None:
            if sinks[b] is not None:
                sinks[b](token)
        outs = generate(self.ckpt, [self.ckpt.encode(i.prompt) for i in items],
                        [i.max_new_tokens for i in items], [i.temperature for i in items],
                        [i.top_k for i in items], self.gen, on_token if sinks else None)
        with self.counters.lock:
            self.counters.generated_tokens += sum(len(o) for o in outs)
            self.counters.batches += 1
            self.counters.requests += len(items)
        return [self.ckpt.decode(o) for o in outs]


class Batcher:
    """Closes a batch at max_batch_size or max_wait after its first request; one in flight."""

    def __init__(self, engine: Engine, max_batch_size: int, max_wait_ms: float):
        self.engine = engine
        self.max_batch_size = max_batch_size
        self.max_wait = max_wait_ms / 1000.0
        self.queue = collections.deque()   # (item, future, arrival time)
        self.wake = asyncio.Event()
        self.in_flight = 0

    async def submit(self, item, sink=None) -> str:
        """sink (worker thread): called with each token of this request as it is made."""
        fut = asyncio.get_running_loop().create_future()
        self.queue.append((item, fut, time.perf_counter(), sink))
        self.wake.set()
        return await fut

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while not self.queue:
                self.wake.clear()
                await self.wake.wait()
            while len(self.queue) < self.max_batch_size:
                left = self.queue[0][2] + self.max_wait - time.perf_counter()
                if left <= 0:
                    break
                self.wake.clear()
                try:
                    await asyncio.wait_for(self.wake.wait(), left)
                except asyncio.TimeoutError:
                    break
            batch = [self.queue.popleft() for _ in range(min(self.max_batch_size, len(self.queue)))]
            self.in_flight = len(batch)
            try:
                texts = await loop.run_in_executor(self.engine.executor, self.engine.run_batch,
                                                   [item for item, _, _, _ in batch],
                                                   [sink for _, _, _, sink in batch])
            except Exception as e:  # noqa: BLE001 - the batch fails, the server goes on
                for _, fut, _, _ in batch:
                    if not fut.done():
                        fut.set_exception(e)
            else:
                for (_, fut, _, _), text in zip(batch, texts):
                    if not fut.done():
                        fut.set_result(text)
            self.in_flight = 0


# ------------------------------------------------------------------------------ HTTP

class GenerateBody(BaseModel):
    prompt: constr(min_length=1, max_length=2000)
    max_new_tokens: conint(ge=1, le=512) = 64
    temperature: confloat(gt=0, le=5) = 1.0
    top_k: Optional[conint(ge=1)] = None


def create_app(engine: Engine, batcher: Batcher, on_ready) -> FastAPI:
    app = FastAPI()

    @app.on_event("startup")
    async def startup():
        asyncio.get_running_loop().create_task(batcher.run())
        on_ready()

    @app.post("/generate")
    async def generate_route(body: GenerateBody):
        started = time.perf_counter()
        text = await batcher.submit(body)
        return {"text": text, "latency_ms": (time.perf_counter() - started) * 1000.0}

    @app.post("/generate/stream")
    async def generate_stream_route(body: GenerateBody):
        loop = asyncio.get_running_loop()
        tokens: asyncio.Queue = asyncio.Queue()

        def sink(token: int) -> None:  # worker thread
            loop.call_soon_threadsafe(tokens.put_nowait, token)

        done = asyncio.ensure_future(batcher.submit(body, sink))
        done.add_done_callback(lambda _: tokens.put_nowait(None))

        async def events():
            while True:
                token = await tokens.get()
                if token is None:
                    break
                yield "data: " + json.dumps({"text": engine.ckpt.decode([token])}) + "\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics():
        c = engine.counters
        with c.lock:
            lines = [f"generated_tokens_total {c.generated_tokens}",
                     f"batch_size_sum {c.requests}", f"batch_size_count {c.batches}"]
        lines += [f"queue_depth {len(batcher.queue)}", f"in_flight {batcher.in_flight}"]
        return "\n".join(lines) + "\n"

    return app


def warm_up(engine: Engine, max_batch_size: int) -> None:
    """TorchScript's profiling executor optimises on the first calls of a shape (our engine
    warms up at load too): run the batch sizes the benchmark will use, twice each."""
    sizes = sorted({1, max_batch_size})
    for size in sizes:
        for _ in range(2):
            items = [GenerateBody(prompt="The jury said", max_new_tokens=4, temperature=1e-6)] * size
            engine.executor.submit(engine.run_batch, items).result()
    with engine.counters.lock:
        engine.counters.generated_tokens = 0
        engine.counters.batches = 0
        engine.counters.requests = 0


def self_check(engine: Engine) -> int:
    prompts = ["The jury said", "In the morning the committee met to consider", "He"]
    ids = [engine.ckpt.encode(p) for p in prompts]
    for max_new in (16, 40):
        want = reference.generate(engine.ckpt, ids, max_new, temperature=0.0)
        got = engine.executor.submit(generate, engine.ckpt, ids, [max_new] * 3, [1e-6] * 3,
                                     [None] * 3, engine.gen).result()
        if got != want:
            print(f"self-check FAILED (max_new_tokens {max_new}):\n  reference {want}\n  lean      {got}")
            return 1
    print("self-check: the lean loop reproduces reference.generate (greedy, batch of 3)")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="FastAPI + PyTorch baseline server")
    ap.add_argument("checkpoint")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--max-batch-size", type=int, default=8)
    ap.add_argument("--max-wait-ms", type=float, default=5.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--self-check", action="store_true")
    args = ap.parse_args(argv)

    engine = Engine(args.checkpoint, args.threads)
    if args.self_check:
        return self_check(engine)
    warm_up(engine, args.max_batch_size)
    batcher = Batcher(engine, args.max_batch_size, args.max_wait_ms)

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    port = sock.getsockname()[1]

    def on_ready():
        print(json.dumps({"ready": True, "port": port, "torch": torch.__version__,
                          "threads": args.threads}), flush=True)

    app = create_app(engine, batcher, on_ready)
    config = uvicorn.Config(app, log_level="warning", access_log=False, backlog=2048)
    server = uvicorn.Server(config)
    server.run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
