#!/usr/bin/env python3
"""Train, evaluate and export the implicit-feedback movie recommender.

    OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 scripts/recsys/train.py \
        --ratings data/ratings.csv --out models/recsys-demo.pt --card models/recommender.md

Input: MovieLens `ratings.csv` (ml-latest, ml-25m: header userId,movieId,rating,timestamp),
ml-1m `ratings.dat` (`::`-separated) or ml-100k `u.data` (tab-separated, no header); a
directory holding one of them works too.

Feedback: every rating is an interaction (a rating means the user watched the movie; the
task is "what will they watch next"). `--min-rating 4` keeps only liked movies as
positives; items rated lower still count as seen and are never recommended again.

Split: per user, by time. The most recent `--holdout` of each user's ratings (a fraction,
or a count when >= 1) is held out; users with fewer than `--min-user-ratings` ratings stay
train-only. Held-out items the training period never saw count as misses.

Model: implicit ALS (weighted matrix factorisation, Hu, Koren & Volinsky 2008) with
conjugate-gradient solves batched over all users at once (Takacs et al. 2011; the
`implicit` library's default). No negative sampling, so no sampling noise and few sweeps;
each CG step is a gather, a row-wise dot and an index_add over the interactions. The
defaults (alpha 1, reg 5, 64 factors, 10 sweeps) came from a small grid on the demo-sized
synthetic set generated with --seed 11 (the demo model uses seed 7); low alpha won there.

Evaluation: recall@K = hits / min(K, |held-out|) and NDCG@K with binary relevance, for the
model and for most-popular (training counts), seen items excluded for both, same users.

Then (default, `--no-retrain-all` to skip) the model is retrained with the same settings
on all ratings, exported as ONE TorchScript file with `config.json` as an extra file, a
`<file>.sha256` beside it, and a model card.
"""

import argparse
import hashlib
import json
import math
import os
import shlex
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from recommender_module import FORMAT, INTERFACE_VERSION, MatrixFactorizationRecommender  # noqa: E402

GATHER_CHUNK = 1 << 15  # interactions per gather/scatter chunk: bounds memory on ml-25m
EVAL_CHUNK = 1024  # users per scoring matmul during evaluation


# ---------------------------------------------------------------------------------------
# Data


def find_ratings_file(path):
    if os.path.isdir(path):
        for name in ("ratings.csv", "ratings.dat", "u.data"):
            if os.path.exists(os.path.join(path, name)):
                return os.path.join(path, name)
        raise SystemExit(f"no ratings.csv, ratings.dat or u.data in {path}")
    return path


