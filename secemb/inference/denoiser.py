"""GREC's denoiser F_p (grec.txt Eq. 16, A.8.2) as a federated model trained by
:func:`secemb.training.train` after the recommender.  ``secemb bench grec`` trains it on the
recommender's training ratings less a per-user validation split and keeps its best validation
epoch (``TrainConfig.early_stop``; the validation score is the RMSE of :meth:`Denoiser.predict`,
the post-processed prediction): at the paper's 50 epochs it overfits (docs/inference.md).

Modules (docs/inference.md):

* ``F_i``: item id -> ``e_i`` (``d^``), the first ``d^`` columns of the sparse table;
* ``F_h``: ``H_u (R, d) -> T_H = H_u W_h (R, d^)``; ``F_z``: ``Z_u -> T_Z = Z_u W_z`` (one
  ``d x d^`` matrix each, applied to every row);
* ``F_o``: one hidden ReLU layer over ``[e_i; vec T_H; vec T_Z; r~ - mid]`` plus a residual
  ``mid + a (r~ - mid)`` whose gain ``a`` is learnt (starts at 1)::

      r^ = mid + a (r~ - mid) + w2 . relu(W1 [e_i; vec T_H; vec T_Z; r~ - mid] + c1) + c2

  ``mid`` is the middle of the public rating scale.  The paper's F_o omits ``r~`` from its
  input; the residual puts it back (the spec's suggestion).

Split for federated training (:mod:`secemb.models.base`):

* sparse table ``(m, d^ + w)``: ``[e_i, the recommender's table row i]``; the trailing ``w``
  columns are **frozen** (zero gradient, like FM's feature codes), so private retrieval of a
  device's rated rows through SecEmb also brings it the recommender rows it needs to compute
  ``r~`` *on the device* -- no server learns which items it rated or sees a noisy prediction
  while the denoiser trains;
* dense ``W_h, W_z, W1, c1, w2, c2, a``, aggregated as additive shares;
* private: nothing (``private_size = 0``); the device's clean ``H_u`` and offset are data it
  already holds from the recommender (:class:`DenoiserContext`).

Every local step draws a fresh ``Z_u`` (Eq. 17) from the CSPRNG.  The noisy ``H~_u`` of a
training step never leaves the device (``r~`` is computed locally from the retrieved rows), so
denoiser training spends no LDP budget; what leaves is the denoiser's gradient, under SecEmb
like the recommender's (docs/inference.md, "privacy").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from secemb.digest import is_sha256_hex, table_sha256
from secemb.errors import InvalidParameters, check_float, check_int
from secemb.inference.mechanism import GaussianLDP, privatize
from secemb.inference.representation import Representation, representation_for
from secemb.models import RecModel, StepResult, UserState, UserStore, register_model
from secemb.models.batch import RATING, Batch
from secemb.models.features import DenseLayout
from secemb.randomness import RandomBytes

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from secemb.data.features import FeatureSet

__all__ = ["NAME", "Denoiser", "DenoiserContext"]

#: the registered model name
NAME = "grec-denoiser"
#: pairs scored at a time outside training
_CHUNK = 1 << 15


@dataclass(frozen=True)
class DenoiserContext:
    """What the denoiser's devices hold besides the denoiser: the trained recommender's split
    (:class:`~secemb.inference.representation.Representation`, with its public dense), every
    device's clean representation ``h`` float64 ``(num_users, R, d)`` and private ``offset``
    float64 ``(num_users,)`` (simulation: side by side, like a :class:`~secemb.models.UserStore`),
    the recommender's public ``table`` (``(m, w)``; the servers put it in the denoiser's frozen
    columns), the LDP ``mechanism``, and ``table_sha256``, the
    :func:`~secemb.digest.table_sha256` of the recommender's table (``None``: a
    device's context built without it, which cannot join a round:
    :meth:`~secemb.client.device.RoundInfo.check_model` compares it with the servers')."""

    rep: Representation
    table: np.ndarray
    h: np.ndarray
    offset: np.ndarray
    mechanism: GaussianLDP
    table_sha256: str | None = None

    @classmethod
    def from_trained(cls, model: RecModel, table: np.ndarray, dense: np.ndarray,
                     user_params: UserStore | np.ndarray, mechanism: GaussianLDP,
                     features: FeatureSet | None = None) -> DenoiserContext:
        """The context of a trained recommender (``features``: FM/DeepFM's)."""
        params = user_params.params if isinstance(user_params, UserStore) else np.asarray(user_params)
        rep = representation_for(model, dense)
        l_x = int(getattr(model, "l_x", 0))
        if l_x:
            if features is None:
                raise InvalidParameters(f"{model.name} uses user features: pass features=")
            user_x = features.user.astype(np.float64)
        else:
            user_x = np.zeros((params.shape[0], 0))
        h, offset = rep.clean(params, user_x)
        table = np.asarray(table, dtype=np.float64)
        return cls(rep, table, h, offset, mechanism, table_sha256(table))

    @classmethod
    def for_device(cls, model: RecModel, dense: np.ndarray, params: np.ndarray, mechanism: GaussianLDP,
                   user_x: np.ndarray | None = None, *, table_sha256: str | None = None) -> DenoiserContext:
        """One standalone device's context: the recommender ``model`` at its public ``dense``,
        the device's own private ``params`` (float64 ``(private_size,)``, its recommender state)
        and, for FM/DeepFM with user features, its own ``user_x`` (``(l_x,)``).  One row (the
        device's row 0 in its one-row store) and no table rows (``(0, w)``: a device never holds
        the recommender's table; its rows arrive in the denoiser's frozen columns), so the
        denoiser built on it can take the device's local steps but not initialize the model.
        ``table_sha256``: the :func:`~secemb.digest.table_sha256` of the recommender's
        table (:func:`secemb.inference.saved.load_public_recommender`'s last element), required
        to join a denoiser's round (the round announces the servers' frozen table's); not needed
        for inference.

        Raises
        ------
        InvalidParameters
            ``params`` not of the model's private size; user features missing or mis-sized;
            ``table_sha256`` not 64 lowercase hex digits.
        """
        if table_sha256 is not None and not is_sha256_hex(table_sha256):
            raise InvalidParameters(f"table_sha256 must be 64 lowercase hex digits, got {table_sha256!r}")
        params = np.asarray(params, dtype=np.float64)
        if params.shape != (model.private_size,):
            raise InvalidParameters(f"params must have shape ({model.private_size},), got {params.shape}")
        l_x = int(getattr(model, "l_x", 0))
        x = np.zeros((1, 0)) if user_x is None else np.asarray(user_x, dtype=np.float64).reshape(1, -1)
        if x.shape[1] != l_x:
            raise InvalidParameters(f"{model.name} has {l_x} user features, got {x.shape[1]}")
        rep = representation_for(model, dense)
        h, offset = rep.clean(params[None], x)
        return cls(rep, np.zeros((0, model.sparse_width)), h, offset, mechanism, table_sha256)


