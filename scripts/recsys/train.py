#!/usr/bin/env python3
"""Choose, evaluate and export the movie recommender.

    OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 scripts/recsys/train.py \
        --ratings data/ratings.csv --out models/recsys-demo.pt --card models/recommender.md

Input: MovieLens `ratings.csv` (ml-latest, ml-25m: header userId,movieId,rating,timestamp),
ml-1m `ratings.dat` (`::`-separated) or ml-100k `u.data` (tab-separated, no header); a
directory holding one of them works too. A `movies.csv` beside it puts titles and genres
into the checkpoint (extra file movies.json).

Feedback: every rating is an interaction (a rating means the user watched the movie; the
task is "what will they watch next"). `--min-rating 4` keeps only liked movies as
positives; items rated lower still count as seen and are never recommended again.

Protocol (docs/recommender.md):
  1. test split: each user's most recent `--holdout` of their ratings (users with at least
     `--min-user-ratings` ratings); the rest is the training part.
  2. validation split: the same rule applied again to the training part.
  3. search: every family's settings (EASE, iALS, SASRec), trained on training minus
     validation and scored on validation, within `--budget-minutes` (see `schedule`).
  4. the winner (best validation recall@K, then NDCG@K) is retrained on the whole training
     part and scored on the test split, once, next to most-popular.
  5. (default) retrained on all ratings and exported: one TorchScript file, `.sha256`,
     model card.
"""

import argparse
import hashlib
import json
import os
import shlex
import sys
import time


def _openblas_core_for_amx_cpus():
    """Debian bookworm's OpenBLAS (0.3.21) picks its Sapphire Rapids kernels on CPUs with AMX,
    and on one thread (OMP_NUM_THREADS=1) torch.linalg.cholesky's small products in them crash
    (SIGSEGV in fit_ease, Xeon family 6 model 207). On a Xeon of that class whose AMX the host
    hides (AVX512_FP16, no amx_tile) it knows no core and falls back to its Prescott (SSE3)
    kernels, whose strsm crashes the same way (a general protection fault, every run). Its
    Skylake-X kernels run the same AVX-512 float32 code without either. Set before numpy or torch
    loads OpenBLAS; a choice already made in OPENBLAS_CORETYPE is kept."""
    if "OPENBLAS_CORETYPE" in os.environ:
        return
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            flags = next((line for line in f if line.startswith("flags")), "").split()
    except OSError:
        return
    if "amx_tile" in flags or ("avx512_fp16" in flags and "avx512f" in flags):
        os.environ["OPENBLAS_CORETYPE"] = "SkylakeX"


_openblas_core_for_amx_cpus()

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from data import Interactions, load_ratings, order_and_dedupe, read_movies, temporal_split  # noqa: E402
from evaluate import HeldOut  # noqa: E402
from families import GramCache, TooLarge, ease_memory_bytes, fit_ease, fit_ials, fit_sasrec  # noqa: E402
from model_card import write_card  # noqa: E402
from recommender_module import FORMAT, INTERFACE_VERSION, ServedRecommender  # noqa: E402

FAMILIES = {
    "ease": ("EASE (item-item, closed form)", fit_ease),
    "ials": ("iALS (matrix factorisation)", fit_ials),
    "sasrec": ("SASRec (sequential, next item)", fit_sasrec),
}

# Each family's settings, most promising first (the order the search tries them in).
# EASE's lambda scales with the data: MovieLens optima lie between ~100 (ml-latest-small)
# and ~500 (ml-20m); the grid brackets them. The iALS and SASRec settings follow Rendle et
# al. 2021 and Kang & McAuley 2018 (small data: heavier dropout).
GRIDS = {
    "ease": [{"lambda": v} for v in (500.0, 200.0, 1000.0, 100.0, 2000.0, 50.0)],
    "ials": [
        {"factors": 64, "alpha": 1.0, "reg": 5.0},
        {"factors": 128, "alpha": 2.0, "reg": 20.0},
        {"factors": 32, "alpha": 1.0, "reg": 2.0},
        {"factors": 128, "alpha": 0.5, "reg": 5.0},
        {"factors": 64, "alpha": 4.0, "reg": 20.0},
        {"factors": 256, "alpha": 1.0, "reg": 50.0},
    ],
    "sasrec": [
        {"dim": 64, "max_len": 50, "blocks": 1, "dropout": 0.2},
        {"dim": 64, "max_len": 50, "blocks": 2, "dropout": 0.4},
        {"dim": 128, "max_len": 50, "blocks": 1, "dropout": 0.3, "negatives": 1024},
    ],
}
SASREC_SHARE = 0.4  # most of the budget one SASRec setting may take


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def fmt_params(params):
    return ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in params.items())


