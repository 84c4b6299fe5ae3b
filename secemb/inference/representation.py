"""What a device privatizes and what the server computes from it (grec.txt §3.2, A.8).

For each rating model a :class:`Representation` splits a prediction into three parts:

* ``clean(params, user_x)``: the device's representation ``H_u`` (float64 ``(n, R, d)``) and
  its **private offset** ``o_u`` (float64 ``(n,)``) -- the user-only scalar terms of the
  prediction (MF/NCF's user bias ``b_u``; FM/DeepFM's ``b_u + x_u . w_x``).  The offset stays
  on the device and is added there: it is a constant per user, so the ranking of items does
  not need it and the server never sees it (docs/inference.md);
* ``summary(H)``: the per-user reduction of a (noisy) representation the server computes once
  per request (MF: ``p_u``; NCF: ``[p^G_u; p^M_u]``; FM: ``sum of rows, sum of squares``;
  DeepFM: that plus the first deep layer's user part);
* ``score(summary, rows)``: the server's score of items given their public table rows.

``score(summary(H_u), rows) + o_u`` equals the model's own ``predict`` for the clean ``H_u``
(tested against :meth:`~secemb.models.RecModel.predict`); on the noisy ``H~_u`` the first
term is what the server returns (``r~``, Eq. 7's naive LDP prediction without ``o_u``).

Rows of ``H_u``: MF ``[p_u]`` (R = 1, width d); NCF ``[p^G_u; p^M_u]`` (R = 2, both towers'
user vectors, width d); FM/DeepFM ``[p_u; x_u1 v_1; ...; x_ul_x v_l_x]`` (R = l_x + 1,
inactive features are zero rows, so the row count does not reveal ``x_u``).
"""

from __future__ import annotations

import warnings
from functools import cached_property
from typing import Any

import numpy as np

from secemb.errors import InvalidParameters
from secemb.models import NCF, DeepFM, FactorizationMachine, MatrixFactorization, RecModel
from secemb.models.features import unpack_codes

__all__ = ["Representation", "has_representation", "representation_for"]



def _read_only_tensor(a: np.ndarray) -> Any:
    """``torch.as_tensor(a)`` for an array torch only reads here (``no_grad``, never written): the
    server's model arrays are read-only since its checkpoints keep them (``MemoryStore``), and
    torch warns once about any non-writable array; the array is not copied."""
    import torch

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.as_tensor(a)

