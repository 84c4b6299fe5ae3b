"""Server-side Adam over the public parameters (sparse table and dense vector), in numpy.

Server 0 applies it to the round's aggregated gradient after reconstruction.

Lazy (sparse) rows
    With ``lazy=True`` (the default) a table row is updated only in rounds where its aggregated
    gradient row is non-zero, i.e. some participating user touched the item (padding rows carry
    exact zeros).  Each row keeps its own step count for bias correction, so a row's trajectory
    is exactly that of a dense Adam fed only the rounds in which it moved.  Rows no user in the
    round rated keep both their value and their moments -- the usual "lazy Adam" for embedding
    tables (TensorFlow's LazyAdam; PyTorch's SparseAdam differs only by using one global step
    count).  With ``lazy=False`` every row moves every round (momentum keeps pushing untouched
    rows), which is :class:`torch.optim.Adam` exactly.  On ML-100K both reach the same accuracy
    (see docs/training.md); lazy touches only the rows of the round and is the default.

The lazy row selection depends only on the aggregate, which server 0 learns anyway, so it
leaks nothing beyond the protocol's output.  The dense vector always takes a dense step.
"""

from __future__ import annotations

import numpy as np

from typing import Any

from secemb.errors import InvalidParameters, check_int
from secemb.models.optim import AdamConfig, adam_update

__all__ = ["ServerAdam"]

#: state_dict() array fields and the attribute each one is
_FIELDS = {"m": "_m", "v": "_v", "row_t": "_row_t", "dm": "_dm", "dv": "_dv"}


class ServerAdam:
    """Adam state for a table of shape ``(num_items, width)`` and a dense vector.

    Parameters
    ----------
    num_items, width: table shape.
    dense_size: length of the dense vector (may be 0).
    config: Adam hyperparameters.
    lazy: update only rows with a non-zero aggregated gradient (see module docstring).
    """

    def __init__(
        self,
        num_items: int,
        width: int,
        dense_size: int,
        config: AdamConfig,
        *,
        lazy: bool = True,
    ) -> None:
        if num_items < 1 or width < 1 or dense_size < 0:
            raise InvalidParameters(
                f"need num_items >= 1, width >= 1, dense_size >= 0; got {num_items}, {width}, "
                f"{dense_size}"
            )
        if not isinstance(config, AdamConfig):
            raise InvalidParameters(f"config must be an AdamConfig, got {type(config).__name__}")
        self.config = config
        self.lazy = bool(lazy)
        self.shape = (int(num_items), int(width))
        self.dense_size = int(dense_size)
        self._m = np.zeros(self.shape)
        self._v = np.zeros(self.shape)
        self._row_t = np.zeros(self.shape[0], dtype=np.int64)
        self._dm = np.zeros(self.dense_size)
        self._dv = np.zeros(self.dense_size)
        self.steps = 0

    def step(
        self,
        table: np.ndarray,
        dense: np.ndarray,
        table_grad: np.ndarray,
        dense_grad: np.ndarray,
    ) -> int:
        """Update ``table`` and ``dense`` (float64) in place; return the number of rows moved.

        Raises
        ------
        InvalidParameters
            If a shape does not match, or a gradient is not finite.
        """
        if table.shape != self.shape or table_grad.shape != self.shape:
            raise InvalidParameters(
                f"table and its gradient must have shape {self.shape}, got {table.shape} and "
                f"{table_grad.shape}"
            )
        if dense.shape != (self.dense_size,) or dense_grad.shape != (self.dense_size,):
            raise InvalidParameters(
                f"dense and its gradient must have shape ({self.dense_size},), got "
                f"{dense.shape} and {dense_grad.shape}"
            )
        if not (np.isfinite(table_grad).all() and np.isfinite(dense_grad).all()):
            raise InvalidParameters("aggregated gradient is not finite")
        self.steps += 1
        cfg = self.config
        if self.lazy:
            rows = np.flatnonzero(np.any(table_grad != 0, axis=1))
            if rows.size:
                self._row_t[rows] += 1
                p, m, v = table[rows], self._m[rows], self._v[rows]
                adam_update(p, table_grad[rows], m, v, self._row_t[rows][:, None], cfg)
                table[rows], self._m[rows], self._v[rows] = p, m, v
            moved = int(rows.size)
        else:
            self._row_t += 1
            adam_update(table, table_grad, self._m, self._v, self.steps, cfg)
            moved = self.shape[0]
        if self.dense_size:
            adam_update(dense, dense_grad, self._dm, self._dv, self.steps, cfg)
        return moved

    def state_dict(self) -> dict[str, Any]:
        """The optimizer's state: ``steps`` (int) and the arrays ``m``, ``v`` (float64, table
        shape), ``row_t`` (int64, (num_items,)), ``dm``, ``dv`` (float64, (dense_size,)).

        The arrays are the live state (not copies): :meth:`step` updates them in place."""
        return {"steps": self.steps} | {k: getattr(self, attr) for k, attr in _FIELDS.items()}

    def load_state_dict(self, state: dict[str, Any], *, copy: bool = True) -> None:
        """Replace the state by ``state`` (as :meth:`state_dict` returns it; arrays copied).

        ``copy=False``: the caller gives ``state``'s arrays up, and those of this optimizer's
        dtype become its state without a copy (a server's optimizer state is 1.8 GB for DeepFM
        at d = 512), read-only ones too: :meth:`step` then refuses to change them in place (a
        server steps a copy of its optimizer, :mod:`secemb.server.combine`).

        Raises
        ------
        InvalidParameters
            A field is missing or has another shape than this optimizer's.
        """
        missing = ({"steps"} | set(_FIELDS)) - set(state)
        if missing:
            raise InvalidParameters(f"optimizer state lacks field(s) {sorted(missing)}")
        arrays = {}
        for key, attr in _FIELDS.items():
            cur, new = getattr(self, attr), np.asarray(state[key])
            if new.shape != cur.shape:
                raise InvalidParameters(f"optimizer state field {key}: expected shape {cur.shape}, got {new.shape}")
            arrays[attr] = new.astype(cur.dtype, copy=copy)
        steps = state["steps"]
        check_int("optimizer state field steps", steps, low=0)
        for attr, arr in arrays.items():
            setattr(self, attr, arr)
        self.steps = int(steps)
