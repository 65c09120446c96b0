#!/usr/bin/env python3
"""Seeded synthetic MovieLens-format data: ratings.csv and movies.csv.

The data has the structure a recommender should exploit, and the traps a temporal split
should expose:

- Movies carry 1-3 of the 18 MovieLens genres and a small "style" vector; users have a
  genre taste (a sparse Dirichlet mixture) and a style vector. Choice and rating both
  follow the user-movie affinity.
- Popularity is heavily skewed (log-normal appeal: a long tail), and so is user activity
  (log-normal counts, a few heavy raters, some users with under 5 ratings). Popularity
  explains about as much of a choice as taste does, as in MovieLens.
- Time drifts: movies are released over the whole period and can only be rated after
  release, people favour recent releases, and each user's taste moves during their active
  span. The most recent ratings of a user are therefore harder to predict than random ones.
- Raw ids are not contiguous: movie ids are a sparse sample of 1..10*movies and user ids
  start at 1 with gaps, so raw-id maps are exercised.

Same seed and sizes give byte-identical files.

    /usr/bin/python3 scripts/recsys/synth_movielens.py --out /tmp/ml-small --preset small
    /usr/bin/python3 scripts/recsys/synth_movielens.py --out data/recsys-demo --preset demo
"""

import argparse
import csv
import os
import sys
import time

import numpy as np

GENRES = [
    "Action", "Adventure", "Animation", "Children", "Comedy", "Crime", "Documentary", "Drama",
    "Fantasy", "Film-Noir", "Horror", "Musical", "Mystery", "Romance", "Sci-Fi", "Thriller",
    "War", "Western",
]
# Rough genre prevalence in MovieLens: drama and comedy everywhere, film-noir rare.
GENRE_WEIGHT = np.array([
    8, 5, 2, 2, 12, 5, 2, 16, 3, 0.5, 4, 1.5, 3, 6, 3, 7, 1.5, 1,
], dtype=np.float64)

PRESETS = {
    # users, movies, target ratings
    "tiny": (120, 200, 4_000),
    "small": (400, 600, 20_000),
    "demo": (2_000, 3_000, 200_000),
}

T_START = 946_684_800  # 2000-01-01
T_END = 1_577_836_800  # 2020-01-01
STYLE_DIM = 8
BLOCK = 8  # events drawn together from one time point (without replacement)
# How much taste, popularity (log-normal appeal) and recency (per year since release) drive
# a choice, and how far a user's taste drifts. Calibrated so the data is about as hard as
# MovieLens ml-latest-small under a per-user temporal hold-out, where models reach only
# 1.4-1.7x most-popular's recall@10: with strong taste and a strong pull of new releases
# (0.35 per year: everyone active at one time rates the same few new films) every model
# scored 3x most-popular here, which flattered them and made choices tuned on it wrong.
TASTE_WEIGHT = 0.7
APPEAL_SD = 1.8
RECENCY = 0.1
DRIFT = 0.8

ADJECTIVES = ["Silent", "Crimson", "Last", "Hidden", "Broken", "Golden", "Midnight", "Lost",
              "Electric", "Distant", "Wild", "Frozen", "Secret", "Burning", "Quiet", "Iron"]
NOUNS = ["River", "Empire", "Garden", "Signal", "Harbor", "Promise", "Machine", "Summer",
         "Frontier", "Witness", "Kingdom", "Voyage", "Shadow", "Letter", "Orbit", "Dance"]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="output directory (created)")
    p.add_argument("--preset", choices=sorted(PRESETS), default="small")
    p.add_argument("--users", type=int, help="number of users (overrides the preset)")
    p.add_argument("--movies", type=int, help="number of movies (overrides the preset)")
    p.add_argument("--ratings", type=int, help="target number of ratings (overrides the preset)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--half-stars", action=argparse.BooleanOptionalAction, default=True,
                   help="ratings 0.5..5 in 0.5 steps (default) or whole stars 1..5")
    return p.parse_args(argv)


def make_movies(rng, n_movies):
    weights = GENRE_WEIGHT / GENRE_WEIGHT.sum()
    n_genres = rng.choice([1, 2, 3], size=n_movies, p=[0.45, 0.4, 0.15])
    genre_mix = np.zeros((n_movies, len(GENRES)))
    genre_lists = []
    for m in range(n_movies):
        g = rng.choice(len(GENRES), size=n_genres[m], replace=False, p=weights)
        genre_mix[m, g] = 1.0 / len(g)
        genre_lists.append(sorted(g.tolist()))
    style = rng.normal(size=(n_movies, STYLE_DIM))
    appeal = rng.normal(0.0, APPEAL_SD, size=n_movies)  # log-popularity: long tail
    # A quarter of the catalogue predates the ratings period ("classics").
    old = rng.random(n_movies) < 0.25
    release = np.where(
        old,
        T_START - rng.uniform(0, 30 * 365 * 86400, size=n_movies),
        rng.uniform(T_START, T_END - 180 * 86400, size=n_movies),
    )
    raw_ids = np.sort(rng.choice(np.arange(1, 10 * n_movies + 1), size=n_movies, replace=False))
    return genre_mix, genre_lists, style, appeal, release, raw_ids


