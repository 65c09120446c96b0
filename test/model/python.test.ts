/**
 * The Python model tooling's own unit tests (test/model/python/test_*.py: cached forward
 * against the plain forward, mixed batches, nanoGPT and GPT-2 export mappings, fixture
 * determinism), run with Debian's python3-torch as part of the suite.
 */
import { expect } from "chai";
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";

import { repoRoot } from "../helpers/fixtures.js";

describe("Python model tooling", function () {
  this.timeout(180000);

  it("passes its unittest suite", () => {
    const python = "/usr/bin/python3";
    expect(existsSync(python), "run `bash scripts/setup.sh --test` (installs python3-torch)").to.equal(true);
    const result = spawnSync(python, ["-m", "unittest", "discover", "-s", join(repoRoot, "test", "model", "python"), "-p", "test_*.py"], {
      cwd: repoRoot,
      env: { ...process.env, OMP_WAIT_POLICY: "PASSIVE" },
      encoding: "utf8",
    });
    const report = `${result.stdout}\n${result.stderr}`;
    expect(result.status, report).to.equal(0);
    expect(report).to.match(/Ran \d+ tests/);
    expect(report).to.match(/\nOK\b/);
  });
});
