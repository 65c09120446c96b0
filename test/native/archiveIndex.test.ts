/**
 * The torch-free archive index (native/runtime/ArchiveIndex.cc and Unpickler.cc, run through
 * test/native/cpp/archive-index.cc built with ASan and UBSan) against torch's own view of the same
 * files (test/native/archive_index_cases.py): every tensor attribute's dtype, shape, strides,
 * storage offset and element bytes (read where the index says its record lies), which tensors
 * share a storage, every scalar attribute, the extra files' bytes, and where Python's zipfile finds
 * each record. On the committed checkpoints, the native fixture set (llama, Qwen, GPT in float32,
 * 16 bits and quantized), a module of every dtype, view and attribute kind, and ZIP64 rewrites of
 * two of them. Damaged and foreign files are refused in one line with status 1, never a crash.
 */
import { expect } from "chai";
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { fixture, repoRoot } from "../helpers/fixtures.js";
import { buildKernelHarness } from "../helpers/kernelHarness.js";
import { nativeFixtureSet } from "../helpers/nativeSet.js";

interface IndexTensor {
  dtype: string;
  shape: number[];
  strides: number[];
  offset: number;
  key: string;
  fileOffset: number;
  storageBytes: number;
  crc?: number;
}

interface Scalars {
  ints: Record<string, string>; // as strings: 64-bit values
  floats: Record<string, number | string>; // "inf", "-inf", "nan" as strings
  bools: Record<string, boolean>;
  strings: Record<string, string>;
}

/** The harness's output. */
interface Index extends Scalars {
  root: string;
  rootClass: string;
  tensors: Record<string, IndexTensor>;
  extra: Record<string, { offset: number; size: number; crc?: number }>;
}

/** Where Python's zipfile finds each record's bytes: [offset, size]. */
interface Records {
  root: string;
  pickle: [number, number];
  data: Record<string, [number, number]>;
  extra: Record<string, [number, number]>;
}

/** torch.jit.load's view of a checkpoint. */
interface TorchView extends Scalars {
  root_class: string;
  tensors: Record<string, { dtype: string; shape: number[]; strides: number[]; offset: number; crc: number; storage: number | null }>;
  parameters: string[];
  buffers: string[];
  extra: Record<string, { size: number; crc: number }>;
  records: Records;
}

const cases = join(repoRoot, "test", "native", "archive_index_cases.py");
const python = (...args: string[]): string => {
  const run = spawnSync("/usr/bin/python3", [cases, ...args], { encoding: "utf8", maxBuffer: 1 << 28 });
  expect(run.status, run.stderr).to.equal(0);
  return run.stdout;
};
const torchViews = (files: string[]): Record<string, TorchView> => JSON.parse(python("view", ...files)) as Record<string, TorchView>;

// A sanitizer's report is not the harness's one-line refusal: give it its own status.
const sanitizerEnv = { ...process.env, ASAN_OPTIONS: "exitcode=86:detect_leaks=0", UBSAN_OPTIONS: "exitcode=87:print_stacktrace=1" };

function runHarness(harness: string, args: string[]) {
  return spawnSync(harness, args, { encoding: "utf8", env: sanitizerEnv, timeout: 60000, maxBuffer: 1 << 28 });
}

function indexOf(harness: string, file: string, ...flags: string[]): Index {
  const run = runHarness(harness, [...flags, file]);
  expect(run.status, `${file}: ${run.stderr}`).to.equal(0);
  return JSON.parse(run.stdout) as Index;
}

/** The harness's refusal of `file`: status 1 and one line on stderr, which is returned. */
function refusalOf(harness: string, file: string): string {
  const run = runHarness(harness, [file]);
  expect({ status: run.status, signal: run.signal }, `${file}: ${run.stderr}`).to.deep.equal({ status: 1, signal: null });
  const lines = run.stderr.trimEnd().split("\n");
  expect(lines, run.stderr).to.have.length(1);
  expect(lines[0]).to.match(/^archive-index: checkpoint .+ cannot be read: ./);
  return lines[0]!;
}

