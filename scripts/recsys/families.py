"""The model families the trainer chooses among. Each `fit(data, params, ...)` returns a
scorer from recommender_module (what is served is what is evaluated) and the settings it
actually used (for SASRec: the number of epochs early stopping picked).

- iALS: implicit ALS (Hu, Koren & Volinsky 2008) with batched conjugate-gradient solves
  (Takacs et al. 2011, as the `implicit` library does).
- EASE: closed-form item-item model (Steck 2019), B = I - P / diag(P), P = (X^T X + lambda I)^-1;
  strong on MovieLens with one hyperparameter; needs the I x I Gram matrix in memory.
- SASRec: a small causal transformer over each user's item sequence (Kang & McAuley 2018)
  trained with cross-entropy against a few hundred sampled items per batch (Klenitskiy &
  Vasilev 2023: softmax losses beat the original one-negative BCE; sampling keeps an epoch
  affordable on one CPU core); it uses the order of a history, which a temporal hold-out
  rewards.
"""

import math
import time

import numpy as np
import torch

from recommender_module import FactorScorer, NeighbourScorer, SequenceNet, SequenceScorer

GATHER_CHUNK = 1 << 15  # interactions per gather/scatter chunk: bounds memory on ml-25m


class TooLarge(Exception):
    """The family cannot be trained on this data within the memory cap."""


# ---------------------------------------------------------------------------------------
# iALS


def _gather_dot_scatter(v, other, rows, cols, weight):
    """out[r] = sum over interactions (r, c) of weight * (v[r] . other[c]) * other[c]."""
    out = torch.zeros_like(v)
    for s in range(0, rows.numel(), GATHER_CHUNK):
        r, c = rows[s:s + GATHER_CHUNK], cols[s:s + GATHER_CHUNK]
        oc = other.index_select(0, c)
        dots = (v.index_select(0, r) * oc).sum(1, keepdim=True)
        out.index_add_(0, r, oc * (weight * dots))
    return out


def _ials_half_sweep(x, other, rows, cols, alpha, reg, cg_steps):
    """Solves (O^T O + alpha * O_u^T O_u + reg I) x_u = (1 + alpha) * sum_{i in u} o_i for
    every row u together, warm-started from the current x (updated in place)."""
    gram = other.t() @ other + reg * torch.eye(other.shape[1], dtype=other.dtype)

    def apply_a(v):
        return v @ gram + _gather_dot_scatter(v, other, rows, cols, alpha)

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


def fit_ials(data, params, seed, **_):
    factors, alpha, reg = int(params["factors"]), float(params["alpha"]), float(params["reg"])
    iterations, cg_steps = int(params.get("iterations", 10)), int(params.get("cg_steps", 3))
    gen = torch.Generator().manual_seed(seed)
    scale = 0.1 / math.sqrt(factors)
    x = torch.randn(data.n_users, factors, generator=gen) * scale
    y = torch.randn(data.n_items, factors, generator=gen) * scale
    u = torch.from_numpy(data.pos_user).long()
    i = torch.from_numpy(data.pos_item).long()
    for _ in range(iterations):
        _ials_half_sweep(x, y, u, i, alpha, reg, cg_steps)
        _ials_half_sweep(y, x, i, u, alpha, reg, cg_steps)
    used = {"factors": factors, "alpha": alpha, "reg": reg, "iterations": iterations, "cg_steps": cg_steps}
    return FactorScorer(x, y), used


# ---------------------------------------------------------------------------------------
# EASE


def ease_memory_bytes(n_items):
    """Peak float32 matrices of the closed form: the Gram matrix, its inverse and the weights."""
    return 3 * n_items * n_items * 4


