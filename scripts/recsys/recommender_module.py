"""The served recommender: a TorchScript module with the serving interface (version 1).

docs/recommender.md is the contract. In short, every id that leaves the module is a RAW
MovieLens id, every user that enters it is an INTERNAL index (position in `user_ids()`):

    interface_version() -> int                                   1
    recommend(users[B] int64, k: int) -> (ids[B,k] int64, scores[B,k] float32)
        one batched scoring call; items the user has seen score -inf and are never
        returned; rows sorted by score; when fewer than k unseen items exist the tail is
        padded with id -1 and score -inf. k < 0 or a user index out of range raises.
    user_ids() -> [U] int64      raw user id of each internal index
    item_ids() -> [I] int64      raw movie id of each item column
    popular(k: int) -> [min(k,I)] int64   raw ids of the k most interacted-with items
    seen_items(user: int) -> [n] int64    raw ids of the items an internal user has seen
    history(user: int, n: int) -> (ids[m] int64, ratings[m] float32, timestamps[m] int64)
        the user's most recent ratings, newest first, m <= n (and <= what was stored)
    forward(users, k)            same as recommend

`ServedRecommender` holds what every model family shares (id maps, seen items, popularity,
recent history); a family only brings a scorer, a submodule whose `score(users) ->
[B, I] float32` gives every item's score for a batch of internal users:

    FactorScorer     iALS: one [B,d] x [d,I] matmul.
    NeighbourScorer  EASE (item-item): the sum of the weight rows of the user's items,
                     each row pruned to its strongest neighbours (one scatter-add).
    SequenceScorer   SASRec-style next-item network over the user's most recent items,
                     stored in the checkpoint, so a request still needs only the user id.

The trainer evaluates with the same scorers, so what is measured is what is served.
"""

from typing import Tuple

import math

import torch
import torch.nn as nn
from torch import Tensor

INTERFACE_VERSION = 1
FORMAT = "torchserve-node/recommender"


def _expand_csr(indptr: Tensor, users: Tensor) -> Tuple[Tensor, Tensor]:
    """(batch row, position in the CSR value array) of every entry of the users' rows."""
    device = indptr.device
    start = indptr.index_select(0, users)
    lengths = indptr.index_select(0, users + 1) - start
    total = int(lengths.sum()) if int(users.size(0)) > 0 else 0
    if total == 0:
        empty = torch.zeros([0], dtype=torch.long, device=device)
        return empty, empty
    rows = torch.repeat_interleave(torch.arange(int(users.size(0)), device=device), lengths)
    row_offset = torch.cumsum(lengths, 0) - lengths
    within = torch.arange(total, device=device) - torch.repeat_interleave(row_offset, lengths)
    return rows, within + torch.repeat_interleave(start, lengths)


class FactorScorer(nn.Module):
    """Matrix factorisation: score = user factor . item factor."""

    def __init__(self, user_factors: Tensor, item_factors: Tensor):
        super().__init__()
        self.register_buffer("user_factors", user_factors.float().contiguous())
        self.register_buffer("item_factors", item_factors.float().contiguous())

    def score(self, users: Tensor) -> Tensor:
        return torch.mm(self.user_factors.index_select(0, users), self.item_factors.t())


class NeighbourScorer(nn.Module):
    """Item-item model: score(u, j) = sum over the user's items i of W[i, j].

    W is stored row-wise pruned to its `N` largest-magnitude entries (nbr_index[I, N],
    nbr_weight[I, N]): the file and the per-request work scale with I * N and with the
    user's history times N, not with I * I."""

    def __init__(self, hist_indptr: Tensor, hist_indices: Tensor, nbr_index: Tensor, nbr_weight: Tensor):
        super().__init__()
        self.register_buffer("hist_indptr", hist_indptr.long().contiguous())
        self.register_buffer("hist_indices", hist_indices.int().contiguous())
        self.register_buffer("nbr_index", nbr_index.long().contiguous())  # int64: no widening per request
        self.register_buffer("nbr_weight", nbr_weight.float().contiguous())

    def score(self, users: Tensor) -> Tensor:
        n_items = int(self.nbr_index.size(0))
        scores = torch.zeros([int(users.size(0)), n_items], device=self.nbr_weight.device)
        rows, pos = _expand_csr(self.hist_indptr, users)
        if int(rows.size(0)) == 0:
            return scores
        items = self.hist_indices.index_select(0, pos).long()
        width = int(self.nbr_index.size(1))
        cols = self.nbr_index.index_select(0, items)
        weights = self.nbr_weight.index_select(0, items).reshape(-1)
        # One index_add_ into the flattened [B*I] scores: on CPU far faster than
        # index_put_(accumulate=True), which sorts its indices first.
        # cols + n_items * row, with the big operand first: the broadcast the other way
        # round ran ~10x slower in TorchScript on CPU.
        flat = cols.add(rows.unsqueeze(1), alpha=n_items)
        scores.view(-1).index_add_(0, flat.reshape(-1), weights)
        return scores


