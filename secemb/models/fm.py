"""Factorization machine (Rendle, 2010) over user id, item id and binary side features.

Active "fields" of a pair ``(u, i)``: the user's embedding ``p_u``, the item's ``q_i``, the
embedding ``v_f`` of every user feature ``f`` with ``x_uf = 1`` and every item feature ``g``
with ``y_ig = 1`` (SecEmb Appendix H).  With all field values 1::

    r_hat = w0 + b_u + b_i + x_u . w_x + y_i . w_y + 1/2 (|sum e|^2 - sum |e|^2)

over the active embeddings ``e``.

Public sparse table   (m, d + 1 + c): ``[q_i (d), b_i, item feature codes (c)]`` (codes: see
                      :mod:`secemb.models.features`; zero gradient).
Public dense          ``w0, w_x (l_x), w_y (l_y), V_x (l_x, d), V_y (l_y, d)``: ``1 + (l_x +
                      l_y)(d + 1)`` values -- 6,696 on ML-100K, 3,121 on ML-1M, 1,301 on
                      ML-10M/25M, 1,041 on Yelp, exactly Table 9's "# Dense".
Private (device)      ``[p_u (d), b_u]``; the device's features ``x_u`` are its private data.

Loss: ``mean (r_hat - r)^2 + reg (|p_u|^2 + sum_rows |q_i|^2 + sum_{active f} |v_f|^2)``, the
last sum over the user's active features and the union of its rows' active item features.
Initialization: embeddings ``N(0, init_std^2)``, linear weights 0, ``w0`` the middle of the
rating scale.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from secemb.errors import check_int
from secemb.models.features import DenseLayout, TorchRecModel, check_dim

if TYPE_CHECKING:  # pragma: no cover
    from secemb.data.features import FeatureSet

__all__ = ["FactorizationMachine"]


class FactorizationMachine(TorchRecModel):
    """FM.  ``sparse_width = d + 1 + ceil(l_y / 15)``, ``private_size = d + 1``."""

    name = "fm"
    uses_features = True

    def __init__(
        self, dim: int = 64, reg: float = 0.1, init_std: float = 0.05, features: FeatureSet | None = None
    ) -> None:
        check_dim(dim, reg, init_std)
        self.dim, self.reg, self.init_std = dim, float(reg), float(init_std)
        self._set_features(features)
        self.layout = DenseLayout(self._fm_fields())
        self._finish()

    def _fm_fields(self) -> list[tuple[str, tuple[int, ...]]]:
        d = self.dim
        return [("w0", ()), ("w_x", (self.l_x,)), ("w_y", (self.l_y,)), ("V_x", (self.l_x, d)), ("V_y", (self.l_y, d))]

    def _finish(self) -> None:
        self.trainable_width = self.dim + 1
        self.sparse_width = self.trainable_width + self.frozen_columns
        self.dense_size = self.layout.size
        self.private_size = self.dim + 1

    def hparams(self) -> dict[str, object]:
        return {**self.spec(), "l_x": self.l_x, "l_y": self.l_y}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(dim={self.dim}, reg={self.reg}, l_x={self.l_x}, l_y={self.l_y})"

    def init_public(self, num_items, rng, *, rating_range=(1.0, 5.0)):  # noqa: ANN001, ANN201
        num_items = check_int("num_items", num_items, low=1)
        table = np.zeros((num_items, self.sparse_width))
        table[:, : self.dim] = rng.normal(0.0, self.init_std, size=(num_items, self.dim))
        self.init_codes(table)
        dense = np.zeros(self.dense_size)
        v = self.layout.views(dense)
        for name in ("V_x", "V_y"):
            v[name][...] = rng.normal(0.0, self.init_std, size=v[name].shape)
        dense[self.layout.offsets["w0"][0]] = (float(rating_range[0]) + float(rating_range[1])) / 2
        self._init_extra(dense, rng)
        return table, dense

    def _init_extra(self, dense: np.ndarray, rng: np.random.Generator) -> None:
        """Hook for DeepFM's MLP."""

    # -- forward -------------------------------------------------------------------
    def _parts(self, private, user_x, rows, dense):  # noqa: ANN001, ANN202
        """Shared FM pieces: (prediction, item features, views)."""
        d = self.dim
        v = self.layout.views(dense)
        y = self.item_features(rows)
        p, q = private[:, :d], rows[:, :d]
        s = p + q
        ss = (p * p).sum(1) + (q * q).sum(1)
        lin = v["w0"] + private[:, d] + rows[:, d]
        if self.l_x:
            s = s + user_x @ v["V_x"]
            ss = ss + user_x @ (v["V_x"] ** 2).sum(1)
            lin = lin + user_x @ v["w_x"]
        if self.l_y:
            s = s + y @ v["V_y"]
            ss = ss + y @ (v["V_y"] ** 2).sum(1)
            lin = lin + y @ v["w_y"]
        return lin + 0.5 * ((s * s).sum(1) - ss), y, v

    def forward(self, private, user_x, rows, dense):  # noqa: ANN001, ANN201
        return self._parts(private, user_x, rows, dense)[0]

    def reg_term(self, private, user_x, rows, dense):  # noqa: ANN001, ANN201
        d = self.dim
        v = self.layout.views(dense)
        r = (private[:d] ** 2).sum() + (rows[:, :d] ** 2).sum()
        if self.l_x:
            r = r + user_x[0] @ (v["V_x"] ** 2).sum(1)
        if self.l_y:
            active = (self.item_features(rows).sum(0) > 0).to(rows.dtype)
            r = r + active @ (v["V_y"] ** 2).sum(1)
        return self.reg * r
