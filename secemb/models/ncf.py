"""Neural collaborative filtering (NeuMF; He et al., 2017) split for federated training.

Layers as in SecEmb Appendix I: the MLP tower maps ``2d -> d -> d/2``; a GMF tower multiplies
the GMF embeddings element-wise; the output weighs the concatenation ``[GMF (d), MLP (d/2)]``::

    r_hat(u, i) = mu + b_u + b_i + h . [p^G_u * q^G_i ;  relu(W2 relu(W1 [p^M_u; q^M_i] + c1) + c2)]

Public sparse table   (m, 2d + 1): row ``i`` = ``[q^G_i (d), q^M_i (d), b_i]``.
Public dense          ``W1 (2d, d), c1 (d), W2 (d, d/2), c2 (d/2), h (3d/2), mu`` -- 688 values
                      for d = 16 plus ``mu``, as Table 9 of the paper counts (it lists 688: the
                      paper's NCF has no global bias; ours starts ``mu`` at the middle of the
                      rating scale so the output begins in range).
Private (device)      ``[p^G_u (d), p^M_u (d), b_u]``.

NCF uses no side features (Table 9's dense sizes do not change with the dataset's features).
Loss: ``mean (r_hat - r)^2 + reg (|p_u|^2 + sum_rows |q_i|^2)`` over the embeddings.
Initialization: embeddings ``N(0, init_std^2)``; MLP weights like ``torch.nn.Linear``
(uniform in ``+-1/sqrt(fan_in)``), biases 0, ``h`` uniform in ``+-1/sqrt(3d/2)``.
"""

from __future__ import annotations

import numpy as np

from secemb.errors import check_int
from secemb.models.features import DenseLayout, TorchRecModel, check_dim

__all__ = ["NCF"]


class NCF(TorchRecModel):
    """NeuMF.  ``sparse_width = 2d + 1``, ``private_size = 2d + 1``; ``dim`` must be even.

    ``features`` is accepted (and ignored) so that every model takes the same arguments.
    """

    name = "ncf"

    def __init__(self, dim: int = 16, reg: float = 0.001, init_std: float = 0.1, features: object = None) -> None:
        check_dim(dim, reg, init_std, even=True)
        self.dim, self.reg, self.init_std = dim, float(reg), float(init_std)
        self._set_features(None)
        d, h = dim, dim // 2
        self.layout = DenseLayout(
            [("W1", (2 * d, d)), ("c1", (d,)), ("W2", (d, h)), ("c2", (h,)), ("h", (d + h,)), ("mu", ())]
        )
        self.sparse_width = self.trainable_width = 2 * d + 1
        self.dense_size = self.layout.size
        self.private_size = 2 * d + 1

    def __repr__(self) -> str:
        return f"NCF(dim={self.dim}, reg={self.reg})"

    def init_public(self, num_items, rng, *, rating_range=(1.0, 5.0)):  # noqa: ANN001, ANN201
        num_items = check_int("num_items", num_items, low=1)
        d = self.dim
        table = np.zeros((num_items, self.sparse_width))
        table[:, : 2 * d] = rng.normal(0.0, self.init_std, size=(num_items, 2 * d))
        dense = np.zeros(self.dense_size)
        v = self.layout.views(dense)
        for w in ("W1", "W2"):
            fan_in = v[w].shape[0]
            v[w][...] = rng.uniform(-1, 1, size=v[w].shape) / np.sqrt(fan_in)
        v["h"][...] = rng.uniform(-1, 1, size=v["h"].shape) / np.sqrt(v["h"].shape[0])
        dense[self.layout.offsets["mu"][0]] = (float(rating_range[0]) + float(rating_range[1])) / 2
        return table, dense

    def forward(self, private, user_x, rows, dense):  # noqa: ANN001, ANN201
        import torch

        d = self.dim
        v = self.layout.views(dense)
        gmf = private[:, :d] * rows[:, :d]
        x = torch.cat([private[:, d : 2 * d], rows[:, d : 2 * d]], dim=1)
        z = torch.relu(torch.relu(x @ v["W1"] + v["c1"]) @ v["W2"] + v["c2"])
        out = torch.cat([gmf, z], dim=1) @ v["h"]
        return out + v["mu"] + private[:, 2 * d] + rows[:, 2 * d]

    def reg_term(self, private, user_x, rows, dense):  # noqa: ANN001, ANN201
        d2 = 2 * self.dim
        return self.reg * ((private[:d2] ** 2).sum() + (rows[:, :d2] ** 2).sum())
