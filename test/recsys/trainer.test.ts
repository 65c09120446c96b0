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

describe("trainer on a small synthetic set (every family's first setting)", () => {
  let fixture: TrainedFixture;

  before(async () => {
    fixture = await trainedFixture();
  });

  it("tries every family on the validation split and picks the best validation recall@10", () => {
    const { search, family, params } = fixture.metrics;
    const tried = search.filter((t) => t.validation !== undefined);
    expect(new Set(tried.map((t) => t.family))).to.deep.equal(new Set(["ease", "ials", "sasrec"]));
    const best = Math.max(...tried.map((t) => t.validation!["recall@10"]!));
    const winner = tried.find((t) => t.family === family && JSON.stringify(t.params) === JSON.stringify(params))!;
    expect(winner.validation!["recall@10"]).to.equal(best);
    // Validation users are test users, scored on their own earlier ratings.
    expect(fixture.metrics.validation.users).to.be.within(0.9 * fixture.metrics.users, fixture.metrics.users);
    expect(fixture.metrics.validation.popularity["recall@10"]).to.be.greaterThan(0);
  });

  it("reports the test split once, for the winner, and it beats most-popular clearly", () => {
    const { model, popularity, k, users, search } = fixture.metrics;
    expect(k).to.equal(10);
    expect(users).to.be.greaterThan(300);
    expect(model["recall@10"]).to.be.greaterThan(1.3 * popularity["recall@10"]!);
    expect(model["ndcg@10"]).to.be.greaterThan(1.3 * popularity["ndcg@10"]!);
    // No trial of the search saw the test split.
    for (const trial of search) expect(Object.keys(trial)).to.not.include("test");
    // One table on stdout, carrying the same numbers.
    expect(fixture.table.match(/\| most popular \|/g)).to.have.lengthOf(1);
    expect(fixture.table).to.contain(model["recall@10"]!.toFixed(4));
    expect(fixture.table).to.contain(popularity["ndcg@10"]!.toFixed(4));
  });

  it("exports one checkpoint with a matching sha256sum file, its config and the movie titles", async () => {
    const bytes = readFileSync(fixture.checkpoint);
    const line = readFileSync(`${fixture.checkpoint}.sha256`, "utf8");
    expect(line).to.equal(`${createHash("sha256").update(bytes).digest("hex")}  model.pt\n`);
    const { stdout } = await runPython([
      "-c",
      "import sys, json, torch; f = {'config.json': '', 'movies.json': ''}; torch.jit.load(sys.argv[1], _extra_files=f); " +
        "print(json.dumps({k: v.decode() for k, v in f.items()}))",
      fixture.checkpoint,
    ]);
    const files = JSON.parse(stdout) as Record<string, string>;
    const config = JSON.parse(files["config.json"]!);
    expect(config.format).to.equal("torchserve-node/recommender");
    expect(config.interface_version).to.equal(1);
    expect(config.trained_on).to.equal("all");
    expect(config.family).to.equal(fixture.metrics.family);
    expect(config.counts.users).to.equal(fixture.seen.size);
    expect(config.evaluation.model).to.deep.equal(fixture.metrics.model);
    expect(config.evaluation.popularity).to.deep.equal(fixture.metrics.popularity);
    const movies = JSON.parse(files["movies.json"]!) as Record<string, { title: string; genres: string[] }>;
    expect(Object.keys(movies)).to.have.lengthOf(config.counts.items);
    const csv = readFileSync(join(fixture.dir, "movies.csv"), "utf8").trim().split("\n").slice(1);
    const [id, ...rest] = csv[0]!.split(",");
    if (movies[id!]) expect(rest.join(",")).to.contain(movies[id!]!.title.split(",")[0]!);
  });

  it("writes a model card with the protocol, every setting tried, the winner and the test table", () => {
    const card = readFileSync(join(fixture.dir, "model.md"), "utf8");
    expect(card).to.contain("## Protocol");
    for (const name of ["EASE", "iALS", "SASRec"]) expect(card).to.match(new RegExp(`^\\| ${name} .*\\| \\d+\\.\\d{4} \\|`, "m"));
    expect(card).to.contain("**(winner)**");
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
        await runPython(["scripts/recsys/train.py", "--ratings", join(dir, name), "--metrics-json", out, "--families", "ease", "--budget-minutes", "0"]);
        const metrics = JSON.parse(readFileSync(out, "utf8"));
        for (const trial of metrics.search) delete trial.seconds;
        return metrics;
      }),
    );
    expect(fromUData).to.deep.equal(fromCsv);
    expect(readSeen(join(dir, "ratings.csv")).size).to.equal(120);
  });
});

describe("trainer: EASE and the memory cap", () => {
  let dir: string;

  before(async () => {
    dir = makeTempDir("cap-");
    await runPython(["scripts/recsys/synth_movielens.py", "--out", dir, "--preset", "tiny", "--seed", "4"]);
  });

  it("refuses EASE alone with a clear message when its item x item matrices exceed --memory-cap-mb", async () => {
    // 200 movies need ~0.5 MiB; a cap of 0 MiB is too small.
    const args = ["scripts/recsys/train.py", "--ratings", join(dir, "ratings.csv"), "--families", "ease", "--memory-cap-mb", "0"];
    try {
      await runPython(args);
      expect.fail("trained EASE above the memory cap");
    } catch (err) {
      const { code, stderr } = err as { code: number; stderr: string };
      expect(code).to.equal(1);
      expect(stderr).to.match(/EASE skipped: the catalogue has \d+ items, so its item x item matrices need about \d+ MiB, above --memory-cap-mb 0/);
      expect(stderr).to.contain("choose another family");
    }
  });

  it("falls back to the other families and says so in the card", async () => {
    const out = join(dir, "model.pt");
    const metricsPath = join(dir, "metrics.json");
    await runPython([
      "scripts/recsys/train.py", "--ratings", join(dir, "ratings.csv"), "--families", "ease,ials",
      "--memory-cap-mb", "0", "--budget-minutes", "0", "--out", out, "--metrics-json", metricsPath,
    ]);
    const metrics = JSON.parse(readFileSync(metricsPath, "utf8"));
    expect(metrics.family).to.equal("ials");
    expect(metrics.search.map((t: { family: string }) => t.family)).to.not.include("ease");
    expect(metrics.notes.join(" ")).to.contain("EASE skipped");
    expect(readFileSync(join(dir, "model.md"), "utf8")).to.contain("EASE skipped");
  });
});
