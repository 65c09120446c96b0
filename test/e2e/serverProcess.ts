/** `node dist/src/server.js` (what `npm start` runs) as a child process, read through its JSON log. */
import { spawn, type ChildProcess } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { expect } from "chai";
import OpenAI from "openai";
import { repoRoot } from "../helpers/fixtures.js";

export const SERVER_ENTRY = join(repoRoot, "dist", "src", "server.js");

/** Every variable the server reads (src/server/config.ts): the test's own environment must not leak in. */
const SERVER_VARIABLES = [
  "HOST", "PORT", "RECSYS_PORT", "SERVICE_CKPT", "SERVICE_DEVICE", "SERVICE_THREADS", "SERVICE_RUNTIME", "SERVICE_KERNELS", "RECSYS_CKPT", "RECSYS_DEVICE",
  "RECSYS_LATENCY_BUDGET_MS", "MAX_BATCH_SIZE", "MAX_WAIT_MS", "MAX_QUEUE_SIZE", "RATE_LIMIT_PER_SECOND",
  "RATE_LIMIT_BURST", "REDIS_URL", "LOG_LEVEL", "SHUTDOWN_TIMEOUT_MS", "TRUST_PROXY", "API_KEYS", "API_KEYS_FILE",
  "SERVICE_MODEL_NAME",
  "MAX_ACTIVE_STREAMS", "RESPONSES_STORE_MB", "RESPONSES_STORE_TTL_S", "SERVICE_KV_BUDGET_MB", "SERVICE_STEP_TOKENS", "SERVICE_PREFIX_CACHE", "HEADERS_TIMEOUT_MS", "REQUEST_TIMEOUT_MS", "KEEP_ALIVE_TIMEOUT_MS",
];

export interface LogLine {
  level: number;
  msg: string;
  [field: string]: unknown;
}

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export class ServerProcess {
  readonly child: ChildProcess;
  readonly log: LogLine[] = [];
  /** stdout lines that are not JSON (there should be none) and all of stderr. */
  readonly other: string[] = [];
  readonly exited: Promise<Exit>;
  #waiters: { predicate: (line: LogLine) => boolean; resolve: (line: LogLine) => void; reject: (err: Error) => void }[] = [];
  #exit: Exit | undefined;

  /** `entry`: another start script, run as its own command (an installed package's bin). */
  constructor(env: Record<string, string>, launch: { entry?: string; cwd?: string } = {}) {
    const base = { ...process.env };
    for (const name of SERVER_VARIABLES) delete base[name];
    const [command, args] = launch.entry ? [launch.entry, []] : [process.execPath, [SERVER_ENTRY]];
    this.child = spawn(command, args, {
      cwd: launch.cwd ?? repoRoot,
      env: { ...base, HOST: "127.0.0.1", PORT: "0", RECSYS_PORT: "0", ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    // A crashed test run must not leave a server behind.
    const killOnExit = (): void => void this.child.kill("SIGKILL");
    process.once("exit", killOnExit);

    createInterface({ input: this.child.stdout! }).on("line", (text) => this.#onLine(text));
    createInterface({ input: this.child.stderr! }).on("line", (text) => this.other.push(text));
    this.exited = new Promise<Exit>((resolve) => {
      this.child.once("exit", (code, signal) => {
        process.off("exit", killOnExit);
        this.#exit = { code, signal };
        for (const waiter of this.#waiters.splice(0)) {
          waiter.reject(new Error(`the server exited (${code ?? signal}) before the log line came.\n${this.transcript()}`));
        }
        resolve(this.#exit);
      });
    });
  }

  #onLine(text: string): void {
    let line: LogLine;
    try {
      line = JSON.parse(text) as LogLine;
    } catch {
      this.other.push(text);
      return;
    }
    this.log.push(line);
    this.#waiters = this.#waiters.filter((waiter) => {
      if (!waiter.predicate(line)) return true;
      waiter.resolve(line);
      return false;
    });
  }

  /** The first log line (already written or still to come) for which `predicate` holds. */
  waitForLog(predicate: (line: LogLine) => boolean): Promise<LogLine> {
    const seen = this.log.find(predicate);
    if (seen) return Promise.resolve(seen);
    if (this.#exit) return Promise.reject(new Error(`the server has exited (${this.#exit.code ?? this.#exit.signal}).\n${this.transcript()}`));
    return new Promise((resolve, reject) => this.#waiters.push({ predicate, resolve, reject }));
  }

  /** Waits for both apps' "serving" lines; their bound ports give the base URLs. */
  async ready(): Promise<{ text: string; recsys: string }> {
    const [text, recsys] = await Promise.all([
      this.waitForLog((line) => line["app"] === "text" && typeof line["port"] === "number"),
      this.waitForLog((line) => line["app"] === "recsys" && typeof line["port"] === "number"),
    ]);
    return { text: `http://127.0.0.1:${text["port"]}`, recsys: `http://127.0.0.1:${recsys["port"]}` };
  }

  /** SIGTERM, then the exit; at once if it has exited already. */
  async stop(): Promise<Exit> {
    if (!this.#exit) this.child.kill("SIGTERM");
    return this.exited;
  }

  /** What the server wrote, for failure messages. */
  transcript(): string {
    return [...this.log.map((line) => JSON.stringify(line)), ...this.other].join("\n");
  }
}

/** The server entry a suite talks to through the `openai` package (see serveWithOpenAi). */
export interface OpenAiServer {
  readonly server: ServerProcess;
  /** The text app's URL. */
  readonly base: string;
  /** An `openai` client on its /v1, no retries. */
  readonly client: OpenAI;
}

/**
 * Starts the server entry before the enclosing suite's tests (with `env` beside info-level
 * logs) and stops it after them, expecting a clean exit; the returned object is filled in
 * once the `before` hook has run.
 */
export function serveWithOpenAi(env: Record<string, string> = {}): OpenAiServer {
  const served = {} as { server: ServerProcess; base: string; client: OpenAI };
  before(async () => {
    served.server = new ServerProcess({ LOG_LEVEL: "info", ...env });
    served.base = (await served.server.ready()).text;
    served.client = new OpenAI({ baseURL: `${served.base}/v1`, apiKey: "unused", maxRetries: 0 });
  });
  after(async () => {
    const exit = await served.server?.stop();
    expect(exit?.code, served.server?.transcript()).to.equal(0);
  });
  return served;
}
