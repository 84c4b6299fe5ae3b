"""Deep Interest Network (Zhou et al., KDD 2018), the model of secure federated submodel
learning's Taobao evaluation, over click samples (:mod:`secemb.data.ctr`).

A sample is ``(user u, target goods t, history h_1..h_L, label y)``.  Every goods ``g`` is
represented by ``e_g = [q_g (d), c_cat(g) (d)]`` (its embedding and its public category's);
an attention unit scores each history item against the target,
``a_l = MLP_att([e_hl, e_t, e_hl - e_t, e_hl * e_t])`` (4*2d -> 80 -> 40 -> 1, sigmoid
hidden units, as the reference implementation), the history is pooled as ``sum_l
softmax(a)_l e_hl`` over the non-padding items, and the click logit is ``MLP([p_u, pooled,
e_t])`` (5d -> 200 -> 80 -> 1, ReLU hidden units).  Loss: mean binary cross-entropy.

Split along the trust boundary (:mod:`secemb.models.base`):

Public sparse table   (num_goods, d): goods embeddings ``q_g``; a submodel is a set of rows.
Public dense          the category table (num_categories, d), then the attention and output MLPs
                      (49,242 values); SFSL downloads and aggregates category rows like goods
                      rows (the categories of the client's goods) and the MLPs in full.
Private (device)      the user embedding ``p_u`` (d).

The paper's embedding size is d = 18 (user, goods and category IDs); it gives 64,327 "other"
parameters without the layer sizes, which we take from the reference DIN (80/40 attention,
200/80 output): 49,242 (docs/sfsl.md).  Click samples are scored by :meth:`DIN.score`; the
rating-model ``predict(user, item)`` is refused (a click score needs a history and categories).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from secemb.errors import InvalidParameters, check_float, check_int
from secemb.models.base import RecModel, UserStore
from secemb.models.batch import HISTORY, TARGET, Batch
from secemb.models.features import DenseLayout
from secemb.models.task import Task

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from secemb.data.ctr import ClickData

__all__ = ["DIN", "HISTORY_CAT", "LABEL", "TARGET_CAT", "click_batch"]

#: batch fields of a click sample (besides ``target``/``history``: positions into the rows)
TARGET_CAT = "target_cat"
HISTORY_CAT = "history_cat"
LABEL = "label"

_ATT = (80, 40)
_MLP = (200, 80)


def click_batch(target: np.ndarray, history: np.ndarray, target_cat: np.ndarray, history_cat: np.ndarray,
                label: np.ndarray) -> Batch:
    """DIN's batch: ``target`` int64 (k,) and ``history`` int64 (k, L) positions into the rows
    given to the model (-1 = padding), ``target_cat``/``history_cat`` the category ids of the
    same goods (-1 = padding), ``label`` float64 (k,) 0/1."""
    return Batch(**{TARGET: np.asarray(target, np.int64), HISTORY: np.asarray(history, np.int64),
                    TARGET_CAT: np.asarray(target_cat, np.int64), HISTORY_CAT: np.asarray(history_cat, np.int64),
                    LABEL: np.asarray(label, np.float64)})


class DIN(RecModel):
    """DIN with ``sparse_width = dim``, ``private_size = dim`` and the dense vector described in
    the module docstring.

    Parameters
    ----------
    num_categories: size of the public category table.
    dim: embedding size d (the paper: 18).
    reg: L2 weight on the embeddings a step touches (its goods rows, their categories, the
        user's embedding), added to the mean cross-entropy; the paper uses none (0).
    init_std: standard deviation of the initial embeddings.
    """

    name = "din"

    def __init__(self, num_categories: int = 1, dim: int = 18, reg: float = 0.0, init_std: float = 0.1) -> None:
        for field, value in (("num_categories", num_categories), ("dim", dim)):
            check_int(field, value, low=1)
        self.num_categories, self.dim = num_categories, dim
        self.reg, self.init_std = check_float("reg", reg, low=0), check_float("init_std", init_std, above=0)
        e = 2 * dim
        att = (4 * e, *_ATT, 1)
        mlp = (dim + 2 * e, *_MLP, 1)
        fields: list[tuple[str, tuple[int, ...]]] = [("categories", (num_categories, dim))]
        for prefix, sizes in (("att", att), ("mlp", mlp)):
            for i, (a, b) in enumerate(zip(sizes, sizes[1:], strict=False)):
                fields += [(f"{prefix}_w{i}", (a, b)), (f"{prefix}_b{i}", (b,))]
        self.layout = DenseLayout(fields)
        self.sparse_width = dim
        self.private_size = dim
        self.dense_size = self.layout.size
        #: size of the dense vector without the category table (the MLPs)
        self.mlp_size = self.dense_size - num_categories * dim

    @property
    def task(self) -> Task:
        """Refused: DIN trains on click samples with histories, which the round engine's tasks
        (ratings, sequences) do not produce; it trains through :mod:`secemb.protocols.sfsl`.

        Raises
        ------
        InvalidParameters
            Always (``secemb train --model din`` fails with this message).
        """
        raise InvalidParameters("DIN trains on click samples through secure federated submodel learning "
                                "(secemb.protocols.sfsl, `secemb bench sfsl`); `secemb train` has no click task "
                                "(docs/sfsl.md)")

    # ------------------------------------------------------------------ initialization

    def init_public(self, num_items: int, rng: np.random.Generator, *,
                    rating_range: tuple[float, float] = (0.0, 1.0)) -> tuple[np.ndarray, np.ndarray]:
        """Embeddings ``N(0, init_std^2)``, weights Glorot-uniform, biases 0."""
        table = rng.normal(0.0, self.init_std, (num_items, self.dim))
        dense = np.zeros(self.dense_size)
        views = self.layout.views(dense)
        views["categories"][...] = rng.normal(0.0, self.init_std, (self.num_categories, self.dim))
        for name, (_, _, shape) in self.layout.offsets.items():
            if "_w" in name:
                limit = np.sqrt(6.0 / (shape[0] + shape[1]))
                views[name][...] = rng.uniform(-limit, limit, shape)
        return table, dense

    def init_private(self, num_users: int, rng: np.random.Generator) -> np.ndarray:
        return rng.normal(0.0, self.init_std, (num_users, self.dim))

    # ------------------------------------------------------------------ forward

    def logits_torch(self, rows: torch.Tensor, dense: torch.Tensor | dict[str, torch.Tensor], user: torch.Tensor,
                     batch: Batch) -> torch.Tensor:
        """Click logits (k,) of ``batch``'s samples.

        rows: (n_rows, d) goods embeddings the positions point at; dense: (dense_size,), or its
        fields by name (:meth:`DenseLayout.views`; the category table may then hold only the rows
        the batch's category positions point at); user: (d,) or (k, d) user embeddings.
        """
        import torch

        batch.require(TARGET, HISTORY, TARGET_CAT, HISTORY_CAT)
        p = self.layout.views(dense)
        cats = p["categories"]
        tgt = torch.as_tensor(batch[TARGET])
        hist = torch.as_tensor(batch[HISTORY])
        tcat = torch.as_tensor(batch[TARGET_CAT])
        hcat = torch.as_tensor(batch[HISTORY_CAT])
        mask = hist >= 0
        e_t = torch.cat([rows[tgt], cats[tcat]], dim=-1)  # (k, 2d)
        e_h = torch.cat([rows[hist.clamp(min=0)], cats[hcat.clamp(min=0)]], dim=-1) * mask.unsqueeze(-1)
        q = e_t.unsqueeze(1).expand_as(e_h)
        a = torch.cat([e_h, q, e_h - q, e_h * q], dim=-1)
        n_att = len(_ATT) + 1
        for i in range(n_att):
            a = a @ p[f"att_w{i}"] + p[f"att_b{i}"]
            if i < n_att - 1:
                a = torch.sigmoid(a)
        score = a.squeeze(-1).masked_fill(~mask, float("-inf"))
        weight = torch.softmax(score, dim=-1).nan_to_num(0.0)  # an empty history pools to 0
        pooled = (weight.unsqueeze(-1) * e_h).sum(dim=1)
        u = user.expand(e_t.shape[0], self.dim) if user.dim() == 1 else user
        x = torch.cat([u, pooled, e_t], dim=-1)
        n_mlp = len(_MLP) + 1
        for i in range(n_mlp):
            x = x @ p[f"mlp_w{i}"] + p[f"mlp_b{i}"]
            if i < n_mlp - 1:
                x = torch.relu(x)
        return x.squeeze(-1)

    def objective_torch(self, rows: torch.Tensor, dense: torch.Tensor | dict[str, torch.Tensor], private: torch.Tensor,
                        batch: Batch) -> torch.Tensor:
        """Mean binary cross-entropy of ``batch`` (fields of :func:`click_batch`)."""
        import torch

        batch.require(LABEL)
        logits = self.logits_torch(rows, dense, private, batch)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, torch.as_tensor(batch[LABEL]))
        if self.reg:
            goods = np.unique(np.concatenate([batch[TARGET], batch[HISTORY][batch[HISTORY] >= 0]]))
            cats = np.unique(np.concatenate([batch[TARGET_CAT], batch[HISTORY_CAT][batch[HISTORY_CAT] >= 0]]))
            table = self.layout.views(dense)["categories"]
            loss = loss + self.reg * ((rows[torch.as_tensor(goods)] ** 2).sum()
                                      + (table[torch.as_tensor(cats)] ** 2).sum() + (private ** 2).sum())
        return loss

    # ------------------------------------------------------------------ evaluation

    def score(self, table: np.ndarray, dense: np.ndarray, user_emb: np.ndarray, data: ClickData,
              *, chunk: int = 4096) -> np.ndarray:
        """Click logits float64 (n,) of every sample of ``data`` under the full ``table``
        (num_goods, d), ``dense`` and the users' embeddings ``user_emb`` (num_users, d)."""
        import torch

        out = np.empty(len(data))
        with torch.no_grad():
            t_table, t_dense, t_user = (torch.as_tensor(np.asarray(a, np.float64)) for a in (table, dense, user_emb))
            for lo in range(0, len(data), chunk):
                part = data.subset(slice(lo, lo + chunk))
                hist = part.history
                batch = click_batch(part.target, hist, data.goods_category[part.target],
                                    np.where(hist >= 0, data.goods_category[np.maximum(hist, 0)], -1), part.label)
                out[lo:lo + chunk] = self.logits_torch(t_table, t_dense, t_user[part.user], batch).numpy()
        return out

    def predict(self, table: np.ndarray, dense: np.ndarray, user_params: UserStore | np.ndarray,
                users: np.ndarray, items: np.ndarray) -> np.ndarray:
        """Not defined for DIN: a click score needs the sample's history and the goods'
        categories, which ``(user, item)`` pairs do not carry; use :meth:`score`.

        Raises
        ------
        InvalidParameters
            Always.
        """
        raise InvalidParameters("DIN scores click samples (target, history, categories): use DIN.score(table, "
                                "dense, user_emb, click_data), not predict(user, item) pairs")
