/**
 * The Python side: the seeded generator and the trainer (run as a user would, through
 * /usr/bin/python3). Needs no addon.
 */
import { createHash } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { expect } from "chai";
import { makeTempDir, readSeen, runPython, trainedFixture, type TrainedFixture } from "./pythonFixture.js";

describe("synthetic MovieLens generator", () => {
  let first: string;
  let second: string;

  before(async () => {
    first = makeTempDir("gen-a-");
    second = makeTempDir("gen-b-");
    await Promise.all(
      [first, second].map((dir) =>
        runPython(["scripts/recsys/synth_movielens.py", "--out", dir, "--preset", "tiny", "--seed", "5"]),
      ),
    );
  });

  it("writes identical files for the same seed", () => {
    for (const name of ["ratings.csv", "movies.csv"]) {
      expect(readFileSync(join(first, name)).equals(readFileSync(join(second, name))), name).to.equal(true);
    }
  });

  it("writes MovieLens-format ratings with non-contiguous raw ids", () => {
    const lines = readFileSync(join(first, "ratings.csv"), "utf8").trim().split("\n");
    expect(lines[0]).to.equal("userId,movieId,rating,timestamp");
    const rows = lines.slice(1).map((l) => l.split(",").map(Number));
    const users = [...new Set(rows.map((r) => r[0]!))].sort((a, b) => a - b);
    const movies = [...new Set(rows.map((r) => r[1]!))].sort((a, b) => a - b);
    expect(users[0]).to.equal(1);
    expect(users[users.length - 1]).to.be.greaterThan(users.length); // gaps among user ids
    expect(movies[movies.length - 1]).to.be.greaterThan(2 * movies.length); // sparse movie ids
    for (const [, , rating, ts] of rows) {
      expect(rating! * 2).to.satisfy(Number.isInteger);
      expect(rating).to.be.within(0.5, 5);
      expect(ts).to.satisfy(Number.isInteger);
    }
    const movieLines = readFileSync(join(first, "movies.csv"), "utf8").trim().split("\n");
    expect(movieLines[0]).to.equal("movieId,title,genres");
    expect(movieLines.length - 1).to.be.at.least(movies.length);
  });
});

describe("trainer (iALS) on a small synthetic set", () => {
  let fixture: TrainedFixture;

  before(async () => {
    fixture = await trainedFixture();
  });

  it("beats most-popular clearly on the temporal hold-out", () => {
    const { model, popularity, k, users } = fixture.metrics;
    expect(k).to.equal(10);
    expect(users).to.be.greaterThan(300);
    expect(model["recall@10"]).to.be.greaterThan(1.5 * popularity["recall@10"]!);
    expect(model["ndcg@10"]).to.be.greaterThan(1.5 * popularity["ndcg@10"]!);
    expect(model["recall@10"]).to.be.greaterThan(0.15);
    // The printed table carries the same numbers.
    expect(fixture.table).to.contain(model["recall@10"]!.toFixed(4));
    expect(fixture.table).to.contain(popularity["ndcg@10"]!.toFixed(4));
  });

  it("exports one checkpoint with a matching sha256sum file and its config", async () => {
    const bytes = readFileSync(fixture.checkpoint);
    const line = readFileSync(`${fixture.checkpoint}.sha256`, "utf8");
    expect(line).to.equal(`${createHash("sha256").update(bytes).digest("hex")}  model.pt\n`);
    const { stdout } = await runPython([
      "-c",
      "import sys, torch; f = {'config.json': ''}; torch.jit.load(sys.argv[1], _extra_files=f); print(f['config.json'].decode())",
      fixture.checkpoint,
    ]);
    const config = JSON.parse(stdout);
    expect(config.format).to.equal("torchserve-node/recommender");
    expect(config.interface_version).to.equal(1);
    expect(config.trained_on).to.equal("all");
    expect(config.counts.users).to.equal(fixture.seen.size);
    expect(config.evaluation.model).to.deep.equal(fixture.metrics.model);
    expect(config.evaluation.popularity).to.deep.equal(fixture.metrics.popularity);
  });

  it("writes a model card with the evaluation table", () => {
    const card = readFileSync(join(fixture.dir, "model.md"), "utf8");
    expect(card).to.contain("| most popular |");
    expect(card).to.contain(fixture.metrics.model["ndcg@10"]!.toFixed(4));
  });

  it("reads ml-100k u.data (tab-separated, no header) like ratings.csv", async () => {
    const dir = makeTempDir("u100k-");
    await runPython(["scripts/recsys/synth_movielens.py", "--out", dir, "--preset", "tiny", "--seed", "9"]);
    const csv = readFileSync(join(dir, "ratings.csv"), "utf8").trim().split("\n").slice(1);
    writeFileSync(join(dir, "u.data"), csv.map((l) => l.replaceAll(",", "\t")).join("\n") + "\n");
    const [fromCsv, fromUData] = await Promise.all(
      ["ratings.csv", "u.data"].map(async (name) => {
        const out = join(dir, `${name}.json`);
        await runPython(["scripts/recsys/train.py", "--ratings", join(dir, name), "--metrics-json", out, "--iterations", "4"]);
        return JSON.parse(readFileSync(out, "utf8"));
      }),
    );
    expect(fromUData).to.deep.equal(fromCsv);
    expect(readSeen(join(dir, "ratings.csv")).size).to.equal(120);
  });
});
