/**
 * Loads without the TorchScript module (load option deferModule, as TorchEngine loads on the
 * CPU): configure builds the native runtime from the archive's records alone (ArchiveIndex,
 * ArchiveWeights) and never loads the module
 * - on a first load, where the archive carries the load-time check's reference logits from its
 *   export: the check runs against them, with the cache shape read from the module's attributes
 *   (the one its cache_shape method gives), and its verdict is remembered;
 * - on a later load, once the check's verdict for an archive, build and kernel family is
 *   remembered, with the checkpoint's cache shape.
 * The tokens are those of a load that did load the module. Anything else (no stored reference and
 * no verdict, a verdict remembered without the cache shape, a check that fails, the TorchScript
 * runtime asked for) loads the module as before. TorchEngine does that with the addon built
 * without libtorch (torchserve-native.node), so such a load's process never loads libtorch.
 */
import { expect } from "chai";
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { readArchiveEntryNames } from "../../src/checkpoint/archiveFiles.js";
import { TorchEngine } from "../../src/engine/TorchEngine.js";
import { loadAddon, loadNativeAddon } from "../../src/native/binding.js";
import type { RawLanguageModel, RawLanguageModelSettings, RawRuntimeChoice } from "../../src/native/types.js";
import { repoRoot } from "../helpers/fixtures.js";
import { agreedSteps, greedy, nativeFixtureSet, type ReferenceCheckpoint } from "../helpers/nativeSet.js";
import { rejection } from "../helpers/rejection.js";
import { resavedWithReference } from "../helpers/storedReference.js";

const addon = loadAddon();
const WITHOUT_MODULE = /weights read from the archive without the TorchScript module/;
const CHECKED_STORED = /load-time check ran \(against the reference logits stored at export\), verdict remembered in /;

interface Served {
  choice: RawRuntimeChoice;
  tokens: number[];
  moduleBytes: number;
  /** What run("cache_shape", [1]) gave: its error's message, or "ran". */
  run?: string;
}

