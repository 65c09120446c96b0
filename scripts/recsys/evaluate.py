"""The evaluation protocol: top-k of each held-out user (their training items excluded)
against their held-out items.

recall@k = hits / min(k, held-out items) (a perfect list scores 1), NDCG@k with binary
relevance, coverage@k = share of the catalogue recommended to at least one user. Held-out
items the training period never saw count as misses. Most-popular (training counts, ties
by raw id, as served for unknown users) is scored the same way on the same users.
"""

import numpy as np
import torch

EVAL_CHUNK = 256  # users per scoring call


class HeldOut:
    """The held-out positives of one split, mapped into a training set's indices."""

    def __init__(self, train, user_raw, item_raw):
        user_index = {int(r): j for j, r in enumerate(train.user_ids)}
        item_index = {int(r): j for j, r in enumerate(train.item_ids)}
        self.train = train
        self.items = {}
        for ur, ir in zip(user_raw.tolist(), item_raw.tolist()):
            self.items.setdefault(user_index[ur], []).append(item_index.get(ir, -1))  # -1: a miss
        self.users = np.array(sorted(self.items), dtype=np.int64)
        self.interactions = int(len(item_raw))

    def evaluate(self, score_fn, k):
        """Metrics of a model given as score_fn(users[B] int64 tensor) -> scores[B, I]."""
        train = self.train
        discounts = 1.0 / np.log2(np.arange(2, k + 2))
        recall = ndcg = 0.0
        covered = set()
        for s in range(0, len(self.users), EVAL_CHUNK):
            batch = self.users[s:s + EVAL_CHUNK]
            with torch.no_grad():
                scores = score_fn(torch.from_numpy(batch)).clone()
            for row, uidx in enumerate(batch):
                seen = train.seen_indices[train.seen_indptr[uidx]:train.seen_indptr[uidx + 1]]
                scores[row, torch.from_numpy(seen).long()] = float("-inf")
            values, top = torch.topk(scores, min(k, train.n_items), dim=1)
            top = top.numpy()
            finite = torch.isfinite(values).numpy()
            for row, uidx in enumerate(batch):
                held = self.items[int(uidx)]
                relevant = set(held)
                picks = top[row][finite[row]]
                hit = np.array([int(it) in relevant for it in picks], dtype=np.float64)
                n_rel = min(k, len(held))
                recall += hit.sum() / n_rel
                ndcg += (hit * discounts[:len(hit)]).sum() / discounts[:n_rel].sum()
                covered.update(picks.tolist())
        n = max(1, len(self.users))
        return {
            f"recall@{k}": round(recall / n, 4),
            f"ndcg@{k}": round(ndcg / n, 4),
            f"coverage@{k}": round(len(covered) / max(1, train.n_items), 4),
        }

    def popularity(self, k):
        rank = np.argsort(self.train.popular_order).astype(np.float32)
        pop = -torch.from_numpy(rank)
        return self.evaluate(lambda users: pop.expand(len(users), -1), k)
