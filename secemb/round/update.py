"""The one post-aggregation update step of a round, shared by both servers
(:mod:`secemb.server.combine`, as its two parts) and by the driver's verification mirror:
decode the round's ring sums, divide by the number of users, take the optimizer step.  A
central differential-privacy mechanism belongs here (noise on the sums before the step), so
that it has exactly one home."""

from __future__ import annotations

import numpy as np

from secemb.ring import FixedPoint
from secemb.round.optimizer import ServerAdam

__all__ = ["apply_aggregate", "mean_gradient"]


def apply_aggregate(fp: FixedPoint, optimizer: ServerAdam, table: np.ndarray, dense: np.ndarray,
                    sparse_sum: np.ndarray, dense_sum: np.ndarray, num_users: int) -> None:
    """Update the public model in place with the mean of the users' gradients: the optimizer's
    step with :func:`mean_gradient` (a caller that can let go of the sums first calls the two
    itself, so that they are gone before the step).

    Parameters
    ----------
    fp: the round's fixed-point encoding (``sparse_sum``/``dense_sum`` are in its ring).
    optimizer: server 0's optimizer (its state advances by one step).
    table, dense: the public model, float64 ``(m, width)`` and ``(dense_size,)``; updated.
    sparse_sum, dense_sum: the round's aggregate, ring ``(m, width)`` and ``(dense_size,)``.
    num_users: users in the aggregate (``>= 1``).
    """
    optimizer.step(table, dense, *mean_gradient(fp, sparse_sum, dense_sum, num_users))


def mean_gradient(fp: FixedPoint, sparse_sum: np.ndarray, dense_sum: np.ndarray,
                  num_users: int) -> tuple[np.ndarray, np.ndarray]:
    """The users' mean gradient, float64 ``(m, width)`` and ``(dense_size,)``, of the round's ring
    sums (as :func:`apply_aggregate` takes them).  Each mean is divided in its decoded array
    (the optimizer's step then runs in block-sized scratch arrays): one float64 copy of the
    model's size besides the model, the optimizer's state and the sums."""
    g_table = fp.decode(np.asarray(sparse_sum))
    g_table /= num_users
    g_dense = fp.decode(np.asarray(dense_sum))
    g_dense /= num_users
    return g_table, g_dense