def make_users(rng, n_users, n_ratings):
    taste0 = rng.dirichlet(np.full(len(GENRES), 0.25), size=n_users)
    taste1 = rng.dirichlet(np.full(len(GENRES), 0.25), size=n_users)
    style = rng.normal(size=(n_users, STYLE_DIM))
    bias = rng.normal(0.0, 0.4, size=n_users)
    # Activity: log-normal, scaled to the target total; at least 1 rating each.
    act = rng.lognormal(0.0, 1.0, size=n_users)
    counts = np.maximum(1, np.round(act / act.sum() * n_ratings)).astype(np.int64)
    start = rng.uniform(T_START, T_END - 30 * 86400, size=n_users)
    span = np.minimum(rng.exponential(3 * 365 * 86400, size=n_users) + 86400, T_END - start)
    # User ids start at 1, with gaps (deleted accounts).
    candidates = np.arange(2, int(n_users * 1.3) + 2)
    raw_ids = np.concatenate([[1], np.sort(rng.choice(candidates, size=n_users - 1, replace=False))])
    return taste0, taste1, style, bias, counts, start, span, raw_ids


def affinity(taste, style_u, genre_mix, style_m):
    genre_match = genre_mix @ taste  # [M], in 0..max(taste)
    return 4.0 * genre_match / (taste.max() + 1e-9) + 0.6 * (style_m @ style_u) / np.sqrt(STYLE_DIM)


def generate(args):
    preset_users, preset_movies, preset_ratings = PRESETS[args.preset]
    n_users = args.users or preset_users
    n_movies = args.movies or preset_movies
    n_ratings = args.ratings or preset_ratings
    if n_users < 2 or n_movies < 2 or n_ratings < n_users:
        raise SystemExit("need at least 2 users, 2 movies and as many ratings as users")
    rng = np.random.default_rng(args.seed)
    genre_mix, genre_lists, m_style, appeal, release, movie_ids = make_movies(rng, n_movies)
    taste0, taste1, u_style, u_bias, counts, start, span, user_ids = make_users(rng, n_users, n_ratings)
    counts = np.minimum(counts, n_movies // 2)

    rows_user, rows_movie, rows_rating, rows_time = [], [], [], []
    t0 = time.time()
    for u in range(n_users):
        n = int(counts[u])
        times = np.sort(rng.uniform(start[u], start[u] + span[u], size=n))
        seen = np.zeros(n_movies, dtype=bool)
        for b in range(0, n, BLOCK):
            block_times = times[b:b + BLOCK]
            t = block_times.mean()
            drift = min(1.0, (t - start[u]) / (5 * 365 * 86400))  # taste moves over ~5 years
            taste = (1 - DRIFT * drift) * taste0[u] + DRIFT * drift * taste1[u]
            aff = affinity(taste, u_style[u], genre_mix, m_style)
            age_years = (t - release) / (365 * 86400)
            logits = TASTE_WEIGHT * aff + 1.0 * appeal - RECENCY * np.clip(age_years, 0, None)
            logits[(release > t) | seen] = -np.inf
            available = np.isfinite(logits).sum()
            take = min(len(block_times), int(available))
            if take == 0:
                continue
            g = logits + rng.gumbel(size=n_movies)
            chosen = np.argpartition(-g, take - 1)[:take]
            chosen = chosen[np.argsort(-g[chosen])]
            seen[chosen] = True
            raw = 3.2 + u_bias[u] + 0.45 * (aff[chosen] - 2.0) + 0.25 * appeal[chosen] \
                + rng.normal(0.0, 0.7, size=take)
            if args.half_stars:
                rating = np.clip(np.round(raw * 2) / 2, 0.5, 5.0)
            else:
                rating = np.clip(np.round(raw), 1.0, 5.0)
            # Timestamps within the block keep their order; a release can not follow a rating.
            ts = np.maximum(block_times[:take], release[chosen] + 3600)
            rows_user.append(np.full(take, user_ids[u]))
            rows_movie.append(movie_ids[chosen])
            rows_rating.append(rating)
            rows_time.append(ts.astype(np.int64))
        if (u + 1) % 500 == 0 or u + 1 == n_users:
            print(f"  users {u + 1}/{n_users}  ({time.time() - t0:.1f}s)", file=sys.stderr)

    user = np.concatenate(rows_user)
    movie = np.concatenate(rows_movie)
    rating = np.concatenate(rows_rating)
    ts = np.concatenate(rows_time)
    order = np.lexsort((movie, user))  # MovieLens order: userId, then movieId
    return (user[order], movie[order], rating[order], ts[order]), (movie_ids, genre_lists, release)


def write(out_dir, ratings, movies):
    os.makedirs(out_dir, exist_ok=True)
    user, movie, rating, ts = ratings
    with open(os.path.join(out_dir, "ratings.csv"), "w", newline="") as f:
        f.write("userId,movieId,rating,timestamp\n")
        f.writelines(f"{u},{m},{r:g},{t}\n" for u, m, r, t in zip(user, movie, rating, ts))
    movie_ids, genre_lists, release = movies
    word_rng = np.random.default_rng(len(movie_ids))
    with open(os.path.join(out_dir, "movies.csv"), "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["movieId", "title", "genres"])
        for mid, genres, rel in zip(movie_ids, genre_lists, release):
            year = time.gmtime(int(rel)).tm_year
            title = f"{ADJECTIVES[word_rng.integers(len(ADJECTIVES))]} " \
                    f"{NOUNS[word_rng.integers(len(NOUNS))]}, Part {mid % 7 + 1} ({year})"
            w.writerow([int(mid), title, "|".join(GENRES[g] for g in genres)])


def main(argv=None):
    args = parse_args(argv)
    ratings, movies = generate(args)
    write(args.out, ratings, movies)
    user, movie = ratings[0], ratings[1]
    print(f"wrote {len(user)} ratings by {len(np.unique(user))} users on "
          f"{len(np.unique(movie))} of {len(movies[0])} movies to {args.out}")


if __name__ == "__main__":
    main()
