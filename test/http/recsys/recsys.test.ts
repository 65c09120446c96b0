/** The recommendation app: GET /recommend/:user_id?k=, its validation, lifespan and metrics. */
import { expect } from "chai";
import type { RecommenderCatalogue } from "../../../src/http/recsys/createRecsysApp.js";
import { createRecsysApp } from "../../../src/http/index.js";
import type { Recommendation, Recommender } from "../../../src/types.js";
import { deferred } from "../../helpers/deferred.js";
import { listen, type Running, type ValidationBody } from "../../helpers/http.js";
import { RecordingLimiter } from "../../helpers/limiters.js";
import { scrape, valueOf } from "../../helpers/metrics.js";

/** Returns k items derived from the user; records its calls. */
class RecordingRecommender implements Recommender {
  readonly calls: [number, number][] = [];
  recommend(userId: number, k: number): Recommendation {
    this.calls.push([userId, k]);
    return { items: Array.from({ length: k }, (_, i) => 1000 + i), fallback: userId < 0 };
  }
}

describe("GET /recommend/:user_id", function () {
  let recommender: RecordingRecommender;
  let running: Running | undefined;
  afterEach(async () => {
    await running?.close();
    running = undefined;
  });

  // Served without start(): the recsys app needs no lifespan to answer.
  async function start(r: Recommender = (recommender = new RecordingRecommender())): Promise<string> {
    running = await listen(createRecsysApp(r));
    return running.base;
  }

  it("answers {user_id, items, fallback} with k = 10 by default", async () => {
    const base = await start();
    const response = await fetch(`${base}/recommend/42`);
    expect(response.status).to.equal(200);
    expect(response.headers.get("content-type")).to.equal("application/json; charset=utf-8");
    expect(await response.json()).to.deep.equal({
      user_id: 42,
      items: Array.from({ length: 10 }, (_, i) => 1000 + i),
      fallback: false,
    });
    expect(recommender.calls).to.deep.equal([[42, 10]]);
  });

  const validK: [string, number][] = [["1", 1], ["100", 100], ["7", 7], ["007", 7]];
  for (const [raw, k] of validK) {
    it(`k=${raw} -> 200 with ${k} items`, async () => {
      const base = await start();
      const body = (await (await fetch(`${base}/recommend/3?k=${raw}`)).json()) as { items: number[] };
      expect(body.items).to.have.length(k);
      expect(recommender.calls).to.deep.equal([[3, k]]);
    });
  }

  const invalidK = ["k=0", "k=101", "k=-1", "k=1.5", "k=abc", "k=", "k=1&k=2", "k=%201", "k=1e1", "k=0x10"];
  for (const query of invalidK) {
    it(`${query} -> 422 at query.k`, async () => {
      const base = await start();
      const response = await fetch(`${base}/recommend/3?${query}`);
      expect(response.status).to.equal(422);
      const body = (await response.json()) as ValidationBody;
      expect(body.detail).to.have.length(1);
      expect(body.detail[0]!.loc).to.deep.equal(["query", "k"]);
      expect(recommender.calls).to.deep.equal([]);
    });
  }

  const validUsers: [string, number][] = [["0", 0], ["-5", -5], ["9007199254740991", 9007199254740991], ["-9007199254740991", -9007199254740991]];
  for (const [raw, userId] of validUsers) {
    it(`user_id ${raw} -> 200`, async () => {
      const base = await start();
      const body = (await (await fetch(`${base}/recommend/${raw}?k=1`)).json()) as { user_id: number };
      expect(body.user_id).to.equal(userId);
      expect(recommender.calls).to.deep.equal([[userId, 1]]);
    });
  }

  const invalidUsers = ["abc", "1.5", "+5", "9007199254740992", "1e3", "%201", "--1", "12a"];
  for (const raw of invalidUsers) {
    it(`user_id ${raw} -> 422 at path.user_id`, async () => {
      const base = await start();
      const response = await fetch(`${base}/recommend/${raw}`);
      expect(response.status).to.equal(422);
      const body = (await response.json()) as ValidationBody;
      expect(body.detail.map((d) => d.loc)).to.deep.equal([["path", "user_id"]]);
      expect(recommender.calls).to.deep.equal([]);
    });
  }

  it("lists a bad user_id and a bad k together", async () => {
    const base = await start();
    const body = (await (await fetch(`${base}/recommend/x?k=0`)).json()) as ValidationBody;
    expect(body.detail.map((d) => d.loc)).to.deep.equal([["path", "user_id"], ["query", "k"]]);
  });

  it("a path that fails to decode is a 422 JSON answer", async () => {
    const base = await start();
    const response = await fetch(`${base}/recommend/%E0%A4%A`);
    expect(response.status).to.equal(422);
    expect(response.headers.get("content-type")).to.match(/^application\/json/);
  });

  it("awaits an async recommender, accepts typed-array items, and counts fallbacks", async () => {
    const base = await start({
      // Outside the contract, but what a careless native binding might hand back.
      recommend: async (userId) => ({ items: Int32Array.from([5, 6]) as unknown as number[], fallback: userId === 9 }),
    });
    expect(await (await fetch(`${base}/recommend/9?k=2`)).json()).to.deep.equal({ user_id: 9, items: [5, 6], fallback: true });
    expect(await (await fetch(`${base}/recommend/8?k=2`)).json()).to.deep.equal({ user_id: 8, items: [5, 6], fallback: false });
    const metrics = await scrape(base);
    expect(valueOf(metrics, "recommend_fallback_total")).to.equal(1);
    expect(valueOf(metrics, "recommend_latency_seconds_count")).to.equal(2);
    expect(valueOf(metrics, "http_requests_total", { route: "/recommend/:user_id", status: "200" })).to.equal(2);
  });

  it("a recommender that throws or rejects gives 500 JSON, and the app keeps serving", async () => {
    let calls = 0;
    const base = await start({
      recommend: (userId, k) => {
        calls += 1;
        if (calls === 1) throw new Error("sync failure");
        if (calls === 2) return Promise.reject(new Error("async failure"));
        return { items: [userId, k], fallback: false };
      },
    });
    for (let i = 0; i < 2; i += 1) {
      const response = await fetch(`${base}/recommend/1`);
      expect(response.status).to.equal(500);
      expect(await response.json()).to.deep.equal({ detail: "Internal Server Error", code: "ERR_INTERNAL" });
    }
    expect(await (await fetch(`${base}/recommend/1?k=3`)).json()).to.deep.equal({ user_id: 1, items: [1, 3], fallback: false });
  });

  it("after stop() answers 503 until start(); stop() waits for a recommendation in flight", async () => {
    const gate = deferred<Recommendation>();
    const called = deferred();
    const app = createRecsysApp({ recommend: () => (called.resolve(), gate.promise) });
    running = await listen(app);
    const inFlight = fetch(`${running.base}/recommend/1`);
    await called.promise;
    let stopped = false;
    const stopping = app.stop().then(() => (stopped = true));
    const refused = await fetch(`${running.base}/recommend/1`);
    expect(refused.status).to.equal(503);
    expect(refused.headers.get("retry-after")).to.equal("1");
    expect((await fetch(`${running.base}/health`)).status).to.equal(200);
    expect(stopped).to.equal(false);
    gate.resolve({ items: [1], fallback: false });
    expect((await inFlight).status).to.equal(200);
    await stopping;
    await app.start();
    expect((await fetch(`${running.base}/recommend/1`)).status).to.equal(200);
  });
});

