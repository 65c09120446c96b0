/**
 * The environment factories of the server entry: each names a missing or bad variable, and
 * hands the engine or recommender the options the variables say.
 */
import { expect } from "chai";

import { loadAddon } from "../../src/native/binding.js";
import { createEngineFromEnv, createRecommenderFromEnv } from "../../src/server/fromEnv.js";
import { fixture } from "../helpers/fixtures.js";
import { rejection } from "../helpers/rejection.js";
import { fakeAddon, writeCheckpoint } from "../recsys/fakeModule.js";


describe("createEngineFromEnv", () => {
  it("names SERVICE_CKPT when it is missing", async () => {
    const err = await rejection(createEngineFromEnv({}));
    expect(err.code).to.equal("ERR_CONFIG");
    expect(err.message).to.include("SERVICE_CKPT");
  });

  it("defaults SERVICE_DEVICE to cpu and SERVICE_RUNTIME to auto", async () => {
    const engine = await createEngineFromEnv({ SERVICE_CKPT: fixture("tiny-gpt.pt") });
    try {
      expect(engine.device).to.equal("cpu");
      expect(engine.runtime).to.equal("native");
    } finally {
      await engine.dispose();
    }
  });

  it("selects the device and runtime named by the environment, with clear errors", async () => {
    const script = await createEngineFromEnv({ SERVICE_CKPT: fixture("tiny-gpt.pt"), SERVICE_RUNTIME: "torchscript" });
    expect(script.runtime).to.equal("torchscript");
    await script.dispose();
    if (loadAddon().cudaAvailable()) {
      // A GPU host: SERVICE_DEVICE=cuda loads there, on the TorchScript runtime (native is CPU-only).
      const gpu = await createEngineFromEnv({ SERVICE_CKPT: fixture("tiny-gpt.pt"), SERVICE_DEVICE: "cuda" });
      expect([gpu.device, gpu.runtime]).to.deep.equal(["cuda:0", "torchscript"]);
      await gpu.dispose();
    } else {
      // A CPU-only build or host: the clear startup error.
      const cuda = await rejection(createEngineFromEnv({ SERVICE_CKPT: fixture("tiny-gpt.pt"), SERVICE_DEVICE: "cuda" }));
      expect(cuda.code).to.equal("ERR_DEVICE");
      expect(cuda.message).to.include("cuda");
    }
    const runtime = await rejection(createEngineFromEnv({ SERVICE_CKPT: fixture("tiny-gpt.pt"), SERVICE_RUNTIME: "fast" }));
    expect(runtime.code).to.equal("ERR_CONFIG");
    const threads = await rejection(createEngineFromEnv({ SERVICE_CKPT: fixture("tiny-gpt.pt"), SERVICE_THREADS: "two" }));
    expect(threads.message).to.include("SERVICE_THREADS");
  });

  it("caps the native kernel family with SERVICE_KERNELS", async () => {
    const capped = await createEngineFromEnv({ SERVICE_CKPT: fixture("tiny-gpt.pt"), SERVICE_KERNELS: "baseline" });
    try {
      expect(capped.runtime).to.equal("native");
      expect(capped.kernels).to.equal("baseline");
    } finally {
      await capped.dispose();
    }
    const best = await createEngineFromEnv({ SERVICE_CKPT: fixture("tiny-gpt.pt") });
    try {
      expect(best.kernels).to.equal(loadAddon().kernelFamilies[0]);
    } finally {
      await best.dispose();
    }
    const bad = await rejection(createEngineFromEnv({ SERVICE_CKPT: fixture("tiny-gpt.pt"), SERVICE_KERNELS: "sse" }));
    expect(bad.code).to.equal("ERR_CONFIG");
    expect(bad.message).to.include("SERVICE_KERNELS");
  });
});

describe("createRecommenderFromEnv", () => {
  it("names RECSYS_CKPT when it is missing or empty", async () => {
    for (const env of [{}, { RECSYS_CKPT: "" }, { RECSYS_DEVICE: "cpu" }]) {
      const err = await rejection(createRecommenderFromEnv(env));
      expect(err.code).to.equal("ERR_CONFIG");
      expect(err.message).to.contain("RECSYS_CKPT");
    }
  });

  it("reports a checkpoint path that does not exist", async () => {
    const err = await rejection(createRecommenderFromEnv({ RECSYS_CKPT: "/nonexistent/recsys.pt" }));
    expect(err.code).to.equal("ERR_CHECKPOINT_NOT_FOUND");
    expect(err.message).to.contain("/nonexistent/recsys.pt");
  });

  it("passes RECSYS_DEVICE to the addon, cpu by default", async () => {
    const path = writeCheckpoint(Buffer.from("another checkpoint"));
    for (const [env, device] of [[{ RECSYS_CKPT: path }, "cpu"], [{ RECSYS_CKPT: path, RECSYS_DEVICE: "cuda:1" }, "cuda:1"]] as const) {
      const addon = fakeAddon();
      const rec = await createRecommenderFromEnv(env, { addon });
      await rec.dispose();
      expect(addon.loads[0]!.options.device).to.equal(device);
    }
  });
});
