"""The silos of SecEA's MovieLens experiment (our design; the paper has none): the users are
dealt at random (seeded) into N silos, the items are the entities.  A silo trains a biased MF
model on its users' ratings; its users' rows and biases never leave it, its item rows
``(q_i, b_i)`` are what SecEA averages across the silos that hold the item (Eq. 2).

Used by the training run (:mod:`secemb.sim.secea`) and ``secemb bench secea``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from secemb.data import RatingData
from secemb.errors import InvalidParameters

__all__ = ["MFSilo", "deal_users", "local_epoch", "make_silos", "one_thread", "popular_items", "silo_entities",
           "silos_rmse"]


@dataclass
class MFSilo:
    """One silo's MF model over its users and the items it holds (sorted global ids)."""

    users: np.ndarray
    items: np.ndarray
    u: torch.Tensor  # local user index per training rating
    i: torch.Tensor  # local item index per training rating
    r: torch.Tensor
    mu: float
    params: list[torch.nn.Parameter]
    opt: torch.optim.Optimizer

    @property
    def item_rows(self) -> np.ndarray:
        """float64 (len(items), d+1): the item vectors and biases."""
        q, bi = self.params[2], self.params[3]
        return torch.cat([q.detach(), bi.detach()[:, None]], dim=1).double().numpy()

    def set_item_rows(self, rows: np.ndarray) -> None:
        """Write back float (len(items), d+1) item vectors and biases."""
        with torch.no_grad():
            self.params[2].copy_(torch.from_numpy(rows[:, :-1]).float())
            self.params[3].copy_(torch.from_numpy(rows[:, -1]).float())

    def state(self) -> dict[str, np.ndarray]:
        """Its parameters and Adam's state (``param{i}``, ``adam_step{i}``, ``adam_m{i}``,
        ``adam_v{i}``; the latter three once it has trained), as arrays: what :meth:`load_state`
        takes back, bit for bit."""
        out = {f"param{i}": p.detach().numpy().copy() for i, p in enumerate(self.params)}
        for i, p in enumerate(self.params):
            st = self.opt.state.get(p)
            if st:
                out |= {f"adam_step{i}": st["step"].numpy().copy(), f"adam_m{i}": st["exp_avg"].numpy().copy(),
                        f"adam_v{i}": st["exp_avg_sq"].numpy().copy()}
        return out

    def load_state(self, arrays: dict[str, np.ndarray]) -> None:
        """Take back :meth:`state`'s arrays, each checked against this model's (shape, dtype,
        finite; Adam's second moments and steps non-negative) before anything is written.

        Raises
        ------
        InvalidParameters: an array missing, of another shape or dtype, or out of range.
        """
        def check(name: str, like: np.ndarray, low: float | None = None) -> torch.Tensor:
            got = arrays.get(name)
            if not isinstance(got, np.ndarray) or got.shape != like.shape or got.dtype != like.dtype \
                    or not np.isfinite(got).all() or (low is not None and (got < low).any()):
                raise InvalidParameters(f"SecEA silo state: {name} must be finite {like.dtype} of shape {like.shape}"
                                        + ("" if low is None else f", >= {low}"))
            return torch.from_numpy(got.copy())

        params = [check(f"param{i}", p.detach().numpy()) for i, p in enumerate(self.params)]
        trained = [f"adam_step{i}" in arrays for i in range(len(self.params))]
        if any(trained) and not all(trained):
            raise InvalidParameters("SecEA silo state: Adam's state must cover every parameter or none")
        moments = []
        for i in range(len(self.params)) if all(trained) else ():
            step = arrays.get(f"adam_step{i}")
            if not isinstance(step, np.ndarray) or step.ndim != 0 or step.dtype not in (np.float32, np.float64) \
                    or not np.isfinite(step) or step < 0:
                raise InvalidParameters(f"SecEA silo state: adam_step{i} must be a non-negative float scalar")
            moments.append({"step": torch.from_numpy(step.copy()), "exp_avg": check(f"adam_m{i}", params[i].numpy()),
                            "exp_avg_sq": check(f"adam_v{i}", params[i].numpy(), 0.0)})
        with torch.no_grad():
            for p, value in zip(self.params, params, strict=True):
                p.copy_(value)
        if moments:
            self.opt.load_state_dict({"state": dict(enumerate(moments)),
                                      "param_groups": self.opt.state_dict()["param_groups"]})

    @property
    def user_rows(self) -> np.ndarray:
        """float64 (len(users), d+1): the private user vectors and biases."""
        p, bu = self.params[0], self.params[1]
        return torch.cat([p.detach(), bu.detach()[:, None]], dim=1).double().numpy()