def fmt_clock(seconds):
    return f"{int(seconds) // 60}:{int(seconds) % 60:02d}"


class Fitter:
    """Trains a family's setting on a training set; shares EASE's Gram matrix between lambdas."""

    def __init__(self, args):
        self.args = args
        self.gram = GramCache()

    def fit(self, family, data, params, deadline=None, validate=None):
        params = dict(params)
        if family == "ease":
            params.setdefault("neighbours", self.args.ease_neighbours)
        return FAMILIES[family][1](data, params, seed=self.args.seed, deadline=deadline, validate=validate,
                                   log=log, memory_cap_bytes=self.args.memory_cap_mb * 2**20,
                                   gram_cache=self.gram)


def schedule(families):
    """The order settings are tried in: every family's first setting (so each family is
    represented whatever the budget), then the rest of EASE's grid (one matrix inverse
    each, the Gram matrix shared), then iALS and SASRec round-robin."""
    queues = {f: list(GRIDS[f]) for f in families}
    order = [(f, queues[f].pop(0)) for f in families]
    if "ease" in queues:
        order += [("ease", p) for p in queues.pop("ease")]
    while any(queues.values()):
        for f in list(queues):
            if queues[f]:
                order.append((f, queues[f].pop(0)))
    return order


def search(args, fitter, inner, validation, families):
    """Tries the schedule's settings while the budget lasts (a setting is skipped when its
    family's past trials took longer than what is left). Returns every trial, with its
    validation metrics or why it was skipped."""
    k = args.k
    budget = args.budget_minutes * 60.0
    t0 = time.time()
    order = schedule(families)
    durations = {f: [] for f in families}
    too_large = set()
    trials = []
    for n, (family, params) in enumerate(order, 1):
        elapsed = time.time() - t0
        remaining = budget - elapsed
        if family in too_large:
            continue
        if durations[family] and np.mean(durations[family]) > remaining:
            trials.append({"family": family, "params": params, "skipped": "time budget"})
            continue
        log(f"[search {n}/{len(order)}  {fmt_clock(elapsed)} of {fmt_clock(budget)}] {family} {fmt_params(params)}")
        started = time.time()
        # SASRec trains epoch by epoch until validation stops improving or this deadline.
        deadline = started + max(0.0, min(remaining, SASREC_SHARE * budget))
        validate = None
        if family == "sasrec":
            validate = lambda scorer: validation.evaluate(scorer.score, k)[f"recall@{k}"]  # noqa: E731
        try:
            scorer, used = fitter.fit(family, inner, params, deadline=deadline, validate=validate)
        except TooLarge as err:
            log(f"  skipped: {err}")
            trials.append({"family": family, "params": params, "skipped": str(err)})
            too_large.add(family)
            continue
        metrics = validation.evaluate(scorer.score, k)
        seconds = round(time.time() - started, 1)
        durations[family].append(seconds)
        trials.append({"family": family, "params": used, "validation": metrics, "seconds": seconds})
        log(f"  validation recall@{k} {metrics[f'recall@{k}']:.4f}  NDCG@{k} {metrics[f'ndcg@{k}']:.4f}"
            f"  coverage {metrics[f'coverage@{k}']:.4f}  ({seconds:.1f}s)")
    return trials


def best_of(trials, k, family=None):
    done = [t for t in trials if "validation" in t and (family is None or t["family"] == family)]
    if not done:
        return None
    return max(done, key=lambda t: (t["validation"][f"recall@{k}"], t["validation"][f"ndcg@{k}"]))


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def export(data, scorer, config, movies, out, history_length):
    h_indptr, h_items, h_ratings, h_times = data.recent_history(history_length)
    module = ServedRecommender(
        scorer, torch.from_numpy(data.user_ids), torch.from_numpy(data.item_ids),
        torch.from_numpy(data.seen_indptr), torch.from_numpy(data.seen_indices),
        torch.from_numpy(data.popular_order), torch.from_numpy(h_indptr), torch.from_numpy(h_items),
        torch.from_numpy(h_ratings), torch.from_numpy(h_times))
    for p in module.parameters():
        p.requires_grad_(False)
    scripted = torch.jit.script(module.eval())
    extra = {"config.json": json.dumps(config, indent=2)}
    if movies is not None:
        catalogue = {str(int(i)): {"title": movies[int(i)][0], "genres": movies[int(i)][1]}
                     for i in data.item_ids if int(i) in movies}
        extra["movies.json"] = json.dumps(catalogue, ensure_ascii=False, separators=(",", ":"))
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    torch.jit.save(scripted, out, _extra_files=extra)
    digest = sha256_of(out)
    with open(out + ".sha256", "w") as f:
        f.write(f"{digest}  {os.path.basename(out)}\n")
    return digest