class Representation:
    """The split of ``model``'s prediction at the public ``dense`` parameters (base: MF).

    Attributes
    ----------
    model: the trained recommender.
    dense: float64 ``(dense_size,)``, its public dense parameters.
    rows, dim: ``R`` and ``d`` of ``H_u``.
    """

    def __init__(self, model: RecModel, dense: np.ndarray) -> None:
        self.model = model
        self.dense = np.asarray(dense, dtype=np.float64)
        if self.dense.shape != (model.dense_size,):
            raise InvalidParameters(f"dense must have shape ({model.dense_size},), got {self.dense.shape}")
        self.dim: int = int(model.dim)  # type: ignore[attr-defined]  # every rating model has one
        self.rows: int = 1

    def clean(self, params: np.ndarray, user_x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(H (n, R, d), offset (n,))`` of the devices with private ``params (n, P)`` and
        features ``user_x (n, l_x)``."""
        d = self.dim
        return params[:, None, :d].copy(), params[:, d].copy()

    def summary(self, h: np.ndarray) -> np.ndarray:
        """float64 ``(n, S)`` per-user reduction of ``h (n, R, d)``."""
        return np.asarray(h, dtype=np.float64)[:, 0, :]

    def score(self, summary: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """float64 ``(k,)``: scores of ``k`` pairs, each a user's summary (``(k, S)``) and an
        item's public table row (``(k, w)``); the private offset excluded."""
        d = self.dim
        return self.dense[0] + rows[:, d] + np.einsum("ij,ij->i", summary, rows[:, :d])


class _NCFRep(Representation):
    def __init__(self, model: RecModel, dense: np.ndarray) -> None:
        super().__init__(model, dense)
        self.rows = 2

    def clean(self, params: np.ndarray, user_x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        d = self.dim
        return params[:, : 2 * d].reshape(-1, 2, d).copy(), params[:, 2 * d].copy()

    def summary(self, h: np.ndarray) -> np.ndarray:
        h = np.asarray(h, dtype=np.float64)
        return h.reshape(h.shape[0], -1)

    def score(self, summary: np.ndarray, rows: np.ndarray) -> np.ndarray:
        import torch

        private = np.concatenate([summary, np.zeros((summary.shape[0], 1))], axis=1)  # b_u = 0: offset
        with torch.no_grad():
            out = self.model.forward(  # type: ignore[attr-defined]
                torch.as_tensor(private), torch.zeros((summary.shape[0], 0), dtype=torch.float64),
                torch.as_tensor(np.asarray(rows, dtype=np.float64)), _read_only_tensor(self.dense))
        return np.asarray(out.numpy(), dtype=np.float64)


class _FMRep(Representation):
    """FM: the summary is ``[sum of H's rows (d), sum of squares of H (1)]``."""

    model: FactorizationMachine

    def __init__(self, model: RecModel, dense: np.ndarray) -> None:
        super().__init__(model, dense)
        self.l_x = int(self.model.l_x)
        self.rows = self.l_x + 1
        self.views: dict[str, Any] = self.model.layout.views(self.dense)

    def clean(self, params: np.ndarray, user_x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        d, v = self.dim, self.views
        user_x = np.asarray(user_x, dtype=np.float64).reshape(params.shape[0], self.l_x)
        h = np.empty((params.shape[0], self.rows, d))
        h[:, 0] = params[:, :d]
        h[:, 1:] = user_x[:, :, None] * v["V_x"][None]
        return h, params[:, d] + user_x @ v["w_x"]

    def summary(self, h: np.ndarray) -> np.ndarray:
        h = np.asarray(h, dtype=np.float64)
        return np.concatenate([h.sum(1), np.einsum("nrd,nrd->n", h, h)[:, None]], axis=1)

    def _fm(self, summary: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The FM prediction (offset excluded) and the item features ``y (k, l_y)``."""
        d, v, m = self.dim, self.views, self.model
        y = unpack_codes(rows[:, m.trainable_width :], m.l_y)
        q = rows[:, :d]
        s = summary[:, :d] + q + y @ v["V_y"]
        ss = summary[:, d] + (q * q).sum(1) + y @ (v["V_y"] ** 2).sum(1)
        lin = v["w0"] + rows[:, d] + y @ v["w_y"]
        return lin + 0.5 * ((s * s).sum(1) - ss), y

    def score(self, summary: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return self._fm(summary, np.asarray(rows, dtype=np.float64))[0]


class _DeepFMRep(_FMRep):
    """DeepFM: the FM summary plus the user part of the first deep layer,
    ``p_u W1_p + sum_f (x_uf v_f) W1_f`` (4d).

    The public products every call used to redo -- the user rows of ``W1`` gathered into one
    ``(R, d, 4d)`` array, ``V_y (.) W1_y`` -- are made once, at the first call that needs them
    (the denoiser's training asks for one device's summary and scores per local step: at
    d = 512 the gathered rows are 713 MB, which this object then holds)."""

    @cached_property
    def _user_w1(self) -> np.ndarray:
        """The rows of ``W1`` that multiply ``H_u``'s rows, ``[W1_p; W1_x]`` ``(R, d, 4d)``."""
        w1 = self.views["W1"]
        return np.concatenate([w1[:1], w1[2 : 2 + self.l_x]], axis=0)

    @cached_property
    def _item_w1(self) -> np.ndarray:
        """``V_y (.) W1_y`` summed over ``d``: the first layer's weights of the item features ``(l_y, 4d)``."""
        return np.einsum("gd,gdh->gh", self.views["V_y"], self.views["W1"][2 + self.l_x :])

    def summary(self, h: np.ndarray) -> np.ndarray:
        h = np.asarray(h, dtype=np.float64)
        deep = np.einsum("nrd,rdh->nh", h, self._user_w1)
        return np.concatenate([super().summary(h), deep], axis=1)

    def score(self, summary: np.ndarray, rows: np.ndarray) -> np.ndarray:
        import torch
        import torch.nn.functional as F

        rows = np.asarray(rows, dtype=np.float64)
        fm, y = self._fm(summary, rows)
        d, v = self.dim, self.views
        h = summary[:, d + 1 :] + rows[:, :d] @ v["W1"][1] + v["c1"]
        if self.model.l_y:
            h = h + y @ self._item_w1
        t = {k: _read_only_tensor(np.asarray(v[k], dtype=np.float64)) for k in ("g1", "b1", "g2", "b2")}
        with torch.no_grad():
            z = torch.relu(F.layer_norm(torch.as_tensor(h), (4 * d,), t["g1"], t["b1"]))
            z2 = z.numpy() @ v["W2"] + v["c2"]
            z = torch.relu(F.layer_norm(torch.as_tensor(z2), (2 * d,), t["g2"], t["b2"]))
        return fm + z.numpy() @ v["o"] + float(v["o0"])


def has_representation(model: RecModel) -> bool:
    """Whether ``model`` has GREC inference (:func:`representation_for`): an MF, NCF, FM or DeepFM."""
    return isinstance(model, MatrixFactorization | NCF | FactorizationMachine)  # DeepFM is an FM


def representation_for(model: RecModel, dense: np.ndarray) -> Representation:
    """The :class:`Representation` of a trained MF, NCF, FM or DeepFM at ``dense``.

    Raises
    ------
    InvalidParameters
        Another model (a sequential model has no GREC inference).
    """
    if not has_representation(model):
        raise InvalidParameters(f"GREC inference supports mf, ncf, fm and deepfm, not {model.name!r}")
    if isinstance(model, DeepFM):
        return _DeepFMRep(model, dense)
    if isinstance(model, FactorizationMachine):
        return _FMRep(model, dense)
    if isinstance(model, NCF):
        return _NCFRep(model, dense)
    return Representation(model, dense)  # MF