def load_ratings(path):
    """Returns (user_raw, item_raw, rating, timestamp) arrays and the detected format.

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


def temporal_split(user, ts, holdout, min_user_ratings):
    """Boolean mask of held-out rows: each eligible user's most recent ratings.

    Rows must be sorted by (user, time)."""
    test = np.zeros(len(user), dtype=bool)
    starts = np.flatnonzero(np.r_[True, user[1:] != user[:-1]])
    ends = np.r_[starts[1:], len(user)]
    for s, e in zip(starts, ends):
        n = e - s
        if n < min_user_ratings:
            continue
        n_test = int(holdout) if holdout >= 1 else max(1, int(math.floor(n * holdout)))
        n_test = min(n_test, n - 1)
        test[e - n_test:e] = True
    return test


class Interactions:
    """Index maps, positives and seen items of one training set."""

    def __init__(self, user_raw, item_raw, rating, min_rating):
        self.user_ids, self.user = np.unique(user_raw, return_inverse=True)
        self.item_ids, self.item = np.unique(item_raw, return_inverse=True)
        self.n_users, self.n_items = len(self.user_ids), len(self.item_ids)
        positive = rating >= min_rating
        self.pos_user = self.user[positive]
        self.pos_item = self.item[positive]
        # Seen items as CSR (every rating counts as seen, liked or not).
        order = np.lexsort((self.item, self.user))
        self.seen_indices = self.item[order]
        self.seen_indptr = np.r_[0, np.cumsum(np.bincount(self.user, minlength=self.n_users))]
        self.popularity = np.bincount(self.pos_item, minlength=self.n_items)
        # Most popular first; ties broken by raw id so the order is reproducible.
        self.popular_order = np.lexsort((self.item_ids, -self.popularity))


# ---------------------------------------------------------------------------------------
# Model: implicit ALS with batched conjugate gradient


def gather_dot_scatter(v, other, rows, cols, weight):
    """out[r] = sum over interactions (r, c) of weight * (v[r] . other[c]) * other[c]."""
    out = torch.zeros_like(v)
    for s in range(0, rows.numel(), GATHER_CHUNK):
        r, c = rows[s:s + GATHER_CHUNK], cols[s:s + GATHER_CHUNK]
        oc = other.index_select(0, c)
        dots = (v.index_select(0, r) * oc).sum(1, keepdim=True)
        out.index_add_(0, r, oc * (weight * dots))
    return out


def ials_half_sweep(x, other, rows, cols, alpha, reg, cg_steps):
    """Updates x (one side's factors, in place) with `other` fixed.

    Solves (O^T O + alpha * O_u^T O_u + reg I) x_u = (1 + alpha) * sum_{i in u} o_i for every
    row u together, warm-started from the current x."""
    gram = other.t() @ other + reg * torch.eye(other.shape[1], dtype=other.dtype)

    def apply_a(v):
        return v @ gram + gather_dot_scatter(v, other, rows, cols, alpha)

    b = torch.zeros_like(x)
    for s in range(0, rows.numel(), GATHER_CHUNK):
        b.index_add_(0, rows[s:s + GATHER_CHUNK], other.index_select(0, cols[s:s + GATHER_CHUNK]))
    b *= 1.0 + alpha
    r = b - apply_a(x)
    p = r.clone()
    rs_old = (r * r).sum(1, keepdim=True)
    for _ in range(cg_steps):
        ap = apply_a(p)
        step = rs_old / (p * ap).sum(1, keepdim=True).clamp_min(1e-20)
        x += step * p
        r -= step * ap
        rs_new = (r * r).sum(1, keepdim=True)
        p = r + (rs_new / rs_old.clamp_min(1e-20)) * p
        rs_old = rs_new


def ials_loss(x, y, rows, cols, alpha, reg):
    """Full weighted loss over all (user, item) cells, computed without the dense matrix."""
    all_cells = ((x.t() @ x) * (y.t() @ y)).sum()  # sum of (x_u . y_i)^2 over every cell
    observed = 0.0
    for s in range(0, rows.numel(), GATHER_CHUNK):
        d = (x.index_select(0, rows[s:s + GATHER_CHUNK]) * y.index_select(0, cols[s:s + GATHER_CHUNK])).sum(1)
        observed += ((1 + alpha) * (1 - d) ** 2 - d ** 2).sum()
    return float(all_cells + observed + reg * (x.pow(2).sum() + y.pow(2).sum()))


def train_ials(data, args, label):
    gen = torch.Generator().manual_seed(args.seed)
    scale = 0.1 / math.sqrt(args.factors)
    x = torch.randn(data.n_users, args.factors, generator=gen) * scale
    y = torch.randn(data.n_items, args.factors, generator=gen) * scale
    u = torch.from_numpy(data.pos_user).long()
    i = torch.from_numpy(data.pos_item).long()
    t0 = time.time()
    for it in range(1, args.iterations + 1):
        ials_half_sweep(x, y, u, i, args.alpha, args.reg, args.cg_steps)
        ials_half_sweep(y, x, i, u, args.alpha, args.reg, args.cg_steps)
        if it == 1 or it == args.iterations or it % max(1, args.iterations // 5) == 0:
            loss = ials_loss(x, y, u, i, args.alpha, args.reg)
            log(f"  [{label}] iteration {it}/{args.iterations}  loss/interaction "
                f"{loss / max(1, len(u)):.4f}  {time.time() - t0:.1f}s")
    return x, y


# ---------------------------------------------------------------------------------------
# Evaluation


def evaluate(train, test_user_raw, test_item_raw, x, y, k):
    """recall@k and NDCG@k of the model and of most-popular on the held-out items."""
    user_index = {int(r): j for j, r in enumerate(train.user_ids)}
    item_index = {int(r): j for j, r in enumerate(train.item_ids)}
    held = {}
    for ur, ir in zip(test_user_raw.tolist(), test_item_raw.tolist()):
        held.setdefault(user_index[ur], []).append(item_index.get(ir, -1))  # -1: unseen in train
    users = np.array(sorted(held), dtype=np.int64)
    discounts = 1.0 / np.log2(np.arange(2, k + 2))
    # Most-popular scores an item by minus its popularity rank: ties broken as at serving time.
    pop_scores = -torch.from_numpy(np.argsort(train.popular_order).astype(np.float32))
    totals = {"model": [0.0, 0.0, set()], "popularity": [0.0, 0.0, set()]}
    for s in range(0, len(users), EVAL_CHUNK):
        batch = users[s:s + EVAL_CHUNK]
        bt = torch.from_numpy(batch)
        model_scores = x.index_select(0, bt) @ y.t()
        for name, scores in (("model", model_scores), ("popularity", pop_scores.expand(len(batch), -1).clone())):
            for row, uidx in enumerate(batch):
                seen = train.seen_indices[train.seen_indptr[uidx]:train.seen_indptr[uidx + 1]]
                scores[row, torch.from_numpy(seen)] = float("-inf")
            top = torch.topk(scores, min(k, train.n_items), dim=1).indices.numpy()
            for row, uidx in enumerate(batch):
                relevant = set(held[int(uidx)])
                hit = np.array([int(it) in relevant for it in top[row]], dtype=np.float64)
                n_rel = min(k, len(held[int(uidx)]))
                totals[name][0] += hit.sum() / n_rel
                totals[name][1] += (hit * discounts[:len(hit)]).sum() / discounts[:n_rel].sum()
                totals[name][2].update(top[row].tolist())
    n = max(1, len(users))
    return {
        name: {
            f"recall@{k}": round(v[0] / n, 4),
            f"ndcg@{k}": round(v[1] / n, 4),
            f"coverage@{k}": round(len(v[2]) / max(1, train.n_items), 4),
        }
        for name, v in totals.items()
    } | {"users": int(len(users)), "held_out_interactions": int(len(test_item_raw))}


def format_table(metrics, k):
    lines = [f"| model | recall@{k} | NDCG@{k} | catalogue coverage@{k} |", "|---|---|---|---|"]
    for name, label in (("model", "iALS (this model)"), ("popularity", "most popular")):
        m = metrics[name]
        lines.append(f"| {label} | {m[f'recall@{k}']:.4f} | {m[f'ndcg@{k}']:.4f} | {m[f'coverage@{k}']:.4f} |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# Export


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def export(data, x, y, config, out):
    module = MatrixFactorizationRecommender(
        x, y, torch.from_numpy(data.user_ids), torch.from_numpy(data.item_ids),
        torch.from_numpy(data.seen_indptr), torch.from_numpy(data.seen_indices),
        torch.from_numpy(data.popular_order))
    scripted = torch.jit.script(module.eval())
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    torch.jit.save(scripted, out, _extra_files={"config.json": json.dumps(config, indent=2)})
    digest = sha256_of(out)
    with open(out + ".sha256", "w") as f:
        f.write(f"{digest}  {os.path.basename(out)}\n")
    return digest


def write_card(path, config, table, command, data_command):
    c = config
    t = c["training"]
    ev = c["evaluation"]
    positives = ("every rating is a positive interaction" if t["min_rating"] <= 0 else
                 f"ratings >= {t['min_rating']} are positives; lower ones still count as seen")
    lines = [
        "# Movie recommender (implicit ALS)",
        "",
        "Generated by `scripts/recsys/train.py`; regenerate rather than edit. The serving",
        "interface is documented in `docs/recommender.md`.",
        "",
        "## Data",
        "",
        f"- Ratings: `{c['data']['file']}` ({c['data']['format']}), sha256 `{c['data']['sha256']}`.",
        f"- {c['counts']['interactions']} interactions, {c['counts']['users']} users, {c['counts']['items']} movies.",
        f"- Implicit feedback: {positives}.",
    ]
    if data_command:
        lines.append(f"- Generated by `{data_command}` (seeded: byte-identical on every run).")
    lines += [
        "",
        "## Model",
        "",
        f"- Implicit ALS (weighted matrix factorisation): {t['factors']} factors, alpha {t['alpha']}, "
        f"reg {t['reg']}, {t['iterations']} sweeps of {t['cg_steps']} conjugate-gradient steps, seed {t['seed']}.",
        "- The trainer's defaults came from a small grid (alpha, reg, factors) on a separately seeded"
        " synthetic set (`--seed 11`), not from this evaluation.",
        "- Score = dot product of user and item factors; items the user has rated are never recommended.",
        f"- The served model is trained on {'all ratings' if c['trained_on'] == 'all' else 'the training split only'};"
        " the evaluation below is of the same settings trained on the training split.",
        "- Unknown users get the most popular movies (training interaction counts), flagged as fallback.",
        "",
        "## Evaluation",
        "",
        f"Per-user temporal hold-out: the most recent "
        + (f"{t['holdout']:.0%} of each user's ratings" if t["holdout"] < 1 else f"{int(t['holdout'])} ratings of each user")
        + f" (users with at least {t['min_user_ratings']} ratings): {ev['users']} users, "
        f"{ev['held_out_interactions']} held-out positives. Seen items are excluded for both rows; "
        f"recall@{ev['k']} = hits / min({ev['k']}, held-out items), NDCG@{ev['k']} with binary relevance; "
        f"coverage = share of the catalogue recommended to at least one user.",
        "",
        table,
        "",
        "## Reproduce",
        "",
        "```sh",
    ]
    if data_command:
        lines.append(data_command)
    lines += [command, "```", ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


# ---------------------------------------------------------------------------------------


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def parse_args(argv):
    p = argparse.ArgumentParser(description="Train, evaluate and export the iALS recommender.")
    p.add_argument("--ratings", required=True, help="ratings.csv, ratings.dat, u.data or their directory")
    p.add_argument("--out", help="TorchScript checkpoint to write (omit to only evaluate)")
    p.add_argument("--card", help="model card to write (default: beside --out, .md)")
    p.add_argument("--metrics-json", help="write the evaluation metrics here as JSON")
    p.add_argument("--factors", type=int, default=64)
    p.add_argument("--alpha", type=float, default=1.0, help="confidence of an observed interaction")
    p.add_argument("--reg", type=float, default=5.0, help="L2 regularisation")
    p.add_argument("--iterations", type=int, default=10, help="ALS sweeps")
    p.add_argument("--cg-steps", type=int, default=3, help="conjugate-gradient steps per solve")
    p.add_argument("--min-rating", type=float, default=0.0, help="positives are ratings >= this")
    p.add_argument("--holdout", type=float, default=0.2,
                   help="held-out share of each user's most recent ratings (a count when >= 1)")
    p.add_argument("--min-user-ratings", type=int, default=5, help="fewer ratings: train-only")
    p.add_argument("--k", type=int, default=10, help="cut-off of the evaluation metrics")
    p.add_argument("--retrain-all", action=argparse.BooleanOptionalAction, default=True,
                   help="retrain on all ratings for the served model (default on)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--data-command", default="", help="the command that made the data, for the card")
    return p.parse_args(argv)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)

    t0 = time.time()
    user, item, rating, ts, fmt, path = load_ratings(args.ratings)
    user, item, rating, ts = order_and_dedupe(user, item, rating, ts)
    log(f"read {len(user)} ratings ({fmt}) from {path} in {time.time() - t0:.1f}s")

    test = temporal_split(user, ts, args.holdout, args.min_user_ratings)
    train = Interactions(user[~test], item[~test], rating[~test], args.min_rating)
    test_pos = test & (rating >= args.min_rating)
    log(f"split: {int((~test).sum())} train, {int(test.sum())} held out "
        f"({int(test_pos.sum())} positives) of {len(np.unique(user[test]))} users")
    x, y = train_ials(train, args, "train split")
    metrics = evaluate(train, user[test_pos], item[test_pos], x, y, args.k)
    table = format_table(metrics, args.k)
    print(table, flush=True)
    if args.metrics_json:
        with open(args.metrics_json, "w") as f:
            json.dump(metrics | {"k": args.k}, f, indent=2)

    if not args.out:
        return
    if args.retrain_all:
        served = Interactions(user, item, rating, args.min_rating)
        x, y = train_ials(served, args, "all data")
    else:
        served = train
    config = {
        "format": FORMAT,
        "interface_version": INTERFACE_VERSION,
        "counts": {"users": int(served.n_users), "items": int(served.n_items),
                   "interactions": int(served.seen_indptr[-1])},
        "factors": args.factors,
        "padding": {"id": -1, "score": "-inf"},
        "trained_on": "all" if args.retrain_all else "train-split",
        "training": {
            "algorithm": "implicit ALS (weighted matrix factorisation), batched conjugate gradient",
            "factors": args.factors, "alpha": args.alpha, "reg": args.reg,
            "iterations": args.iterations, "cg_steps": args.cg_steps, "seed": args.seed,
            "min_rating": args.min_rating, "holdout": args.holdout,
            "min_user_ratings": args.min_user_ratings, "torch": torch.__version__,
        },
        "evaluation": metrics | {"k": args.k, "split": "per-user temporal hold-out",
                                 "trained_on": "train split"},
        "data": {"file": os.path.basename(path), "format": fmt, "sha256": sha256_of(path)},
    }
    digest = export(served, x, y, config, args.out)
    log(f"exported {args.out} (sha256 {digest[:16]}...)")
    card = args.card or os.path.splitext(args.out)[0] + ".md"
    own_args = []
    skip = False
    for a in argv:  # the card shows --data-command as its own line, not as an argument
        if skip or a.startswith("--data-command"):
            skip = a == "--data-command"
            continue
        own_args.append(a)
    command = "OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 scripts/recsys/train.py " + shlex.join(own_args)
    write_card(card, config, table, command, args.data_command)
    log(f"wrote {card}")


if __name__ == "__main__":
    main()
