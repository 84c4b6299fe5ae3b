"""The two roles of secure federated submodel learning (SFSL, Algorithm 1) with DIN: the
device (:class:`SFSLDevice`) and the cloud server (:class:`SFSLServer`).

They exchange bytes only (:mod:`secemb.protocols.sfsl.wire` for the submodel download,
:mod:`secemb.secagg` for the private set union and the secure sum); the round driver
(:mod:`secemb.protocols.sfsl.round`) moves the bytes and counts them.

Row space of the secure sum (public): goods ``0 .. G-1``, then categories ``G .. G+C-1``, then
``R = ceil(mlp_size / d)`` rows holding the dense layers (zero-padded), each row ``d`` update
values and one weight: ``(v z_1, ..., v z_d, v)`` (:mod:`secemb.protocols.sfsl.quantize`).  A
goods or category row's weight is the number of the device's training samples touching it
(count-normalized aggregation); a dense row's weight is the device's sample count (FedAvg over
the dense layers).  A device contributes the rows of its perturbed set S'' (goods, their
categories) and every dense row; the server aggregates row ``j`` over the live devices that
contributed it (the per-row participant sets of :class:`secemb.secagg.SecAggConfig` ``sparse``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from secemb.data.ctr import ClickData
from secemb.errors import InvalidMessage, InvalidParameters, check_float, check_int
from secemb.models.din import DIN, click_batch
from secemb.privacy.randomized_response import IndexPerturber, RRParams
from secemb.protocols.sfsl import wire
from secemb.protocols.sfsl.quantize import dequantize_mean, max_weight, quantize
from secemb.randomness import RandomBytes, system_rng
from secemb.secagg.config import check_min_row_holders, default_threshold

__all__ = ["MIN_ROW_HOLDERS", "R6_WARNING", "RowSpace", "SFSLDevice", "SFSLServer", "TrainingSettings",
           "warn_min_row_holders"]

#: The default of :attr:`TrainingSettings.min_row_holders`: a row's revealed sum is over at least
#: two devices, or the row is not updated (docs/sfsl.md, finding R6); 1 is the paper's behaviour
MIN_ROW_HOLDERS = 2

#: What a run with ``min_row_holders = 1`` warns (:func:`warn_min_row_holders`)
R6_WARNING = ("warning: SFSL with min_row_holders = 1 is the paper's secure sum, with finding R6's leak -- a server "
              "can read one device's update on a row only that device holds (docs/sfsl.md, 'Rows of few holders'); "
              "the default 2 closes it")

log = logging.getLogger(__name__)


def warn_min_row_holders(min_row_holders: int) -> None:
    """Log :data:`R6_WARNING` (logger ``secemb.protocols.sfsl.parties``, level WARNING: on
    stderr even where logging is not configured) if ``min_row_holders`` is 1 -- what every run
    of SFSL with it prints once (``secemb train``/``demo``/``serve``/``client`` when they make the
    protocol, ``secemb bench sfsl``)."""
    if min_row_holders == 1:
        log.warning(R6_WARNING)


@dataclass(frozen=True)
class RowSpace:
    """The public row layout of the secure sum (module docstring)."""

    goods: int
    categories: int
    dim: int
    mlp_size: int

    @property
    def dense_rows(self) -> int:
        return -(-self.mlp_size // self.dim)

    @property
    def length(self) -> int:
        return self.goods + self.categories + self.dense_rows

    @property
    def width(self) -> int:
        return self.dim + 1

    def rows_of(self, goods: np.ndarray, categories: np.ndarray) -> np.ndarray:
        """int64, strictly increasing: the rows a device holding ``goods`` and ``categories``
        (both ascending) contributes: those, then every dense row."""
        dense = np.arange(self.goods + self.categories, self.length, dtype=np.int64)
        return np.concatenate([goods, self.goods + categories, dense]).astype(np.int64)


@dataclass(frozen=True)
class TrainingSettings:
    """Public training hyperparameters of a round (the paper: SGD, batch 2, one local epoch,
    lr 1.0 decayed x0.999 per round, γ = 2^15).

    bound: the public quantization range [-bound, bound] of an update value (docs/sfsl.md).
    max_weight: the public cap on a device's per-row weight (no wrap-around in Z_2^32).
    min_row_holders: the secure sum's
        :attr:`~secemb.secagg.config.SecAggConfig.min_row_holders` ``m``: a device contributes
        zero on a row fewer than ``m`` devices hold, and unmasks only where no revealed row sum
        is over fewer than ``m`` (default :data:`MIN_ROW_HOLDERS`, 2).  1 is the paper's
        secure sum, with finding R6's leak: a server can learn one device's update on a row it
        alone holds (docs/sfsl.md, "Rows of few holders"; a run with 1 warns:
        :func:`warn_min_row_holders`).
    """

    lr: float = 1.0
    batch: int = 2
    epochs: int = 1
    bound: float = 1.0
    levels: int = 1 << 15
    max_weight: int = 1310
    min_row_holders: int = MIN_ROW_HOLDERS

    def check(self, clients: int) -> TrainingSettings:
        """These settings, if a device of a round of ``clients`` devices can train with them (what
        a device checks in a round document, which the server writes): ``batch``, ``epochs`` ints
        >= 1, ``lr`` finite >= 0, ``bound`` finite > 0, ``levels`` an int in [2, 2^31],
        ``max_weight`` an int in [1, :func:`~secemb.protocols.sfsl.quantize.max_weight`] (no
        wrap-around of the secure sum) and ``min_row_holders`` an int in [1, the round's
        threshold ``clients // 2 + 1``].

        Raises
        ------
        InvalidParameters: the first field out of range.
        """
        for name in ("batch", "epochs"):
            check_int(name, getattr(self, name), low=1)
        check_float("lr", self.lr, low=0)
        check_float("bound", self.bound, above=0)
        check_int("levels", self.levels, low=2, high=1 << 31)
        check_int("max_weight", self.max_weight, low=1, high=max_weight(clients, self.levels))
        check_min_row_holders(self.min_row_holders, default_threshold(clients), clients)
        return self


def categories_of(goods: np.ndarray, goods_category: np.ndarray) -> np.ndarray:
    """int64 ascending: the distinct public categories of ``goods``."""
    return np.unique(goods_category[goods]).astype(np.int64)


class SFSLDevice:
    """One client: its click samples, Algorithm 2's memo, its private user embedding.

    Parameters
    ----------
    user: the client id.
    samples: the user's training samples (one user's rows of a :class:`ClickData`).
    params: its choice of probability parameters.
    model: the public DIN (sizes).
    user_embedding: float64 (d,), the private user embedding (a view the device updates).
    """

    def __init__(self, user: int, samples: ClickData, params: RRParams, model: DIN,
                 user_embedding: np.ndarray) -> None:
        if len(samples) and np.any(samples.user != user):
            raise InvalidParameters(f"device {user}: samples of another user")
        self.user, self.samples, self.model = int(user), samples, model
        self.goods_category = samples.goods_category
        h = samples.history
        self.real = np.unique(np.concatenate([samples.target, h[h >= 0]])).astype(np.int64)
        self.perturber = IndexPerturber(self.real, params)
        self.user_embedding = user_embedding
        self._perturbed = np.empty(0, np.int64)
        self._categories = np.empty(0, np.int64)
        #: share of update values clipped by the quantization range in the last round
        self.clipped = 0.0
        #: samples trained on in the last round (the succinct set's)
        self.trained = 0
        #: mean local objective (DIN's binary cross-entropy) over the last round's training
        #: steps, weighted by batch size; None before training in this round, or with no sample
        self.loss: float | None = None

    def request(self, union: np.ndarray, round_id: int, *, _rng: RandomBytes = system_rng) -> bytes:
        """Perturb (Algorithm 2) over the PSU's ``union`` and ask for W_{S''}."""
        self.loss = None  # a new round: no loss until this round's training
        self._perturbed = self.perturber.perturb(union, _rng=_rng)
        self._categories = categories_of(self._perturbed, self.goods_category)
        return wire.request(round_id, self._perturbed)

    def train(self, reply: bytes, round_id: int, space: RowSpace, settings: TrainingSettings,
              rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Local training on the succinct set, then the round's secure-sum input.

        Returns ``(rows, values)``: ``rows`` int64 strictly increasing (:meth:`RowSpace.rows_of`),
        ``values`` uint32 (len(rows), d + 1) = ``(v z, v)`` per row.
        """
        rows, deltas, weights = self.local_update(reply, round_id, space, settings, rng)
        d = space.dim
        z, self.clipped = quantize(deltas, settings.bound, settings.levels, rng)
        values = np.empty((weights.size, d + 1), dtype=np.uint32)
        values[:, :d] = z * weights[:, None]
        values[:, d] = weights
        return rows, values

    def local_update(self, reply: bytes, round_id: int, space: RowSpace, settings: TrainingSettings,
                     rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Local training on the succinct set (SGD, ``settings``' batch, epochs, step size; the
        private user embedding updated in place), unquantized: ``(rows, deltas, weights)`` with
        ``rows`` as :meth:`train`'s, ``deltas`` float64 (len(rows), d) the rows' changes,
        ``weights`` uint32 (len(rows),) the per-row weights (capped at ``settings.max_weight``).
        """
        import torch

        d, goods, cats = space.dim, self._perturbed, self._categories
        g_rows, c_rows, mlp = wire.open_reply(reply, round_id, goods.size, cats.size, d, space.mlp_size)
        # the succinct training set: targets in S'' (all targets are in S), histories filtered to S''
        s = self.samples
        keep = np.isin(s.target, goods)
        target = np.searchsorted(goods, s.target[keep])
        hist_ids = s.history[keep]
        in_set = (hist_ids >= 0) & np.isin(hist_ids, goods)
        hist = np.where(in_set, np.searchsorted(goods, np.where(in_set, hist_ids, 0)), -1)
        cat_pos = np.searchsorted(cats, self.goods_category[goods])  # category position of each row
        n = int(keep.sum())
        self.trained = n
        # one leaf per dense field (autograd through slices of one flat vector would build a
        # full-size gradient per slice and step): the MLP leaves share the storage, hence the memory
        # alignment (which BLAS results depend on), of one flat vector laid out as the model's;
        # the category table is cut to the downloaded rows (cat_pos indexes it)
        c = self.model.num_categories * d
        flat = torch.tensor(np.concatenate([np.zeros(c), mlp]))
        fields = {name: (torch.tensor(c_rows) if name == "categories" else t.detach()).requires_grad_()
                  for name, t in self.model.layout.views(flat).items()}
        rows_t = torch.tensor(g_rows, requires_grad=True)
        user_t = torch.tensor(self.user_embedding, requires_grad=True)
        params = (rows_t, user_t, *fields.values())
        tcat_all = cat_pos[target]  # category positions (into the downloaded rows) of the targets
        hcat_all = np.where(hist >= 0, cat_pos[np.maximum(hist, 0)], -1)
        label = s.label[keep]
        total = 0.0
        for _ in range(settings.epochs):
            order = rng.permutation(n)
            for lo in range(0, n, settings.batch):
                idx = order[lo:lo + settings.batch]
                batch = click_batch(target[idx], hist[idx], tcat_all[idx], hcat_all[idx], label[idx])
                loss = self.model.objective_torch(rows_t, fields, user_t, batch)
                grads = torch.autograd.grad(loss, params)
                total += float(loss.detach()) * idx.size
                with torch.no_grad():  # plain SGD
                    for p, g in zip(params, grads, strict=True):
                        p.sub_(settings.lr * g)
        self.loss = total / (n * settings.epochs) if n and settings.epochs else None
        self.user_embedding[...] = user_t.detach().numpy()
        delta_goods = rows_t.detach().numpy() - g_rows
        delta_cats = fields["categories"].detach().numpy() - c_rows
        delta_mlp = np.zeros(space.dense_rows * d)
        delta_mlp[:space.mlp_size] = flat[c:].numpy() - mlp
        # weights: samples touching each goods / category row; the sample count for dense rows
        v_goods = np.bincount(target, minlength=goods.size) + _history_counts(target, hist, goods.size)
        v_cats = np.bincount(tcat_all, minlength=cats.size) + _history_counts(tcat_all, hcat_all, cats.size)
        v_dense = np.full(space.dense_rows, n, dtype=np.int64)
        weights = np.minimum(np.concatenate([v_goods, v_cats, v_dense]), settings.max_weight).astype(np.uint32)
        deltas = np.concatenate([delta_goods, delta_cats, delta_mlp.reshape(-1, d)])
        return space.rows_of(goods, cats), deltas, weights


def _history_counts(target: np.ndarray, hist: np.ndarray, size: int) -> np.ndarray:
    """int64 (size,): for each row position, the samples whose history (not its target)
    contains it at least once."""
    k, width = hist.shape
    sample = np.repeat(np.arange(k), width)
    pos = hist.ravel()
    ok = pos >= 0
    pairs = np.unique(np.stack([sample[ok], pos[ok]]), axis=1) if ok.any() else np.empty((2, 0), np.int64)
    pairs = pairs[:, pairs[1] != target[pairs[0]]]
    return np.bincount(pairs[1], minlength=size).astype(np.int64)


class SFSLServer:
    """The cloud server: the public model (goods table, dense vector with the category table
    and the MLPs) and the update of Algorithm 1, line 9."""

    def __init__(self, model: DIN, table: np.ndarray, dense: np.ndarray, goods_category: np.ndarray) -> None:
        self.model, self.table, self.dense, self.goods_category = model, table, dense, goods_category
        self.space = RowSpace(table.shape[0], model.num_categories, model.dim, model.mlp_size)

    def reply(self, request: bytes, round_id: int, union: np.ndarray | None = None) -> bytes:
        """W_{S''} for a device's request; with the round's ``union`` (int, increasing), only for
        goods in it (an honest S'' is a subset of the union: Algorithm 2).

        Raises
        ------
        InvalidMessage
            A malformed request, or (``union``) one for goods outside the union: the server
            would otherwise hold a reply as large as the whole table for it (finding S41-R5).
        """
        goods = wire.open_request(request, round_id, self.space.goods)
        if union is not None and not np.isin(goods, union).all():
            raise InvalidMessage(f"download request of round {round_id} names goods outside the round's union")
        cats = categories_of(goods, self.goods_category)
        d, c = self.model.dim, self.model.num_categories
        return wire.reply(round_id, self.table[goods], self.dense[:c * d].reshape(c, d)[cats], self.dense[c * d:])

    def apply(self, total: np.ndarray, settings: TrainingSettings) -> int:
        """``W_j += decompress(sum v z / sum v)`` for every row with ``sum v > 0``; returns the
        number of such rows.  ``total`` uint32 (length, d + 1) is the secure sum."""
        d = self.model.dim
        self.add(dequantize_mean(total[:, :d], total[:, d], settings.bound, settings.levels))
        return int(np.count_nonzero(total[:, d]))

    def add(self, update: np.ndarray) -> None:
        """Add ``update`` float64 (length, d), one row per row of the public row space, to the
        model (goods rows to the table; category and dense rows to the dense vector)."""
        sp, d, c = self.space, self.model.dim, self.space.categories
        self.table += update[:sp.goods]
        self.dense[:c * d] += update[sp.goods:sp.goods + c].ravel()
        self.dense[c * d:] += update[sp.goods + c:].ravel()[:sp.mlp_size]
