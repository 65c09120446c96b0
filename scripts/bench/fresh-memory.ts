/**
 * How long this host takes to write memory a process has not touched before: the floor under
 * a load that makes a copy of its weights (a 16-bit checkpoint's native runtime packs one; the
 * quantized ones map theirs). Each round waits `--pause` seconds, then runs two fresh child
 * processes one after the other, each writing `--gb` GB of fresh memory once; the second reuses
 * the pages the first one freed. On a VM whose host takes back the guest's free memory, the
 * first write after a pause costs several times the second; on bare metal the two should match.
 * load-memory.js's first load of a checkpoint is such a "first write" where it packs.
 *
 *   node dist/scripts/bench/fresh-memory.js [--gb 2.47] [--rounds 3] [--pause 60]
 */
import { execFileSync } from "node:child_process";
import { setTimeout as sleep } from "node:timers/promises";

import { numberFlag, parseFlags } from "./lib/args.js";
import { machineFacts } from "./lib/machine.js";
import { writeResults } from "./lib/results.js";

const usage = `usage: node dist/scripts/bench/fresh-memory.js [--gb 2.47] [--rounds 3] [--pause 60]
  --gb N       GB (1e9 bytes) of fresh memory each process writes (default 2.47: a 1B bf16 checkpoint's weights)
  --rounds N   rounds of (pause, first write, second write) (default 3)
  --pause S    seconds of idle before each round (default 60)`;

// One child: a fresh process allocates the block, writes every byte once, and prints the seconds.
const child = `
const bytes = Number(process.argv[1]);
const start = process.hrtime.bigint();
const block = Buffer.allocUnsafeSlow(bytes);
block.fill(1);
console.log(Number(process.hrtime.bigint() - start) / 1e9);`;

function writeFresh(bytes: number): number {
  return Number(execFileSync(process.execPath, ["-e", child, String(bytes)], { encoding: "utf8" }).trim());
}

const flags = parseFlags(process.argv.slice(2), usage, ["gb", "rounds", "pause"]);
const gb = numberFlag(flags, "gb", 2.47);
const rounds = numberFlag(flags, "rounds", 3);
const pause = numberFlag(flags, "pause", 60);
const bytes = Math.round(gb * 1e9);

console.log(`fresh memory: ${gb} GB written once by a fresh process; ${rounds} rounds, ${pause} s idle before each`);
console.log("round  after the pause s  right after s  ratio");
const results: { afterPause: number; rightAfter: number }[] = [];
for (let round = 1; round <= rounds; round++) {
  await sleep(pause * 1000);
  const afterPause = writeFresh(bytes);
  const rightAfter = writeFresh(bytes);
  results.push({ afterPause, rightAfter });
  console.log(`${String(round).padStart(5)}  ${afterPause.toFixed(2).padStart(17)}  ${rightAfter.toFixed(2).padStart(13)}  ${(afterPause / rightAfter).toFixed(2).padStart(5)}x`);
}
console.log(`results: ${writeResults("fresh-memory", { machine: machineFacts(), gb, pause, results })}`);
