"""Sequential recommenders (next-item prediction) split for federated training: SASRec
(Kang & McAuley, 2018) and Caser (Tang & Wang, 2018); SecEmb §5.4, Table 4, Appendix K.6.

Both train on a :class:`~secemb.models.task.SequenceTask` sample: histories of the device's
chronological sequence, their target items and sampled negatives, all rows of the request the
device retrieved privately.  The loss is the binary cross-entropy of both papers::

    L_u = (1 / #targets) sum_targets [ -log sigma(s(x, t)) - sum_negatives log(1 - sigma(s(x, n))) ]
          + reg (|rows|^2 + |private|^2),      s(x, i) = x . V_i + b_i

with ``x`` the model's representation of the history (:meth:`SequenceModel.encode`) and
``(V_i, b_i)`` item ``i``'s output embedding and bias (:meth:`SequenceModel.output`).

Public sparse table (one row per item; SecEmb retrieves and aggregates it):
    SASRec ``[e_i (d)]``: input and output embedding shared (width d).
    Caser  ``[q_i (d), w'_i (2d), b'_i]``: input embedding, output weights, output bias (3d + 1).
Public dense vector: SASRec's positional embeddings, attention, feed-forward and layer norms;
    Caser's convolutions and fully connected layer (additive shares).
Private (device): Caser's user embedding ``p_u (d)``; SASRec has none.

Dropout is drawn from a ``torch.Generator`` seeded with the batch's ``seed[0]`` (drawn by the
task from the training generator), so a step is a deterministic function of its inputs and the
secure, plaintext, in-process and networked runs of one seed agree bit for bit.  Scoring
(:meth:`SequenceModel.score_next`) runs without dropout.  History slots of -1 are padding: a
zero embedding (and, in SASRec, keys no real position attends to).

Threads: a device step is a few small tensors, for which torch's intra-op threads cost far more
than they save (0.49 s against 12 ms per SASRec step on a loaded 2-core machine), so these
models set torch to one thread (process-wide) when they first compute.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from typing import TYPE_CHECKING

import numpy as np

from secemb.errors import InvalidParameters, check_float, check_int
from secemb.models.base import RecModel, UserStore
from secemb.models.batch import HISTORY, NEGATIVE, SEED, TARGET, Batch
from secemb.models.features import DenseLayout
from secemb.models.task import SequenceTask

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = ["SASRec", "Caser", "SequenceModel"]


def _one_thread() -> None:
    """Run torch on one intra-op thread (see the module docstring)."""
    import torch

    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)


def _dropout(x: torch.Tensor, p: float, gen: torch.Generator | None) -> torch.Tensor:
    """Inverted dropout with mask bits from ``gen`` (identity when ``gen`` is None)."""
    import torch

    if gen is None or p == 0.0:
        return x
    keep = torch.rand(x.shape, generator=gen, dtype=x.dtype) >= p
    return x * keep / (1.0 - p)


class SequenceModel(RecModel):
    """A next-item model: subclasses define the input embedding (:meth:`item_input`), the
    history encoder (:meth:`encode`) and the output embedding (:meth:`output`); the objective,
    its autograd gradients (the generic :meth:`RecModel.local_step`) and scoring follow."""

    dim: int
    reg: float
    dropout: float
    layout: DenseLayout

    @property
    @abstractmethod
    def task(self) -> SequenceTask:
        """The model's :class:`~secemb.models.task.SequenceTask`."""

    @abstractmethod
    def item_input(self, rows: torch.Tensor) -> torch.Tensor:
        """Input embeddings (n, d) of table rows (n, sparse_width)."""

    @abstractmethod
    def output(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Output embeddings (n, w) and biases (n,) of table rows (n, sparse_width)."""

    @abstractmethod
    def encode(self, emb: torch.Tensor, valid: torch.Tensor, fields: dict[str, torch.Tensor],
               private: torch.Tensor, gen: torch.Generator | None) -> torch.Tensor:
        """History representations ``x`` (k, P, w) from the history's input embeddings ``emb``
        (k, L, d) (zero at padding), ``valid`` bool (k, L), the dense fields, the users'
        private vectors (k, private_size) and the dropout generator.  ``P`` is L when every
        position predicts its next item (SASRec) or 1 (Caser); ``x[:, -1]`` scores the next item
        after the whole history."""

    def init_private(self, num_users: int, rng: np.random.Generator) -> np.ndarray:
        num_users = check_int("num_users", num_users, low=0)
        return rng.normal(0.0, 1.0 / math.sqrt(self.dim), size=(num_users, self.private_size)) \
            if self.private_size else np.zeros((num_users, 0))

    def objective_torch(self, rows: torch.Tensor, dense: torch.Tensor, private: torch.Tensor,
                        batch: Batch) -> torch.Tensor:
        """The loss of the module docstring over the batch's ``history`` (k, L), ``target``
        (k, T) and ``negative`` (k, T, n) (row positions, -1 = none); dropout seeded by
        ``seed[0]`` when the batch has a ``seed`` field."""
        import torch
        import torch.nn.functional as F

        batch.require(HISTORY, TARGET, NEGATIVE)
        _one_thread()
        pad = torch.cat([rows, rows.new_zeros(1, rows.shape[1])])  # position -1 -> the zero row
        hist = torch.as_tensor(np.asarray(batch[HISTORY], dtype=np.int64))
        tgt = torch.as_tensor(np.asarray(batch[TARGET], dtype=np.int64))
        neg = torch.as_tensor(np.asarray(batch[NEGATIVE], dtype=np.int64))
        gen = None
        if SEED in batch and batch.num_samples and self.dropout > 0:
            gen = torch.Generator().manual_seed(int(batch[SEED][0]))
        k = hist.shape[0]
        x = self.encode(self.item_input(pad)[hist], hist >= 0, self.layout.views(dense), private.expand(k, -1), gen)
        out, bias = self.output(pad)
        pos = (x * out[tgt]).sum(-1) + bias[tgt]                      # (k, T)
        negl = (x.unsqueeze(2) * out[neg]).sum(-1) + bias[neg]        # (k, T, n)
        live = tgt >= 0
        n_live = max(int(live.sum()), 1)
        bce = (F.softplus(-pos)[live].sum() + F.softplus(negl)[live].sum()) / n_live
        return bce + self.reg * ((rows * rows).sum() + (private * private).sum())

    def predict(self, table: np.ndarray, dense: np.ndarray, user_params: UserStore | np.ndarray, users: np.ndarray,
                items: np.ndarray) -> np.ndarray:
        """Not defined: a next-item model scores candidates after a history (:meth:`score_next`).

        Raises
        ------
        InvalidParameters
            Always.
        """
        raise InvalidParameters(f"{self.name} ranks next items after a history: use score_next, not predict")

    def score_next(self, table: np.ndarray, dense: np.ndarray, user_params: UserStore | np.ndarray,
                   users: np.ndarray, history: np.ndarray, candidates: np.ndarray | None = None) -> np.ndarray:
        """Scores of next items, without dropout.

        Parameters
        ----------
        table: float64 (m, sparse_width); dense: float64 (dense_size,).
        user_params: the users' private parameters (store or float64 (num_users, private_size)).
        users: int64 (n,); history: int64 (n, L) item ids, oldest first, -1 = padding.
        candidates: int64 (n, c) item ids to score, or ``None`` for the whole catalogue.

        Returns
        -------
        float64 (n, c), or (n, m) for the whole catalogue.
        """
        import torch

        params = user_params.params if isinstance(user_params, UserStore) else user_params
        _one_thread()
        with torch.no_grad():
            t = torch.as_tensor(np.asarray(table, dtype=np.float64))
            pad = torch.cat([t, t.new_zeros(1, t.shape[1])])
            hist = torch.as_tensor(np.asarray(history, dtype=np.int64))
            priv = torch.as_tensor(np.asarray(params, dtype=np.float64)[np.asarray(users, dtype=np.int64)])
            fields = self.layout.views(torch.as_tensor(np.asarray(dense, dtype=np.float64)))
            x = self.encode(self.item_input(pad)[hist], hist >= 0, fields, priv, None)[:, -1, :]
            out, bias = self.output(pad)
            if candidates is None:
                return (x @ out[:-1].T + bias[:-1]).numpy()
            cand = torch.as_tensor(np.asarray(candidates, dtype=np.int64))
            return ((x.unsqueeze(1) * out[cand]).sum(-1) + bias[cand]).numpy()


class SASRec(SequenceModel):
    """SASRec: causal self-attention over the last ``max_len`` items, one negative per position.

    ``sparse_width = dim`` (shared input/output embedding), ``private_size = 0``, dense:
    positional embeddings (L, d), per block ``ln1, W_q, W_k, W_v, W_o, ln2, W_1, W_2`` (with
    biases; one head), a final layer norm.

    Parameters
    ----------
    dim: d (50 in the paper).  max_len: L (200 on ML-1M, 50 on sparse sets).  blocks: 2.
    dropout: 0.2 (ML-1M) / 0.5 (sparse sets).  reg: L2 weight on the retrieved rows (0).
    negatives: negatives per position (1).
    """

    name = "sasrec"

    def __init__(self, dim: int = 50, max_len: int = 50, blocks: int = 2, dropout: float = 0.2, reg: float = 0.0,
                 negatives: int = 1) -> None:
        self.dim, self.max_len = check_int("dim", dim, low=1), check_int("max_len", max_len, low=1)
        self.blocks, self.negatives = check_int("blocks", blocks, low=1), check_int("negatives", negatives, low=1)
        self.dropout, self.reg = check_float("dropout", dropout, low=0, below=1), check_float("reg", reg, low=0)
        d = dim
        fields: list[tuple[str, tuple[int, ...]]] = [("pos", (max_len, d))]
        for b in range(blocks):
            fields += [(f"{b}.{name}", shape) for name, shape in (
                ("ln1_w", (d,)), ("ln1_b", (d,)), ("wq", (d, d)), ("bq", (d,)), ("wk", (d, d)), ("bk", (d,)),
                ("wv", (d, d)), ("bv", (d,)), ("wo", (d, d)), ("bo", (d,)), ("ln2_w", (d,)), ("ln2_b", (d,)),
                ("w1", (d, d)), ("b1", (d,)), ("w2", (d, d)), ("b2", (d,)))]
        fields += [("ln_w", (d,)), ("ln_b", (d,))]
        self.layout = DenseLayout(fields)
        self.sparse_width, self.dense_size, self.private_size = d, self.layout.size, 0

    @property
    def task(self) -> SequenceTask:
        return SequenceTask(self.max_len, self.max_len, self.negatives, "last")

    def __repr__(self) -> str:
        return f"SASRec(dim={self.dim}, max_len={self.max_len}, blocks={self.blocks}, dropout={self.dropout})"

    def init_public(self, num_items: int, rng: np.random.Generator, *,
                    rating_range: tuple[float, float] = (1.0, 5.0)) -> tuple[np.ndarray, np.ndarray]:
        """Embeddings and weight matrices ``N(0, 1/d)``, layer-norm gains 1, biases 0."""
        check_int("num_items", num_items, low=1)
        s = 1.0 / math.sqrt(self.dim)
        table = rng.normal(0.0, s, size=(num_items, self.dim))
        dense = np.zeros(self.dense_size)
        v = self.layout.views(dense)
        for name, (_, _, shape) in self.layout.offsets.items():
            if name == "pos" or name.split(".")[-1] in ("wq", "wk", "wv", "wo", "w1", "w2"):
                v[name][...] = rng.normal(0.0, s, size=shape)
            elif name.endswith("_w"):
                v[name][...] = 1.0
        return table, dense

    def item_input(self, rows: torch.Tensor) -> torch.Tensor:
        return rows * math.sqrt(self.dim)

    def output(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return rows, rows.new_zeros(rows.shape[0])

    def encode(self, emb: torch.Tensor, valid: torch.Tensor, fields: dict[str, torch.Tensor],
               private: torch.Tensor, gen: torch.Generator | None) -> torch.Tensor:
        import torch
        import torch.nn.functional as F

        d, p = self.dim, self.dropout
        k, L = valid.shape
        mask = valid.unsqueeze(-1).to(emb.dtype)
        x = _dropout(emb + fields["pos"][-L:], p, gen) * mask
        causal = torch.ones(L, L, dtype=torch.bool).tril()
        # a query sees earlier real items and itself (so a padded row never has an empty softmax)
        allowed = causal & (valid.unsqueeze(1) | torch.eye(L, dtype=torch.bool))
        neg_inf = torch.zeros(k, L, L, dtype=emb.dtype).masked_fill(~allowed, float("-inf"))
        for b in range(self.blocks):
            f = {name: fields[f"{b}.{name}"] for name in ("ln1_w", "ln1_b", "wq", "bq", "wk", "bk", "wv", "bv", "wo",
                                                          "bo", "ln2_w", "ln2_b", "w1", "b1", "w2", "b2")}
            q = F.layer_norm(x, (d,), f["ln1_w"], f["ln1_b"], eps=1e-8)
            att = torch.softmax((q @ f["wq"] + f["bq"]) @ (x @ f["wk"] + f["bk"]).transpose(1, 2) / math.sqrt(d)
                                + neg_inf, dim=-1)
            x = q + _dropout(_dropout(att, p, gen) @ (x @ f["wv"] + f["bv"]) @ f["wo"] + f["bo"], p, gen)
            h = F.layer_norm(x, (d,), f["ln2_w"], f["ln2_b"], eps=1e-8)
            x = (h + _dropout(torch.relu(_dropout(h @ f["w1"] + f["b1"], p, gen)) @ f["w2"] + f["b2"], p, gen)) * mask
        return F.layer_norm(x, (d,), fields["ln_w"], fields["ln_b"], eps=1e-8)


class Caser(SequenceModel):
    """Caser: vertical and horizontal convolutions over the last ``max_len`` items' embeddings,
    a fully connected layer, the user's private embedding, and per-item output weights.

    ``sparse_width = 3 dim + 1`` (``[q_i, w'_i, b'_i]``), ``private_size = dim``, dense: the
    vertical filters (n_v, L), the horizontal filters of heights 1..L (n_h, h, d) and the FC
    layer (d, n_v d + n_h L), with biases.

    Parameters
    ----------
    dim: d = 50.  max_len: L = 5.  targets: T = 3.  n_v: 4.  n_h: 16.  dropout: 0.5.
    reg: L2 weight on the retrieved rows and the user embedding (1e-6).  negatives: 3 per
    target.  windows: sliding windows trained per round (drawn from the user's windows).
    """

    name = "caser"

    def __init__(self, dim: int = 50, max_len: int = 5, targets: int = 3, n_v: int = 4, n_h: int = 16,
                 dropout: float = 0.5, reg: float = 1e-6, negatives: int = 3, windows: int = 16) -> None:
        for name, v in (("dim", dim), ("max_len", max_len), ("targets", targets), ("n_v", n_v), ("n_h", n_h),
                        ("negatives", negatives), ("windows", windows)):
            check_int(name, v, low=1)
        check_float("dropout", dropout, low=0, below=1)
        check_float("reg", reg, low=0)
        self.dim, self.max_len, self.targets, self.n_v, self.n_h = dim, max_len, targets, n_v, n_h
        self.dropout, self.reg, self.negatives, self.windows = float(dropout), float(reg), negatives, windows
        d, L = dim, max_len
        fields: list[tuple[str, tuple[int, ...]]] = [("conv_v_w", (n_v, L)), ("conv_v_b", (n_v,))]
        for h in range(1, L + 1):
            fields += [(f"conv_h{h}_w", (n_h, h, d)), (f"conv_h{h}_b", (n_h,))]
        fields += [("fc_w", (n_v * d + n_h * L, d)), ("fc_b", (d,))]
        self.layout = DenseLayout(fields)
        self.sparse_width, self.dense_size, self.private_size = 3 * d + 1, self.layout.size, d

    @property
    def task(self) -> SequenceTask:
        return SequenceTask(self.max_len, self.targets, self.negatives, "sliding", self.windows)

    def __repr__(self) -> str:
        return f"Caser(dim={self.dim}, max_len={self.max_len}, targets={self.targets}, n_v={self.n_v}, n_h={self.n_h})"

    def init_public(self, num_items: int, rng: np.random.Generator, *,
                    rating_range: tuple[float, float] = (1.0, 5.0)) -> tuple[np.ndarray, np.ndarray]:
        """``q_i ~ N(0, 1/d)``, ``w'_i ~ N(0, 1/(2d))``, ``b'_i = 0`` (Caser's own), filters and
        FC weights ``N(0, 1/fan_in)``, biases 0."""
        check_int("num_items", num_items, low=1)
        d = self.dim
        table = np.zeros((num_items, self.sparse_width))
        table[:, :d] = rng.normal(0.0, 1.0 / math.sqrt(d), size=(num_items, d))
        table[:, d:3 * d] = rng.normal(0.0, 1.0 / math.sqrt(2 * d), size=(num_items, 2 * d))
        dense = np.zeros(self.dense_size)
        v = self.layout.views(dense)
        for name, (_, _, shape) in self.layout.offsets.items():
            if name.endswith("_w"):
                fan_in = int(np.prod(shape[1:])) if name != "fc_w" else shape[0]
                v[name][...] = rng.normal(0.0, 1.0 / math.sqrt(fan_in), size=shape)
        return table, dense

    def item_input(self, rows: torch.Tensor) -> torch.Tensor:
        return rows[:, : self.dim]

    def output(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        d = self.dim
        return rows[:, d : 3 * d], rows[:, 3 * d]

    def encode(self, emb: torch.Tensor, valid: torch.Tensor, fields: dict[str, torch.Tensor],
               private: torch.Tensor, gen: torch.Generator | None) -> torch.Tensor:
        import torch

        k, L = valid.shape
        out_v = (torch.einsum("vl,kld->kvd", fields["conv_v_w"], emb) + fields["conv_v_b"][:, None]).reshape(k, -1)
        pooled = []
        for h in range(1, L + 1):
            windows = emb.unfold(1, h, 1)  # (k, L - h + 1, d, h)
            conv = torch.einsum("ktdh,fhd->kft", windows, fields[f"conv_h{h}_w"]) + fields[f"conv_h{h}_b"][:, None]
            pooled.append(torch.relu(conv).amax(dim=2))
        hidden = _dropout(torch.cat([out_v, *pooled], dim=1), self.dropout, gen)
        z = torch.relu(hidden @ fields["fc_w"] + fields["fc_b"])
        return torch.cat([z, private], dim=1).unsqueeze(1)

