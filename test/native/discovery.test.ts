/**
 * libtorch discovery (scripts/torch-paths.mjs, the one both builds use): CMakeLists.txt and
 * binding.gyp's flags resolve the same libtorch, by default and with Torch_DIR, and both fail
 * with an actionable message when pointed at a folder without libtorch (the CMake configure
 * step alone; nothing is built).
 */
import { expect } from "chai";
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";

import { repoRoot } from "../helpers/fixtures.js";

interface FoundTorch {
  source: string;
  torchDir: string;
  include: string[];
  lib: string;
}

function torchPaths(what: string, env: NodeJS.ProcessEnv = process.env): string {
  const result = spawnSync(process.execPath, [join(repoRoot, "scripts", "torch-paths.mjs"), what], { env, encoding: "utf8" });
  expect(result.status, result.stderr).to.equal(0);
  return result.stdout.trim();
}

/** CMake's configure step in a scratch folder: its output and the Torch_DIR it cached. */
function cmakeConfigure(env: NodeJS.ProcessEnv = process.env): { stdout: string; torchDir: string | undefined } {
  const buildDir = mkdtempSync(join(tmpdir(), "tsn-cmake-"));
  try {
    const result = spawnSync("cmake", ["-S", repoRoot, "-B", buildDir], { env, encoding: "utf8" });
    expect(result.status, result.stderr).to.equal(0);
    const cache = readFileSync(join(buildDir, "CMakeCache.txt"), "utf8");
    return { stdout: result.stdout, torchDir: /^Torch_DIR:PATH=(.*)$/m.exec(cache)?.[1] };
  } finally {
    rmSync(buildDir, { recursive: true, force: true });
  }
}

describe("libtorch discovery", function () {
  this.timeout(60000);
  const nowhere = join(tmpdir(), "no-libtorch-here");

  it("both builds take the libtorch scripts/torch-paths.mjs finds", () => {
    const found = JSON.parse(torchPaths("--json")) as FoundTorch;
    const cmake = cmakeConfigure();
    expect(cmake.stdout).to.include(`from ${found.source}: ${found.torchDir}`);
    expect(cmake.torchDir).to.equal(found.torchDir);
    // binding.gyp's include folders and link flags
    expect(torchPaths("--include").split(" ")).to.deep.equal(found.include);
    expect(torchPaths("--ldflags")).to.include(`-L${found.lib} -Wl,-rpath,${found.lib} `);
  });

  it("a Torch_DIR in the environment is what both builds use", () => {
    const found = JSON.parse(torchPaths("--json")) as FoundTorch;
    const env = { ...process.env, Torch_DIR: found.torchDir };
    const named = JSON.parse(torchPaths("--json", env)) as FoundTorch;
    expect(named).to.deep.include({ source: "Torch_DIR", torchDir: found.torchDir, lib: found.lib });
    const cmake = cmakeConfigure(env);
    expect(cmake.stdout).to.include(`from Torch_DIR: ${found.torchDir}`);
    expect(cmake.torchDir).to.equal(found.torchDir);
  });

  it("a Python torch in pip's layout comes before the system (TORCHSERVE_PYTHON)", () => {
    // A stand-in interpreter answering the probe with a prefix laid out as a pip wheel's torch/.
    const prefix = mkdtempSync(join(tmpdir(), "tsn-pip-torch-"));
    try {
      for (const file of ["share/cmake/Torch/TorchConfig.cmake", "include/torch/script.h", "lib/libtorch.so"]) {
        mkdirSync(dirname(join(prefix, file)), { recursive: true });
        writeFileSync(join(prefix, file), "");
      }
      const python = join(prefix, "python");
      writeFileSync(python, `#!/bin/sh\necho ${join(prefix, "share", "cmake")}\n`, { mode: 0o755 });
      const found = JSON.parse(torchPaths("--json", { ...process.env, TORCHSERVE_PYTHON: python })) as FoundTorch;
      expect(found).to.deep.include({
        source: `Python torch (${python})`,
        torchDir: join(prefix, "share", "cmake", "Torch"),
        include: [join(prefix, "include"), join(prefix, "include", "torch", "csrc", "api", "include")],
        lib: join(prefix, "lib"),
      });
    } finally {
      rmSync(prefix, { recursive: true, force: true });
    }
  });

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