def deal_users(num_users: int, n: int, seed: int) -> np.ndarray:
    """The silo of every user (a public, seeded dealing: a permutation of the users mod ``n``)."""
    return np.random.default_rng(seed).permutation(num_users) % n


def make_silos(train: RatingData, n: int, dim: int, lr: float, seed: int) -> list[MFSilo]:
    """``n`` silos over ``train``: users dealt by :func:`deal_users`, MF parameters drawn
    from torch's generator seeded with ``seed``, Adam at ``lr``."""
    owner = deal_users(train.num_users, n, seed)
    torch.manual_seed(seed)
    out = []
    for s in range(n):
        mask = owner[train.users] == s
        users, u = np.unique(train.users[mask], return_inverse=True)
        items, i = np.unique(train.items[mask], return_inverse=True)
        params = [torch.nn.Parameter(0.1 * torch.randn(users.size, dim)), torch.nn.Parameter(torch.zeros(users.size)),
                  torch.nn.Parameter(0.1 * torch.randn(items.size, dim)), torch.nn.Parameter(torch.zeros(items.size))]
        r = torch.from_numpy(train.ratings[mask]).float()
        out.append(MFSilo(users, items, torch.from_numpy(u), torch.from_numpy(i), r, float(r.mean()), params,
                          torch.optim.Adam(params, lr=lr)))
    return out


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Local training on one torch thread: with these small batches more threads only contend
    (measured about 10x slower on the 2 loaded cores of the development machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def local_epoch(s: MFSilo, reg: float, batch: int, gen: np.random.Generator) -> float:
    """One epoch of minibatch Adam on the silo's ratings (order drawn from ``gen``); the mean
    objective over its batches."""
    p, bu, q, bi = s.params
    order = torch.from_numpy(gen.permutation(s.r.numel()))
    total, count = 0.0, 0
    for start in range(0, order.numel(), batch):
        idx = order[start : start + batch]
        u, i = s.u[idx], s.i[idx]
        pred = s.mu + bu[u] + bi[i] + (p[u] * q[i]).sum(1)
        loss = ((pred - s.r[idx]) ** 2).mean() + reg * ((p[u] ** 2).sum(1) + (q[i] ** 2).sum(1)).mean()
        s.opt.zero_grad()
        loss.backward()
        s.opt.step()
        total, count = total + loss.item(), count + 1
    return total / max(count, 1)


def silos_rmse(silos: list[MFSilo], test: RatingData) -> float:
    """Test RMSE of the silos' models, each on its own users' test ratings (predictions clipped
    to [1, 5]; ``mu + b_u`` for an item the silo never saw)."""
    sq, count = 0.0, 0
    for s in silos:
        mask = np.isin(test.users, s.users)
        u = np.searchsorted(s.users, test.users[mask])
        pos = np.searchsorted(s.items, test.items[mask])
        known = (pos < s.items.size) & (s.items[np.minimum(pos, s.items.size - 1)] == test.items[mask])
        p, bu, q, bi = (t.detach().double().numpy() for t in s.params)
        pred = s.mu + bu[u]
        k = np.flatnonzero(known)
        pred[k] += bi[pos[k]] + (p[u[k]] * q[pos[k]]).sum(1)
        sq += float(((np.clip(pred, 1.0, 5.0) - test.ratings[mask]) ** 2).sum())
        count += int(mask.sum())
    return (sq / count) ** 0.5


def popular_items(train: RatingData, count: int) -> np.ndarray:
    """The ``count`` items with the most training ratings (ties: lower id first), sorted; every
    item when ``count`` is 0 (a public choice of the entities SecEA averages)."""
    if count == 0:
        return np.arange(train.num_items, dtype=np.int64)
    ranked = np.argsort(-np.bincount(train.items, minlength=train.num_items), kind="stable")
    return np.sort(ranked[:count]).astype(np.int64)


def silo_entities(silo: MFSilo, chosen: np.ndarray) -> np.ndarray:
    """The positions (in the silo's item list) of its items among ``chosen``: the rows it
    aggregates; its entity ids are ``silo.items[positions]``."""
    return np.flatnonzero(np.isin(silo.items, chosen))