class GramCache:
    """X^T X of one training set, computed once and shared by every lambda tried on it."""

    def __init__(self):
        self._key = None
        self._gram = None

    def get(self, data):
        if self._key is not data:
            self._gram = None  # free the old one before building the new one
            gram = torch.zeros(data.n_items, data.n_items)
            chunk = max(1, (1 << 24) // max(1, data.n_items))  # users per dense slice of X
            for s in range(0, data.n_users, chunk):
                lo, hi = data.pos_indptr[s], data.pos_indptr[min(data.n_users, s + chunk)]
                x = torch.zeros(min(chunk, data.n_users - s), data.n_items)
                rows = torch.from_numpy(data.pos_user[lo:hi] - s).long()
                x[rows, torch.from_numpy(data.pos_item[lo:hi]).long()] = 1.0
                gram.addmm_(x.t(), x)
            self._key, self._gram = data, gram
        return self._gram


def fit_ease(data, params, memory_cap_bytes, gram_cache, **_):
    need = ease_memory_bytes(data.n_items)
    if need > memory_cap_bytes:
        raise TooLarge(
            f"EASE needs the {data.n_items} x {data.n_items} item Gram matrix: about {need / 2**20:.0f} MiB "
            f"of working memory, above the cap of {memory_cap_bytes / 2**20:.0f} MiB (--memory-cap-mb)")
    lam = float(params["lambda"])
    neighbours = int(params.get("neighbours", 64))
    gram = gram_cache.get(data)
    p = gram.clone()
    p.diagonal().add_(lam)
    # Symmetric positive definite: a Cholesky inverse costs about half an LU inverse.
    p = torch.cholesky_inverse(torch.linalg.cholesky(p))
    b = p / (-p.diagonal()).unsqueeze(0)  # B_ij = -P_ij / P_jj
    b.diagonal().zero_()
    del p
    width = min(neighbours, data.n_items) if neighbours > 0 else data.n_items
    _, index = torch.topk(b.abs(), width, dim=1)
    weight = torch.gather(b, 1, index)
    del b
    scorer = NeighbourScorer(torch.from_numpy(data.pos_indptr), torch.from_numpy(data.pos_item),
                             index, weight)
    return scorer, {"lambda": lam, "neighbours": width}


# ---------------------------------------------------------------------------------------
# SASRec


def _windows(sequences, max_len):
    """Training windows: input = items[e-L:e], target = items[e-L+1:e+1], for ends e stepping
    back from each sequence's end by L. Item indices + 1; inputs left-padded with 0,
    targets with -1 (ignored)."""
    inputs, targets = [], []
    for seq in sequences:
        n = len(seq)
        e = n - 1
        while e >= 1:
            s = max(0, e - max_len)
            inp = np.zeros(max_len, dtype=np.int64)
            tgt = np.full(max_len, -1, dtype=np.int64)
            inp[max_len - (e - s):] = seq[s:e] + 1
            tgt[max_len - (e - s):] = seq[s + 1:e + 1]
            inputs.append(inp)
            targets.append(tgt)
            e -= max_len
    if not inputs:
        return torch.zeros(0, max_len, dtype=torch.long), torch.zeros(0, max_len, dtype=torch.long)
    return torch.from_numpy(np.stack(inputs)), torch.from_numpy(np.stack(targets))


def recent_items(sequences, max_len):
    """Each user's last `max_len` items (index + 1), left-padded with 0: what serving scores from."""
    recent = np.zeros((len(sequences), max_len), dtype=np.int32)
    for u, seq in enumerate(sequences):
        tail = seq[-max_len:]
        if len(tail):
            recent[u, max_len - len(tail):] = tail + 1
    return torch.from_numpy(recent)


def fit_sasrec(data, params, seed, deadline=None, validate=None, log=None, **_):
    """Trains for params["epochs"] epochs, or, with `validate`, until validation recall stops
    improving (patience 3) or the deadline passes; returns the best epoch's weights."""
    dim, max_len = int(params["dim"]), int(params["max_len"])
    blocks, heads, dropout = int(params.get("blocks", 2)), int(params.get("heads", 1)), float(params["dropout"])
    lr, batch = float(params.get("lr", 5e-3)), int(params.get("batch", 128))
    max_epochs = int(params.get("epochs", 200))
    negatives = int(params.get("negatives", 512))
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    sequences = data.sequences()
    inputs, targets = _windows(sequences, max_len)
    net = SequenceNet(data.n_items, dim, max_len, blocks, heads, dropout)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    recent = recent_items(sequences, max_len)
    best = (-1.0, 0, None)
    stale = 0
    epoch = 0
    t0 = time.time()
    for epoch in range(1, max_epochs + 1):
        net.train()
        order = torch.randperm(len(inputs), generator=gen)
        total, count = 0.0, 0
        for s in range(0, len(order), batch):
            idx = order[s:s + batch]
            hidden = net(inputs[idx])
            tgt = targets[idx]
            keep = tgt >= 0
            h, t = hidden[keep], tgt[keep]
            if negatives < data.n_items:
                # Sampled softmax: the target against `negatives` items drawn uniformly for the
                # whole batch (a draw that is the row's own target is masked out).
                neg = torch.randint(0, data.n_items, (negatives,), generator=gen)
                emb = net.item_emb.weight
                pos_logit = (h * emb.index_select(0, t + 1)).sum(1, keepdim=True)
                neg_logit = (h @ emb.index_select(0, neg + 1).t()).masked_fill(neg.unsqueeze(0) == t.unsqueeze(1), float("-inf"))
                logits = torch.cat([pos_logit, neg_logit], 1)
                loss = torch.nn.functional.cross_entropy(logits, torch.zeros(len(t), dtype=torch.long))
            else:
                loss = torch.nn.functional.cross_entropy(net.item_scores(h), t)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss) * int(keep.sum())
            count += int(keep.sum())
        if validate is None:
            continue
        net.eval()
        with torch.no_grad():
            score = validate(SequenceScorer(net, recent))
        if log:
            log(f"      epoch {epoch}: loss {total / max(1, count):.3f}  validation recall@10 {score:.4f}"
                f"  ({time.time() - t0:.0f}s)")
        if score > best[0]:
            best = (score, epoch, {k: v.clone() for k, v in net.state_dict().items()})
            stale = 0
        else:
            stale += 1
        if stale >= 3 or (deadline is not None and time.time() > deadline):
            break
    if validate is not None and best[2] is not None:
        net.load_state_dict(best[2])
        epochs = best[1]
    else:
        epochs = epoch
    net.eval()
    for p in net.parameters():
        p.requires_grad_(False)
    used = {"dim": dim, "max_len": max_len, "blocks": blocks, "heads": heads, "dropout": dropout,
            "lr": lr, "batch": batch, "negatives": negatives, "epochs": epochs}
    return SequenceScorer(net, recent), used