class Denoiser(RecModel):
    """F_p.  ``sparse_width = hat_d + frozen``, ``private_size = 0``.

    :meth:`for_context` builds the denoiser of a trained recommender; the constructor takes
    JSON-able sizes (what the servers' configuration records and rebuilds: a denoiser without
    ``context`` knows its sizes but cannot train or predict; with ``frozen_table``, the
    recommender's public table, it can initialize the public model, as server 0 does).

    Parameters
    ----------
    rows, dim: ``R`` and ``d`` of the recommender's representation.
    frozen: width ``w`` of the recommender's table rows (the frozen columns).
    hat_d: the denoising dimension d^ (Table 8: 8; NCF 5), >= 1.
    hidden: width of F_o's hidden layer, >= 1.
    reg: L2 weight on the retrieved ``e_i`` (Table 8's regularization), >= 0.
    init_std: standard deviation of ``e_i``'s normal initialization, >= 0.
    rating_range: the public rating scale (``mid`` is its middle).
    epsilon, delta, bound: the LDP mechanism :class:`~secemb.inference.GaussianLDP` the
        denoiser is trained for and used with (public: part of the spec, hence of a
        deployment's fingerprint and round document, so a standalone device knows it); with
        ``context``, the context's mechanism must be this one.
    context: the recommender's side (:class:`DenoiserContext`), matching the sizes.
    frozen_table: without ``context``, the recommender's public table alone (float64
        ``(m, frozen)``): what a server needs to initialize the model (its frozen columns) --
        a server process builds the denoiser from its configuration and this table
        (``[model] frozen_table``, :func:`secemb.inference.saved.save_frozen_table`); it can
        initialize but not train or predict.
    _rng: random bytes for the noise draws (tests only; the OS CSPRNG by default).
    """

    name = NAME

    def __init__(self, rows: int, dim: int, frozen: int, hat_d: int = 8, hidden: int = 32, reg: float = 0.001,
                 init_std: float = 0.1, rating_range: tuple[float, float] | list[float] = (1.0, 5.0),
                 epsilon: float = 1.0, delta: float = 1e-4, bound: float = 1.0, *,
                 context: DenoiserContext | None = None, frozen_table: np.ndarray | None = None,
                 _rng: RandomBytes | None = None) -> None:
        for what, v in (("rows", rows), ("dim", dim), ("frozen", frozen), ("hat_d", hat_d), ("hidden", hidden)):
            check_int(what, v, low=1)
        for what, f in (("reg", reg), ("init_std", init_std)):
            check_float(what, f, low=0)
        lo, hi = (float(x) for x in rating_range)
        if not lo < hi:
            raise InvalidParameters(f"rating_range must be (lo, hi) with lo < hi, got {rating_range!r}")
        self.mechanism = GaussianLDP(*(check_float(what, f) for what, f in
                                       (("epsilon", epsilon), ("delta", delta), ("bound", bound))))
        if context is not None:
            if not isinstance(context, DenoiserContext):
                raise InvalidParameters(f"context must be a DenoiserContext, got {type(context).__name__}")
            got = (context.rep.rows, context.rep.dim, int(context.table.shape[1]))
            if got != (rows, dim, frozen):
                raise InvalidParameters(f"context has (rows, dim, frozen) = {got}, not {(rows, dim, frozen)}")
            if context.mechanism != self.mechanism:
                raise InvalidParameters(f"the context's mechanism {context.mechanism} is not the denoiser's "
                                        f"{self.mechanism}")
        if frozen_table is not None:
            if context is not None:
                raise InvalidParameters("give context or frozen_table, not both (the context holds the table)")
            frozen_table = np.asarray(frozen_table, dtype=np.float64)
            if frozen_table.ndim != 2 or frozen_table.shape[1] != frozen or not np.all(np.isfinite(frozen_table)):
                raise InvalidParameters(f"frozen_table must be a finite (m, {frozen}) array, got shape "
                                        f"{frozen_table.shape}")
        self.rows, self.dim, self.frozen = rows, dim, frozen
        self.hat_d, self.hidden = hat_d, hidden
        self.reg, self.init_std = float(reg), float(init_std)
        self.rating_range = (lo, hi)
        self.mid = (lo + hi) / 2.0
        self._context = context
        self._frozen_table = frozen_table
        self._rng = _rng
        self.trainable_width = hat_d
        self.frozen_columns = frozen
        self.sparse_width = hat_d + frozen
        n_in = (2 * rows + 1) * hat_d + 1
        self.layout = DenseLayout([("W_h", (dim, hat_d)), ("W_z", (dim, hat_d)), ("W1", (n_in, hidden)),
                                   ("c1", (hidden,)), ("w2", (hidden,)), ("c2", ()), ("a", ())])
        self.dense_size = self.layout.size
        self.private_size = 0

    @classmethod
    def for_context(cls, context: DenoiserContext, *, _rng: RandomBytes | None = None, **hparams: Any) -> Denoiser:
        """The denoiser of ``context``'s recommender with ``hparams`` (``hat_d``, ``hidden``,
        ``reg``, ``init_std``, ``rating_range``; the mechanism is the context's)."""
        m = context.mechanism
        hp = {"epsilon": m.epsilon, "delta": m.delta, "bound": m.bound, **hparams}
        return cls(context.rep.rows, context.rep.dim, int(context.table.shape[1]), context=context, _rng=_rng,
                   **hp)

    @classmethod
    def for_device(cls, spec: dict[str, Any], model: RecModel, dense: np.ndarray, params: np.ndarray,
                   user_x: np.ndarray | None = None, *, table_sha256: str | None = None,
                   _rng: RandomBytes | None = None) -> Denoiser:
        """A standalone device's denoiser: the announced (or saved) ``spec`` (:meth:`spec`,
        mechanism included) over its one-device context
        (:meth:`DenoiserContext.for_device`: the recommender ``model`` at its public ``dense``,
        the device's recommender ``params``, with user features its ``user_x``, and to train in
        a round the ``table_sha256`` of the recommender's table).

        Raises
        ------
        InvalidParameters
            A malformed spec, or one that does not fit the recommender (rows, dim, frozen).
        """
        if not isinstance(spec, dict):
            raise InvalidParameters(f"a denoiser spec must be a dict, got {type(spec).__name__}")
        # TypeError: a field missing or not the constructor's; ValueError, OverflowError: a rating_range
        # that is no pair of numbers, sizes numpy cannot hold
        try:
            announced = cls(**spec)
        except InvalidParameters:
            raise
        except (TypeError, ValueError, OverflowError) as exc:
            raise InvalidParameters(f"not a denoiser spec: {exc}") from None
        ctx = DenoiserContext.for_device(model, dense, params, announced.mechanism, user_x, table_sha256=table_sha256)
        hp = {k: v for k, v in announced.spec().items() if k not in ("rows", "dim", "frozen")}
        den = cls.for_context(ctx, _rng=_rng, **hp)
        if den.spec() != announced.spec():
            sizes = (announced.rows, announced.dim, announced.frozen)
            raise InvalidParameters(f"the denoiser's (rows, dim, frozen) = {sizes} do not fit the recommender "
                                    f"{model.name}'s {(den.rows, den.dim, den.frozen)}")
        return den

    @property
    def context(self) -> DenoiserContext:
        """The recommender's side.

        Raises
        ------
        InvalidParameters
            The denoiser was built from its sizes only.
        """
        if self._context is None:
            raise InvalidParameters("this denoiser was built without its recommender (context=); "
                                    "build it with Denoiser.for_context")
        return self._context

    @property
    def public_table(self) -> np.ndarray:
        """The recommender's public table (float64 ``(m, frozen)``): the frozen columns.

        Raises
        ------
        InvalidParameters
            The denoiser was built from its sizes only.
        """
        if self._context is not None:
            return self._context.table
        if self._frozen_table is None:
            raise InvalidParameters("this denoiser was built without its recommender (context= or frozen_table=); "
                                    "build it with Denoiser.for_context")
        return self._frozen_table

    @property
    def recommender_table_sha256(self) -> str | None:
        """The :func:`~secemb.digest.table_sha256` of the recommender's table this
        denoiser is trained against: its context's (a device's context records the one it was
        given, or ``None``), else that of its ``frozen_table`` (a server's); ``None`` for a
        denoiser built from its sizes only.  The servers announce theirs in the round document
        (``model.recommender_table_sha256``)."""
        if self._context is not None:
            return self._context.table_sha256
        return None if self._frozen_table is None else table_sha256(self._frozen_table)

    def spec(self) -> dict[str, object]:
        """The JSON-able constructor arguments (not the context)."""
        return {"rows": self.rows, "dim": self.dim, "frozen": self.frozen, "hat_d": self.hat_d,
                "hidden": self.hidden, "reg": self.reg, "init_std": self.init_std,
                "rating_range": list(self.rating_range), "epsilon": self.mechanism.epsilon,
                "delta": self.mechanism.delta, "bound": self.mechanism.bound}

    def __repr__(self) -> str:
        return f"Denoiser(rows={self.rows}, dim={self.dim}, hat_d={self.hat_d}, hidden={self.hidden})"

    # ------------------------------------------------------------------ initialization

    def init_public(self, num_items: int, rng: np.random.Generator, *,
                    rating_range: tuple[float, float] = (1.0, 5.0)) -> tuple[np.ndarray, np.ndarray]:
        public = self.public_table
        if num_items != public.shape[0]:
            raise InvalidParameters(f"the recommender has {public.shape[0]} items, got {num_items}")
        table = np.empty((num_items, self.sparse_width))
        table[:, : self.hat_d] = rng.normal(0.0, self.init_std, (num_items, self.hat_d))
        table[:, self.hat_d :] = public
        dense = np.zeros(self.dense_size)
        v = self.layout.views(dense)
        for name in ("W_h", "W_z", "W1"):
            v[name][...] = rng.uniform(-1, 1, v[name].shape) / np.sqrt(v[name].shape[0])
        v["w2"][...] = rng.uniform(-1, 1, v["w2"].shape) / np.sqrt(self.hidden)
        dense[self.layout.offsets["a"][0]] = 1.0
        return table, dense

    def init_private(self, num_users: int, rng: np.random.Generator) -> np.ndarray:
        if num_users != self.context.h.shape[0]:
            raise InvalidParameters(f"the context holds {self.context.h.shape[0]} devices, got {num_users}")
        return np.zeros((num_users, 0))

    # ------------------------------------------------------------------ the forward pass

    def noisy_scores(self, users: np.ndarray, h_tilde: np.ndarray, rec_rows: np.ndarray,
                     pair_user: np.ndarray) -> np.ndarray:
        """``r~`` of pairs: the server's score of the noisy ``h_tilde (U, R, d)`` of ``users
        (U,)`` for the items whose recommender rows are ``rec_rows (k, w)``, pair ``j`` being
        user ``pair_user[j]`` (an index into ``users``), plus each device's private offset.
        Scored in chunks of ``2^15`` pairs (a DeepFM summary is ``4d + d + 1`` wide)."""
        rep = self.context.rep
        summary = rep.summary(h_tilde)
        offset = self.context.offset[users]
        out = np.empty(pair_user.shape[0])
        for lo in range(0, pair_user.shape[0], _CHUNK):
            part = pair_user[lo : lo + _CHUNK]
            out[lo : lo + part.size] = rep.score(summary[part], rec_rows[lo : lo + part.size]) + offset[part]
        return out

    def forward(self, v: dict[str, Any], e: torch.Tensor, h: torch.Tensor, z: torch.Tensor,
                pair_user: torch.Tensor, r_tilde: torch.Tensor) -> torch.Tensor:
        """``r^`` of ``k`` pairs (torch float64 ``(k,)``): ``e (k, d^)`` item embeddings, the
        devices' clean ``h`` and kept noise ``z`` (``(U, R, d)``), ``pair_user (k,)`` int64
        index into them, ``r_tilde (k,)``.  The first layer is applied to the per-device part
        once per device (``W1 [e; T_H; T_Z; r]`` split by blocks)."""
        hd, rows = self.hat_d, self.rows
        n_dev = h.shape[0]
        t_h = (h @ v["W_h"]).reshape(n_dev, rows * hd)
        t_z = (z @ v["W_z"]).reshape(n_dev, rows * hd)
        w1 = v["W1"]
        dev = t_h @ w1[hd : hd + rows * hd] + t_z @ w1[hd + rows * hd : hd + 2 * rows * hd]
        centred = r_tilde - self.mid
        pre = e @ w1[:hd] + dev[pair_user] + centred[:, None] * w1[-1] + v["c1"]
        import torch

        return self.mid + v["a"] * centred + torch.relu(pre) @ v["w2"] + v["c2"]

    # ------------------------------------------------------------------ training

    def objective_torch(self, rows: torch.Tensor, dense: torch.Tensor, private: torch.Tensor,
                        batch: Batch) -> torch.Tensor:
        raise InvalidParameters("the denoiser's objective needs the device's data: use local_step")

    def local_step(self, rows: np.ndarray, dense: np.ndarray, user_state: UserState, batch: Batch) -> StepResult:
        """One device's step on Eq. 17: a fresh ``Z_u`` from the CSPRNG, ``r~`` of its rated
        items computed here from the retrieved recommender rows, the squared error of ``r^``
        (mean over the items) plus ``reg`` times the retrieved ``e_i``'s squared norms."""
        import torch

        rows, item_pos = self._rating_step_inputs(rows, dense, batch)
        u = np.array([user_state.user])
        h = self.context.h[u]
        h_tilde, z = privatize(h, self.context.mechanism, _rng=self._rng)
        zeros = np.zeros(item_pos.size, dtype=np.int64)
        r_tilde = self.noisy_scores(u, h_tilde, rows[item_pos, self.hat_d :], zeros)
        rows_t = torch.tensor(rows[:, : self.hat_d], requires_grad=True)
        fields = self.layout.leaves(np.asarray(dense, dtype=np.float64))
        pred = self.forward(fields, rows_t[torch.as_tensor(item_pos)], torch.as_tensor(h), torch.as_tensor(z),
                            torch.as_tensor(zeros), torch.as_tensor(r_tilde))
        ratings = torch.as_tensor(np.asarray(batch[RATING], dtype=np.float64))
        loss = ((pred - ratings) ** 2).mean() + self.reg * (rows_t**2).sum()
        grads = torch.autograd.grad(loss, (rows_t, *fields.values()), allow_unused=True)
        row_grads = np.zeros(rows.shape)
        if grads[0] is not None:
            row_grads[:, : self.hat_d] = grads[0].numpy()
        dense_grad = np.zeros(self.dense_size)
        for name, g in zip(fields, grads[1:], strict=True):
            if g is not None:
                a, b, _ = self.layout.offsets[name]
                dense_grad[a:b] = g.numpy().reshape(-1)
        return StepResult(row_grads, dense_grad, float(loss.item()))

    # ------------------------------------------------------------------ evaluation

    def denoise(self, table: np.ndarray, dense: np.ndarray, users: np.ndarray, h_tilde: np.ndarray,
                z: np.ndarray, pair_user: np.ndarray, items: np.ndarray, r_tilde: np.ndarray) -> np.ndarray:
        """float64 ``(k,)``: ``r^`` on the devices ``users (U,)`` that released ``h_tilde`` and
        kept ``z`` (``(U, R, d)``), for pairs ``(users[pair_user[j]], items[j])`` whose noisy
        score is ``r_tilde[j]``.  Only the denoiser's ``e`` columns of ``table`` are read."""
        import torch

        del h_tilde  # r~ already carries it; F_p sees H and Z (Eq. 16)
        v = {k: torch.as_tensor(np.asarray(x, dtype=np.float64)) for k, x in
             self.layout.views(np.asarray(dense, dtype=np.float64)).items()}
        with torch.no_grad():
            out = self.forward(v, torch.as_tensor(np.asarray(table[items, : self.hat_d], dtype=np.float64)),
                               torch.as_tensor(self.context.h[users]), torch.as_tensor(np.asarray(z)),
                               torch.as_tensor(np.asarray(pair_user, dtype=np.int64)),
                               torch.as_tensor(np.asarray(r_tilde, dtype=np.float64)))
        return np.asarray(out.numpy(), dtype=np.float64)

    def predict(self, table: np.ndarray, dense: np.ndarray, user_params: UserStore | np.ndarray,
                users: np.ndarray, items: np.ndarray) -> np.ndarray:
        """Post-processed predictions ``r^`` of the pairs: one fresh release ``H~_u`` per
        distinct user (as one inference request), ``r~`` from it, then F_p."""
        users = np.asarray(users, dtype=np.int64)
        items = np.asarray(items, dtype=np.int64)
        uniq, pair_user = np.unique(users, return_inverse=True)
        h_tilde, z = privatize(self.context.h[uniq], self.context.mechanism, _rng=self._rng)
        r_tilde = self.noisy_scores(uniq, h_tilde, table[items, self.hat_d :], pair_user)
        return self.denoise(table, dense, uniq, h_tilde, z, pair_user, items, r_tilde)


register_model(NAME, Denoiser)
