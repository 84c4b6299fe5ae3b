"""What a recommender model must provide to be trained by secemb.

A model is split along the trust boundary of federated training:

* **public parameters**, held by the two servers: a *sparse table* of shape
  ``(num_items, sparse_width)`` (one row per item: its embedding and any per-item scalars,
  e.g. the item bias) and a flat *dense* vector of length ``dense_size`` (everything else
  shared by all users: a global bias, MLP weights, ...);
* **private parameters**, held by each user's device: a flat float64 vector of length
  ``private_size`` (user embedding, user bias, ...), updated on the device only.

In a round a user sees only the table rows of its own items and the dense vector.  It calls
:meth:`RecModel.local_step`, which returns the gradients of its loss with respect to those rows
and to the dense vector and updates the private vector in place through the device's optimizer
(:class:`UserStore`).  All arrays are float64.

A new model (NCF, FM, DeepFM, ...) subclasses :class:`RecModel`, declares
``sparse_width``/``dense_size``/``private_size``, initializes its parameters from a
:class:`numpy.random.Generator`, and writes its loss in torch in :meth:`RecModel.objective_torch`;
the generic :meth:`RecModel.local_step` then gets gradients by autograd.  A model may override
``local_step`` with a hand-derived fast path, checked against the autograd one in its tests.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from secemb.errors import InvalidParameters, check_int
from secemb.models import batch as fields
from secemb.models.batch import Batch
from secemb.models.optim import AdamConfig, adam_update
from secemb.models.task import RATING, Task

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = ["RecModel", "StepResult", "UserState", "UserStore"]


@dataclass(frozen=True)
class StepResult:
    """What one local step produces on the device.

    Attributes
    ----------
    row_grads: float64, (n_rows, sparse_width): gradient of the loss w.r.t. each given row.
    dense_grad: float64, (dense_size,): gradient w.r.t. the dense vector.
    loss: value of the local objective *before* the private update.
    """

    row_grads: np.ndarray
    dense_grad: np.ndarray
    loss: float


class UserStore:
    """On-device private parameters of simulated users, one row per user, with each device's
    own optimizer state (Adam moments and step count).

    In a deployment every device holds only its own row; the simulation keeps them side by side
    so that evaluation can be vectorized.  Nothing in the store ever crosses the transport.

    Parameters
    ----------
    params:
        float64, (num_users, private_size): initial private parameters (copied).
    optimizer:
        Adam hyperparameters of the on-device optimizer.
    """

    def __init__(self, params: np.ndarray, optimizer: AdamConfig) -> None:
        params = np.array(params, dtype=np.float64, copy=True)
        if params.ndim != 2:
            raise InvalidParameters(
                f"params must be 2-D (num_users, private_size), got {params.shape}"
            )
        if not isinstance(optimizer, AdamConfig):
            raise InvalidParameters(
                f"optimizer must be an AdamConfig, got {type(optimizer).__name__}"
            )
        self.params = params
        self.optimizer = optimizer
        self._m = np.zeros_like(params)
        self._v = np.zeros_like(params)
        self._t = np.zeros(params.shape[0], dtype=np.int64)

    @property
    def num_users(self) -> int:
        """Number of users (rows)."""
        return int(self.params.shape[0])

    @property
    def private_size(self) -> int:
        """Length of each user's private vector."""
        return int(self.params.shape[1])

    def state(self, user: int) -> UserState:
        """The device state of ``user`` (views into the store)."""
        user = check_int("user", user, low=0, high=self.num_users - 1)
        return UserState(self, int(user))

    def steps(self, user: int) -> int:
        """Number of optimizer steps ``user``'s device has taken."""
        return int(self._t[user])

    def state_dict(self) -> dict[str, np.ndarray]:
        """Every device's private state as arrays (copies): ``params`` and the Adam moments
        ``adam_m``, ``adam_v`` float64 (num_users, private_size), ``adam_t`` int64 (num_users,)
        step counts.  :meth:`from_state_dict` rebuilds the store."""
        return {"params": self.params.copy(), "adam_m": self._m.copy(), "adam_v": self._v.copy(),
                "adam_t": self._t.copy()}

    @classmethod
    def from_state_dict(cls, state: Mapping[str, np.ndarray], optimizer: AdamConfig) -> UserStore:
        """The store :meth:`state_dict` described, with on-device optimizer ``optimizer``.

        Raises
        ------
        InvalidParameters
            A key is missing or extra, or an array has the wrong dtype or shape (each named).
        """
        expected = {"params", "adam_m", "adam_v", "adam_t"}
        if set(state) != expected:
            raise InvalidParameters(f"user store state must have keys {sorted(expected)}, got {sorted(state)}")
        params = state["params"]
        if not isinstance(params, np.ndarray) or params.dtype != np.float64 or params.ndim != 2:
            raise InvalidParameters(f"user store state 'params' must be float64 (num_users, private_size), got "
                                    f"{getattr(params, 'dtype', type(params).__name__)} {getattr(params, 'shape', '')}")
        store = cls(params, optimizer)
        moments = store.params.shape
        for key, dtype, shape in (("adam_m", np.float64, moments), ("adam_v", np.float64, moments),
                                  ("adam_t", np.int64, (store.num_users,))):
            arr = state[key]
            if not isinstance(arr, np.ndarray) or arr.dtype != dtype or arr.shape != shape:
                raise InvalidParameters(f"user store state {key!r} must be {np.dtype(dtype)} {shape}, got "
                                        f"{getattr(arr, 'dtype', type(arr).__name__)} {getattr(arr, 'shape', '')}")
        if (state["adam_t"] < 0).any():
            raise InvalidParameters("user store state 'adam_t' must be >= 0")
        store._m, store._v, store._t = (np.array(state[k], copy=True) for k in ("adam_m", "adam_v", "adam_t"))
        return store

    def snapshot(self, user: int) -> UserSnapshot:
        """A copy of ``user``'s private parameters and on-device Adam state (to undo a local
        step whose round was aborted, with :meth:`restore`)."""
        self.state(user)  # validates user
        return UserSnapshot(self.params[user].copy(), self._m[user].copy(), self._v[user].copy(), int(self._t[user]))

    def restore(self, user: int, snap: UserSnapshot) -> None:
        """Put back ``user``'s :meth:`snapshot`.

        Raises
        ------
        InvalidParameters
            ``snap`` is not a snapshot of this store's shape.
        """
        self.state(user)
        if not isinstance(snap, UserSnapshot) or snap.params.shape != (self.private_size,):
            raise InvalidParameters(f"snapshot must be a UserSnapshot of {self.private_size} parameters")
        self.params[user], self._m[user], self._v[user], self._t[user] = snap.params, snap.m, snap.v, snap.t


