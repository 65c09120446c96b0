/**
 * Layout files (runtime/LayoutCache.h): the quantized rows a kernel family lays out anew at
 * load (Q8_0 on every SIMD family, Q4_K on avx2 and Intel's AVX-512) are written by the first load, in the
 * background, to a file in the `layoutCache` directory, and a later load of the same archive on
 * the same build and family maps them from it instead of reading and rewriting them. What must
 * hold: the later load serves the same greedy tokens as a load without the file (the same
 * kernels read the same bytes, on this machine, so the tokens are equal, not close); a file that
 * is damaged, cut short or of another archive is never served from; a directory that cannot be
 * written only costs the file. Two random-weight Llamas, Q8_0 and Q4_K_M, whose MLP matrices are
 * records of more than 1 MiB (mapped from the checkpoint), on avx2 and on the CPU's own family.
 */
import { expect } from "chai";
import { spawnSync } from "node:child_process";
import { closeSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, openSync, readdirSync, rmSync, statSync, statfsSync, truncateSync, writeFileSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { TorchEngine } from "../../src/engine/TorchEngine.js";
import { loadAddon } from "../../src/native/binding.js";
import type { KernelFamilyCap, RawLanguageModel, RawLayoutWrite, RawRuntimeChoice } from "../../src/native/types.js";
import { regroupsQ4K, repoRoot } from "../helpers/fixtures.js";

const addon = loadAddon();

// argv: file, scheme. Width 512, SwiGLU 4096: Q8_0 MLP records 2.2 MB, Q4_K ones 1.2 MB.
const makeModel = `
import sys, torch
sys.path.insert(0, sys.argv[3]); sys.path.insert(0, sys.argv[4])
import make_bench_models as m
from torchserve_node import export_gpt
from torchserve_node.llama import INTERFACE_VERSION, LlamaConfig, quantize_llama
torch.manual_seed(0)
model, cfg = m.random_llama(LlamaConfig(vocab_size=4096, block_size=128, n_layer=2, n_head=4, n_kv_head=2, n_embd=512,
                                        intermediate_size=4096, rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False))
cfg = dict(cfg, format="torchserve-node/causal-lm", interface_version=INTERFACE_VERSION, tokenizer=m.BYTE_TOKENIZER)
quantize_llama(model.float().eval(), sys.argv[2])
export_gpt.save_module(model, sys.argv[1], dict(cfg, dtype="float32", quantization=sys.argv[2]))
`;

interface Served {
  choice: RawRuntimeChoice;
  tokens: number[];
  written: RawLayoutWrite | null;
  runtimeBytes: number;
}

/** Configures the native runtime as TorchEngine does (the module's weights released, so the stepper takes its rows over). */
function configureNative(model: RawLanguageModel, kernels: KernelFamilyCap): Promise<RawRuntimeChoice> {
  const config = JSON.parse(model.extraFiles["config.json"]!) as Record<string, unknown>;
  return model.configure({
    contextLength: 64, eosTokenIds: [], runtime: "native", architecture: String(config.architecture), dtype: "float32",
    modelConfig: config, kernels, releaseModuleWeights: true,
  });
}

/**
 * Loads `file`, configures the native runtime on `kernels`, waits for any layout write, then takes
 * 12 greedy tokens. No request runs between the configure and the end of the write, so the rows
 * are still as they lay in the checkpoint when it ends (`pending.adopted` false); the request
 * takes the file's runs in their place first (`written.adopted`).
 */
async function serve(file: string, kernels: KernelFamilyCap, layoutCache: string | undefined, dispose = true): Promise<Served> {
  const model = await addon.loadLanguageModel(file, {
    device: "cpu",
    extraFiles: ["config.json"],
    threads: 2,
    kernels,
    ...(layoutCache === undefined ? {} : { layoutCache }),
  });
  try {
    const choice = await configureNative(model, kernels);
    const pending = await model.layoutWritten();
    if (pending !== null) expect(pending.adopted, "taken before any request").to.equal(false);
    const [out] = await model.generate(
      [{ tokens: Int32Array.from([1, 2, 3, 4]), maxNewTokens: 12, sampling: { temperature: 0, topK: 0, seed: -1 } }],
      null,
    ).result;
    const { runtime } = await model.weightBytes();
    const written = await model.layoutWritten();
    if (written !== null) expect(written.adopted, written.error).to.equal(written.error === "");
    return { choice, tokens: Array.from(out!), written, runtimeBytes: runtime };
  } finally {
    if (dispose) await model.dispose();
  }
}

const layoutFiles = (dir: string): string[] => (existsSync(dir) ? readdirSync(dir).filter((name) => name.startsWith("layout-")) : []);

describe("layout files: the rows a kernel family lays out anew, written once and mapped by later loads", function () {
  this.timeout(300000);
  const dir = mkdtempSync(join(tmpdir(), "tsn-layout-"));
  const files: Record<string, string> = {};

  before(function () {
    // The writer keeps 10% of the disk (and 1 GiB) free; on a disk fuller than that every file
    // here would be refused (by design), so there is nothing of this to test.
    const fs = statfsSync(dir);
    if (fs.bavail * fs.bsize < Math.max(0.1 * fs.blocks * fs.bsize, 2 ** 30) + 2 ** 28) {
      console.log(`    (skipped: ${dir}'s disk has less than 10% free, where no layout file is written)`);
      this.skip();
    }
    for (const scheme of ["q8_0", "q4_k_m"]) {
      files[scheme] = join(dir, `${scheme}.pt`);
      const run = spawnSync("/usr/bin/python3", ["-c", makeModel, files[scheme]!, scheme, join(repoRoot, "scripts", "bench"), join(repoRoot, "python")], {
        encoding: "utf8",
      });
      expect(run.status, run.stderr).to.equal(0);
    }
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  for (const scheme of ["q8_0", "q4_k_m"]) {
    for (const kernels of ["avx2", "auto"] as const satisfies readonly KernelFamilyCap[]) {
      it(`${scheme}, kernels ${kernels}: the first load writes the file, a later one maps it and serves the same tokens`, async () => {
        const cache = mkdtempSync(join(dir, "cache-"));
        const plain = await serve(files[scheme]!, kernels, undefined);
        expect(plain.written).to.equal(null);
        const first = await serve(files[scheme]!, kernels, cache);
        const family = first.choice.kernels;
        // The families that lay these rows out anew (FamilyRegroups): Q8_0 on every SIMD one, Q4_K
        // on avx2 and Intel's AVX-512 ones.
        const rewrites = family !== "baseline" && (scheme === "q8_0" || regroupsQ4K(family));
        if (!rewrites) {
          expect(first.written).to.equal(null);
          expect(first.choice.note).to.not.include("layout");
          expect(layoutFiles(cache)).to.deep.equal([]);
          expect(first.tokens).to.deep.equal(plain.tokens);
          return;
        }
        expect(first.choice.note).to.match(new RegExp(`writing the ${family} kernels' layout of those rows to .*layout-[0-9a-f]{40}\\.bin for later loads \\(served as they lie until it is written, then from it\\)`));
        // The first load maps those rows too: none is read into fresh memory.
        expect(first.choice.note).to.include("weights read in place from the checkpoint");
        expect(first.choice.note).to.not.include("read into memory");
        expect(first.written).to.not.equal(null);
        const { file, bytes, error } = first.written!;
        expect(error).to.equal("");
        expect(statSync(file).size).to.equal(bytes + 4096);
        expect(layoutFiles(cache)).to.deep.equal([file.split("/").pop()]);
        expect(first.tokens).to.deep.equal(plain.tokens);
        expect(first.runtimeBytes).to.equal(plain.runtimeBytes);

        const later = await serve(files[scheme]!, kernels, cache);
        expect(later.choice.note).to.include(`rows laid out for the ${family} kernels mapped from ${file}`);
        expect(later.choice.note).to.include("weights read in place from the checkpoint");
        expect(later.choice.note).to.not.include("read into memory");
        expect(later.written).to.equal(null);
        expect(later.tokens).to.deep.equal(plain.tokens);
        expect(later.runtimeBytes).to.equal(plain.runtimeBytes);
      });
    }
  }

  it("requests served while the file is written are served from the rows as they lie, and the next step takes the file's runs", async () => {
    const cache = mkdtempSync(join(dir, "cache-"));
    const plain = await serve(files["q8_0"]!, "avx2", undefined);
    const model = await addon.loadLanguageModel(files["q8_0"]!, { device: "cpu", extraFiles: ["config.json"], threads: 2, kernels: "avx2", layoutCache: cache });
    try {
      await configureNative(model, "avx2");
      const request = { tokens: Int32Array.from([1, 2, 3, 4]), maxNewTokens: 12, sampling: { temperature: 0, topK: 0, seed: -1 } };
      // At once, beside the write (the products read the GGUF rows where the write has not ended).
      const during = await Promise.all([0, 1, 2].map(() => model.generate([request, request], null).result));
      for (const rows of during) for (const row of rows) expect(row).to.have.length(12);
      const written = (await model.layoutWritten())!;
      expect(written.error).to.equal("");
      const [after] = await model.generate([request], null).result;
      expect(Array.from(after!)).to.deep.equal(plain.tokens);
      expect((await model.layoutWritten())!.adopted).to.equal(true);
    } finally {
      await model.dispose();
    }
  });

  it("a write that fails after it started leaves the rows rewritten into memory at the next request", async () => {
    const cache = mkdtempSync(join(dir, "cache-"));
    const plain = await serve(files["q8_0"]!, "avx2", undefined);
    const { file } = (await serve(files["q8_0"]!, "avx2", cache)).written!;
    // A directory where the file goes: the header cannot be read (no file to map), and the
    // rename that ends the write fails.
    rmSync(file);
    mkdirSync(join(file, "occupied"), { recursive: true });
    const failed = await serve(files["q8_0"]!, "avx2", cache);
    expect(failed.choice.note).to.include(`writing the avx2 kernels' layout of those rows to ${file}`);
    expect(failed.written!.error).to.include(`cannot write ${file}`);
    expect(failed.written!.adopted).to.equal(false);
    expect(failed.tokens).to.deep.equal(plain.tokens);
    expect(failed.runtimeBytes).to.equal(plain.runtimeBytes);
    expect(layoutFiles(cache).filter((name) => name.endsWith(".tmp"))).to.deep.equal([]);
  });

  it("through TorchEngine (the server's path): layoutWritten() resolves once written, and the next load's note says it was mapped", async () => {
    const cache = mkdtempSync(join(dir, "cache-"));
    const options = { threads: 2, kernels: "avx2", runtime: "native", layoutCache: cache } as const;
    const first = await TorchEngine.load(files["q8_0"]!, options);
    let file: string;
    try {
      const written = await first.layoutWritten();
      expect(written?.error).to.equal("");
      file = written!.file;
    } finally {
      await first.dispose();
    }
    const later = await TorchEngine.load(files["q8_0"]!, options);
    try {
      expect(later.runtimeNote).to.include(`mapped from ${file}`);
      expect(await later.layoutWritten()).to.equal(null);
      const [text] = await later.generateBatch([{ prompt: "ab", maxNewTokens: 4, temperature: 0, topK: null }]);
      expect(text).to.be.a("string");
    } finally {
      await later.dispose();
    }
  });

  it("a damaged file is set aside and removed, the rows rewritten, and the next load writes it anew", async () => {
    const cache = mkdtempSync(join(dir, "cache-"));
    const plain = await serve(files["q8_0"]!, "avx2", undefined);
    const { file, bytes } = (await serve(files["q8_0"]!, "avx2", cache)).written!;
    // The first matrix's first run: 64 KiB of zeros over it.
    const fd = openSync(file, "r+");
    writeSync(fd, Buffer.alloc(65536), 0, 65536, 4096);
    closeSync(fd);
    const damaged = await serve(files["q8_0"]!, "avx2", cache);
    expect(damaged.choice.note).to.include(`layout file ${file} set aside (a `);
    expect(damaged.choice.note).to.include("runs differ from its rows' rewrite), removed; rows rewritten at load");
    expect(damaged.tokens).to.deep.equal(plain.tokens);
    expect(existsSync(file)).to.equal(false);
    const again = await serve(files["q8_0"]!, "avx2", cache);
    expect(again.written?.error).to.equal("");
    expect(statSync(file).size).to.equal(bytes + 4096);
    expect((await serve(files["q8_0"]!, "avx2", cache)).choice.note).to.include(`mapped from ${file}`);
  });

  it("a file cut short is not mapped: the load rewrites the rows and writes it whole again", async () => {
    const cache = mkdtempSync(join(dir, "cache-"));
    const plain = await serve(files["q4_k_m"]!, "avx2", undefined);
    const { file, bytes } = (await serve(files["q4_k_m"]!, "avx2", cache)).written!;
    truncateSync(file, 4096 + bytes / 2);
    const cut = await serve(files["q4_k_m"]!, "avx2", cache);
    expect(cut.choice.note).to.include(`writing the avx2 kernels' layout of those rows to ${file}`);
    expect(cut.tokens).to.deep.equal(plain.tokens);
    expect(cut.written?.error).to.equal("");
    expect(statSync(file).size).to.equal(bytes + 4096);
  });

  it("another archive at the same path gets its own file, which replaces the old one", async () => {
    const cache = mkdtempSync(join(dir, "cache-"));
    const served = join(dir, "served.pt");
    copyFileSync(files["q8_0"]!, served);
    const old = (await serve(served, "avx2", cache)).written!.file;
    rmSync(served);
    copyFileSync(files["q4_k_m"]!, served);
    const plain = await serve(files["q4_k_m"]!, "avx2", undefined);
    const next = await serve(served, "avx2", cache);
    expect(next.choice.note).to.include("writing the avx2 kernels' layout");
    expect(next.written!.file).to.not.equal(old);
    expect(next.tokens).to.deep.equal(plain.tokens);
    expect(layoutFiles(cache)).to.deep.equal([next.written!.file.split("/").pop()]);
  });

  it("with mapping off no layout file is read or written", async () => {
    const cache = mkdtempSync(join(dir, "cache-"));
    await serve(files["q8_0"]!, "avx2", cache); // writes one
    const model = await addon.loadLanguageModel(files["q8_0"]!, { device: "cpu", extraFiles: ["config.json"], threads: 2, kernels: "avx2", mapWeights: false, layoutCache: cache });
    try {
      const choice = await configureNative(model, "avx2");
      expect(choice.note).to.not.include("layout");
      expect(choice.note).to.include("weights read into memory (mapping off)");
      expect(await model.layoutWritten()).to.equal(null);
    } finally {
      await model.dispose();
    }
    expect(layoutFiles(cache)).to.have.length(1);
  });

  it("a directory that cannot be made costs only the file", async () => {
    const blocker = join(dir, "not-a-directory");
    writeFileSync(blocker, "");
    const plain = await serve(files["q8_0"]!, "avx2", undefined);
    const served = await serve(files["q8_0"]!, "avx2", join(blocker, "layouts"));
    expect(served.choice.note).to.include(`layout file not written: cannot create ${join(blocker, "layouts")}`);
    expect(served.written).to.equal(null);
    expect(served.tokens).to.deep.equal(plain.tokens);
  });

  it("disposing the model while it writes leaves no partial file behind", async () => {
    const cache = mkdtempSync(join(dir, "cache-"));
    const model = await addon.loadLanguageModel(files["q8_0"]!, { device: "cpu", extraFiles: ["config.json"], threads: 2, kernels: "avx2", layoutCache: cache });
    const choice = await configureNative(model, "avx2");
    expect(choice.note).to.include("writing the avx2 kernels' layout");
    const written = model.layoutWritten();
    await model.dispose();
    const outcome = (await written)!;
    // Either it was written whole before the dispose reached it, or cancelled and removed.
    if (outcome.error === "") {
      expect(statSync(outcome.file).size).to.equal(outcome.bytes + 4096);
    } else {
      expect(outcome.error).to.include("cancelled");
      expect(existsSync(outcome.file)).to.equal(false);
    }
    expect(layoutFiles(cache).filter((name) => name.endsWith(".tmp"))).to.deep.equal([]);
  });
});
