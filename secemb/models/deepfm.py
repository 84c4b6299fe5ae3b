"""DeepFM (Guo et al., 2017): the factorization machine of :mod:`secemb.models.fm` plus a deep
tower over the concatenated field embeddings, sharing the embeddings.

Deep tower (SecEmb Appendix I: ``(l_x + l_y + 2) d -> 4d -> 2d``)::

    e = [p_u, q_i, x_u1 v_1, ..., x_ul_x v_l_x, y_i1 u_1, ..., y_il_y u_l_y]   ((l_x + l_y + 2) d)
    z = relu(LN(W1 e + c1)) -> relu(LN(W2 z + c2)) -> o . z + o0
    r_hat = FM(u, i) + z

``LN`` is a layer normalization with a gain and bias per unit: the paper's dense count
(Table 9: 1,761,065 on ML-100K, 856,370 on ML-1M) includes two normalization layers with
``2 x 4d + 2 x 2d`` parameters, i.e. BatchNorm's gain and bias.  BatchNorm's running
statistics are per-device state that federated averaging has no good answer for, so secemb
uses LayerNorm, which has the same parameters and no running statistics; the dense size is
Table 9's exactly.

``W1 e`` is computed field by field -- ``p_u W1_p + q_i W1_q + x_u (V_x (.) W1_x) + y_i (V_y (.)
W1_y)`` -- which is the same product without materializing ``e``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from secemb.models.features import DenseLayout
from secemb.models.fm import FactorizationMachine

if TYPE_CHECKING:  # pragma: no cover
    from secemb.data.features import FeatureSet

__all__ = ["DeepFM"]


class DeepFM(FactorizationMachine):
    """DeepFM.  Same table and private vector as FM; dense adds the deep tower."""

    name = "deepfm"

    def __init__(
        self, dim: int = 64, reg: float = 0.1, init_std: float = 0.05, features: FeatureSet | None = None
    ) -> None:
        super().__init__(dim, reg, init_std, features)
        d = self.dim
        fields = self.l_x + self.l_y + 2
        self.layout = DenseLayout(
            self._fm_fields()
            + [
                ("W1", (fields, d, 4 * d)), ("c1", (4 * d,)), ("g1", (4 * d,)), ("b1", (4 * d,)),
                ("W2", (4 * d, 2 * d)), ("c2", (2 * d,)), ("g2", (2 * d,)), ("b2", (2 * d,)),
                ("o", (2 * d,)), ("o0", ()),
            ]
        )
        self._finish()

    def _init_extra(self, dense: np.ndarray, rng: np.random.Generator) -> None:
        v = self.layout.views(dense)
        d = self.dim
        fan1 = (self.l_x + self.l_y + 2) * d
        v["W1"][...] = rng.uniform(-1, 1, size=v["W1"].shape) / np.sqrt(fan1)
        v["W2"][...] = rng.uniform(-1, 1, size=v["W2"].shape) / np.sqrt(4 * d)
        v["o"][...] = rng.uniform(-1, 1, size=v["o"].shape) / np.sqrt(2 * d)
        v["g1"][...] = 1.0
        v["g2"][...] = 1.0

    def forward(self, private, user_x, rows, dense):  # noqa: ANN001, ANN201
        import torch
        import torch.nn.functional as F

        fm, y, v = self._parts(private, user_x, rows, dense)
        d, lx = self.dim, self.l_x
        # one split rather than four slices: each slice's backward would zero-fill and add a
        # full-size W1 gradient (the same values, four times the memory traffic)
        w1_p, w1_q, w1_x, w1_y = torch.split(v["W1"], [1, 1, lx, self.l_y])
        h = private[:, :d] @ w1_p[0] + rows[:, :d] @ w1_q[0] + v["c1"]
        if lx:
            h = h + user_x @ torch.einsum("fd,fdh->fh", v["V_x"], w1_x)
        if self.l_y:
            h = h + y @ torch.einsum("gd,gdh->gh", v["V_y"], w1_y)
        z = torch.relu(F.layer_norm(h, (4 * d,), v["g1"], v["b1"]))
        z = torch.relu(F.layer_norm(z @ v["W2"] + v["c2"], (2 * d,), v["g2"], v["b2"]))
        return fm + z @ v["o"] + v["o0"]
