/**
 * Time to ready of `npm start`: from spawning `node dist/src/server.js` to both applications
 * logging that they serve, for this build and an older one (--before) side by side, rounds
 * alternating (this machine is shared: compare the ratio). Results go to
 * .cache/bench/startup-latest.json.
 *
 *   node dist/scripts/bench/startup.js --before dist-before [--ckpt .cache/bench/models/llama-1b-q8_0.pt] [--rounds 5] [--quick]
 *
 * --before names an older build's dist/ folder copied into this checkout (`cp -r dist
 * dist-before` at the older commit, then `npm run build` here), so both find the same addon,
 * node_modules and models. The load-check and layout caches are the server's defaults, so every
 * start after an arm's first is a later load (its check remembered), as a restart in production
 * is: the first round is not counted.
 */
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

import { Child } from "./lib/child.js";
import { machineFacts } from "./lib/machine.js";
import { writeResults } from "./lib/results.js";
import { median } from "./lib/stats.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const { values: args } = parseArgs({
  options: {
    before: { type: "string" },
    ckpt: { type: "string" },
    rounds: { type: "string", default: "5" },
    quick: { type: "boolean", default: false },
    help: { type: "boolean", default: false },
  },
});
if (args.help || !args.before) {
  console.log(`usage: node dist/scripts/bench/startup.js --before DIR [options]
  --before DIR   an older build's dist/ folder, copied into this checkout (cp -r dist dist-before)
  --ckpt PATH    SERVICE_CKPT (default: the demo model)
  --rounds N     timed rounds, the two builds alternating (default 5), after one untimed
  --quick        two rounds`);
  process.exit(args.help ? 0 : 2);
}
const before = resolve(args.before);
const arms = { before: join(before, "src", "server.js"), this: join(root, "dist", "src", "server.js") };
for (const [name, file] of Object.entries(arms)) {
  if (!existsSync(file)) throw new Error(`${name}: ${file} not found`);
}
const rounds = args.quick ? 2 : Number(args.rounds);

interface Start {
  readySeconds: number;
  loadSeconds: Record<string, number> | undefined;
}

/** Starts one server (lib/child.ts), times it until both apps log that they serve, then stops it. */
async function startOnce(server: string): Promise<Start> {
  let loadSeconds: Record<string, number> | undefined;
  const serving = new Set<unknown>();
  const started = performance.now();
  const child = await Child.start({
    name: server,
    command: process.execPath,
    args: [server],
    env: { PORT: "0", RECSYS_PORT: "0", LOG_LEVEL: "info", ...(args.ckpt ? { SERVICE_CKPT: resolve(args.ckpt) } : {}) },
    onJson(line) {
      if (line.loadSeconds) loadSeconds = line.loadSeconds as Record<string, number>;
    },
    ready(line) {
      if (typeof line.url === "string") serving.add(line.app); // "... serving on URL"
      return serving.size === 2 ? true : undefined;
    },
  });
  const readySeconds = (performance.now() - started) / 1000;
  await child.stop();
  return { readySeconds, loadSeconds };
}

const times: Record<keyof typeof arms, number[]> = { before: [], this: [] };
const phases: Record<keyof typeof arms, Record<string, number> | undefined> = { before: undefined, this: undefined };
for (let round = 0; round <= rounds; round++) {
  // Alternate which arm goes first, so a drift in the machine's load hits both alike.
  const order = (round % 2 === 0 ? ["before", "this"] : ["this", "before"]) as (keyof typeof arms)[];
  for (const arm of order) {
    const start = await startOnce(arms[arm]);
    if (round === 0) continue; // the first start of each arm checks and remembers; not counted
    times[arm].push(start.readySeconds);
    phases[arm] = start.loadSeconds;
  }
  process.stderr.write(`round ${round}/${rounds} done\n`);
}

const fmt = (values: number[]) => values.map((v) => v.toFixed(2)).join(", ");
console.log(`time to ready of \`node dist/src/server.js\` (${args.ckpt ?? "demo models"}), ${rounds} rounds after one untimed, builds alternating`);
console.log(`| build | median s | runs s | language model load phases (last run) |`);
console.log(`|---|---:|---|---|`);
for (const arm of ["before", "this"] as const) {
  const described = phases[arm] ? Object.entries(phases[arm]!).map(([k, v]) => `${k} ${v.toFixed(2)}`).join(", ") : "";
  console.log(`| ${arm === "before" ? `before (${args.before})` : "this"} | ${median(times[arm]).toFixed(2)} | ${fmt(times[arm])} | ${described} |`);
}
console.log(`this / before: ${(median(times.this) / median(times.before)).toFixed(2)}x the time to ready`);
const file = writeResults("startup", { machine: machineFacts(), ckpt: args.ckpt ?? null, before: args.before, rounds, times, phases });
console.log(`results: ${file}`);