class CausalBlock(nn.Module):
    """Pre-norm transformer block with causal self-attention (written out: scriptable)."""

    def __init__(self, dim: int, heads: int, dropout: float):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.ff1 = nn.Linear(dim, 2 * dim)
        self.ff2 = nn.Linear(2 * dim, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        q = q.reshape(b, t, h, d // h).transpose(1, 2)
        k = k.reshape(b, t, h, d // h).transpose(1, 2)
        v = v.reshape(b, t, h, d // h).transpose(1, 2)
        att = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d // h)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        y = torch.matmul(self.drop(att), v).transpose(1, 2).reshape(b, t, d)
        x = x + self.drop(self.proj(y))
        return x + self.drop(self.ff2(self.drop(torch.relu(self.ff1(self.norm2(x))))))


class SequenceNet(nn.Module):
    """SASRec-style encoder: item + position embeddings, causal blocks; the output at each
    position, dotted with the (tied) item embeddings, scores the next item."""

    def __init__(self, n_items: int, dim: int, max_len: int, blocks: int, heads: int, dropout: float):
        super().__init__()
        self.item_emb = nn.Embedding(n_items + 1, dim, padding_idx=0)  # index 0: padding
        self.pos_emb = nn.Embedding(max_len, dim)
        self.blocks = nn.ModuleList([CausalBlock(dim, heads, dropout) for _ in range(blocks)])
        self.norm = nn.LayerNorm(dim)
        self.drop = nn.Dropout(dropout)
        nn.init.normal_(self.item_emb.weight, std=dim ** -0.5)
        with torch.no_grad():
            self.item_emb.weight[0].zero_()

    def forward(self, seq: Tensor) -> Tensor:
        """seq[B, T] item indices + 1 (0 = padding, left-padded) -> hidden states [B, T, d]."""
        t = int(seq.size(1))
        pos = torch.arange(t, device=seq.device)
        x = self.item_emb(seq) * math.sqrt(float(self.item_emb.embedding_dim)) + self.pos_emb(pos)
        x = self.drop(x) * (seq != 0).unsqueeze(-1).to(x.dtype)
        # Causal, and no attention to padding keys (the diagonal stays open so no row is empty).
        causal = torch.ones(t, t, dtype=torch.bool, device=seq.device).triu(1)
        mask = causal.unsqueeze(0) | ((seq == 0).unsqueeze(1) & ~torch.eye(t, dtype=torch.bool, device=seq.device))
        mask = mask.unsqueeze(1)
        for block in self.blocks:
            x = block(x, mask)
        return self.norm(x)

    def item_scores(self, hidden: Tensor) -> Tensor:
        """hidden[..., d] -> scores over the I items (padding excluded)."""
        return torch.matmul(hidden, self.item_emb.weight[1:].t())


class SequenceScorer(nn.Module):
    """Next-item scores from each known user's most recent items (stored: recent[U, L])."""

    def __init__(self, net: SequenceNet, recent: Tensor):
        super().__init__()
        self.net = net
        self.register_buffer("recent", recent.int().contiguous())  # item index + 1, left-padded with 0

    def score(self, users: Tensor) -> Tensor:
        seq = self.recent.index_select(0, users).long()
        hidden = self.net(seq)[:, -1, :]
        return self.net.item_scores(hidden)


class ServedRecommender(nn.Module):
    def __init__(self, scorer: nn.Module, user_raw_ids: Tensor, item_raw_ids: Tensor, seen_indptr: Tensor,
                 seen_indices: Tensor, popular_order: Tensor, history_indptr: Tensor, history_items: Tensor,
                 history_ratings: Tensor, history_times: Tensor):
        super().__init__()
        assert user_raw_ids.shape[0] == seen_indptr.shape[0] - 1 == history_indptr.shape[0] - 1
        assert item_raw_ids.shape[0] == popular_order.shape[0]
        self.scorer = scorer
        self.register_buffer("user_raw_ids", user_raw_ids.long().contiguous())
        self.register_buffer("item_raw_ids", item_raw_ids.long().contiguous())
        # The items each user has seen, as CSR over internal item indices. int32 halves the
        # file; indices are widened to int64 only for the rows of a batch.
        self.register_buffer("seen_indptr", seen_indptr.long().contiguous())
        self.register_buffer("seen_indices", seen_indices.int().contiguous())
        # Internal item indices, most popular first (training interaction counts).
        self.register_buffer("popular_order", popular_order.long().contiguous())
        # Each user's most recent ratings, newest first (CSR): what the playground shows.
        self.register_buffer("history_indptr", history_indptr.long().contiguous())
        self.register_buffer("history_items", history_items.int().contiguous())
        self.register_buffer("history_ratings", history_ratings.float().contiguous())
        self.register_buffer("history_times", history_times.long().contiguous())

    @torch.jit.export
    def interface_version(self) -> int:
        return 1

    @torch.jit.export
    def user_ids(self) -> Tensor:
        return self.user_raw_ids

    @torch.jit.export
    def item_ids(self) -> Tensor:
        return self.item_raw_ids

    @torch.jit.export
    def popular(self, k: int) -> Tensor:
        if k < 0:
            raise ValueError("popular: k must be >= 0")
        n = min(k, int(self.popular_order.size(0)))
        return self.item_raw_ids.index_select(0, self.popular_order[:n])

    def _check_user(self, user: int):
        if user < 0 or user >= int(self.user_raw_ids.size(0)):
            raise ValueError("user index out of range")

    @torch.jit.export
    def seen_items(self, user: int) -> Tensor:
        self._check_user(user)
        start = int(self.seen_indptr[user])
        end = int(self.seen_indptr[user + 1])
        return self.item_raw_ids.index_select(0, self.seen_indices[start:end].long())

    @torch.jit.export
    def history(self, user: int, n: int) -> Tuple[Tensor, Tensor, Tensor]:
        self._check_user(user)
        if n < 0:
            raise ValueError("history: n must be >= 0")
        start = int(self.history_indptr[user])
        end = min(int(self.history_indptr[user + 1]), start + n)
        items = self.item_raw_ids.index_select(0, self.history_items[start:end].long())
        return items, self.history_ratings[start:end], self.history_times[start:end]

    @torch.jit.export
    def recommend(self, users: Tensor, k: int) -> Tuple[Tensor, Tensor]:
        if k < 0:
            raise ValueError("recommend: k must be >= 0")
        if users.dim() != 1:
            raise ValueError("recommend: users must be a 1-D tensor of internal user indices")
        device = self.user_raw_ids.device
        users = users.to(device=device, dtype=torch.long)
        n_users = int(self.user_raw_ids.size(0))
        batch = int(users.size(0))
        if batch > 0 and (int(users.min()) < 0 or int(users.max()) >= n_users):
            raise ValueError("recommend: user index out of range")

        scores = self.scorer.score(users)

        # Mask the seen items of every row in one index_put_.
        rows, pos = _expand_csr(self.seen_indptr, users)
        if int(rows.size(0)) > 0:
            cols = self.seen_indices.index_select(0, pos).long()
            scores.index_put_((rows, cols), torch.full([1], float("-inf"), device=device))

        n_items = int(self.item_raw_ids.size(0))
        kk = min(k, n_items)
        values, index = torch.topk(scores, kk, dim=1, largest=True, sorted=True)
        ids = self.item_raw_ids.index_select(0, index.reshape(-1)).reshape(index.shape)
        ids = ids.masked_fill(values == float("-inf"), -1)
        if k > kk:
            ids = torch.cat([ids, torch.full([batch, k - kk], -1, dtype=torch.long, device=device)], 1)
            values = torch.cat(
                [values, torch.full([batch, k - kk], float("-inf"), dtype=values.dtype, device=device)], 1)
        return ids, values

    def forward(self, users: Tensor, k: int) -> Tuple[Tensor, Tensor]:
        return self.recommend(users, k)
