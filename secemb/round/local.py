"""A device's local step between retrieval and upload, shared by the in-process loop
(:mod:`secemb.training.loop`) and the networked device (:mod:`secemb.client`), so that both
produce bit-identical models.

:func:`local_update` decodes the real rows and the dense vector, maps the ratings onto the
kept rows (placement may have dropped some items), runs the model's local step, places the row
gradients at their request slots (padding and empty slots get exact zeros: PadOrTruncEmb),
clips for ``n_p`` users and encodes.  Under DP it first scales the whole contribution to the
L2 bound, and the per-coordinate bound leaves room for the noise (:class:`ClipSpec`).  A step whose
gradients are not finite (it diverged, or a server's crafted model made it: docs/security.md, "An offset on
the aggregate") contributes zero, uploaded like any other: a device that failed instead would show the
servers which devices' data made the step diverge.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from secemb.data import UserRatings
from secemb.models.base import StepResult
from secemb.models.batch import Batch
from secemb.models.task import RATING, Task, distinct_items
from secemb.privacy.noise import ClipSpec
from secemb.protocols.base import RoundConfig
from secemb.protocols.placement import PaddedRequest
from secemb.ring import FixedPoint

log = logging.getLogger("secemb.client")

__all__ = ["LocalStep", "distinct_counts", "distinct_items", "local_update"]

#: ``step(rows, dense, batch) -> StepResult``: float64 rows (n_kept, width) of the kept items,
#: the dense vector, and the device's samples whose ``item_pos`` index those rows.
LocalStep = Callable[[np.ndarray, np.ndarray, Batch], StepResult]


def distinct_counts(per_user: UserRatings) -> np.ndarray:
    """Number of distinct items of each user (``by_user`` sorts items within a user)."""
    counts = per_user.counts()
    owner = np.repeat(np.arange(per_user.num_users, dtype=np.int64), counts)
    items = per_user.items
    new = np.ones(items.size, dtype=bool)
    new[1:] = (items[1:] != items[:-1]) | (owner[1:] != owner[:-1])
    return np.bincount(owner[new], minlength=per_user.num_users).astype(np.int64)


def local_update(
    fp: FixedPoint,
    rc: RoundConfig,
    n_p: int,
    request: PaddedRequest,
    num_distinct: int,
    batch: Batch,
    rows_ring: np.ndarray,
    dense_ring: np.ndarray,
    step: LocalStep,
    *,
    task: Task = RATING,
    clip: ClipSpec | None = None,
) -> tuple[np.ndarray, np.ndarray, StepResult]:
    """One local step; returns the encoded row gradients (ring, (slots, width)), the encoded
    dense gradient (ring, (dense_size,)) and the step's result.

    Parameters
    ----------
    fp: the round's fixed-point encoding.
    rc: the round's configuration.
    n_p: users in the round (clipping bound ``R_u`` of Appendix L.2).
    request: the device's placement (slots, real positions, kept items).
    num_distinct: number of distinct items the device rated.
    batch: the device's samples; its position fields (the rating task's ``item_pos`` int64
        (k,)) index the ``num_distinct`` requested items.  The step gets them re-pointed at the
        kept rows by ``task`` (:meth:`~secemb.models.task.Task.restrict`).
    rows_ring: the retrieved rows (ring, (slots, width)).
    dense_ring: the dense vector (ring, (dense_size,)).
    step: the local training hook (the model's ``local_step`` bound to the device's state).
    task: the task that built ``batch`` (the model's :attr:`~secemb.models.base.RecModel.task`).
    clip: DP clipping (user level: rows and dense gradient together to ``clip.l2``), or ``None``.
    """
    rows = fp.decode(rows_ring[request.real_pos])
    dense_u = fp.decode(dense_ring)
    if request.kept.size != num_distinct:  # truncated: samples of the kept items, pointing at their rows
        row_of = np.full(num_distinct, -1, dtype=np.int64)
        row_of[request.kept] = np.arange(request.kept.size, dtype=np.int64)
        batch = task.restrict(batch, row_of)
    result = step(rows, dense_u, batch)
    if not (np.all(np.isfinite(np.asarray(result.row_grads))) and np.all(np.isfinite(np.asarray(result.dense_grad)))):
        log.warning("round %d: the local step gave non-finite gradients; this round's contribution is zero",
                    rc.round_id)
        result = StepResult(np.zeros(np.shape(result.row_grads)), np.zeros(np.shape(result.dense_grad)), result.loss)
    if clip is None:  # the kept rows encoded alone: every other slot's zero gradient encodes to zero
        encoded = np.zeros((rc.slots, rc.width), fp.dtype)
        encoded[request.real_pos] = fp.encode_clipped(result.row_grads, n_p)
        return encoded, fp.encode_clipped(result.dense_grad, n_p), result
    grads = np.zeros((rc.slots, rc.width))
    grads[request.real_pos], dense_g = clip.clip(result.row_grads, result.dense_grad)
    bound = clip.coordinate_bound(fp, n_p)
    return fp.encode(np.clip(grads, -bound, bound)), fp.encode(np.clip(dense_g, -bound, bound)), result
