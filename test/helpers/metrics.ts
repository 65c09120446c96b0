/** Parses the Prometheus text exposition format, enough to assert on it. */
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface Exposition {
  readonly text: string;
  readonly types: Map<string, string>;
  readonly help: Map<string, string>;
  readonly samples: Sample[];
}

export function parseExposition(text: string): Exposition {
  const types = new Map<string, string>();
  const help = new Map<string, string>();
  const samples: Sample[] = [];
  for (const line of text.split("\n")) {
    if (line === "") continue;
    const meta = /^# (TYPE|HELP) (\S+) (.*)$/.exec(line);
    if (meta) {
      (meta[1] === "TYPE" ? types : help).set(meta[2]!, meta[3]!);
      continue;
    }
    const sample = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!sample) throw new Error(`unparsable exposition line: ${line}`);
    const labels: Record<string, string> = {};
    for (const match of (sample[2] ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
      labels[match[1]!] = match[2]!;
    }
    samples.push({ name: sample[1]!, labels, value: Number(sample[3]) });
  }
  return { text, types, help, samples };
}

/** Sum of the samples named `name` whose labels include `labels`. */
export function valueOf(exposition: Exposition, name: string, labels: Record<string, string> = {}): number {
  return exposition.samples
    .filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))
    .reduce((sum, s) => sum + s.value, 0);
}

export async function scrape(base: string): Promise<Exposition> {
  const response = await fetch(`${base}/metrics`);
  if (response.status !== 200) throw new Error(`/metrics answered ${response.status}`);
  return parseExposition(await response.text());
}

const PROMTOOL = "/usr/bin/promtool";

/** Lints exposition text with promtool; the project's setup installs it, so its absence fails. */
export function promtoolCheck(text: string): { status: number | null; output: string } {
  if (!existsSync(PROMTOOL)) {
    throw new Error(`${PROMTOOL} is missing: install it (apt-get install -y prometheus, or run scripts/setup.sh --test)`);
  }
  const run = spawnSync(PROMTOOL, ["check", "metrics"], { input: text, encoding: "utf8" });
  return { status: run.status, output: `${run.stdout}${run.stderr}` };
}

/** Polls an observable condition (never a fixed sleep) until it holds. */
export async function eventually(check: () => Promise<boolean>, what: string, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}
