/**
 * Every model family the trainer can pick exports a checkpoint that TorchRecommender serves
 * through the addon with the same contract: Python's scores, seen items filtered, unknown
 * users answered with popular items, titles and recent ratings for the playground.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { expect } from "chai";
import { TorchRecommender } from "../../src/recsys/index.js";
import { makeTempDir, pythonRecommend, readSeen, runPython } from "./pythonFixture.js";

const FAMILIES = ["ease", "ials", "sasrec"] as const;

interface Rating {
  movie: number;
  rating: number;
  ts: number;
}

function readRatings(path: string): Map<number, Rating[]> {
  const byUser = new Map<number, Rating[]>();
  for (const line of readFileSync(path, "utf8").trim().split("\n").slice(1)) {
    const [user, movie, rating, ts] = line.split(",").map(Number) as [number, number, number, number];
    if (!byUser.has(user)) byUser.set(user, []);
    byUser.get(user)!.push({ movie, rating, ts });
  }
  return byUser;
}

/** movies.csv rows: id,title,genres with the title quoted when it holds a comma. */
function readTitles(path: string): Map<number, string> {
  const titles = new Map<number, string>();
  for (const line of readFileSync(path, "utf8").trim().split("\n").slice(1)) {
    const m = /^(\d+),(?:"((?:[^"]|"")*)"|([^,]*)),/.exec(line)!;
    titles.set(Number(m[1]), (m[2] ?? m[3])!.replaceAll('""', '"'));
  }
  return titles;
}

describe("each model family, exported and served", function () {
  let dir: string;
  const checkpoints = new Map<string, string>();

  before(async () => {
    dir = makeTempDir("families-");
    await runPython(["scripts/recsys/synth_movielens.py", "--out", dir, "--preset", "tiny", "--seed", "6"]);
    await Promise.all(
      FAMILIES.map(async (family) => {
        const out = join(dir, `${family}.pt`);
        await runPython([
          "scripts/recsys/train.py", "--ratings", join(dir, "ratings.csv"), "--out", out,
          "--families", family, "--budget-minutes", "0",
        ]);
        checkpoints.set(family, out);
      }),
    );
  });

  for (const family of FAMILIES) {
    describe(family, () => {
      let rec: TorchRecommender;

      before(async () => {
        rec = await TorchRecommender.load(checkpoints.get(family)!, { latencyBudgetMs: null });
      });

      after(async () => {
        await rec?.dispose();
      });

      it("is the family the config names, and answers as Python's torch.jit.load does", async () => {
        expect(rec.config["family"]).to.equal(family);
        const golden = await pythonRecommend(checkpoints.get(family)!, [0, 1, 7, 50], 10);
        for (const [row, index] of [0, 1, 7, 50].entries()) {
          expect(await rec.recommend(golden.userIds[index]!, 10)).to.deep.equal({ items: golden.ids[row], fallback: false });
        }
      });

      it("never recommends a movie the user rated, and gives unknown users the popular list", async () => {
        const seen = readSeen(join(dir, "ratings.csv"));
        for (const [userId, rated] of seen) {
          const result = await rec.recommend(userId, 10);
          expect(result.fallback).to.equal(false);
          expect(result.items).to.have.lengthOf(10);
          expect(result.items.filter((id) => rated.has(id)), `user ${userId}`).to.deep.equal([]);
        }
        const unknown = await rec.recommend(Math.max(...seen.keys()) + 1, 5);
        expect(unknown.fallback).to.equal(true);
        expect(unknown.items).to.have.lengthOf(5);
      });

      it("carries titles and each user's most recent ratings, newest first", async () => {
        const titles = readTitles(join(dir, "movies.csv"));
        const ratings = readRatings(join(dir, "ratings.csv"));
        const { items } = await rec.recommend(1, 5);
        expect(rec.movies([...items, -7])).to.deep.equal([
          ...items.map((id) => ({ id, title: titles.get(id), genres: rec.movies([id])[0]!.genres })),
          { id: -7, title: null, genres: [] },
        ]);
        for (const userId of [...ratings.keys()].slice(0, 20)) {
          const mine = ratings.get(userId)!;
          const history = await rec.history(userId, 5);
          expect(history.known).to.equal(true);
          expect(history.ratings).to.have.lengthOf(Math.min(5, mine.length));
          const newest = Math.max(...mine.map((r) => r.ts));
          expect(history.ratings[0]!.timestamp).to.equal(newest);
          for (let j = 1; j < history.ratings.length; j++) {
            expect(history.ratings[j]!.timestamp).to.be.at.most(history.ratings[j - 1]!.timestamp);
          }
          for (const r of history.ratings) {
            expect(mine).to.deep.include({ movie: r.movieId, rating: r.rating, ts: r.timestamp });
          }
        }
        expect(await rec.history(-1, 5)).to.deep.equal({ known: false, ratings: [] });
      });
    });
  }
});