/** A recommender with a two-movie catalogue and one known user's history; records calls. */
class CatalogueRecommender extends RecordingRecommender implements RecommenderCatalogue {
  readonly historyCalls: [number, number][] = [];
  movies(ids: readonly number[]) {
    const known: Record<number, { title: string; genres: string[] }> = {
      1: { title: "Toy Story (1995)", genres: ["Animation", "Children"] },
      2: { title: "Heat, Part 2 (1995)", genres: [] },
    };
    return ids.map((id) => ({ id, title: known[id]?.title ?? null, genres: known[id]?.genres ?? [] }));
  }
  async history(userId: number, n: number) {
    this.historyCalls.push([userId, n]);
    if (userId !== 7) return { known: false, ratings: [] };
    const all = [
      { movieId: 2, rating: 4.5, timestamp: 1_600_000_000 },
      { movieId: 9, rating: 3, timestamp: 1_500_000_000 },
    ];
    return { known: true, ratings: all.slice(0, n) };
  }
}

describe("GET /movies and GET /users/:user_id/history (display routes)", function () {
  let running: Running | undefined;
  afterEach(async () => {
    await running?.close();
    running = undefined;
  });

  async function start(r: Recommender, limiter?: RecordingLimiter): Promise<string> {
    running = await listen(createRecsysApp(r, { rateLimiter: limiter ?? null }));
    return running.base;
  }

  it("answers titles and genres in the order asked, null for unknown ids", async () => {
    const base = await start(new CatalogueRecommender());
    const response = await fetch(`${base}/movies?ids=2,5,1,2`);
    expect(response.status).to.equal(200);
    expect(await response.json()).to.deep.equal({
      movies: [
        { id: 2, title: "Heat, Part 2 (1995)", genres: [] },
        { id: 5, title: null, genres: [] },
        { id: 1, title: "Toy Story (1995)", genres: ["Animation", "Children"] },
        { id: 2, title: "Heat, Part 2 (1995)", genres: [] },
      ],
    });
  });

  const invalidIds: [string, (string | number)[]][] = [
    ["", ["query", "ids"]],
    ["ids=", ["query", "ids", 0]],
    ["ids=1,x,3", ["query", "ids", 1]],
    ["ids=1,,3", ["query", "ids", 1]],
    ["ids=1.5", ["query", "ids", 0]],
    [`ids=${Array.from({ length: 101 }, (_, i) => i).join(",")}`, ["query", "ids"]],
  ];
  for (const [query, loc] of invalidIds) {
    it(`/movies?${query.slice(0, 20)} -> 422 at ${loc.join(".")}`, async () => {
      const base = await start(new CatalogueRecommender());
      const response = await fetch(`${base}/movies?${query}`);
      expect(response.status).to.equal(422);
      const body = (await response.json()) as ValidationBody;
      expect(body.detail.map((d) => d.loc)).to.deep.include(loc);
    });
  }

  it("answers a known user's recent ratings with titles, newest first; n defaults to 20", async () => {
    const recommender = new CatalogueRecommender();
    const base = await start(recommender);
    expect(await (await fetch(`${base}/users/7/history`)).json()).to.deep.equal({
      user_id: 7,
      known: true,
      ratings: [
        { movie_id: 2, rating: 4.5, timestamp: 1_600_000_000, title: "Heat, Part 2 (1995)", genres: [] },
        { movie_id: 9, rating: 3, timestamp: 1_500_000_000, title: null, genres: [] },
      ],
    });
    expect(((await (await fetch(`${base}/users/7/history?n=1`)).json()) as { ratings: unknown[] }).ratings).to.have.lengthOf(1);
    expect(await (await fetch(`${base}/users/8/history`)).json()).to.deep.equal({ user_id: 8, known: false, ratings: [] });
    expect(recommender.historyCalls).to.deep.equal([[7, 20], [7, 1], [8, 20]]);
  });

  it("validates user_id and n together (422), without calling the recommender", async () => {
    const recommender = new CatalogueRecommender();
    const base = await start(recommender);
    const body = (await (await fetch(`${base}/users/x/history?n=101`)).json()) as ValidationBody;
    expect(body.detail.map((d) => d.loc)).to.deep.equal([["path", "user_id"], ["query", "n"]]);
    expect((await fetch(`${base}/users/1/history?n=0`)).status).to.equal(422);
    expect(recommender.historyCalls).to.deep.equal([]);
  });

  it("a recommender without a catalogue gives null titles and no history", async () => {
    const base = await start(new RecordingRecommender());
    expect(await (await fetch(`${base}/movies?ids=1`)).json()).to.deep.equal({ movies: [{ id: 1, title: null, genres: [] }] });
    expect(await (await fetch(`${base}/users/1/history`)).json()).to.deep.equal({ user_id: 1, known: false, ratings: [] });
  });

  it("both routes are rate limited like /recommend", async () => {
    const limiter = new RecordingLimiter();
    const base = await start(new CatalogueRecommender(), limiter);
    limiter.decide = () => false;
    for (const path of ["/movies?ids=1", "/users/7/history", "/recommend/7"]) {
      const response = await fetch(`${base}${path}`);
      expect(response.status, path).to.equal(429);
      expect(response.headers.get("retry-after")).to.equal("1");
    }
  });
});
