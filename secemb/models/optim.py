"""Adam (Kingma & Ba, 2015) as plain numpy arithmetic, shared by the device and the servers.

The update is the one of :class:`torch.optim.Adam` with ``amsgrad=False`` and no weight decay::

    m <- beta1 m + (1 - beta1) g
    v <- beta2 v + (1 - beta2) g^2
    p <- p - lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)

computed in float64.  Server-side use (whole table, lazy rows) lives in
:mod:`secemb.round.optimizer`; on-device use (one user's private vector) in
:class:`secemb.models.base.UserStore`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from secemb.errors import check_float

__all__ = ["AdamConfig", "adam_update"]


@dataclass(frozen=True)
class AdamConfig:
    """Adam hyperparameters.

    Attributes
    ----------
    lr: step size, > 0.
    beta1, beta2: moment decay rates in [0, 1).
    eps: denominator guard, > 0.
    """

    lr: float = 0.025
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8

    def __post_init__(self) -> None:
        check_float("Adam lr", self.lr, above=0)
        check_float("Adam beta1", self.beta1, low=0, below=1)
        check_float("Adam beta2", self.beta2, low=0, below=1)
        check_float("Adam eps", self.eps, above=0)


#: values in one block of :func:`adam_update`'s step (its scratch arrays: 512 KiB each)
_BLOCK = 1 << 16


def adam_update(
    param: np.ndarray,
    grad: np.ndarray,
    m: np.ndarray,
    v: np.ndarray,
    t: np.ndarray | int,
    cfg: AdamConfig,
) -> None:
    """One Adam step, in place on ``param``, ``m`` and ``v`` (float64 arrays of one shape).

    ``t`` is the step number *after* incrementing (>= 1): an int, or an array broadcastable
    against ``param`` (per-row step counts for lazy updates).

    ``param -= lr (m / bc1) / (sqrt(v / bc2) + eps)`` is computed in two scratch arrays, the
    same operations in the same order (the same bits) as the expression (which held up to four
    temporaries: ~4 GB at once for DeepFM's dense vector at d = 512).  With an int ``t`` the
    step runs over blocks of rows (leading-axis slices of about 2^16 values), so the scratch
    arrays are block-sized, not ``param``-sized; every operation is elementwise, so the bits
    are those of one pass.
    """
    blocks = [slice(None)]  # the whole array
    if np.ndim(t) == 0 and param.size > _BLOCK:  # then param.ndim >= 1 and every row is non-empty
        rows = max(1, _BLOCK // (param.size // param.shape[0]))
        blocks = [slice(lo, lo + rows) for lo in range(0, param.shape[0], rows)]
    b1, b2 = cfg.beta1, cfg.beta2
    bc1 = 1.0 - np.power(b1, t)
    bc2 = 1.0 - np.power(b2, t)
    for block in blocks:  # one pass over each block, in two scratch arrays of its shape
        p, g, mb, vb = param[block], grad[block], m[block], v[block]
        scratch = np.multiply(g, 1.0 - b1)
        mb *= b1
        mb += scratch
        np.multiply(g, g, out=scratch)
        scratch *= 1.0 - b2
        vb *= b2
        vb += scratch
        np.divide(vb, bc2, out=scratch)
        denominator = np.sqrt(scratch, out=scratch)
        denominator += cfg.eps
        step = np.divide(mb, bc1)
        step *= cfg.lr
        step /= denominator
        p -= step
