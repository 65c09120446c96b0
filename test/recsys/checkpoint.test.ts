/**
 * A checkpoint trained and exported by the Python pipeline, served through the addon:
 * the same scores as Python's torch.jit.load, and the behaviour users see.
 */
import { copyFileSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { expect } from "chai";
import { ServingError } from "../../src/errors.js";
import { loadAddon } from "../../src/native/binding.js";
import type { RawAddon, RawModule, RawTensor, RawValue } from "../../src/native/types.js";
import { TorchRecommender } from "../../src/recsys/index.js";
import {
  makeTempDir,
  pythonRecommend,
  trainedFixture,
  type PythonRecommendations,
  type TrainedFixture,
} from "./pythonFixture.js";

const K = 10;

describe("a checkpoint from the Python pipeline", () => {
  it("refuses a corrupted checkpoint with ERR_CHECKPOINT_INVALID", async () => {
    const { checkpoint } = await trainedFixture();
    const path = join(makeTempDir("corrupt-"), "model.pt");
    const bytes = readFileSync(checkpoint);
    bytes[Math.floor(bytes.length / 2)] ^= 0xff; // one flipped byte inside the tensor data
    writeFileSync(path, bytes);
    copyFileSync(`${checkpoint}.sha256`, `${path}.sha256`);
    try {
      await TorchRecommender.load(path);
      expect.fail("loaded a corrupted checkpoint");
    } catch (err) {
      expect(err).to.be.instanceOf(ServingError);
      expect((err as ServingError).code).to.equal("ERR_CHECKPOINT_INVALID");
    }
  });
});

describe("recommender checkpoint through the addon", () => {
  let fixture: TrainedFixture;
  let golden: PythonRecommendations;
  let goldenUsers: number[];
  let addon: RawAddon;

  before(async () => {
    fixture = await trainedFixture();
    const users = fixture.seen.size;
    goldenUsers = [0, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, users - 1];
    golden = await pythonRecommend(fixture.checkpoint, goldenUsers, K);
    addon = await loadAddon();
  });

  function rawUser(index: number): number {
    return golden.userIds[index]!;
  }

  it("returns the scores Python computes (raw module call)", async () => {
    const module = await addon.loadModule(fixture.checkpoint, { device: "cpu", extraFiles: ["config.json"] });
    try {
      const config = JSON.parse(module.extraFiles["config.json"]!);
      expect(config.counts.items).to.equal(golden.items);
      const users: RawTensor = { dtype: "int64", shape: [goldenUsers.length], data: BigInt64Array.from(goldenUsers, BigInt) };
      const [ids, scores] = (await module.run("recommend", [users, K])) as RawTensor[];
      expect(ids!.dtype).to.equal("int64");
      expect(ids!.shape).to.deep.equal([goldenUsers.length, K]);
      expect(scores!.dtype).to.equal("float32");
      expect(Array.from(ids!.data as BigInt64Array, Number)).to.deep.equal(golden.ids.flat());
      const got = Array.from(scores!.data as Float32Array);
      golden.scores.flat().forEach((want, j) => expect(got[j]).to.be.closeTo(want!, 1e-5));
      const userIds = (await module.run("user_ids", [])) as RawTensor;
      expect(Array.from(userIds.data as BigInt64Array, Number)).to.deep.equal(golden.userIds);
    } finally {
      await module.dispose();
    }
  });

  describe("TorchRecommender", () => {
    let rec: TorchRecommender;

    before(async () => {
      rec = await TorchRecommender.load(fixture.checkpoint, { latencyBudgetMs: null });
    });

    after(async () => {
      await rec.dispose();
    });

    it("recommends what Python computes, by raw user id", async () => {
      for (const [row, index] of goldenUsers.entries()) {
        expect(await rec.recommend(rawUser(index), K)).to.deep.equal({ items: golden.ids[row], fallback: false });
      }
    });

    it("gives a known user exactly k items it has not rated", async () => {
      for (const [userId, seen] of [...fixture.seen].slice(0, 40)) {
        const result = await rec.recommend(userId, K);
        expect(result.fallback).to.equal(false);
        expect(result.items).to.have.lengthOf(K);
        expect(new Set(result.items).size).to.equal(K);
        expect(result.items.filter((id) => seen.has(id)), `user ${userId}`).to.deep.equal([]);
      }
    });

    it("gives an unknown user the most popular items as a fallback", async () => {
      const unknown = Math.max(...fixture.seen.keys()) + 1;
      const result = await rec.recommend(unknown, K);
      expect(result.fallback).to.equal(true);
      expect(result.items).to.deep.equal(golden.popular.slice(0, K));
    });

    it("handles k = 1, k = 100 and k above the item count", async () => {
      const [userId, seen] = [...fixture.seen].find(([, s]) => s.size > 50)!;
      expect((await rec.recommend(userId, 1)).items).to.have.lengthOf(1);
      const hundred = await rec.recommend(userId, 100);
      expect(hundred.items).to.have.lengthOf(100);
      expect(hundred.items.filter((id) => seen.has(id))).to.deep.equal([]);
      const everything = await rec.recommend(userId, golden.items + 50);
      expect(everything.fallback).to.equal(false);
      expect(everything.items).to.have.lengthOf(golden.items - seen.size);
      expect(everything.items.slice(0, 100)).to.deep.equal(hundred.items);
      expect((await rec.recommend(-1, golden.items + 50)).items).to.deep.equal(golden.popular);
    });
  });

  it("scores concurrent requests in fewer module calls, each getting its own user's answer", async () => {
    const calls: number[] = [];
    const module = countingModule(await addon.loadModule(fixture.checkpoint, { device: "cpu", extraFiles: ["config.json"] }), calls);
    const rec = await TorchRecommender.fromModule(module, { maxBatchSize: 16, latencyBudgetMs: null });
    try {
      calls.length = 0;
      const rows = Array.from({ length: 40 }, (_, n) => n % goldenUsers.length);
      const results = await Promise.all(rows.map((row) => rec.recommend(rawUser(goldenUsers[row]!), K)));
      results.forEach((result, n) => expect(result).to.deep.equal({ items: golden.ids[rows[n]!], fallback: false }));
      expect(calls.reduce((a, b) => a + b, 0)).to.equal(40);
      expect(calls.length).to.be.at.most(4);
    } finally {
      await rec.dispose();
    }
  });

  it("falls back to popular items when the module call throws", async () => {
    const failing = { on: false };
    const real = await addon.loadModule(fixture.checkpoint, { device: "cpu", extraFiles: ["config.json"] });
    const module: RawModule = {
      extraFiles: real.extraFiles,
      device: real.device,
      run: (method: string, args: RawValue[]) =>
        failing.on && method === "recommend" ? Promise.reject(new Error("simulated libtorch failure")) : real.run(method, args),
      dispose: () => real.dispose(),
    };
    const rec = await TorchRecommender.fromModule(module);
    try {
      failing.on = true;
      const result = await rec.recommend(rawUser(0), K);
      expect(result).to.deep.equal({ items: golden.popular.slice(0, K), fallback: true, fallbackReason: "model_error" });
      failing.on = false;
      expect(await rec.recommend(rawUser(0), K)).to.deep.equal({ items: golden.ids[0], fallback: false });
    } finally {
      await rec.dispose();
    }
  });
});

function countingModule(real: RawModule, calls: number[]): RawModule {
  return {
    extraFiles: real.extraFiles,
    device: real.device,
    run(method: string, args: RawValue[]) {
      if (method === "recommend") calls.push((args[0] as RawTensor).shape[0]!);
      return real.run(method, args);
    },
    dispose: () => real.dispose(),
  };
}