def format_table(rows, k):
    lines = [f"| model | recall@{k} | NDCG@{k} | catalogue coverage@{k} |", "|---|---|---|---|"]
    for label, m in rows:
        lines.append(f"| {label} | {m[f'recall@{k}']:.4f} | {m[f'ndcg@{k}']:.4f} | {m[f'coverage@{k}']:.4f} |")
    return "\n".join(lines)


def parse_args(argv):
    p = argparse.ArgumentParser(description="Choose (by validation), evaluate and export the recommender.")
    p.add_argument("--ratings", required=True, help="ratings.csv, ratings.dat, u.data or their directory")
    p.add_argument("--out", help="TorchScript checkpoint to write (omit to only evaluate)")
    p.add_argument("--card", help="model card to write (default: beside --out, .md)")
    p.add_argument("--metrics-json", help="write the search and the evaluation here as JSON")
    p.add_argument("--families", default="ease,ials,sasrec",
                   help="comma-separated families to search among: ease, ials, sasrec")
    p.add_argument("--budget-minutes", type=float, default=5.0,
                   help="time for the search (every family's first setting runs regardless)")
    p.add_argument("--memory-cap-mb", type=int, default=4096,
                   help="working memory EASE may use (3 float32 item x item matrices); above it EASE is skipped")
    p.add_argument("--ease-neighbours", type=int, default=64,
                   help="EASE weights kept per item (largest magnitude; 0: all); the evaluation scores the pruned model")
    p.add_argument("--min-rating", type=float, default=0.0, help="positives are ratings >= this")
    p.add_argument("--holdout", type=float, default=0.2,
                   help="held-out share of each user's most recent ratings (a count when >= 1)")
    p.add_argument("--min-user-ratings", type=int, default=5, help="fewer ratings: train-only")
    p.add_argument("--k", type=int, default=10, help="cut-off of the evaluation metrics")
    p.add_argument("--test-every-family", action="store_true",
                   help="also score each family's best setting on the test split (reported, not used to choose)")
    p.add_argument("--retrain-all", action=argparse.BooleanOptionalAction, default=True,
                   help="retrain on all ratings for the served model (default on)")
    p.add_argument("--history-length", type=int, default=20,
                   help="most recent ratings per user stored for display")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--data-command", default="", help="the command that made the data, for the card")
    args = p.parse_args(argv)
    families = [f.strip() for f in args.families.split(",") if f.strip()]
    unknown = [f for f in families if f not in FAMILIES]
    if unknown or not families:
        p.error(f"--families: unknown {unknown or 'empty'}; choose among {', '.join(FAMILIES)}")
    args.family_list = families
    if args.budget_minutes < 0:
        p.error("--budget-minutes must be >= 0")
    return args


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    k = args.k

    t0 = time.time()
    user, item, rating, ts, fmt, path = load_ratings(args.ratings)
    user, item, rating, ts = order_and_dedupe(user, item, rating, ts)
    log(f"read {len(user)} ratings ({fmt}) from {path} in {time.time() - t0:.1f}s")
    movies, movies_path = read_movies(path)

    families = list(args.family_list)
    n_items_all = len(np.unique(item))
    notes = []
    if "ease" in families and ease_memory_bytes(n_items_all) > args.memory_cap_mb * 2**20:
        message = (f"EASE skipped: the catalogue has {n_items_all} items, so its item x item matrices need "
                   f"about {ease_memory_bytes(n_items_all) / 2**20:.0f} MiB, above --memory-cap-mb "
                   f"{args.memory_cap_mb}")
        if families == ["ease"]:
            raise SystemExit(message + "; choose another family (--families ials,sasrec) or raise the cap")
        log(message + "; searching the other families")
        notes.append(message)
        families.remove("ease")

    # Test split, then the validation split carved from the training part by the same rule
    # (only from users who have test items, so validation measures what the test measures).
    test = temporal_split(user, args.holdout, args.min_user_ratings)
    has_test = np.zeros(len(user), dtype=bool)
    test_users = np.unique(user[test])
    has_test[np.isin(user, test_users)] = True
    tr = ~test
    val_in_train = temporal_split(user[tr], args.holdout, 2, eligible=has_test[tr])
    positive = rating >= args.min_rating
    train = Interactions(user[tr], item[tr], rating[tr], args.min_rating, ts[tr])
    inner_rows = np.flatnonzero(tr)[~val_in_train]
    val_rows = np.flatnonzero(tr)[val_in_train]
    inner = Interactions(user[inner_rows], item[inner_rows], rating[inner_rows], args.min_rating, ts[inner_rows])
    val_pos = val_rows[positive[val_rows]]
    validation = HeldOut(inner, user[val_pos], item[val_pos])
    test_pos = test & positive
    test_set = HeldOut(train, user[test_pos], item[test_pos])
    log(f"split: {len(inner_rows)} training, {len(val_rows)} validation, {int(test.sum())} test ratings; "
        f"{len(test_users)} test users")

    fitter = Fitter(args)
    trials = search(args, fitter, inner, validation, families)
    val_popularity = validation.popularity(k)
    log(f"validation, most popular: recall@{k} {val_popularity[f'recall@{k}']:.4f}")
    winner = best_of(trials, k)
    if winner is None:
        raise SystemExit("no family could be trained: " + "; ".join(t.get("skipped", "") for t in trials))
    family = winner["family"]
    log(f"winner: {family} {fmt_params(winner['params'])} "
        f"(validation recall@{k} {winner['validation'][f'recall@{k}']:.4f})")

    # The winner's settings, retrained on the whole training part, scored on the test split once.
    scorer, _ = fitter.fit(family, train, winner["params"])
    test_metrics = test_set.evaluate(scorer.score, k)
    test_popularity = test_set.popularity(k)
    rows = [(f"{FAMILIES[family][0]}: this model", test_metrics), ("most popular", test_popularity)]
    others = {}
    if args.test_every_family:
        for other in families:
            best = best_of(trials, k, other)
            if other == family or best is None:
                continue
            other_scorer, _ = fitter.fit(other, train, best["params"])
            others[other] = {"params": best["params"], "test": test_set.evaluate(other_scorer.score, k)}
            rows.insert(len(rows) - 1, (f"{FAMILIES[other][0]}: best setting, not chosen", others[other]["test"]))
    table = format_table(rows, k)
    print(table, flush=True)

    evaluation = {
        "model": test_metrics,
        "popularity": test_popularity,
        "users": int(len(test_set.users)),
        "held_out_interactions": test_set.interactions,
        "k": k,
        "split": "per-user temporal hold-out",
        "trained_on": "train split",
        "validation": {"users": int(len(validation.users)), "held_out_interactions": validation.interactions,
                       "popularity": val_popularity},
    }
    if others:
        evaluation["other_families"] = others
    report = {"family": family, "params": winner["params"], "search": trials, "notes": notes} | evaluation
    if args.metrics_json:
        with open(args.metrics_json, "w") as f:
            json.dump(report, f, indent=2)

    if not args.out:
        log(f"done in {fmt_clock(time.time() - t0)}")
        return
    if args.retrain_all:
        served = Interactions(user, item, rating, args.min_rating, ts)
        scorer, _ = fitter.fit(family, served, winner["params"])
    else:
        served = train
    config = {
        "format": FORMAT,
        "interface_version": INTERFACE_VERSION,
        "counts": {"users": int(served.n_users), "items": int(served.n_items),
                   "interactions": int(served.seen_indptr[-1])},
        "padding": {"id": -1, "score": "-inf"},
        "trained_on": "all" if args.retrain_all else "train-split",
        "family": family,
        "training": {
            "family": family, "algorithm": FAMILIES[family][0], "params": winner["params"],
            "seed": args.seed, "min_rating": args.min_rating, "holdout": args.holdout,
            "min_user_ratings": args.min_user_ratings, "budget_minutes": args.budget_minutes,
            "torch": torch.__version__,
        },
        "search": trials,
        "notes": notes,
        "evaluation": evaluation,
        "history_length": args.history_length,
        "data": {"file": os.path.basename(path), "format": fmt, "sha256": sha256_of(path),
                 "movies": os.path.basename(movies_path) if movies_path else None},
    }
    digest = export(served, scorer, config, movies, args.out, args.history_length)
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
    write_card(card, config, table, command, args.data_command, FAMILIES)
    log(f"wrote {card}; done in {fmt_clock(time.time() - t0)}")


if __name__ == "__main__":
    main()
