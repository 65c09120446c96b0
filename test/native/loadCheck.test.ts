/**
 * The load-time check's remembered verdicts (configure's loadCheckCache / loadCheck): a
 * checkpoint is checked once per archive contents, build, kernel family, threads and config,
 * and the check keeps its power: a config.json the checkpoint's forward does not follow
 * (rms_norm_eps, which the native runtime reads from it and the TorchScript forward does not)
 * is refused whether or not a pass was remembered for the true config, and an archive that
 * differs by one byte is checked again. A quantized checkpoint's wider tolerance (its activations
 * are rounded to 8 bits) still refuses the wrong config. The reference logits an export stores
 * stand in for the checkpoint's forward at load, and a wrong copy of them fails the check.
 */
import { expect } from "chai";
import { spawnSync } from "node:child_process";
import { copyFileSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { loadAddon } from "../../src/native/binding.js";
import type { RawLanguageModelSettings, RawRuntimeChoice } from "../../src/native/types.js";
import { repoRoot } from "../helpers/fixtures.js";
import { nativeFixtureSet } from "../helpers/nativeSet.js";
import { rejection } from "../helpers/rejection.js";
import { resavedWithReference } from "../helpers/storedReference.js";

const addon = loadAddon();
const prompt = Int32Array.from([3, 17, 42, 5, 9]);

describe("load-time check: remembered verdicts", function () {
  this.timeout(300000);
  let dir: string;
  let checkpoint: string;

  before(function () {
    dir = mkdtempSync(join(tmpdir(), "tsn-load-check-"));
    const made = spawnSync(
      "/usr/bin/python3",
      [join(repoRoot, "test", "model", "python", "make_hf_fixture.py"), dir, "--only", "llama-gqa", "--export"],
      { encoding: "utf8" },
    );
    expect(made.status, made.stderr).to.equal(0);
    checkpoint = join(dir, "llama-gqa.pt");
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  /** Loads `file`, configures it with `settings` (config.json changed by `config`), greedy-decodes 6 tokens. */
  async function load(
    file: string,
    settings: Partial<RawLanguageModelSettings>,
    config: Record<string, unknown> = {},
  ): Promise<{ choice: RawRuntimeChoice; tokens: number[] }> {
    const model = await addon.loadLanguageModel(file, { device: "cpu", extraFiles: ["config.json"], threads: 1 });
    try {
      const modelConfig = { ...(JSON.parse(model.extraFiles["config.json"]!) as Record<string, unknown>), ...config };
      const choice = await model.configure({
        contextLength: 64,
        architecture: "llama",
        dtype: "float32",
        modelConfig,
        ...settings,
      });
      const [out] = await model.generate([{ tokens: prompt, maxNewTokens: 6, sampling: { temperature: 0, topK: 0, seed: -1 } }], null)
        .result;
      return { choice, tokens: Array.from(out!) };
    } finally {
      await model.dispose();
    }
  }

  it("checks once: a later load of the same archive finds the verdict and serves the same tokens", async () => {
    const cache = join(dir, "cache-once");
    const first = await load(checkpoint, { runtime: "native", loadCheckCache: cache });
    expect(first.choice.note).to.match(/load-time check ran \(against the reference logits stored at export\), verdict remembered in /);
    expect(readdirSync(cache)).to.have.length(1);
    // The verdict follows the archive's contents, not its path.
    const copy = join(dir, "copy-of-llama-gqa.pt");
    copyFileSync(checkpoint, copy);
    for (const file of [checkpoint, copy]) {
      const later = await load(file, { runtime: "auto", loadCheckCache: cache });
      expect(later.choice.runtime).to.equal("native");
      expect(later.choice.note).to.match(/load-time check passed on \d{4}-\d\d-\d\dT[\d:]+Z .*remembered in /);
      expect(later.tokens).to.deep.equal(first.tokens);
    }
    const again = await load(checkpoint, { runtime: "native", loadCheckCache: cache, loadCheck: "always" });
    expect(again.choice.note).to.match(/load-time check ran/);
    expect(readdirSync(cache)).to.have.length(1);
  });

  it("times the runtimes once on the baseline family: later loads take the remembered timing, other TorchScript settings time again", async () => {
    const cache = join(dir, "cache-timing");
    const settings = { runtime: "auto", kernels: "baseline", loadCheckCache: cache } as const;
    // Both runs timed, or the TorchScript one stopped once it could no longer be chosen.
    const workload =
      /a short workload took [\d.]+ ms native \(baseline kernels\)(, [\d.]+ ms TorchScript|; TorchScript was stopped [\d.]+ ms into a run of it, once it could no longer be chosen)/;
    const first = await load(checkpoint, settings);
    expect(first.choice.note).to.match(workload);
    expect(first.choice.phases).to.have.property("timing");
    // A TorchScript forward the timing chose has run its first calls there: no warm-up after.
    if (first.choice.runtime === "torchscript") expect(first.choice.phases).to.not.have.property("warm-up");
    const [figures, how] = workload.exec(first.choice.note!)!;
    if (how!.includes("stopped")) expect(first.choice.runtime).to.equal("native");
    const [file] = readdirSync(cache);
    expect(readFileSync(join(cache, file!), "utf8")).to.match(/^timing compute=auto,dequantize=auto,optimize=auto [\d.e-]+ [\d.e-]+( stopped)?$/m);
    const checked = /^verdict agrees \S+ (\S+)$/m;
    expect(checked.exec(readFileSync(join(cache, file!), "utf8"))).to.not.equal(null);

    const later = await load(checkpoint, settings);
    expect(later.choice.phases).to.not.have.property("timing");
    expect(later.choice.runtime).to.equal(first.choice.runtime);
    expect(later.choice.note).to.include(figures);
    expect(later.choice.note).to.include("remembered with the verdict");
    expect(later.tokens).to.deep.equal(first.tokens);

    // Another TorchScript setting is another timing; it replaces the first in the same file,
    // and the check's date stays that of the check.
    const dated = readFileSync(join(cache, file!), "utf8").replace(checked, (line, date: string) => line.replace(date, "2020-01-02T03:04:05Z"));
    writeFileSync(join(cache, file!), dated);
    const other = await load(checkpoint, { ...settings, torchscriptOptimize: "off" });
    expect(other.choice.phases).to.have.property("timing");
    expect(readdirSync(cache)).to.have.length(1);
    expect(readFileSync(join(cache, file!), "utf8")).to.match(/^timing compute=auto,dequantize=auto,optimize=off /m);
    expect(checked.exec(readFileSync(join(cache, file!), "utf8"))![1]).to.equal("2020-01-02T03:04:05Z");

    // A remembered timing in which TorchScript was clearly faster serves TorchScript, untimed
    // and without packing the native weights.
    const text = readFileSync(join(cache, file!), "utf8");
    writeFileSync(join(cache, file!), text.replace(/^timing (\S+) .*$/m, "timing $1 0.05 0.01"));
    const scripted = await load(checkpoint, { ...settings, torchscriptOptimize: "off" });
    expect(scripted.choice.runtime).to.equal("torchscript");
    expect(scripted.choice.note).to.match(/^TorchScript runtime: a short workload took 50\.0 ms native \(baseline kernels\), 10\.0 ms TorchScript \(timed at an earlier load/);
    expect(scripted.choice.phases).to.not.have.property("timing");
    expect(scripted.choice.phases).to.not.have.property("pack");
    expect(scripted.choice.phases).to.have.property("warm-up"); // chosen untimed: its first calls run at configure
    expect(scripted.tokens).to.have.length(6);
    // A remembered timing whose TorchScript run was stopped serves native and says so.
    writeFileSync(join(cache, file!), text.replace(/^timing (\S+) .*$/m, "timing $1 0.01 0.009 stopped"));
    const stopped = await load(checkpoint, { ...settings, torchscriptOptimize: "off" });
    expect(stopped.choice.runtime).to.equal("native");
    expect(stopped.choice.note).to.match(/^native runtime: a short workload took 10\.0 ms native \(baseline kernels\); TorchScript was stopped 9\.0 ms into a run of it, once it could no longer be chosen \(timed at an earlier load/);
    expect(stopped.choice.phases).to.not.have.property("timing");
    // A timing line that does not parse is timed again; the verdict stands.
    writeFileSync(join(cache, file!), text.replace(/^timing .*$/m, "timing garbled"));
    const garbled = await load(checkpoint, settings);
    expect(garbled.choice.note).to.match(/load-time check passed on /);
    expect(garbled.choice.phases).to.have.property("timing");
  });

  it("refuses a config.json the checkpoint's forward does not follow, though a pass for the true one is remembered", async () => {
    const cache = join(dir, "cache-refuse");
    expect((await load(checkpoint, { runtime: "native", loadCheckCache: cache })).choice.runtime).to.equal("native");
    const wrong = { rms_norm_eps: 100 };
    const native = await rejection(load(checkpoint, { runtime: "native", loadCheckCache: cache }, wrong));
    expect(native.code).to.equal("ERR_CHECKPOINT_INTERFACE");
    expect(native.message).to.match(/native forward disagrees with the checkpoint's .*load-time check ran/);
    // The failure was remembered too: "auto" goes to the TorchScript runtime without checking again.
    const auto = await load(checkpoint, { runtime: "auto", loadCheckCache: cache }, wrong);
    expect(auto.choice.runtime).to.equal("torchscript");
    expect(auto.choice.note).to.match(/disagrees.*load-time check failed on .*remembered in /);
    // Without the cache the check runs and refuses just the same.
    const unremembered = await rejection(load(checkpoint, { runtime: "native" }, wrong));
    expect(unremembered.message).to.match(/native forward disagrees/);
    expect(readdirSync(cache)).to.have.length(2);
  });

  it("keeps its power on a quantized checkpoint, whose tolerance allows for 8-bit activations", async () => {
    // The native set's Q4_K_M checkpoint (Q4_K and Q6_K matrices, Q8_K activations; made once per process).
    const { file: quantized, dtype } = nativeFixtureSet()["llama-wide-q4_k_m"]!;
    const passed = await load(quantized, { runtime: "native", dtype });
    expect(passed.choice.runtime).to.equal("native");
    expect(passed.tokens).to.have.length(6);
    const refused = await rejection(load(quantized, { runtime: "native", dtype }, { rms_norm_eps: 100 }));
    expect(refused.code).to.equal("ERR_CHECKPOINT_INTERFACE");
    const found = /native forward disagrees with the checkpoint's \(relative logit difference ([\d.]+)/.exec(refused.message);
    expect(found, refused.message).to.not.equal(null);
    const difference = Number(found![1]);
    expect(difference, "a wrong config moves logits far past the quantized tolerance").to.be.above(0.3);
  });

  it("serves a quantized checkpoint natively on the baseline family untimed, unless TorchScript would dequantize once", async () => {
    const { file: quantized, dtype } = nativeFixtureSet()["llama-wide-q4_k_m"]!;
    const cache = join(dir, "cache-quantized-timing");
    const settings = { runtime: "auto", kernels: "baseline", dtype, loadCheckCache: cache } as const;
    const untimed = await load(quantized, settings);
    expect(untimed.choice.runtime).to.equal("native");
    expect(untimed.choice.kernels).to.equal("baseline");
    expect(untimed.choice.note).to.match(/^native runtime, baseline kernels: not timed, as the TorchScript forward of a quantized checkpoint dequantizes every weight on every call/);
    expect(untimed.choice.phases).to.not.have.property("timing");
    const [file] = readdirSync(cache);
    expect(readFileSync(join(cache, file!), "utf8")).to.not.match(/^timing /m);
    // Dequantized once, TorchScript holds float32 weights and may be faster: the runtimes are timed.
    const once = await load(quantized, { ...settings, torchscriptDequantize: "once" });
    expect(once.choice.phases).to.have.property("timing");
    expect(once.choice.note).to.match(/a short workload took [\d.]+ ms native \(baseline kernels\)/);
    expect(readFileSync(join(cache, file!), "utf8")).to.match(/^timing compute=auto,dequantize=once,optimize=auto /m);
    // On a SIMD family nothing is timed, dequantized once or not.
    const simd = addon.kernelFamilies.find((family) => family !== "baseline");
    if (simd !== undefined) {
      const fast = await load(quantized, { ...settings, kernels: simd, torchscriptDequantize: "once" });
      expect(fast.choice.runtime).to.equal("native");
      expect(fast.choice.phases).to.not.have.property("timing");
    }
    expect(untimed.tokens).to.have.length(6);
  });

  it("serves a 16-bit checkpoint natively on the baseline family untimed where TorchScript would widen it to float32", async () => {
    const cache = join(dir, "cache-widened-timing");
    // float16 has no CPU matmul in torch 1.13: TorchScript computes it in float32 on every CPU.
    const fp16 = nativeFixtureSet()["llama-gqa-fp16"]!;
    const widened = await load(fp16.file, { runtime: "auto", kernels: "baseline", dtype: fp16.dtype, loadCheckCache: cache });
    expect(widened.choice.runtime).to.equal("native");
    expect(widened.choice.note).to.match(
      /^native runtime, baseline kernels: not timed, as the TorchScript forward would compute this 16-bit checkpoint in float32 on this CPU, holding a float32 copy of its weights/,
    );
    expect(widened.choice.phases).to.not.have.property("timing");
    // bf16 asked to compute in float32 likewise; left in its own dtype it is timed.
    const bf16 = nativeFixtureSet()["llama-gqa-bf16"]!;
    const settings = { runtime: "auto", kernels: "baseline", dtype: bf16.dtype, loadCheckCache: cache } as const;
    const asked = await load(bf16.file, { ...settings, torchscriptCompute: "float32" });
    expect(asked.choice.runtime).to.equal("native");
    expect(asked.choice.phases).to.not.have.property("timing");
    const own = await load(bf16.file, { ...settings, torchscriptCompute: "checkpoint" });
    expect(own.choice.phases).to.have.property("timing");
    expect(own.choice.note).to.match(/a short workload took [\d.]+ ms native \(baseline kernels\)/);
  });

  it("checks an archive that differs by one byte (its config.json) again", async () => {
    const cache = join(dir, "cache-edit");
    await load(checkpoint, { runtime: "native", loadCheckCache: cache });
    const edited = join(dir, "edited.pt");
    const code = `
import sys, torch
files = {"config.json": ""}
module = torch.jit.load(sys.argv[1], _extra_files=files)
torch.jit.save(module, sys.argv[2], _extra_files={"config.json": bytes(files["config.json"]) + b" "})
`;
    const made = spawnSync("/usr/bin/python3", ["-c", code, checkpoint, edited], { encoding: "utf8" });
    expect(made.status, made.stderr).to.equal(0);
    const later = await load(edited, { runtime: "native", loadCheckCache: cache });
    expect(later.choice.note).to.match(/load-time check ran, verdict remembered/);
  });

  /** `checkpoint` saved again by Python with its load-time reference logits replaced by `edit`'s (None: dropped). */
  const resaved = (name: string, edit: string): string => resavedWithReference(checkpoint, join(dir, name), edit);

  it("takes the reference logits the export stored, and checks against the forward where they are absent or another probe's", async () => {
    const stored = await load(checkpoint, { runtime: "native" });
    expect(stored.choice.note).to.match(/load-time check ran \(against the reference logits stored at export\)/);
    expect(stored.choice.phases).to.have.property("stored reference");
    expect(stored.choice.phases).to.not.have.property("reference forward");
    const absent = await load(resaved("no-reference.pt", "blob = None"), { runtime: "native" });
    const otherProbe = await load(resaved("other-probe.pt", "tokens[0] += 1\nblob = blob[:40] + tokens.tobytes() + logits.tobytes()"), {
      runtime: "native",
    });
    for (const live of [absent, otherProbe]) {
      expect(live.choice.runtime).to.equal("native");
      expect(live.choice.note).to.match(/load-time check ran/).and.not.match(/stored at export/);
      expect(live.choice.phases).to.have.property("reference forward");
      expect(live.tokens).to.deep.equal(stored.tokens);
    }
  });

  it("refuses the native runtime where the stored reference logits disagree with its forward", async () => {
    // The decode step's logits of row 1 moved by 1 (relative to logits of this fixture's size: far past 1e-3).
    const wrong = resaved("wrong-reference.pt", "logits[3] += 1\nblob = blob[:split] + logits.tobytes()");
    const native = await rejection(load(wrong, { runtime: "native" }));
    expect(native.code).to.equal("ERR_CHECKPOINT_INTERFACE");
    expect(native.message).to.match(/native forward disagrees with the checkpoint's .*stored at export/);
    const auto = await load(wrong, { runtime: "auto" });
    expect(auto.choice.runtime).to.equal("torchscript");
    // One NaN among the reference logits is a disagreement, not a difference to pass over.
    const nan = resaved("nan-reference.pt", "logits[1][0] = float('nan')\nblob = blob[:split] + logits.tobytes()");
    const refused = await rejection(load(nan, { runtime: "native" }));
    expect(refused.message).to.match(/native forward disagrees with the checkpoint's \(relative logit difference inf/);
  });

  it("still checks, and serves, where the verdict cannot be written; rejects an unknown loadCheck", async () => {
    const blocker = join(dir, "not-a-directory");
    writeFileSync(blocker, "");
    const { choice } = await load(checkpoint, { runtime: "native", loadCheckCache: join(blocker, "cache") });
    expect(choice.runtime).to.equal("native");
    expect(choice.note).to.match(/its verdict could not be remembered: cannot create/);
    const bad = await rejection(load(checkpoint, { loadCheck: "sometimes" as "always" }));
    expect(bad.code).to.equal("ERR_INVALID_ARGUMENT");
    expect(bad.message).to.match(/loadCheck must be "cached" or "always"/);
  });
});
