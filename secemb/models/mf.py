"""Matrix factorization with biases (Koren, Bell & Volinsky, 2009), split for federated training.

Prediction for user ``u`` and item ``i``::

    r_hat(u, i) = mu + b_u + b_i + p_u . q_i

Public (server) parameters
    table  float64 (m, d + 1): row ``i`` is ``[q_i (d values), b_i]``.
    dense  float64 (1,): ``[mu]``, the global bias.
Private (device) parameters
    float64 (d + 1,): ``[p_u (d values), b_u]``.

Local objective of user ``u`` over its k ratings (in a round: the ones whose items it retrieved)
and the n_u distinct rows it retrieved for them::

    L_u = (1/k) sum_j (r_hat(u, i_j) - r_j)^2  +  reg * (|p_u|^2 + sum_{rows i} |q_i|^2)

Biases are not regularized.  The item term lives in the user's loss (each user regularizes
the rows it touches); without it the item embeddings overfit badly in federated training (test
RMSE above 1.2 on ML-100K).  Float64 throughout: rows arrive as fixed-point decoded float64
and the cost of d = 64 vectors is negligible either way.

Initialization: ``q_i, p_u ~ N(0, init_std^2)`` (default 0.1), biases 0, ``mu`` the midpoint of
the public rating scale (3.0 for 1-5 stars), so nothing is computed from users' data.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from secemb.errors import InvalidParameters, check_float, check_int
from secemb.models.base import RecModel, StepResult, UserState, UserStore
from secemb.models.batch import ITEM_POS, RATING, Batch

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = ["MatrixFactorization"]


class MatrixFactorization(RecModel):
    """Biased MF.  ``sparse_width = dim + 1``, ``dense_size = 1``, ``private_size = dim + 1``.

    Parameters
    ----------
    dim: embedding size d, >= 1.
    reg: L2 weight on ``p_u`` and the retrieved ``q_i``, >= 0.
    init_std: standard deviation of the normal initialization of embeddings, >= 0.
    """

    name = "mf"

    def __init__(self, dim: int = 64, reg: float = 0.01, init_std: float = 0.1) -> None:
        dim = check_int("dim", dim, low=1)
        check_float("reg", reg, low=0)
        check_float("init_std", init_std, low=0)
        self.dim = dim
        self.reg = float(reg)
        self.init_std = float(init_std)
        self.sparse_width = dim + 1
        self.dense_size = 1
        self.private_size = dim + 1

    def __repr__(self) -> str:
        return f"MatrixFactorization(dim={self.dim}, reg={self.reg}, init_std={self.init_std})"

    # ------------------------------------------------------------------ initialization

    def init_public(
        self,
        num_items: int,
        rng: np.random.Generator,
        *,
        rating_range: tuple[float, float] = (1.0, 5.0),
    ) -> tuple[np.ndarray, np.ndarray]:
        num_items = check_int("num_items", num_items, low=1)
        lo, hi = (float(x) for x in rating_range)
        table = np.zeros((num_items, self.sparse_width), dtype=np.float64)
        table[:, : self.dim] = rng.normal(0.0, self.init_std, size=(num_items, self.dim))
        dense = np.array([(lo + hi) / 2.0], dtype=np.float64)
        return table, dense

    def init_private(self, num_users: int, rng: np.random.Generator) -> np.ndarray:
        num_users = check_int("num_users", num_users, low=0)
        params = np.zeros((num_users, self.private_size), dtype=np.float64)
        params[:, : self.dim] = rng.normal(0.0, self.init_std, size=(num_users, self.dim))
        return params

    # ------------------------------------------------------------------ training

    def objective_torch(
        self,
        rows: torch.Tensor,
        dense: torch.Tensor,
        private: torch.Tensor,
        batch: Batch,
    ) -> torch.Tensor:
        import torch

        d = self.dim
        batch.require(ITEM_POS, RATING)
        q = rows[torch.as_tensor(np.asarray(batch[ITEM_POS], dtype=np.int64))]
        ratings = torch.as_tensor(np.asarray(batch[RATING], dtype=np.float64))
        pred = dense[0] + private[d] + q[:, d] + q[:, :d] @ private[:d]
        mse = ((pred - ratings) ** 2).mean()
        return mse + self.reg * ((private[:d] ** 2).sum() + (rows[:, :d] ** 2).sum())

    def local_step(
        self,
        rows: np.ndarray,
        dense: np.ndarray,
        user_state: UserState,
        batch: Batch,
    ) -> StepResult:
        """Hand-derived gradients of the objective (checked against autograd in the tests)."""
        d = self.dim
        rows = np.asarray(rows, dtype=np.float64)
        dense = np.asarray(dense, dtype=np.float64)
        n_rows = rows.shape[0]
        if rows.ndim != 2 or rows.shape[1] != self.sparse_width:
            raise InvalidParameters(
                f"rows must have shape (n, {self.sparse_width}), got {rows.shape}"
            )
        if dense.shape != (1,):
            raise InvalidParameters(f"dense must have shape (1,), got {dense.shape}")
        batch.require(ITEM_POS, RATING)
        item_pos = np.asarray(batch[ITEM_POS], dtype=np.int64)
        r = np.asarray(batch[RATING], dtype=np.float64)
        k = r.shape[0]
        if k == 0 or item_pos.shape != (k,):
            raise InvalidParameters(
                f"need k >= 1 ratings and item_pos of shape (k,), got {r.shape} and {item_pos.shape}"
            )
        if item_pos.min() < 0 or item_pos.max() >= n_rows:
            raise InvalidParameters(f"item_pos must index rows in [0, {n_rows})")
        p = user_state.params
        identity = k == n_rows and np.array_equal(item_pos, np.arange(k))
        q = rows if identity else rows[item_pos]

        err = dense[0] + p[d] + q[:, d] + q[:, :d] @ p[:d] - r  # (k,)
        c = 2.0 / k
        ce = c * err
        reg2 = 2.0 * self.reg

        # Per-rating gradient w.r.t. its row: [c e_j p_u, c e_j]; rows add up over ratings.
        g = np.empty((k, self.sparse_width), dtype=np.float64)
        np.multiply(ce[:, None], p[None, :d], out=g[:, :d])
        g[:, d] = ce
        if identity:
            row_grads = g
        else:
            row_grads = np.zeros_like(rows)
            np.add.at(row_grads, item_pos, g)
        row_grads[:, :d] += reg2 * rows[:, :d]

        sum_ce = float(ce.sum())
        dense_grad = np.array([sum_ce])
        g_priv = np.empty(self.private_size, dtype=np.float64)
        g_priv[:d] = ce @ q[:, :d] + reg2 * p[:d]
        g_priv[d] = sum_ce

        loss = float(err @ err) / k + self.reg * (
            float(p[:d] @ p[:d]) + float(np.einsum("ij,ij->", rows[:, :d], rows[:, :d]))
        )
        user_state.apply_gradient(g_priv)
        return StepResult(row_grads, dense_grad, loss)

    # ------------------------------------------------------------------ evaluation

    def predict(
        self,
        table: np.ndarray,
        dense: np.ndarray,
        user_params: UserStore | np.ndarray,
        users: np.ndarray,
        items: np.ndarray,
    ) -> np.ndarray:
        params = user_params.params if isinstance(user_params, UserStore) else user_params
        d = self.dim
        users = np.asarray(users, dtype=np.int64)
        items = np.asarray(items, dtype=np.int64)
        p = params[users]
        q = table[items]
        return dense[0] + p[:, d] + q[:, d] + np.einsum("ij,ij->i", p[:, :d], q[:, :d])
