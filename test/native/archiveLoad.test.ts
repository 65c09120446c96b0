/**
 * Later loads without the TorchScript module (load option deferModule, as TorchEngine loads on
 * the CPU): once the load-time check's verdict for an archive, build and kernel family is
 * remembered, with the checkpoint's cache shape, configure builds the native runtime from the
 * archive's records alone (ArchiveIndex, ArchiveWeights) and never loads the module; the tokens
 * are those of a load that did. Anything else (no verdict, a verdict remembered without the
 * cache shape, another archive, the TorchScript runtime asked for) loads the module as before.
 * TorchEngine does that with the addon built without libtorch (torchserve-native.node), so a
 * later load's process never loads libtorch.
 */
import { expect } from "chai";
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { TorchEngine } from "../../src/engine/TorchEngine.js";
import { loadAddon, loadNativeAddon } from "../../src/native/binding.js";
import type { RawLanguageModelSettings, RawRuntimeChoice } from "../../src/native/types.js";
import { repoRoot } from "../helpers/fixtures.js";
import { agreedSteps, greedy, nativeFixtureSet } from "../helpers/nativeSet.js";
import { rejection } from "../helpers/rejection.js";

const addon = loadAddon();
const WITHOUT_MODULE = /weights read from the archive without the TorchScript module/;

interface Served {
  choice: RawRuntimeChoice;
  tokens: number[];
  moduleBytes: number;
  /** What run("cache_shape", [1]) gave: its error's message, or "ran". */
  run?: string;
}

