"""Ratings input, the per-user temporal split, training sets and the movie catalogue."""

import csv
import math
import os

import numpy as np


def find_ratings_file(path):
    if os.path.isdir(path):
        for name in ("ratings.csv", "ratings.dat", "u.data"):
            if os.path.exists(os.path.join(path, name)):
                return os.path.join(path, name)
        raise SystemExit(f"no ratings.csv, ratings.dat or u.data in {path}")
    return path


def load_ratings(path):
    """Returns (user_raw, item_raw, rating, timestamp) arrays, the detected format and the file.

    Parses with numpy's C tokenizer (np.fromstring with a separator): ml-25m's 25M rows take
    seconds instead of minutes with the csv module."""
    path = find_ratings_file(path)
    with open(path, "rb") as f:
        text = f.read()
    first = text.split(b"\n", 1)[0]
    if b"::" in first:
        fmt = "ml-1m ratings.dat"
        body = text.replace(b"::", b" ")
    elif b"\t" in first:
        fmt = "ml-100k u.data"
        body = text.replace(b"\t", b" ")
    else:
        fmt = "MovieLens ratings.csv"
        header = first.decode().strip().lower().split(",")
        if header[:4] != ["userid", "movieid", "rating", "timestamp"]:
            raise SystemExit(f"{path}: expected header userId,movieId,rating,timestamp, got {first!r}")
        body = text[len(first) + 1:].replace(b",", b" ")
    values = np.fromstring(body.decode(), dtype=np.float64, sep=" ")
    if values.size % 4 != 0:
        raise SystemExit(f"{path}: rows do not all have 4 fields")
    if values.size == 0:
        raise SystemExit(f"{path}: no ratings")
    values = values.reshape(-1, 4)
    return (values[:, 0].astype(np.int64), values[:, 1].astype(np.int64),
            values[:, 2].astype(np.float32), values[:, 3].astype(np.int64), fmt, path)


def order_and_dedupe(user, item, rating, ts):
    """Sorts by (user, time, item) and keeps the latest rating of a repeated (user, item)."""
    order = np.lexsort((item, ts, user))
    user, item, rating, ts = user[order], item[order], rating[order], ts[order]
    key = user.astype(np.int64) * (int(item.max()) + 1) + item
    # np.unique keeps the first occurrence: look from the end to keep the latest.
    _, last_rev = np.unique(key[::-1], return_index=True)
    keep = np.sort(len(key) - 1 - last_rev)
    return user[keep], item[keep], rating[keep], ts[keep]


def temporal_split(user, holdout, min_user_ratings, eligible=None):
    """Boolean mask of held-out rows: each eligible user's most recent ratings.

    Rows must be sorted by (user, time). `eligible` (a mask over rows, constant per user)
    limits the split to some users: the validation split is carved only from users who
    also have test items, so it measures what the test measures."""
    held = np.zeros(len(user), dtype=bool)
    starts = np.flatnonzero(np.r_[True, user[1:] != user[:-1]])
    ends = np.r_[starts[1:], len(user)]
    for s, e in zip(starts, ends):
        n = e - s
        if n < min_user_ratings or (eligible is not None and not eligible[s]):
            continue
        n_held = int(holdout) if holdout >= 1 else max(1, int(math.floor(n * holdout)))
        n_held = min(n_held, n - 1)
        held[e - n_held:e] = True
    return held


class Interactions:
    """Index maps, positives, seen items and chronological sequences of one training set.

    Rows must be sorted by (user, time)."""

    def __init__(self, user_raw, item_raw, rating, min_rating, ts=None):
        self.user_ids, self.user = np.unique(user_raw, return_inverse=True)
        self.item_ids, self.item = np.unique(item_raw, return_inverse=True)
        self.n_users, self.n_items = len(self.user_ids), len(self.item_ids)
        self.rating = rating
        self.ts = ts
        positive = rating >= min_rating
        # Positives in (user, time) order: the histories of EASE and the sequences of SASRec.
        self.pos_user = self.user[positive]
        self.pos_item = self.item[positive]
        self.pos_indptr = np.r_[0, np.cumsum(np.bincount(self.pos_user, minlength=self.n_users))]
        # Seen items as CSR (every rating counts as seen, liked or not).
        order = np.lexsort((self.item, self.user))
        self.seen_indices = self.item[order]
        self.seen_indptr = np.r_[0, np.cumsum(np.bincount(self.user, minlength=self.n_users))]
        self.popularity = np.bincount(self.pos_item, minlength=self.n_items)
        # Most popular first; ties broken by raw id so the order is reproducible.
        self.popular_order = np.lexsort((self.item_ids, -self.popularity))

    def sequences(self):
        """Each user's positive items, oldest first."""
        return [self.pos_item[self.pos_indptr[u]:self.pos_indptr[u + 1]] for u in range(self.n_users)]

    def recent_history(self, length):
        """Each user's `length` most recent ratings, newest first, as CSR (for the playground)."""
        starts = np.r_[0, np.cumsum(np.bincount(self.user, minlength=self.n_users))]
        take = [np.arange(e - 1, max(s, e - length) - 1, -1) for s, e in zip(starts[:-1], starts[1:])]
        rows = np.concatenate(take) if take else np.zeros(0, dtype=np.int64)
        indptr = np.r_[0, np.cumsum([len(t) for t in take])]
        ts = self.ts if self.ts is not None else np.zeros(len(self.user), dtype=np.int64)
        return indptr, self.item[rows], self.rating[rows], ts[rows]


def read_movies(ratings_path):
    """movies.csv beside the ratings file: {raw id: (title, [genres])}, or None when absent."""
    path = os.path.join(os.path.dirname(os.path.abspath(ratings_path)), "movies.csv")
    if not os.path.exists(path):
        return None, None
    movies = {}
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = [h.strip().lower() for h in next(reader, [])]
        if header[:3] != ["movieid", "title", "genres"]:
            raise SystemExit(f"{path}: expected header movieId,title,genres, got {header}")
        for row in reader:
            if len(row) < 3:
                continue
            genres = [] if row[2] in ("", "(no genres listed)") else row[2].split("|")
            movies[int(row[0])] = (row[1], genres)
    return movies, path
