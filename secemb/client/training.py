"""The device's local step: :func:`local_update` is the one the in-process loop runs
(:mod:`secemb.training.local`), so a networked run and an in-process run with one seed
produce bit-identical models (tested).

The private parameters change only through the model's local step on the device's
:class:`~secemb.models.base.UserState`; :func:`snapshot` / :func:`restore` let a device undo
that step when its round is aborted, so that a retried round starts where the aborted one did.
"""

from __future__ import annotations

import numpy as np

from secemb.models.base import UserStore
from secemb.training.local import LocalStep, distinct_items, local_update

__all__ = ["LocalStep", "distinct_items", "local_update", "restore", "snapshot"]


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