@dataclass(frozen=True)
class UserSnapshot:
    """One user's private state at a point in time (:meth:`UserStore.snapshot`)."""

    params: np.ndarray
    m: np.ndarray
    v: np.ndarray
    t: int


class UserState:
    """One device's private parameters and optimizer; ``params`` is a writable view."""

    __slots__ = ("_store", "params", "user")

    def __init__(self, store: UserStore, user: int) -> None:
        self._store = store
        self.user = user
        self.params = store.params[user]

    def apply_gradient(self, grad: np.ndarray) -> None:
        """One step of the device's Adam on the private parameters, in place."""
        grad = np.asarray(grad, dtype=np.float64)
        if grad.shape != self.params.shape:
            raise InvalidParameters(
                f"private gradient must have shape {self.params.shape}, got {grad.shape}"
            )
        s = self._store
        s._t[self.user] += 1
        adam_update(
            self.params, grad, s._m[self.user], s._v[self.user], int(s._t[self.user]), s.optimizer
        )


class RecModel(ABC):
    """A recommender model split into public (server) and private (device) parameters.

    Subclasses set ``name`` and the three sizes, and implement the abstract methods.
    """

    name: str = ""
    #: whether the model is built with the dataset's side features (``features=`` argument)
    uses_features: bool = False
    sparse_width: int
    dense_size: int
    private_size: int

    def spec(self) -> dict[str, object]:
        """The constructor arguments of this model, JSON-able: ``get_model(self.name,
        **self.spec())`` builds an identical model (a feature model also needs its data,
        ``features=self.features``, which is not part of the spec).

        The default reads, for every parameter of ``type(self).__init__`` except ``features``,
        the attribute of the same name -- the convention every built-in model follows.  A
        model whose constructor stores its arguments differently overrides this.

        Raises
        ------
        InvalidParameters
            A constructor parameter has no attribute of the same name, or is ``*args`` /
            ``**kwargs`` (the spec could not be complete).
        """
        out: dict[str, object] = {}
        for name, param in inspect.signature(type(self).__init__).parameters.items():
            if name in ("self", "features"):
                continue
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) or not hasattr(self, name):
                raise InvalidParameters(
                    f"{type(self).__name__}.spec(): constructor parameter {name!r} is not stored as an "
                    "attribute of the same name; override spec()"
                )
            out[name] = getattr(self, name)
        return out

    @property
    def task(self) -> Task:
        """What the model trains on (:mod:`secemb.models.task`): the rating task by default; a
        sequential model returns its :class:`~secemb.models.task.SequenceTask`."""
        return RATING

    def hparams(self) -> dict[str, object]:
        """Hyperparameters recorded in training results: :meth:`spec` plus any sizes derived
        from data (e.g. FM's feature counts)."""
        return self.spec()

    # ------------------------------------------------------------------ initialization

    @abstractmethod
    def init_public(
        self,
        num_items: int,
        rng: np.random.Generator,
        *,
        rating_range: tuple[float, float] = (1.0, 5.0),
    ) -> tuple[np.ndarray, np.ndarray]:
        """Initial public parameters ``(table (num_items, sparse_width), dense (dense_size,))``.

        ``rating_range`` is the public rating scale (it may seed an output bias); nothing
        computed from users' data may be used here.
        """

    @abstractmethod
    def init_private(self, num_users: int, rng: np.random.Generator) -> np.ndarray:
        """Initial private parameters of every user, float64 ``(num_users, private_size)``."""

    def new_user_store(
        self, num_users: int, rng: np.random.Generator, optimizer: AdamConfig
    ) -> UserStore:
        """A :class:`UserStore` with freshly initialized private parameters."""
        return UserStore(self.init_private(num_users, rng), optimizer)

    # ------------------------------------------------------------------ training

    @abstractmethod
    def objective_torch(
        self,
        rows: torch.Tensor,
        dense: torch.Tensor,
        private: torch.Tensor,
        batch: Batch,
    ) -> torch.Tensor:
        """The local objective of one user as a torch scalar (reference definition).

        Parameters
        ----------
        rows: (n_rows, sparse_width) table rows of the user's items.
        dense: (dense_size,) dense parameters.
        private: (private_size,) the user's private parameters.
        batch: the user's samples (numpy arrays; see :mod:`secemb.models.batch`); the rating
            task's fields are ``item_pos`` (int64 (k,), each rating's row in ``rows``) and
            ``rating`` (float64 (k,)).
        """

    def local_step(
        self,
        rows: np.ndarray,
        dense: np.ndarray,
        user_state: UserState,
        batch: Batch,
    ) -> StepResult:
        """Gradients of the local objective w.r.t. ``rows`` and ``dense`` at the current
        parameters, then one on-device optimizer step on the private parameters.

        Parameters
        ----------
        rows: float64 (n_rows, sparse_width), the user's retrieved rows (its real items only).
        dense: float64 (dense_size,), the public dense parameters.
        user_state: the device state; its ``params`` are updated in place.
        batch: the user's samples; for the rating task (:func:`~secemb.models.batch.rating_batch`)
            ``item_pos`` int64 (k,), row index in ``rows`` of each rating's item, and
            ``rating`` float64 (k,).

        Returns
        -------
        StepResult
            Row gradients (n_rows, sparse_width), dense gradient (dense_size,), loss.

        The generic implementation uses torch autograd on :meth:`objective_torch`.
        """
        import torch

        rows_t = torch.tensor(rows, dtype=torch.float64, requires_grad=True)
        dense_t = torch.tensor(dense, dtype=torch.float64, requires_grad=True)
        priv_t = torch.tensor(user_state.params, dtype=torch.float64, requires_grad=True)
        loss = self.objective_torch(rows_t, dense_t, priv_t, batch)
        g_rows, g_dense, g_priv = torch.autograd.grad(
            loss, (rows_t, dense_t, priv_t), allow_unused=True
        )
        row_grads = np.zeros(rows.shape) if g_rows is None else g_rows.numpy().copy()
        dense_grad = np.zeros(np.shape(dense)) if g_dense is None else g_dense.numpy().copy()
        if g_priv is not None:
            user_state.apply_gradient(g_priv.numpy())
        return StepResult(row_grads, dense_grad, float(loss.item()))

    def _rating_step_inputs(self, rows: np.ndarray, dense: np.ndarray, batch: Batch) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, item_pos)`` of a rating-task step, checked: ``rows`` float64
        (n, sparse_width), ``dense`` (dense_size,), and ``item_pos`` a non-empty int64 array of
        row indices in ``[0, n)`` (``InvalidParameters`` naming what is wrong otherwise)."""
        rows = np.asarray(rows, dtype=np.float64)
        if rows.ndim != 2 or rows.shape[1] != self.sparse_width:
            raise InvalidParameters(f"rows must have shape (n, {self.sparse_width}), got {rows.shape}")
        if np.shape(dense) != (self.dense_size,):
            raise InvalidParameters(f"dense must have shape ({self.dense_size},), got {np.shape(dense)}")
        batch.require(fields.ITEM_POS, fields.RATING)
        item_pos = np.asarray(batch[fields.ITEM_POS], dtype=np.int64)
        if item_pos.size == 0 or item_pos.min() < 0 or item_pos.max() >= rows.shape[0]:
            raise InvalidParameters(f"item_pos must be non-empty and index rows in [0, {rows.shape[0]})")
        return rows, item_pos

    # ------------------------------------------------------------------ evaluation

    @abstractmethod
    def predict(
        self,
        table: np.ndarray,
        dense: np.ndarray,
        user_params: UserStore | np.ndarray,
        users: np.ndarray,
        items: np.ndarray,
    ) -> np.ndarray:
        """Predicted ratings (float64, unclipped) for the pairs ``(users[j], items[j])``."""