/** Names grouped by what they share (a record, a storage), as sorted lists; null shares nothing. */
function sharing(of: Record<string, unknown>): string[][] {
  const groups = new Map<unknown, string[]>();
  for (const [name, by] of Object.entries(of)) {
    if (by !== null) groups.set(by, [...(groups.get(by) ?? []), name]);
  }
  return [...groups.values()].map((g) => g.sort()).sort((a, b) => a[0]!.localeCompare(b[0]!));
}

function expectSameAsTorch(index: Index, torch: TorchView, label: string): void {
  expect(Object.keys(index.tensors).sort(), `${label}: tensor attributes`).to.deep.equal(Object.keys(torch.tensors).sort());
  const unlisted = [...torch.parameters, ...torch.buffers].filter((name) => !(name in index.tensors));
  expect(unlisted, `${label}: parameters and buffers missing`).to.deep.equal([]);
  for (const [name, t] of Object.entries(torch.tensors)) {
    const mine = index.tensors[name]!;
    const { dtype, shape, strides, offset, crc } = mine;
    expect({ dtype, shape, strides, offset, crc }, `${label}: ${name}`).to.deep.equal({
      dtype: t.dtype,
      shape: t.shape,
      strides: t.strides,
      offset: t.offset,
      crc: t.crc,
    });
    expect([mine.fileOffset, mine.storageBytes], `${label}: ${name}'s record`).to.deep.equal(torch.records.data[mine.key]);
  }
  // Tensors share a record exactly where torch gives them one storage (empty ones share nothing).
  const keys = Object.fromEntries(Object.entries(index.tensors).map(([name, t]) => [name, t.storageBytes > 0 ? t.key : null]));
  const storages = Object.fromEntries(Object.entries(torch.tensors).map(([name, t]) => [name, t.storage]));
  expect(sharing(keys), `${label}: shared storages`).to.deep.equal(sharing(storages));
  for (const kind of ["ints", "floats", "bools", "strings"] as const) {
    expect(index[kind], `${label}: ${kind}`).to.deep.equal(torch[kind]);
  }
  expect(index.root, label).to.equal(torch.records.root);
  expect(index.rootClass, `${label}: the root module's class`).to.equal(torch.root_class);
  expect(Object.keys(index.extra).sort(), `${label}: extra files`).to.deep.equal(Object.keys(torch.extra).sort());
  for (const [name, { size, crc }] of Object.entries(torch.extra)) {
    const mine = index.extra[name]!;
    expect({ size: mine.size, crc: mine.crc, offset: mine.offset }, `${label}: extra/${name}`).to.deep.equal({
      size,
      crc,
      offset: torch.records.extra[name]![0],
    });
  }
}