describe("later loads without the TorchScript module", function () {
  this.timeout(600000);
  let dir: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), "tsn-archive-load-"));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  /** Loads `file` deferring its module, configures it for the native set's checkpoint `name`, decodes its first case greedily. */
  async function serve(
    file: string,
    name: string,
    settings: Partial<RawLanguageModelSettings>,
    options: { layoutCache?: string; tryRun?: boolean } = {},
  ): Promise<Served> {
    const reference = nativeFixtureSet()[name]!;
    const model = await addon.loadLanguageModel(file, {
      device: "cpu",
      extraFiles: ["config.json"],
      threads: 1,
      deferModule: true,
      ...(options.layoutCache === undefined ? {} : { layoutCache: options.layoutCache }),
    });
    try {
      const modelConfig = JSON.parse(model.extraFiles["config.json"]!) as Record<string, unknown>;
      const choice = await model.configure({
        contextLength: 64,
        architecture: reference.architecture,
        dtype: reference.dtype,
        modelConfig,
        releaseModuleWeights: true,
        ...settings,
      });
      const [out] = await model.generate([greedy(reference.cases[0]!)], null).result;
      if (options.layoutCache !== undefined) await model.layoutWritten();
      const { module } = await model.weightBytes();
      const served: Served = { choice, tokens: Array.from(out!), moduleBytes: module };
      if (options.tryRun) {
        served.run = await model.run("cache_shape", [1]).then(
          () => "ran",
          (err: Error) => err.message,
        );
      }
      return served;
    } finally {
      await model.dispose();
    }
  }

  it("serves every native checkpoint's later load from its records, with the tokens of the load that checked it", async () => {
    const set = nativeFixtureSet();
    const cache = join(dir, "verdicts-all");
    for (const [name, reference] of Object.entries(set)) {
      const first = await serve(reference.file, name, { runtime: "auto", loadCheckCache: cache });
      expect(first.choice.runtime, `${name}: ${first.choice.note}`).to.equal("native");
      expect(first.choice.note, name).to.match(/load-time check ran/).and.not.match(WITHOUT_MODULE);
      const later = await serve(reference.file, name, { runtime: "auto", loadCheckCache: cache }, { tryRun: true });
      expect(later.choice.runtime, `${name}: ${later.choice.note}`).to.equal("native");
      expect(later.choice.note, name).to.match(WITHOUT_MODULE).and.match(/load-time check passed on .*remembered in /);
      expect(later.moduleBytes, name).to.equal(0);
      expect(later.tokens, name).to.deep.equal(first.tokens);
      agreedSteps(reference.cases[0]!, later.tokens, reference.quantization ? 0.05 : 0.02, name);
      expect(later.run, name).to.match(/no TorchScript module to call `cache_shape` on/);
    }
  });

  it("loads the module where the verdict lacks the cache shape, and remembers it for the next load", async () => {
    const [name, reference] = Object.entries(nativeFixtureSet()).find(([, r]) => r.architecture === "llama" && r.quantization)!;
    const cache = join(dir, "verdicts-old");
    const first = await serve(reference.file, name, { runtime: "native", loadCheckCache: cache });
    const [file] = readdirSync(cache);
    const path = join(cache, file!);
    const text = readFileSync(path, "utf8");
    expect(text).to.match(/^cache_shape( -?\d+){6}$/m);
    // As a verdict remembered by an earlier build reads.
    writeFileSync(path, text.replace(/^cache_shape.*\n/m, ""));
    const older = await serve(reference.file, name, { runtime: "native", loadCheckCache: cache });
    expect(older.choice.note).to.match(/load-time check passed on/).and.not.match(WITHOUT_MODULE);
    expect(readFileSync(path, "utf8")).to.equal(text);
    const next = await serve(reference.file, name, { runtime: "native", loadCheckCache: cache });
    expect(next.choice.note).to.match(WITHOUT_MODULE);
    expect(older.tokens).to.deep.equal(first.tokens);
    expect(next.tokens).to.deep.equal(first.tokens);
  });

  it("checks another archive again, and loads the module for the TorchScript runtime or a check asked for", async () => {
    const [name, reference] = Object.entries(nativeFixtureSet()).find(([, r]) => r.architecture === "llama" && r.dtype === "bfloat16")!;
    const cache = join(dir, "verdicts-other");
    const first = await serve(reference.file, name, { runtime: "auto", loadCheckCache: cache });
    // The same bytes under another name are the same archive; a file whose bytes differ is not.
    const copy = join(dir, "copy.pt");
    copyFileSync(reference.file, copy);
    expect((await serve(copy, name, { runtime: "auto", loadCheckCache: cache })).choice.note).to.match(WITHOUT_MODULE);
    const bytes = readFileSync(reference.file);
    const other = join(dir, "other.pt");
    const at = bytes.indexOf(Buffer.from('"rms_norm_eps"'));
    expect(at).to.be.above(0);
    bytes.write('"rms_norm_Eps"', at);
    writeFileSync(other, bytes);
    const changed = await serve(other, name, { runtime: "auto", loadCheckCache: cache });
    expect(changed.choice.note).to.match(/load-time check ran/).and.not.match(WITHOUT_MODULE);
    const script = await serve(reference.file, name, { runtime: "torchscript", loadCheckCache: cache }, { tryRun: true });
    expect(script.choice.runtime).to.equal("torchscript");
    expect(script.run).to.equal("ran");
    const again = await serve(reference.file, name, { runtime: "auto", loadCheckCache: cache, loadCheck: "always" });
    expect(again.choice.note).to.match(/load-time check ran/).and.not.match(WITHOUT_MODULE);
    for (const served of [changed, script, again]) agreedSteps(reference.cases[0]!, served.tokens, 0.02, name);
    expect(again.tokens).to.deep.equal(first.tokens);
  });

  it("maps a layout file an earlier load wrote, from the records alone", async () => {
    const [name, reference] = Object.entries(nativeFixtureSet()).find(([, r]) => r.quantization === "q8_0")!;
    const cache = join(dir, "verdicts-layout");
    const layouts = join(dir, "layouts");
    const first = await serve(reference.file, name, { runtime: "native", loadCheckCache: cache }, { layoutCache: layouts });
    for (let i = 0; i < 2; i++) {
      const later = await serve(reference.file, name, { runtime: "native", loadCheckCache: cache }, { layoutCache: layouts });
      expect(later.choice.note).to.match(WITHOUT_MODULE);
      // Q8_0 rows are laid out anew on every SIMD family (none on the baseline: no file).
      if (readdirSync(layouts).length > 0) expect(later.choice.note).to.match(/rows laid out for the \w+ kernels mapped from .*layout-/);
      expect(later.tokens).to.deep.equal(first.tokens);
    }
  });

  it("TorchEngine loads a checkpoint again without its module, and serves the same text", async () => {
    const [, reference] = Object.entries(nativeFixtureSet()).find(([, r]) => r.architecture === "llama" && r.quantization)!;
    const options = { threads: 1, loadCheckCache: join(dir, "verdicts-engine"), verifyChecksum: false } as const;
    const texts: string[] = [];
    const notes: string[] = [];
    for (let i = 0; i < 2; i++) {
      const engine = await TorchEngine.load(reference.file, options);
      try {
        notes.push(engine.runtimeNote ?? "");
        const [out] = await engine.generateBatch([{ prompt: "the", maxNewTokens: 6, temperature: 0, topK: 0 }]);
        texts.push(out!);
      } finally {
        await engine.dispose();
      }
    }
    expect(notes[0]).to.not.match(WITHOUT_MODULE);
    expect(notes[1]).to.match(WITHOUT_MODULE);
    expect(texts[1]).to.equal(texts[0]);
  });

  it("TorchEngine's later load runs in a process that never loads libtorch; TORCHSERVE_NATIVE_ADDON=off loads it", async () => {
    const [, reference] = Object.entries(nativeFixtureSet()).find(([, r]) => r.architecture === "llama" && r.quantization)!;
    const cache = join(dir, "verdicts-process");
    const script = `
      import { TorchEngine } from ${JSON.stringify(join(repoRoot, "dist", "src", "engine", "TorchEngine.js"))};
      import { readFileSync } from "node:fs";
      const engine = await TorchEngine.load(process.argv[1], { threads: 1, loadCheckCache: process.argv[2], verifyChecksum: false });
      const [text] = await engine.generateBatch([{ prompt: "the", maxNewTokens: 6, temperature: 0, topK: 0 }]);
      await engine.dispose();
      const maps = readFileSync("/proc/self/maps", "utf8");
      console.log(JSON.stringify({ text, note: engine.runtimeNote, libtorch: /libtorch_cpu\.so/.test(maps), phases: Object.keys(engine.loadPhases) }));`;
    const run = (env: NodeJS.ProcessEnv = {}) =>
      JSON.parse(
        execFileSync(process.execPath, ["--input-type=module", "-e", script, reference.file, cache], {
          env: { ...process.env, ...env },
          encoding: "utf8",
        }),
      ) as { text: string; note: string; libtorch: boolean; phases: string[] };
    const first = run();
    expect(first.libtorch, "the first load checks with libtorch").to.equal(true);
    expect(first.phases).to.include("libtorch addon");
    const later = run();
    expect(later.note).to.match(WITHOUT_MODULE);
    expect(later.libtorch, "a later load needs no libtorch").to.equal(false);
    expect(later.text).to.equal(first.text);
    const off = run({ TORCHSERVE_NATIVE_ADDON: "off" });
    expect(off.libtorch).to.equal(true);
    expect(off.note).to.match(WITHOUT_MODULE);
    expect(off.text).to.equal(first.text);
  });

  it("the addon without libtorch refuses, with ERR_NEEDS_LIBTORCH, what it cannot serve", async () => {
    const native = loadNativeAddon();
    expect(native, "build/Release/torchserve-native.node is built beside the libtorch addon").to.not.equal(undefined);
    const [name, reference] = Object.entries(nativeFixtureSet()).find(([, r]) => r.architecture === "gpt")!;
    expect((await rejection(native!.loadLanguageModel(join(dir, "absent.pt"), { device: "cpu" }))).code).to.equal("ERR_NEEDS_LIBTORCH");
    expect((await rejection(native!.loadLanguageModel(reference.file, { device: "cuda" }))).code).to.equal("ERR_NEEDS_LIBTORCH");
    const model = await native!.loadLanguageModel(reference.file, { device: "cpu", extraFiles: ["config.json"], threads: 1 });
    try {
      const settings = {
        contextLength: 64,
        architecture: reference.architecture,
        dtype: reference.dtype,
        modelConfig: JSON.parse(model.extraFiles["config.json"]!) as Record<string, unknown>,
        loadCheckCache: join(dir, "verdicts-none"),
      };
      // No verdict remembered for it: the libtorch addon must check it first.
      expect((await rejection(model.configure(settings))).code).to.equal("ERR_NEEDS_LIBTORCH");
      expect((await rejection(model.run("cache_shape", [1]))).code).to.equal("ERR_NEEDS_LIBTORCH");
      await serve(reference.file, name, { runtime: "native", loadCheckCache: settings.loadCheckCache });
      const choice = await model.configure(settings);
      expect(choice.note).to.match(WITHOUT_MODULE);
      const [out] = await model.generate([greedy(reference.cases[0]!)], null).result;
      agreedSteps(reference.cases[0]!, Array.from(out!), 0.02, name);
    } finally {
      await model.dispose();
    }
  });
});
