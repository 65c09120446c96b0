/**
 * Servers under test run in child processes, so the load generator never shares their event
 * loop or their cores' scheduling with the server's own JavaScript. Every child started here
 * is stopped by pid when the benchmark ends, fails or is interrupted.
 */
import { type ChildProcess, fork, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";

const running = new Set<ChildProcess>();
let hooked = false;

function hookCleanup(): void {
  if (hooked) return;
  hooked = true;
  process.on("exit", () => {
    for (const child of running) child.kill("SIGKILL");
  });
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    process.on(signal, () => {
      for (const child of running) child.kill("SIGKILL");
      process.exit(130);
    });
  }
}

export interface StartOptions<T> {
  name: string;
  command: string;
  args: string[];
  env?: NodeJS.ProcessEnv;
  /** Called with each stdout line parsed as JSON (non-JSON lines are skipped): ready info or undefined. */
  ready(line: Record<string, unknown>): T | undefined;
  timeoutMs?: number;
  /** fork() (Node, with an IPC channel) instead of spawn(). */
  ipc?: boolean;
  /** Every stdout line that parses as JSON, before and after ready. */
  onJson?(line: Record<string, unknown>): void;
}

export class Child<T = unknown> {
  private constructor(
    readonly name: string,
    readonly process: ChildProcess,
    readonly info: T,
    private readonly stderrTail: string[],
  ) {}

  get pid(): number {
    return this.process.pid!;
  }

  static start<T>(options: StartOptions<T>): Promise<Child<T>> {
    hookCleanup();
    const env = { ...process.env, ...options.env };
    const child = options.ipc
      ? fork(options.args[0]!, options.args.slice(1), { env, execPath: options.command, stdio: ["ignore", "pipe", "pipe", "ipc"] })
      : spawn(options.command, options.args, { env, stdio: ["ignore", "pipe", "pipe"] });
    running.add(child);
    child.once("exit", () => running.delete(child));
    const stderrTail: string[] = [];
    createInterface({ input: child.stderr! }).on("line", (line) => {
      stderrTail.push(line);
      if (stderrTail.length > 40) stderrTail.shift();
    });
    return new Promise((resolve, reject) => {
      let settled = false;
      const timer = setTimeout(() => fail(`not ready after ${(options.timeoutMs ?? 180_000) / 1000} s`), options.timeoutMs ?? 180_000);
      const fail = (why: string) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        child.kill("SIGKILL");
        reject(new Error(`${options.name}: ${why}\n${stderrTail.join("\n")}`));
      };
      child.once("exit", (code, signal) => fail(`exited (code ${code}, signal ${signal}) before it was ready`));
      child.once("error", (err) => fail(err.message));
      // stdout is always drained: a full pipe would stall the server.
      createInterface({ input: child.stdout! }).on("line", (line) => {
        // Warnings and errors of the JSON log (pino: level 40+) are kept with stderr.
        if (/"level":\s*([4-9]\d)/.test(line)) {
          stderrTail.push(line);
          if (stderrTail.length > 40) stderrTail.shift();
        }
        if (!line.startsWith("{")) return;
        let parsed: Record<string, unknown>;
        try {
          parsed = JSON.parse(line) as Record<string, unknown>;
        } catch {
          return;
        }
        options.onJson?.(parsed);
        if (settled) return;
        const info = options.ready(parsed);
        if (info === undefined) return;
        settled = true;
        clearTimeout(timer);
        const started = new Child(options.name, child, info, stderrTail);
        child.once("exit", (code, signal) => {
          // Stopping it sets `stopping`; any other exit is news to whoever is measuring.
          if (!started.stopping) console.error(`\n${options.name} (pid ${child.pid}) exited: code ${code}, signal ${signal}\n${stderrTail.join("\n")}`);
        });
        resolve(started);
      });
    });
  }

  stopping = false;

  /** SIGTERM (the server drains), then SIGKILL after `graceMs`. */
  async stop(graceMs = 15_000): Promise<void> {
    this.stopping = true;
    const child = this.process;
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
    child.kill("SIGTERM");
    const timer = setTimeout(() => child.kill("SIGKILL"), graceMs);
    await exited;
    clearTimeout(timer);
  }

  /** Resident set size of the child, bytes (Linux /proc). */
  rssBytes(): number {
    return readRss(this.pid);
  }

  recentStderr(): string {
    return this.stderrTail.join("\n");
  }
}

export function readRss(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const kb = /VmRSS:\s+(\d+)\s+kB/.exec(status)?.[1];
  return kb ? Number(kb) * 1024 : Number.NaN;
}

/** Threads of a process (Linux /proc), to spot a thread leak. */
export function readThreads(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  return Number(/Threads:\s+(\d+)/.exec(status)?.[1] ?? Number.NaN);
}

/** CPU seconds (user + system, all threads) a process has used so far (Linux /proc). */
export function readCpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  // fields[0] is field 3 (state); utime and stime are fields 14 and 15, in clock ticks (100/s).
  return (Number(fields[11]) + Number(fields[12])) / 100;
}
