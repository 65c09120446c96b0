/**
 * A small synthetic data set and a checkpoint trained on it by the real Python pipeline,
 * built once per test process in a temporary directory and shared by the test files.
 */
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const execFileAsync = promisify(execFile);

/** dist/test/recsys/ -> repository root. */
export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
export const PYTHON = "/usr/bin/python3";

export async function runPython(args: string[]): Promise<{ stdout: string; stderr: string }> {
  return execFileAsync(PYTHON, args, {
    cwd: repoRoot,
    env: { ...process.env, OMP_WAIT_POLICY: "PASSIVE", OMP_NUM_THREADS: "1" },
    maxBuffer: 64 * 1024 * 1024,
  });
}

export interface SearchTrial {
  family: string;
  params: Record<string, number>;
  validation?: Record<string, number>;
  skipped?: string;
  seconds?: number;
}

/** train.py --metrics-json: the search, the winner and its test evaluation. */
export interface EvalMetrics {
  k: number;
  users: number;
  family: string;
  params: Record<string, number>;
  search: SearchTrial[];
  notes: string[];
  model: Record<string, number>;
  popularity: Record<string, number>;
  validation: { users: number; popularity: Record<string, number> };
}

export interface TrainedFixture {
  dir: string;
  ratingsCsv: string;
  checkpoint: string;
  metrics: EvalMetrics;
  /** Printed evaluation table (stdout of train.py). */
  table: string;
  /** Raw user id -> raw movie ids the user rated. */
  seen: Map<number, Set<number>>;
}

let fixture: Promise<TrainedFixture> | null = null;
let tempDir: string | null = null;

process.on("exit", () => {
  if (tempDir) rmSync(tempDir, { recursive: true, force: true });
});

export function trainedFixture(): Promise<TrainedFixture> {
  fixture ??= build();
  return fixture;
}

export function makeTempDir(prefix: string): string {
  tempDir ??= mkdtempSync(join(tmpdir(), "recsys-test-"));
  return mkdtempSync(join(tempDir, prefix));
}

async function build(): Promise<TrainedFixture> {
  const dir = makeTempDir("small-");
  await runPython(["scripts/recsys/synth_movielens.py", "--out", dir, "--preset", "small", "--seed", "3"]);
  const checkpoint = join(dir, "model.pt");
  const metricsPath = join(dir, "metrics.json");
  // Budget 0: every family's first setting only (SASRec: one epoch), so this takes seconds.
  const { stdout } = await runPython([
    "scripts/recsys/train.py",
    "--ratings", join(dir, "ratings.csv"),
    "--out", checkpoint,
    "--metrics-json", metricsPath,
    "--budget-minutes", "0",
  ]);
  const ratingsCsv = join(dir, "ratings.csv");
  return {
    dir,
    ratingsCsv,
    checkpoint,
    metrics: JSON.parse(readFileSync(metricsPath, "utf8")) as EvalMetrics,
    table: stdout,
    seen: readSeen(ratingsCsv),
  };
}

export function readSeen(ratingsCsv: string): Map<number, Set<number>> {
  const seen = new Map<number, Set<number>>();
  const lines = readFileSync(ratingsCsv, "utf8").trim().split("\n").slice(1);
  for (const line of lines) {
    const [user, movie] = line.split(",", 2).map(Number) as [number, number];
    let set = seen.get(user);
    if (!set) seen.set(user, (set = new Set()));
    set.add(movie);
  }
  return seen;
}

/** Scores computed by Python's torch.jit.load of the checkpoint, for comparison. */
export interface PythonRecommendations {
  userIds: number[];
  popular: number[];
  items: number;
  /** Per requested internal index; padding is id -1 and score null (-inf). */
  ids: number[][];
  scores: (number | null)[][];
}

export async function pythonRecommend(checkpoint: string, users: number[], k: number): Promise<PythonRecommendations> {
  const script = `
import json, sys, torch
m = torch.jit.load(sys.argv[1])
users = torch.tensor(json.loads(sys.argv[2]), dtype=torch.long)
ids, scores = m.recommend(users, int(sys.argv[3]))
n = int(m.item_ids().numel())
print(json.dumps({"userIds": m.user_ids().tolist(), "popular": m.popular(n).tolist(), "items": n,
                  "ids": ids.tolist(), "scores": [[None if s == float("-inf") else s for s in row] for row in scores.tolist()]}))
`;
  const { stdout } = await runPython(["-c", script, checkpoint, JSON.stringify(users), String(k)]);
  return JSON.parse(stdout) as PythonRecommendations;
}
