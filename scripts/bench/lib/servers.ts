/** Starting the processes under test: our server, the engine driver, a bare Express, FastAPI. */
import { join } from "node:path";

import { Child } from "./child.js";
import type { EngineRunCommand, EngineRunResult } from "./engineDriver.js";
import { benchDist, benchSrc, serverEntry } from "./paths.js";

/** The Python every Python script here runs under (Debian's, with python3-torch). */
export const PYTHON = process.env.BENCH_PYTHON ?? "/usr/bin/python3";

export interface OurServerOptions {
  checkpoint: string;
  maxBatchSize?: number;
  maxWaitMs?: number;
  /** SERVICE_THREADS; unset: the server's default (cores minus one, at most 8). */
  threads?: number;
  recsysCheckpoint?: string;
  /** Run through lib/gcServer.js with --expose-gc: SIGUSR2 = full GC, memory printed. */
  gcProbe?: boolean;
  /** More environment, e.g. SERVICE_RUNTIME: "torchscript" for the device-generic runtime's arm. */
  env?: Record<string, string>;
  onJson?(line: Record<string, unknown>): void;
}

export type OurServer = Child<{ text: string; recsys: string; runtime: string }>;

/** The production entry (`npm start` = node dist/src/server.js) on two free loopback ports. */
export function startOurServer(options: OurServerOptions, name = "server"): Promise<OurServer> {
  const urls: { text?: string; recsys?: string } = {};
  let runtime = "unknown";
  const env: NodeJS.ProcessEnv = {
    HOST: "127.0.0.1",
    PORT: "0",
    RECSYS_PORT: "0",
    SERVICE_CKPT: options.checkpoint,
    MAX_BATCH_SIZE: String(options.maxBatchSize ?? 8),
    MAX_WAIT_MS: String(options.maxWaitMs ?? 5),
    LOG_LEVEL: "info",
    // The addon sets this itself; stated here so both servers visibly run alike.
    OMP_WAIT_POLICY: "PASSIVE",
  };
  if (options.threads !== undefined) {
    env.SERVICE_THREADS = String(options.threads);
    env.OPENBLAS_NUM_THREADS = String(options.threads);
  }
  if (options.recsysCheckpoint) env.RECSYS_CKPT = options.recsysCheckpoint;
  Object.assign(env, options.env);
  return Child.start({
    name,
    command: process.execPath,
    args: options.gcProbe ? ["--expose-gc", join(benchDist, "lib", "gcServer.js")] : [serverEntry],
    env,
    onJson: options.onJson,
    ready(line) {
      if (typeof line.runtime === "string") runtime = line.runtime; // "language model loaded"
      if ((line.app === "text" || line.app === "recsys") && typeof line.url === "string") {
        urls[line.app] = line.url.replace("localhost", "127.0.0.1");
      }
      return urls.text && urls.recsys ? { text: urls.text, recsys: urls.recsys, runtime } : undefined;
    },
  });
}

export class EngineDriver {
  private constructor(private readonly child: Child<{ runtime: string }>) {}

  /** "torchscript", or "native" for the addon's built-in fast path. */
  get runtime(): string {
    return this.child.info.runtime;
  }

  static async start(checkpoint: string, threads: number): Promise<EngineDriver> {
    const child = await Child.start({
      name: "engine driver",
      command: process.execPath,
      args: [join(benchDist, "lib", "engineDriver.js"), checkpoint, String(threads)],
      ipc: true,
      ready: (line) => (line.ready === true ? { runtime: String(line.runtime) } : undefined),
    });
    return new EngineDriver(child);
  }

  get pid(): number {
    return this.child.pid;
  }

  run(command: Omit<EngineRunCommand, "cmd">): Promise<EngineRunResult> {
    return new Promise((resolve, reject) => {
      const proc = this.child.process;
      const onExit = () => reject(new Error(`engine driver exited during a run\n${this.child.recentStderr()}`));
      proc.once("exit", onExit);
      proc.once("message", (message: EngineRunResult | { error: string }) => {
        proc.off("exit", onExit);
        if ("error" in message) reject(new Error(`engine driver: ${message.error}`));
        else resolve(message);
      });
      proc.send({ cmd: "run", ...command });
    });
  }

  stop(): Promise<void> {
    return this.child.stop();
  }
}

/** A bare Express 5 app answering a constant recommendation (the /recommend baseline). */
export function startBareExpress(): Promise<Child<{ url: string }>> {
  return Child.start({
    name: "bare express",
    command: process.execPath,
    args: [join(benchDist, "lib", "bareServer.js")],
    ready: (line) => (typeof line.port === "number" ? { url: `http://127.0.0.1:${line.port}` } : undefined),
  });
}

/** createRecsysApp around a constant recommender (diagnostic arm of recommend-http). */
export function startConstRecsys(): Promise<Child<{ url: string }>> {
  return Child.start({
    name: "recsys app, constant recommender",
    command: process.execPath,
    args: [join(benchDist, "lib", "constRecsysServer.js")],
    ready: (line) => (typeof line.port === "number" ? { url: `http://127.0.0.1:${line.port}` } : undefined),
  });
}

export interface FastapiOptions {
  checkpoint: string;
  maxBatchSize: number;
  maxWaitMs: number;
  threads: number;
}

/** scripts/bench/fastapi_server.py under uvicorn, on a free loopback port it reports. */
export function startFastapi(options: FastapiOptions): Promise<Child<{ url: string }>> {
  return Child.start({
    name: "fastapi",
    command: PYTHON,
    args: [
      join(benchSrc, "fastapi_server.py"),
      options.checkpoint,
      "--max-batch-size",
      String(options.maxBatchSize),
      "--max-wait-ms",
      String(options.maxWaitMs),
      "--threads",
      String(options.threads),
    ],
    env: { OMP_WAIT_POLICY: "PASSIVE", OPENBLAS_NUM_THREADS: String(options.threads), PYTHONUNBUFFERED: "1" },
    ready: (line) => (typeof line.port === "number" && line.ready === true ? { url: `http://127.0.0.1:${line.port}` } : undefined),
  });
}
