/**
 * A one-row step on a model whose layers hold 1 MiB or more of weights is split across the
 * compute team (batch-1 decode is bound by memory bandwidth, which one core does not
 * saturate). On the demo model (512 wide, about 3 MB a layer) the team must give exactly the
 * tokens one thread gives, at batch 1 and 2 (steps the team used to leave to the inference
 * thread alone), greedy and seeded, under every kernel family: each output column is summed
 * by one member in the same order, so the results are the same bits on one machine. Three
 * threads on this two-core host split each phase's chunks into uneven ranges and take each
 * other's (ThreadTeam::Phase): a chunk run twice (a residual added twice) or left out would
 * change the tokens.
 */
import { expect } from "chai";
import { join } from "node:path";

import { TorchEngine } from "../../src/engine/TorchEngine.js";
import { loadAddon } from "../../src/native/binding.js";
import type { GenerateRequest } from "../../src/types.js";
import { repoRoot } from "../helpers/fixtures.js";

const demo = join(repoRoot, "models", "brown-gpt.pt");
const request = (prompt: string, extra: Partial<GenerateRequest> = {}): GenerateRequest => ({
  prompt,
  maxNewTokens: 24,
  temperature: 0,
  topK: null,
  ...extra,
});
const requests = [
  request("The jury said"),
  request("It was a long", { temperature: 0.9, seed: 7 }),
  request("In the morning the", { temperature: 0.7, topK: 40, seed: 11 }),
];

describe("native runtime: one-row steps on the team", function () {
  this.timeout(120_000);

  for (const kernels of loadAddon().kernelFamilies) {
    it(`${kernels}: 2 and 3 threads give the tokens of 1 thread at batch 1 and 2`, async () => {
      const outputs: string[][] = [];
      for (const threads of [1, 2, 3]) {
        const engine = await TorchEngine.load(demo, { threads, runtime: "native", kernels });
        try {
          const got: string[] = [];
          for (const one of requests) got.push(...(await engine.generateBatch([one])));
          got.push(...(await engine.generateBatch(requests.slice(0, 2))));
          outputs.push(got);
        } finally {
          await engine.dispose();
        }
      }
      expect(outputs[0]!.every((text) => text.length > 0)).to.equal(true);
      expect(outputs[1]).to.deep.equal(outputs[0]);
      expect(outputs[2]).to.deep.equal(outputs[0]);
    });
  }
});
