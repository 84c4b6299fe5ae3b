"""The device's local step between retrieval and upload, shared by every device driver.

:func:`local_update` is exactly the arithmetic of the in-process loop
(:meth:`secemb.training.loop._Round.train_and_upload`): decode the real rows and the dense
vector, map the ratings onto the kept rows (PadOrTruncIdx may have dropped some items), run the
model's local step, place the row gradients at their request slots (padding and empty slots
get exact zeros: PadOrTruncEmb), clip for ``n_p`` users and encode.  A networked run and an
in-process run with one seed therefore produce bit-identical models (tested).

The private parameters change only through the model's local step on the device's
:class:`~secemb.models.base.UserState`; :func:`snapshot` / :func:`restore` let a device undo
that step when its round is aborted, so that a retried round starts where the aborted one did.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from secemb.models.base import StepResult, UserStore
from secemb.protocols.base import RoundConfig
from secemb.protocols.placement import PaddedRequest
from secemb.ring import FixedPoint
from secemb.training.loop import _distinct

__all__ = ["LocalStep", "distinct_items", "local_update", "restore", "snapshot"]

#: ``step(rows, dense, item_pos, ratings) -> StepResult``: float64 rows (n_kept, width) of the
#: kept items, the dense vector, each rating's row index, the ratings.
LocalStep = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], StepResult]


def distinct_items(items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(distinct items ascending, position of each rating's item among them)``."""
    return _distinct(np.asarray(items, dtype=np.int64))


def local_update(
    fp: FixedPoint,
    rc: RoundConfig,
    n_p: int,
    request: PaddedRequest,
    num_distinct: int,
    item_pos: np.ndarray,
    ratings: np.ndarray,
    rows_ring: np.ndarray,
    dense_ring: np.ndarray,
    step: LocalStep,
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
    item_pos, ratings: for each rating, its item's position among the distinct items, and
        the rating.
    rows_ring: the retrieved rows (ring, (slots, width)).
    dense_ring: the dense vector (ring, (dense_size,)).
    step: the local training hook (the model's ``local_step`` bound to the device's state).
    """
    rows = fp.decode(rows_ring[request.real_pos])
    dense_u = fp.decode(dense_ring)
    if request.kept.size == num_distinct:  # padded: kept = all, in order
        pos, r = item_pos, ratings
    else:  # truncated: ratings of the kept items, pointing at their rows
        row_of = np.full(num_distinct, -1, dtype=np.int64)
        row_of[request.kept] = np.arange(request.kept.size, dtype=np.int64)
        pos = row_of[item_pos]
        sel = pos >= 0
        pos, r = pos[sel], ratings[sel]
    result = step(rows, dense_u, pos, r)
    grads = np.zeros((rc.slots, rc.width))
    grads[request.real_pos] = result.row_grads
    return fp.encode_clipped(grads, n_p), fp.encode_clipped(result.dense_grad, n_p), result


def snapshot(store: UserStore, user: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """A copy of ``user``'s private parameters and on-device Adam state."""
    return (store.params[user].copy(), store._m[user].copy(), store._v[user].copy(), int(store._t[user]))


def restore(store: UserStore, user: int, snap: tuple[np.ndarray, np.ndarray, np.ndarray, int]) -> None:
    """Put back a :func:`snapshot`."""
    params, m, v, t = snap
    store.params[user] = params
    store._m[user] = m
    store._v[user] = v
    store._t[user] = t