describe("loads without the TorchScript module", function () {
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
    options: { layoutCache?: string; tryRun?: boolean; deferModule?: boolean } = {},
  ): Promise<Served> {
    const reference = nativeFixtureSet()[name]!;
    const model = await addon.loadLanguageModel(file, {
      device: "cpu",
      extraFiles: ["config.json"],
      threads: 1,
      deferModule: options.deferModule ?? true,
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

  /** configure()'s settings for `model`, a checkpoint of the native set, its verdicts in `cache`. */
  const settingsFor = (model: RawLanguageModel, reference: ReferenceCheckpoint, cache: string) => ({
    contextLength: 64,
    architecture: reference.architecture,
    dtype: reference.dtype,
    modelConfig: JSON.parse(model.extraFiles["config.json"]!) as Record<string, unknown>,
    loadCheckCache: cache,
  });

  /** The lines of the one verdict file in `cache`. */
  const verdictLines = (cache: string): string[] => {
    const files = readdirSync(cache);
    expect(files).to.have.length(1);
    return readFileSync(join(cache, files[0]!), "utf8").split("\n");
  };

  it("checks every native checkpoint's first load from its records against its stored reference, as a load of the module does", async () => {
    const set = nativeFixtureSet();
    for (const [name, reference] of Object.entries(set)) {
      const moduleCache = join(dir, `verdicts-module-${name}`);
      const recordsCache = join(dir, `verdicts-records-${name}`);
      // The GPT exports store no reference logits: their first load checks the module's forward.
      const stored = readArchiveEntryNames(reference.file)!.some((entry) => entry.endsWith("/extra/load_check.bin"));
      const module = await serve(reference.file, name, { runtime: "auto", loadCheckCache: moduleCache }, { deferModule: false });
      expect(module.choice.runtime, `${name}: ${module.choice.note}`).to.equal("native");
      expect(module.choice.note, name).to.match(stored ? CHECKED_STORED : /load-time check ran, verdict remembered/);
      expect(module.choice.note, name).to.not.match(WITHOUT_MODULE);
      const first = await serve(reference.file, name, { runtime: "auto", loadCheckCache: recordsCache });
      expect(first.choice.runtime, `${name}: ${first.choice.note}`).to.equal("native");
      if (stored) {
        expect(first.choice.note, name).to.match(CHECKED_STORED).and.match(WITHOUT_MODULE);
        expect(first.choice.phases, name).to.have.property("stored reference");
        expect(first.moduleBytes, name).to.equal(0);
      } else {
        expect(first.choice.note, name).to.match(/load-time check ran, verdict remembered/).and.not.match(WITHOUT_MODULE);
      }
      // The cache shape read from the module's attributes is the one its cache_shape(1) gave.
      const shapeLine = (lines: string[]) => lines.find((line) => line.startsWith("cache_shape "));
      expect(shapeLine(verdictLines(recordsCache)), name).to.match(/^cache_shape( \d+){6}$/);
      expect(shapeLine(verdictLines(recordsCache)), name).to.equal(shapeLine(verdictLines(moduleCache)));
      const later = await serve(reference.file, name, { runtime: "auto", loadCheckCache: recordsCache }, { tryRun: true });
      expect(later.choice.runtime, `${name}: ${later.choice.note}`).to.equal("native");
      expect(later.choice.note, name).to.match(WITHOUT_MODULE).and.match(/load-time check passed on .*remembered in /);
      expect(later.moduleBytes, name).to.equal(0);
      expect(first.tokens, name).to.deep.equal(module.tokens);
      expect(later.tokens, name).to.deep.equal(module.tokens);
      agreedSteps(reference.cases[0]!, later.tokens, reference.quantization ? 0.05 : 0.02, name);
      expect(later.run, name).to.match(/no TorchScript module to call `cache_shape` on/);
    }
  });

  it("checks without a verdict directory too; loads the module where the stored reference is absent or disagrees", async () => {
    const [name, reference] = Object.entries(nativeFixtureSet()).find(([, r]) => r.architecture === "llama" && r.quantization)!;
    const unremembered = await serve(reference.file, name, { runtime: "native" });
    expect(unremembered.choice.note).to.match(/load-time check ran \(against the reference logits stored at export\)/).and.match(WITHOUT_MODULE);
    const absent = resavedWithReference(reference.file, join(dir, "no-reference.pt"), "blob = None");
    const live = await serve(absent, name, { runtime: "native", loadCheckCache: join(dir, "verdicts-absent") });
    expect(live.choice.note).to.match(/load-time check ran, verdict remembered/).and.not.match(WITHOUT_MODULE);
    expect(live.tokens).to.deep.equal(unremembered.tokens);
    // The decode step's logits of row 1 moved far past the tolerance: the check fails on the
    // records, its verdict is remembered, and the module's load finds it: TorchScript serves.
    const wrong = resavedWithReference(reference.file, join(dir, "wrong-reference.pt"), "logits[3] += 100\nblob = blob[:split] + logits.tobytes()");
    const cache = join(dir, "verdicts-wrong");
    const refused = await rejection(serve(wrong, name, { runtime: "native", loadCheckCache: cache }));
    expect(refused.code).to.equal("ERR_CHECKPOINT_INTERFACE");
    expect(refused.message).to.match(/native forward disagrees with the checkpoint's .*load-time check failed on/);
    expect(verdictLines(cache).filter((line) => line.startsWith("verdict disagrees "))).to.have.length(1);
    const script = await serve(wrong, name, { runtime: "auto", loadCheckCache: cache });
    expect(script.choice.runtime).to.equal("torchscript");
    expect(script.choice.note).to.match(/load-time check failed on/);
    // A GPT export given the reference logits its export left out: its cache shape is read from
    // the GPT module's own attributes (n_head, where a llama module's is n_kv_head).
    const [gptName, gpt] = Object.entries(nativeFixtureSet()).find(([, r]) => r.architecture === "gpt")!;
    const gptStored = resavedWithReference(
      gpt.file,
      join(dir, "gpt-stored.pt"),
      "from torchserve_node import export_gpt\nblob = export_gpt.load_check_reference(module)",
    );
    const gptCaches = [join(dir, "verdicts-gpt-module"), join(dir, "verdicts-gpt-records")];
    const gptModule = await serve(gptStored, gptName, { runtime: "auto", loadCheckCache: gptCaches[0] }, { deferModule: false });
    const gptRecords = await serve(gptStored, gptName, { runtime: "auto", loadCheckCache: gptCaches[1] });
    expect(gptModule.choice.note).to.match(CHECKED_STORED).and.not.match(WITHOUT_MODULE);
    expect(gptRecords.choice.note).to.match(CHECKED_STORED).and.match(WITHOUT_MODULE);
    expect(gptRecords.tokens).to.deep.equal(gptModule.tokens);
    const [moduleShape, recordsShape] = gptCaches.map((c) => verdictLines(c).find((line) => line.startsWith("cache_shape ")));
    expect(recordsShape).to.equal(moduleShape).and.match(/^cache_shape /);
    // A module of another class than the architecture's: its attributes are not taken for a cache shape.
    const foreign = await serve(gpt.file, gptName, { runtime: "auto", architecture: "llama", loadCheckCache: join(dir, "verdicts-class") });
    expect(foreign.choice.runtime).to.equal("torchscript");
    expect(foreign.choice.note).to.not.match(WITHOUT_MODULE);
    const native = loadNativeAddon()!;
    const model = await native.loadLanguageModel(wrong, { device: "cpu", extraFiles: ["config.json"], threads: 1 });
    try {
      const settings = settingsFor(model, reference, join(dir, "verdicts-wrong-native"));
      expect((await rejection(model.configure(settings))).code).to.equal("ERR_NEEDS_LIBTORCH");
      expect(verdictLines(settings.loadCheckCache).filter((line) => line.startsWith("verdict disagrees "))).to.have.length(1);
    } finally {
      await model.dispose();
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
    expect(changed.choice.note).to.match(CHECKED_STORED);
    const script = await serve(reference.file, name, { runtime: "torchscript", loadCheckCache: cache }, { tryRun: true });
    expect(script.choice.runtime).to.equal("torchscript");
    expect(script.run).to.equal("ran");
    const again = await serve(reference.file, name, { runtime: "auto", loadCheckCache: cache, loadCheck: "always" });
    expect(again.choice.note).to.match(/load-time check ran/).and.not.match(WITHOUT_MODULE);
    for (const served of [changed, script, again]) agreedSteps(reference.cases[0]!, served.tokens, 0.02, name);
    expect(again.tokens).to.deep.equal(first.tokens);
  });

  it("on the baseline family: untimed loads go without the module; a timed one loads it, and its later loads go by the timing", async () => {
    const set = Object.entries(nativeFixtureSet());
    const [qName, quantized] = set.find(([, r]) => r.architecture === "llama" && r.quantization === "q8_0")!;
    const qCache = join(dir, "verdicts-baseline-quantized");
    for (const note of [/load-time check ran \(against the reference/, /load-time check passed on/]) {
      // The TorchScript forward of a quantized checkpoint dequantizes on every call: never timed.
      const served = await serve(quantized.file, qName, { runtime: "auto", kernels: "baseline", loadCheckCache: qCache });
      expect(served.choice.runtime).to.equal("native");
      expect(served.choice.note).to.match(/baseline kernels: not timed, as the TorchScript forward of a quantized/);
      expect(served.choice.note).to.match(note).and.match(WITHOUT_MODULE);
    }
    const [fName, float] = set.find(([, r]) => r.architecture === "llama" && r.dtype === "float32" && !r.quantization)!;
    const fCache = join(dir, "verdicts-baseline-float");
    const first = await serve(float.file, fName, { runtime: "auto", kernels: "baseline", loadCheckCache: fCache });
    expect(first.choice.note).to.match(/short workload took/).and.not.match(WITHOUT_MODULE);
    expect(first.choice.phases).to.have.property("timing");
    const later = await serve(float.file, fName, { runtime: "auto", kernels: "baseline", loadCheckCache: fCache });
    expect(later.choice.runtime).to.equal(first.choice.runtime);
    expect(later.choice.note).to.match(/timed at an earlier load, remembered with the verdict/);
    expect(later.choice.phases).to.not.have.property("timing");
    // Native chosen: served from the records; TorchScript chosen: its module is loaded.
    if (first.choice.runtime === "native") expect(later.choice.note).to.match(WITHOUT_MODULE);
    else expect(later.choice.note).to.not.match(WITHOUT_MODULE);
    expect(later.tokens).to.deep.equal(first.tokens);
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

  it("TorchEngine loads a checkpoint, and loads it again, without its module, and serves the same text", async () => {
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
    expect(notes[0]).to.match(CHECKED_STORED).and.match(WITHOUT_MODULE);
    expect(notes[1]).to.match(/load-time check passed on/).and.match(WITHOUT_MODULE);
    expect(texts[1]).to.equal(texts[0]);
  });

  it("TorchEngine's loads run in a process that never loads libtorch, but for a first load without a stored reference", async () => {
    const [name, reference] = Object.entries(nativeFixtureSet()).find(([, r]) => r.architecture === "llama" && r.quantization)!;
    const absent = resavedWithReference(reference.file, join(dir, "engine-no-reference.pt"), "blob = None");
    const script = `
      import { TorchEngine } from ${JSON.stringify(join(repoRoot, "dist", "src", "engine", "TorchEngine.js"))};
      import { readFileSync } from "node:fs";
      const engine = await TorchEngine.load(process.argv[1], { threads: 1, loadCheckCache: process.argv[2], verifyChecksum: false });
      const [text] = await engine.generateBatch([{ prompt: "the", maxNewTokens: 6, temperature: 0, topK: 0 }]);
      await engine.dispose();
      const maps = readFileSync("/proc/self/maps", "utf8");
      console.log(JSON.stringify({ text, note: engine.runtimeNote, libtorch: /libtorch_cpu\.so/.test(maps), phases: Object.keys(engine.loadPhases) }));`;
    const run = (file: string, cache: string, env: NodeJS.ProcessEnv = {}) =>
      JSON.parse(
        execFileSync(process.execPath, ["--input-type=module", "-e", script, file, cache], {
          env: { ...process.env, ...env },
          encoding: "utf8",
        }),
      ) as { text: string; note: string; libtorch: boolean; phases: string[] };
    const cache = join(dir, "verdicts-process");
    const first = run(reference.file, cache);
    expect(first.note).to.match(CHECKED_STORED).and.match(WITHOUT_MODULE);
    expect(first.libtorch, "a first load with a stored reference needs no libtorch").to.equal(false);
    expect(first.phases).to.not.include("libtorch addon");
    const later = run(reference.file, cache);
    expect(later.note).to.match(WITHOUT_MODULE).and.match(/load-time check passed on/);
    expect(later.libtorch, "a later load needs no libtorch").to.equal(false);
    expect(later.text).to.equal(first.text);
    const off = run(reference.file, join(dir, "verdicts-process-off"), { TORCHSERVE_NATIVE_ADDON: "off" });
    expect(off.libtorch).to.equal(true);
    expect(off.note).to.match(CHECKED_STORED).and.match(WITHOUT_MODULE);
    expect(off.text).to.equal(first.text);
    // Without a stored reference the first load runs the module's forward, with libtorch; the
    // verdict it remembers lets the next load go without.
    const liveCache = join(dir, "verdicts-process-live");
    const live = run(absent, liveCache);
    expect(live.libtorch, `${name}: the check runs the module's forward`).to.equal(true);
    expect(live.phases).to.include("libtorch addon");
    expect(live.note).to.match(/load-time check ran, verdict remembered/).and.not.match(WITHOUT_MODULE);
    const liveLater = run(absent, liveCache);
    expect(liveLater.libtorch).to.equal(false);
    expect(liveLater.text).to.equal(first.text);
  });

  it("the addon without libtorch refuses, with ERR_NEEDS_LIBTORCH, what it cannot serve", async () => {
    const native = loadNativeAddon();
    expect(native, "build/Release/torchserve-native.node is built beside the libtorch addon").to.not.equal(undefined);
    const [name, reference] = Object.entries(nativeFixtureSet()).find(([, r]) => r.architecture === "gpt")!;
    expect((await rejection(native!.loadLanguageModel(join(dir, "absent.pt"), { device: "cpu" }))).code).to.equal("ERR_NEEDS_LIBTORCH");
    expect((await rejection(native!.loadLanguageModel(reference.file, { device: "cuda" }))).code).to.equal("ERR_NEEDS_LIBTORCH");
    const unchecked = resavedWithReference(reference.file, join(dir, "gpt-no-reference.pt"), "blob = None");
    const model = await native!.loadLanguageModel(unchecked, { device: "cpu", extraFiles: ["config.json"], threads: 1 });
    try {
      const settings = settingsFor(model, reference, join(dir, "verdicts-none"));
      // No verdict remembered for it, and no stored reference: the libtorch addon must check it first.
      expect((await rejection(model.configure(settings))).code).to.equal("ERR_NEEDS_LIBTORCH");
      expect((await rejection(model.run("cache_shape", [1]))).code).to.equal("ERR_NEEDS_LIBTORCH");
      await serve(unchecked, name, { runtime: "native", loadCheckCache: settings.loadCheckCache });
      const choice = await model.configure(settings);
      expect(choice.note).to.match(WITHOUT_MODULE);
      const [out] = await model.generate([greedy(reference.cases[0]!)], null).result;
      agreedSteps(reference.cases[0]!, Array.from(out!), 0.02, name);
    } finally {
      await model.dispose();
    }
  });
});
