/**
 * The shipped demo checkpoint behind the recommendation app, over a real socket.
 */
import { join } from "node:path";
import { expect } from "chai";
import { createRecsysApp } from "../../src/http/index.js";
import type { TorchRecommender } from "../../src/recsys/index.js";
import { createRecommenderFromEnv } from "../../src/server/fromEnv.js";
import { serve, type Running } from "../helpers/http.js";
import { pythonRecommend, repoRoot, type PythonRecommendations } from "./pythonFixture.js";

describe("models/recsys-demo.pt served by createRecsysApp", () => {
  const checkpoint = join(repoRoot, "models", "recsys-demo.pt");
  let rec: TorchRecommender;
  let running: Running;
  let golden: PythonRecommendations;

  before(async () => {
    golden = await pythonRecommend(checkpoint, [0, 1, 2], 10);
    rec = await createRecommenderFromEnv({ RECSYS_CKPT: checkpoint }); // checksum verified on load
    running = await serve(createRecsysApp(rec));
  });

  after(async () => {
    await running?.close();
    await rec?.dispose();
  });

  it("answers known users with the model's top 10, as Python computes them", async () => {
    expect(rec.config.counts).to.include({ users: 2000 });
    for (const [row, index] of [0, 1, 2].entries()) {
      const userId = golden.userIds[index]!;
      const response = await fetch(`${running.base}/recommend/${userId}`);
      expect(response.status).to.equal(200);
      expect(await response.json()).to.deep.equal({ user_id: userId, items: golden.ids[row], fallback: false });
    }
  });

  it("answers an unknown user with popular items and counts the fallback", async () => {
    const unknown = Math.max(...golden.userIds) + 1000;
    const response = await fetch(`${running.base}/recommend/${unknown}?k=3`);
    expect(await response.json()).to.deep.equal({ user_id: unknown, items: golden.popular.slice(0, 3), fallback: true });
    const metrics = await (await fetch(`${running.base}/metrics`)).text();
    expect(metrics).to.match(/^recommend_fallback_total 1$/m);
  });
});
