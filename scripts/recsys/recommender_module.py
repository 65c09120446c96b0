"""The served recommender: a TorchScript module with the serving interface (version 1).

docs/recommender.md is the contract. In short, every id that leaves the module is a RAW
MovieLens id, every user that enters it is an INTERNAL index (position in `user_ids()`):

    interface_version() -> int                                   1
    recommend(users[B] int64, k: int) -> (ids[B,k] int64, scores[B,k] float32)
        one [B,d]x[d,I] matmul; items the user has seen score -inf and are never returned;
        rows sorted by score; when fewer than k unseen items exist the tail is padded with
        id -1 and score -inf. k < 0 or a user index out of range raises.
    user_ids() -> [U] int64      raw user id of each internal index
    item_ids() -> [I] int64      raw movie id of each item column
    popular(k: int) -> [min(k,I)] int64   raw ids of the k most interacted-with items
    seen_items(user: int) -> [n] int64    raw ids of the items an internal user has seen
    forward(users, k)            same as recommend
"""

from typing import Tuple

import torch
import torch.nn as nn
from torch import Tensor

INTERFACE_VERSION = 1
FORMAT = "torchserve-node/recommender"


class MatrixFactorizationRecommender(nn.Module):
    def __init__(self, user_factors: Tensor, item_factors: Tensor, user_raw_ids: Tensor,
                 item_raw_ids: Tensor, seen_indptr: Tensor, seen_indices: Tensor,
                 popular_order: Tensor):
        super().__init__()
        assert user_factors.shape[0] == user_raw_ids.shape[0] == seen_indptr.shape[0] - 1
        assert item_factors.shape[0] == item_raw_ids.shape[0] == popular_order.shape[0]
        self.register_buffer("user_factors", user_factors.float().contiguous())
        self.register_buffer("item_factors", item_factors.float().contiguous())
        self.register_buffer("user_raw_ids", user_raw_ids.long().contiguous())
        self.register_buffer("item_raw_ids", item_raw_ids.long().contiguous())
        # The items each user has seen, as CSR over internal item indices. int32 halves the
        # file; indices are widened to int64 only for the rows of a batch.
        self.register_buffer("seen_indptr", seen_indptr.long().contiguous())
        self.register_buffer("seen_indices", seen_indices.int().contiguous())
        # Internal item indices, most popular first (training interaction counts).
        self.register_buffer("popular_order", popular_order.long().contiguous())

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

    @torch.jit.export
    def seen_items(self, user: int) -> Tensor:
        if user < 0 or user >= int(self.user_factors.size(0)):
            raise ValueError("seen_items: user index out of range")
        start = int(self.seen_indptr[user])
        end = int(self.seen_indptr[user + 1])
        return self.item_raw_ids.index_select(0, self.seen_indices[start:end].long())

    @torch.jit.export
    def recommend(self, users: Tensor, k: int) -> Tuple[Tensor, Tensor]:
        if k < 0:
            raise ValueError("recommend: k must be >= 0")
        if users.dim() != 1:
            raise ValueError("recommend: users must be a 1-D tensor of internal user indices")
        device = self.user_factors.device
        users = users.to(device=device, dtype=torch.long)
        n_users = int(self.user_factors.size(0))
        batch = int(users.size(0))
        if batch > 0 and (int(users.min()) < 0 or int(users.max()) >= n_users):
            raise ValueError("recommend: user index out of range")

        scores = torch.mm(self.user_factors.index_select(0, users), self.item_factors.t())

        # Mask the seen items of every row in one index_put_: expand each row's CSR slice.
        start = self.seen_indptr.index_select(0, users)
        lengths = self.seen_indptr.index_select(0, users + 1) - start
        total = int(lengths.sum()) if batch > 0 else 0
        if total > 0:
            rows = torch.repeat_interleave(torch.arange(batch, device=device), lengths)
            row_offset = torch.cumsum(lengths, 0) - lengths
            within = torch.arange(total, device=device) - torch.repeat_interleave(row_offset, lengths)
            cols = self.seen_indices.index_select(0, within + torch.repeat_interleave(start, lengths)).long()
            scores.index_put_((rows, cols), torch.full([1], float("-inf"), device=device))

        n_items = int(self.item_factors.size(0))
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
