/**
 * libtorch discovery fails with an actionable message, in both build systems, when it is
 * pointed at a folder without libtorch (the CMake configure step alone; nothing is built).
 */
import { expect } from "chai";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { repoRoot } from "../helpers/fixtures.js";

describe("libtorch discovery", function () {
  this.timeout(60000);
  const nowhere = join(tmpdir(), "no-libtorch-here");

  it("CMakeLists.txt: a LIBTORCH without libtorch stops the configure with the fix", () => {
    const buildDir = mkdtempSync(join(tmpdir(), "tsn-cmake-"));
    try {
      const result = spawnSync("cmake", ["-S", repoRoot, "-B", buildDir], {
        env: { ...process.env, LIBTORCH: nowhere },
        encoding: "utf8",
      });
      expect(result.status).to.not.equal(0);
      expect(result.stderr).to.include("LIBTORCH/Torch_DIR is set");
      expect(result.stderr).to.include("TorchConfig.cmake");
    } finally {
      rmSync(buildDir, { recursive: true, force: true });
    }
  });

  it("CMakeLists.txt: the default search finds this machine's libtorch", () => {
    const buildDir = mkdtempSync(join(tmpdir(), "tsn-cmake-"));
    try {
      const result = spawnSync("cmake", ["-S", repoRoot, "-B", buildDir], { encoding: "utf8" });
      expect(result.stdout).to.match(/libtorch \S+ from (system|Python torch|LIBTORCH)/);
    } finally {
      rmSync(buildDir, { recursive: true, force: true });
    }
  });

  it("binding.gyp's discovery (scripts/torch-paths.mjs) says where it looked", () => {
    const result = spawnSync(process.execPath, [join(repoRoot, "scripts", "torch-paths.mjs"), "--include"], {
      env: { ...process.env, LIBTORCH: nowhere },
      encoding: "utf8",
    });
    expect(result.status).to.equal(1);
    expect(result.stderr).to.include("libtorch not found");
    const found = spawnSync(process.execPath, [join(repoRoot, "scripts", "torch-paths.mjs"), "--json"], { encoding: "utf8" });
    expect(JSON.parse(found.stdout)).to.have.property("lib");
  });
});
