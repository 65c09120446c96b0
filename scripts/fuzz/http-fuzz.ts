#!/usr/bin/env node
/**
 * A longer HTTP fuzz of both apps than the suite's (test/http/fuzz.test.ts), same cases:
 *   node dist/scripts/fuzz/http-fuzz.js --iterations 5000 --seed 1 [--concurrency 8]
 * Prints requests sent and statuses per app; exits 1 on any 5xx, hang or leaked internals.
 */
import { parseArgs } from "node:util";
import { runFuzz } from "./cases.js";
import { repoRoot, startTargets } from "./targets.js";

const { values } = parseArgs({
  options: {
    iterations: { type: "string", default: "2000" },
    seed: { type: "string", default: "1" },
    concurrency: { type: "string", default: "8" },
  },
});
const iterations = Number(values.iterations);
const seed = Number(values.seed);
const concurrency = Number(values.concurrency);

const targets = await startTargets();
const started = Date.now();
const { statuses, failures } = await runFuzz(
  { text: targets.text, recsys: targets.recsys },
  { iterations, seed, concurrency, timeoutMs: 15_000, root: repoRoot },
);
const health = await fetch(`http://127.0.0.1:${targets.text.port}/health`);
const works = await fetch(`http://127.0.0.1:${targets.text.port}/generate`, {
  method: "POST",
  headers: { "content-type": "application/json" },
  body: JSON.stringify({ prompt: "Once", max_new_tokens: 4, seed: 1 }),
});
await targets.close();
console.log(JSON.stringify({ iterations, seed, concurrency, seconds: (Date.now() - started) / 1000, statuses, afterwards: { health: health.status, generate: works.status }, failures: failures.length }, null, 2));
for (const failure of failures.slice(0, 20)) console.log(`FAIL ${failure}`);
process.exit(failures.length || health.status !== 200 || works.status !== 200 ? 1 : 0);
