/**
 * A bounded, seeded fuzz of both apps over real sockets, on the real engines (the tiny
 * checkpoint, the demo recommender): hostile bodies, content types, paths, headers, methods,
 * truncated and chunked bodies, every route. No 5xx, no hang, nothing internal in a body, and
 * the server serves normally afterwards. scripts/fuzz/http-fuzz.ts runs the same cases longer.
 */
import { expect } from "chai";

import { leaks, runFuzz } from "../../scripts/fuzz/cases.js";
import { repoRoot, startTargets, type Targets } from "../../scripts/fuzz/targets.js";
import { postJson } from "../helpers/http.js";

const CASES = 400;
const SEED = 20261123;

describe("HTTP fuzz (seeded, both apps, real engines)", function () {
  this.timeout(120_000);
  let targets: Targets;

  before(async () => {
    targets = await startTargets();
  });
  after(async () => {
    await targets?.close();
  });

  it(`${CASES} hostile requests: no 5xx, no hang, no stack trace or path in a body; served normally afterwards`, async () => {
    const run = await runFuzz(
      { text: targets.text, recsys: targets.recsys },
      { iterations: CASES, seed: SEED, concurrency: 6, timeoutMs: 10_000, root: repoRoot },
    );
    const statuses: Record<string, number> = {};
    for (const counts of Object.values(run.statuses)) {
      for (const [status, count] of Object.entries(counts)) statuses[status] = (statuses[status] ?? 0) + count;
    }
    const failures = run.failures;
    expect(failures, JSON.stringify(statuses)).to.deep.equal([]);
    // The mix reached the handlers, not only the parser's refusals.
    expect(statuses["200"]).to.be.greaterThan(CASES / 5);
    expect(statuses["422"]).to.be.greaterThan(0);

    expect(({} as Record<string, unknown>)["polluted"]).to.equal(undefined);
    const text = `http://127.0.0.1:${targets.text.port}`;
    const answer = await postJson(text, "/generate", { prompt: "Once", max_new_tokens: 4, seed: 1 });
    expect(answer.status).to.equal(200);
    expect(((await answer.json()) as { text: string }).text).to.be.a("string");
    const recommend = await fetch(`http://127.0.0.1:${targets.recsys.port}/recommend/3?k=2`);
    expect(recommend.status).to.equal(200);
  });

  it("an internal failure answers a plain 500 body: no message, stack or path", async () => {
    // Any 5xx the fuzz could not provoke: an engine that throws with a path in its message.
    const { createApp } = await import("../../src/http/text/createApp.js");
    const { serve } = await import("../helpers/http.js");
    const failing = {
      generateBatch: () => Promise.reject(new Error(`boom at ${repoRoot}/src/engine/TorchEngine.ts:12`)),
      async *generateStream(): AsyncGenerator<string> {
        throw new TypeError(`cannot read x of undefined (${repoRoot}/node_modules/y/index.js:3)`);
      },
    };
    const running = await serve(createApp(failing));
    try {
      for (const path of ["/generate", "/generate/stream"]) {
        const answer = await postJson(running.base, path, { prompt: "a" });
        expect(answer.status).to.equal(500);
        const body = await answer.text();
        expect(JSON.parse(body)).to.deep.equal({ detail: "Internal Server Error", code: "ERR_INTERNAL" });
        expect(leaks(body, repoRoot)).to.equal(null);
      }
    } finally {
      await running.close();
    }
  });
});
