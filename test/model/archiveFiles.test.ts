/**
 * readArchiveExtraFiles: a checkpoint's config and tokenizer files read from its zip without
 * the addon (TorchEngine.load builds the tokenizer from them while the addon loads). It must
 * give the addon's bytes exactly, and undefined, never a throw or a wrong file, for anything
 * else; preloadAddon must leave loadAddon working, and never reject.
 */
import { expect } from "chai";
import { spawnSync } from "node:child_process";
import { copyFileSync, mkdtempSync, readFileSync, rmSync, truncateSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { readArchiveExtraFiles } from "../../src/checkpoint/archiveFiles.js";
import { loadAddon, preloadAddon } from "../../src/native/binding.js";
import { fixture, repoRoot } from "../helpers/fixtures.js";

const names = ["config.json", "tokenizer.json", "tokenizer_config.json"] as const;

describe("readArchiveExtraFiles: a checkpoint's small files without the addon", function () {
  this.timeout(120000);
  let dir: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), "archive-files-"));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it("reads the same bytes as the addon, for the files the archive has", async () => {
    await preloadAddon();
    const addon = loadAddon();
    for (const file of ["tiny-gpt-hf.pt", "tiny-gpt.pt"]) {
      const ours = readArchiveExtraFiles(fixture(file), names);
      const model = await addon.loadModule(fixture(file), { device: "cpu", extraFiles: [...names] });
      try {
        expect(ours, file).to.not.equal(undefined);
        expect(Object.keys(ours!).sort(), file).to.deep.equal(Object.keys(model.extraFiles).sort());
        for (const name of Object.keys(model.extraFiles)) expect(ours![name], `${file} ${name}`).to.equal(model.extraFiles[name]);
      } finally {
        await model.dispose();
      }
    }
    expect(Object.keys(readArchiveExtraFiles(fixture("tiny-gpt-hf.pt"), names)!)).to.include("tokenizer.json");
  });

  it("reads deflated entries and zip64 local headers, and ignores another folder's files", () => {
    const zipped = join(dir, "made.pt");
    const made = spawnSync("/usr/bin/python3", ["-c", `
import zipfile, sys
with zipfile.ZipFile(sys.argv[1], "w") as z:
    z.writestr("model/data.pkl", b"x" * 100, compress_type=zipfile.ZIP_STORED)
    z.writestr("model/extra/config.json", '{"a": "' + "\\u00e9" * 5000 + '"}', compress_type=zipfile.ZIP_DEFLATED)
    z.writestr("other/extra/tokenizer.json", "not this one")
    with z.open("model/extra/tokenizer.json", "w", force_zip64=True) as f:
        f.write(b"{}")
`, zipped], { encoding: "utf8" });
    expect(made.status, made.stderr).to.equal(0);
    const files = readArchiveExtraFiles(zipped, names)!;
    expect(files["config.json"]).to.equal(`{"a": "${"é".repeat(5000)}"}`);
    expect(files["tokenizer.json"]).to.equal("{}");
    expect(files).to.not.have.property("tokenizer_config.json");
  });

  it("gives undefined, not a throw, for a missing, empty, foreign or truncated file", () => {
    expect(readArchiveExtraFiles(join(dir, "absent.pt"), names)).to.equal(undefined);
    writeFileSync(join(dir, "empty.pt"), "");
    expect(readArchiveExtraFiles(join(dir, "empty.pt"), names)).to.equal(undefined);
    writeFileSync(join(dir, "text.pt"), "not a zip archive at all ".repeat(100));
    expect(readArchiveExtraFiles(join(dir, "text.pt"), names)).to.equal(undefined);
    expect(readArchiveExtraFiles(join(repoRoot, "package.json"), names)).to.equal(undefined);
    // Cut anywhere, an archive has lost its directory (at its end): nothing is read from it.
    const cut = join(dir, "cut.pt");
    const length = readFileSync(fixture("tiny-gpt-hf.pt")).length;
    for (const fraction of [0.1, 0.5, 0.9, 0.999]) {
      copyFileSync(fixture("tiny-gpt-hf.pt"), cut);
      truncateSync(cut, Math.floor(length * fraction));
      expect(readArchiveExtraFiles(cut, names), `${fraction}`).to.equal(undefined);
    }
    // A directory entry that points past the end of the file (its local header cut off).
    const damaged = readFileSync(fixture("tiny-gpt-hf.pt"));
    const end = damaged.lastIndexOf(Buffer.from([0x50, 0x4b, 0x05, 0x06]));
    damaged.writeUInt32LE(damaged.length + 1000, end + 16);
    writeFileSync(cut, damaged);
    expect(readArchiveExtraFiles(cut, names)).to.equal(undefined);
  });
});

describe("preloadAddon", () => {
  it("resolves where the addon cannot load, leaving loadAddon to report it with its fixes", () => {
    // A process of its own: this one has loaded the addon already.
    const script = `
      const { preloadAddon, loadAddon } = await import(${JSON.stringify(join(repoRoot, "dist", "src", "native", "binding.js"))});
      await preloadAddon();
      try { loadAddon(); console.log("loaded"); } catch (err) { console.log(err.code); }`;
    const bad = join(mkdtempSync(join(tmpdir(), "bad-addon-")), "torchserve.node");
    writeFileSync(bad, "not an ELF file");
    const run = spawnSync(process.execPath, ["--input-type=module", "-e", script], {
      encoding: "utf8",
      env: { ...process.env, TORCHSERVE_ADDON: bad },
    });
    expect(run.status, run.stderr).to.equal(0);
    // The worker tried the override first and failed; loadAddon then went on to the real build.
    expect(run.stdout.trim()).to.equal("loaded");
  });
});