describe("the torch-free archive index reads a TorchScript checkpoint's weights as torch does", function () {
  this.timeout(900000);
  let dir = "";
  let harness = "";

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), "tsn-archive-index-"));
    harness = await buildKernelHarness("archive-index.cc", dir, {
      units: ["native/runtime/ArchiveIndex.cc", "native/runtime/Unpickler.cc"],
      flags: ["-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-Wall", "-Wextra", "-Werror"],
    });
    python("make", dir, fixture("tiny-gpt-hf.pt"));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it("builds from the C++ standard library alone (no torch, Node or other header or symbol)", () => {
    for (const unit of ["ArchiveIndex", "Unpickler"]) {
      const object = join(dir, `alone-${unit}.o`);
      // Only native/ on the include path: a torch or Node header would not be found.
      execFileSync("g++", ["-std=c++17", "-O0", `-I${join(repoRoot, "native")}`, "-c", join(repoRoot, "native", "runtime", `${unit}.cc`), "-o", object]);
      const undefinedSymbols = execFileSync("nm", ["-u", "-C", object], { encoding: "utf8" });
      expect(undefinedSymbols).to.not.match(/napi_|c10::|at::|torch::|caffe2::/);
    }
  });

  it("the committed checkpoints: tiny-gpt, tiny-gpt-hf whose head is tied to its embedding, and others", () => {
    // no-config.pt has no extra file; corrupt.pt has bytes flipped inside a record, which torch reads as they are.
    const broken = ["no-config.pt", "corrupt.pt"].map((name) => join(repoRoot, "test", "fixtures", "broken", name));
    const files = [fixture("tiny-gpt.pt"), fixture("tiny-gpt-hf.pt"), fixture("tiny-gpt-eos.pt"), ...broken];
    const views = torchViews(files);
    for (const file of files) expectSameAsTorch(indexOf(harness, file), views[file]!, file);
    const hf = indexOf(harness, fixture("tiny-gpt-hf.pt"));
    expect(hf.tensors["lm_head.weight"]!.key).to.equal(hf.tensors["wte.weight"]!.key);
    expect(hf.tensors["lm_head.weight"]!.fileOffset).to.equal(hf.tensors["wte.weight"]!.fileOffset);
    const config = hf.extra["config.json"]!;
    const configBytes = readFileSync(fixture("tiny-gpt-hf.pt")).subarray(config.offset, config.offset + config.size);
    expect(JSON.parse(configBytes.toString())).to.have.property("vocab_size");
  });

  it("a module with every dtype, views of one storage, 0-d and empty tensors, and every kind of attribute", () => {
    const file = join(dir, "odd.pt");
    const index = indexOf(harness, file);
    expectSameAsTorch(index, torchViews([file])[file]!, "odd.pt");
    expect(new Set(Object.values(index.tensors).map((t) => t.dtype))).to.deep.equal(
      new Set(["float32", "bfloat16", "float16", "float64", "uint8", "int8", "int16", "int32", "int64", "bool"]),
    );
    expect(index.tensors.sliced).to.include({ key: index.tensors.base!.key, offset: 21 });
    expect(index.tensors.transposed!.strides).to.deep.equal([1, 10]);
    expect(index.ints).to.include({ big: "1099511627776", neg: "-70000", "stack.1.k": "3" });
    expect(index.floats).to.include({ eps: 1e-300, ninf: "-inf" });
    expect(index.strings).to.include({ name: "é→😀", blank: "" });
    // None, typed lists, tuples and dicts are left out, not refused.
    for (const name of ["maybe", "sizes", "pair", "table", "tensors"]) expect(index.tensors).to.not.have.property(name);
  });

  it("ZIP64 archives: every size and offset in ZIP64 fields, a ZIP64 end record, a comment, padded local headers", () => {
    const files = [join(dir, "odd-zip64.pt"), join(dir, "source-zip64.pt")];
    const views = torchViews(files);
    for (const file of files) expectSameAsTorch(indexOf(harness, file), views[file]!, file);
  });

  it("the native fixture set (llama, Qwen, GPT; float32, bfloat16, float16; Q8_0, Q4_0, Q4_K_M, Q5_K_M), with each quantized module's type and width", () => {
    const set = Object.values(nativeFixtureSet());
    const views = torchViews(set.map((c) => c.file));
    for (const checkpoint of set) {
      const index = indexOf(harness, checkpoint.file);
      const torch = views[checkpoint.file]!;
      expectSameAsTorch(index, torch, checkpoint.file);
      const quantized = Object.keys(torch.strings).filter((name) => name.endsWith(".qtype"));
      expect(quantized.length > 0, `${checkpoint.file}: quantized modules`).to.equal(checkpoint.quantization !== undefined);
      for (const name of quantized) {
        const module = name.slice(0, -".qtype".length);
        expect(index.strings[name], name).to.equal(torch.strings[name]);
        expect(index.tensors[`${module}.qweight`]!.dtype, name).to.equal("uint8");
        const width = `${module}.${module === "embed" ? "embedding_dim" : "in_features"}`;
        expect(index.ints[width], width).to.equal(torch.ints[width]).and.to.match(/^[1-9]\d*$/);
      }
    }
  });

  it("refuses damaged and foreign files in one line naming what is wrong, never a crash", () => {
    const refusals = JSON.parse(readFileSync(join(dir, "refusals.json"), "utf8")) as Record<string, string>;
    for (const [file, why] of Object.entries(refusals)) expect(refusalOf(harness, join(dir, file)), file).to.include(why);

    const original = readFileSync(fixture("tiny-gpt.pt"));
    const write = (name: string, bytes: Uint8Array): string => {
      writeFileSync(join(dir, name), bytes);
      return join(dir, name);
    };
    expect(refusalOf(harness, write("empty.pt", new Uint8Array(0)))).to.include("too short");
    let seed = 20261129;
    const random = (): number => ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 2 ** 32);
    const noise = Uint8Array.from({ length: 70000 }, () => Math.floor(random() * 256));
    expect(refusalOf(harness, write("random.pt", noise))).to.include("not a zip archive");
    for (const length of [10, 21, 1000, original.length >> 1, original.length - 23, original.length - 1]) {
      expect(refusalOf(harness, write(`cut-${length}.pt`, original.subarray(0, length))), `cut at ${length}`).to.match(/zip|cut short/);
    }
    expect(refusalOf(harness, join(repoRoot, "test", "fixtures", "broken", "truncated.pt"))).to.include("not a zip archive");
    expect(refusalOf(harness, join(dir, "no-such-file.pt"))).to.include("No such file");
    expect(refusalOf(harness, dir)).to.include("not a regular file");

    // Seeded damage where the reader looks (the central directory and data.pkl) and anywhere:
    // each file is read or refused in one line; a sanitizer report or a signal fails.
    const pickle = (JSON.parse(python("records", fixture("tiny-gpt.pt"))) as Records).pickle;
    const directory = original.readUInt32LE(original.length - 6); // the end record's directory offset (no comment)
    let read = 0;
    for (let i = 0; i < 60; i++) {
      const bytes = Buffer.from(original);
      const [from, span] = i % 3 === 0 ? [pickle[0], pickle[1]] : i % 3 === 1 ? [directory, original.length - directory] : [0, original.length];
      for (let flips = 1 + Math.floor(random() * 4); flips > 0; flips--) bytes[from + Math.floor(random() * span)] = Math.floor(random() * 256);
      const file = write(`damaged-${i}.pt`, i % 10 === 9 ? Buffer.concat([bytes.subarray(0, from), bytes.subarray(from + 300)]) : bytes);
      const run = runHarness(harness, [file]);
      expect(run.signal, `damaged-${i}: ${run.stderr}`).to.equal(null);
      expect([0, 1], `damaged-${i}: status ${run.status}: ${run.stderr}`).to.include(run.status);
      if (run.status === 1) {
        expect(run.stderr.trimEnd().split("\n"), `damaged-${i}`).to.have.length(1);
      } else {
        expect(run.stderr, `damaged-${i}`).to.equal("");
        read++;
      }
    }
    expect(read, "damaged copies read (bytes flipped inside records change no index)").to.be.greaterThan(0);
  });

  it("a checkpoint over 4 GiB, where the records lie past 32-bit offsets (.cache/bench/models/llama-8b-q8_0.pt, if made)", function () {
    const file = join(repoRoot, ".cache", "bench", "models", "llama-8b-q8_0.pt");
    if (!existsSync(file)) this.skip();
    const index = indexOf(harness, file, "--no-data");
    const records = JSON.parse(python("records", file)) as Records;
    expect(index.root).to.equal(records.root);
    for (const [name, t] of Object.entries(index.tensors)) expect([t.fileOffset, t.storageBytes], name).to.deep.equal(records.data[t.key]);
    expect(new Set(Object.values(index.tensors).map((t) => t.key))).to.deep.equal(new Set(Object.keys(records.data)));
    expect(Math.max(...Object.values(index.tensors).map((t) => t.fileOffset))).to.be.greaterThan(2 ** 32);
    expect(index.strings["layers.31.q_proj.qtype"]).to.equal("q8_0");
  });
});
