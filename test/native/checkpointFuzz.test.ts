/**
 * Damaged checkpoints: seeded mutations of the demo model (bytes flipped in the zip's central
 * directory or anywhere, a chunk cut out) loaded through the addon, in a child process so a
 * crash fails the test rather than ending the suite. Each must load (and then configure and
 * generate, or refuse with a coded error) or be refused with one of the addon's error codes;
 * never a crash or an uncoded error. The demo model's weight records are 1 MiB, so its loads
 * take the path that reads large records after the archive is parsed (runtime/Checkpoint.cc).
 */
import { expect } from "chai";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { prng } from "../../scripts/fuzz/cases.js";
import { loadAddon } from "../../src/native/binding.js";
import { repoRoot } from "../helpers/fixtures.js";

const MUTANTS = 36;

// Loads each file given; prints {file: outcome}, the outcome "served" or an error's code
// ("UNCODED: message" for an error without one).
const loader = `
import { loadAddon } from ${JSON.stringify(join(repoRoot, "dist", "src", "native", "binding.js"))};
const addon = loadAddon();
const outcomes = {};
const code = (e) => e && e.code ? e.code : "UNCODED: " + String(e && e.message).slice(0, 200);
for (const file of process.argv.slice(1)) {
  try {
    const model = await addon.loadLanguageModel(file, { device: "cpu", threads: 1, extraFiles: ["config.json"] });
    try {
      const config = JSON.parse(model.extraFiles["config.json"] ?? "{}");
      await model.configure({ contextLength: 64, eosTokenIds: [], runtime: "auto", architecture: "gpt", dtype: "float32", modelConfig: config });
      await model.generate([{ tokens: Int32Array.from([84, 104, 101]), maxNewTokens: 4, sampling: { temperature: 0, topK: 0, seed: -1 } }], null).result;
      outcomes[file] = "served";
    } catch (e) {
      outcomes[file] = code(e);
    } finally {
      await model.dispose();
    }
  } catch (e) {
    outcomes[file] = code(e);
  }
}
console.log(JSON.stringify(outcomes));
`;

describe("damaged checkpoints are refused with a coded error or served, never a crash", function () {
  this.timeout(300000);

  it(`${MUTANTS} seeded mutations of the demo model`, () => {
    const original = readFileSync(join(repoRoot, "models", "brown-gpt.pt"));
    const dir = mkdtempSync(join(tmpdir(), "tsn-checkpoint-fuzz-"));
    try {
      const random = prng(20261127);
      const pick = (n: number) => Math.floor(random() * n);
      const files: string[] = [];
      for (let i = 0; i < MUTANTS; i++) {
        let bytes = Buffer.from(original);
        if (i % 3 === 0) {
          // The central directory and end records: the last 20,000 bytes.
          for (let f = 1 + pick(8); f > 0; f--) bytes[bytes.length - 1 - pick(20000)] = pick(256);
        } else if (i % 3 === 1) {
          for (let f = 1 + pick(16); f > 0; f--) bytes[pick(bytes.length)] = pick(256);
        } else {
          const at = pick(bytes.length);
          bytes = Buffer.concat([bytes.subarray(0, at), bytes.subarray(at + 1 + pick(4096))]);
        }
        const file = join(dir, `mutant-${i}.pt`);
        writeFileSync(file, bytes);
        files.push(file);
      }
      const run = spawnSync(process.execPath, ["--input-type=module", "-e", loader, ...files], { encoding: "utf8", timeout: 240000 });
      expect(run.signal, run.stderr).to.equal(null);
      expect(run.status, run.stderr).to.equal(0);
      const outcomes = JSON.parse(run.stdout) as Record<string, string>;
      expect(Object.keys(outcomes)).to.have.length(MUTANTS);
      const known = new Set(loadAddon().errorCodes);
      for (const [file, outcome] of Object.entries(outcomes)) {
        expect(outcome === "served" || known.has(outcome), `${file}: ${outcome}`).to.equal(true);
      }
      // Both ways out were taken: the mutations reach past the zip's checks too.
      const values = Object.values(outcomes);
      expect(values).to.include("served");
      expect(values).to.include("ERR_CHECKPOINT_INVALID");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
