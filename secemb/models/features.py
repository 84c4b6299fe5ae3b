"""Shared machinery of the feature-aware models (FM, DeepFM) and the neural ones (NCF).

Where the features live (SecEmb Appendix H):

* **user features** ``x_u`` (0/1, ``l_x``) are private data of each device; the simulation keeps
  them side by side (like :class:`~secemb.models.UserStore`) and a device reads only its own row;
* **item features** ``y_i`` (0/1, ``l_y``) are public catalogue metadata.  A device needs them
  for the items it trains on, and asking for them in the clear would reveal those items, so
  they travel *inside the item's table row*: ``c = ceil(l_y / 15)`` trailing columns hold the
  feature bits packed 15 per column (integers < 2^15, exact in the 16-fractional-bit fixed
  point of a 32-bit ring).  Private retrieval returns them with the embedding; their gradient
  is exactly zero, so secure aggregation carries zeros and Adam never moves them (m = v = 0
  gives a zero step).  ``frozen_columns = c`` tells protocols that project updates (CoLR) to
  leave those columns alone.
* **feature embeddings** (``V_x``, ``V_y``, linear weights) and MLP weights are public dense
  parameters, aggregated as additive shares.

:class:`DenseLayout` names slices of the flat dense vector; :func:`pack_codes` /
:func:`unpack_codes` convert feature bits to and from table columns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from secemb.errors import InvalidParameters, check_float, check_int
from secemb.models.base import RecModel, StepResult, UserStore
from secemb.models.batch import ITEM_POS, RATING, Batch

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from secemb.data.features import FeatureSet

__all__ = ["BITS_PER_COLUMN", "DenseLayout", "TorchRecModel", "code_columns", "pack_codes", "unpack_codes"]

#: feature bits per table column (values < 2^15 survive 16-fractional-bit fixed point in Z_2^32)
BITS_PER_COLUMN = 15


def code_columns(l_y: int) -> int:
    """Table columns needed for ``l_y`` item feature bits."""
    return -(-int(l_y) // BITS_PER_COLUMN)


def pack_codes(bits: np.ndarray) -> np.ndarray:
    """0/1 array (m, nbits) -> float64 (m, ceil(nbits / 15)): bit ``j`` of column ``j // 15`` at
    position ``j % 15``."""
    bits = np.asarray(bits, dtype=np.int64)
    m, nbits = bits.shape
    out = np.zeros((m, code_columns(nbits)), np.float64)
    for j in range(nbits):
        out[:, j // BITS_PER_COLUMN] += bits[:, j] * float(1 << (j % BITS_PER_COLUMN))
    return out


def unpack_codes(codes: Any, nbits: int) -> Any:
    """Inverse of :func:`pack_codes` for a numpy array or torch tensor (values rounded first,
    so fixed-point decoding noise cannot flip a bit).  Returns float64 0/1 of shape (n, nbits)."""
    bit = np.arange(nbits)
    column, shift = bit // BITS_PER_COLUMN, bit % BITS_PER_COLUMN  # bit j: column j // 15, position j % 15
    if isinstance(codes, np.ndarray):
        c = np.rint(codes).astype(np.int64)
        return ((c[:, column] >> shift) & 1).astype(np.float64)
    import torch

    t = torch.round(codes.detach()).to(torch.int64)
    return ((t[:, torch.from_numpy(column)] >> torch.from_numpy(shift)) & 1).to(torch.float64)


class DenseLayout:
    """Named, shaped slices of a flat dense parameter vector (in declaration order)."""

    def __init__(self, fields: list[tuple[str, tuple[int, ...]]]) -> None:
        self.fields = list(fields)
        self.offsets: dict[str, tuple[int, int, tuple[int, ...]]] = {}
        off = 0
        for name, shape in self.fields:
            n = int(np.prod(shape, dtype=np.int64)) if shape else 1
            self.offsets[name] = (off, off + n, shape)
            off += n
        self.size = off

    def view(self, flat: Any, name: str) -> Any:
        """The slice ``name`` of ``flat`` (numpy array or torch tensor), reshaped."""
        a, b, shape = self.offsets[name]
        return flat[a:b].reshape(shape) if shape else flat[a]

    def views(self, flat: Any) -> dict[str, Any]:
        """Every slice by name; a dict (already split, e.g. torch leaves) is returned as is."""
        if isinstance(flat, dict):
            return flat
        return {name: self.view(flat, name) for name, _ in self.fields}

    def leaves(self, flat: np.ndarray) -> dict[str, Any]:
        """One torch leaf tensor (requires grad) per field, on ``flat``'s memory where it is
        float64 (else a float64 copy): autograd never writes its leaves, and a model-sized copy
        per local step was 900 MB for DeepFM at d = 512; ``flat`` must not change while they are
        in use.  Autograd through slices of one big tensor would allocate a full-size gradient
        per slice."""
        import torch

        return {
            name: torch.from_numpy(np.asarray(self.view(flat, name), dtype=np.float64)).requires_grad_(True)
            for name, _ in self.fields
        }

    def sizes(self) -> dict[str, int]:
        return {name: b - a for name, (a, b, _) in self.offsets.items()}


def check_dim(dim: object, reg: object, init_std: object, *, even: bool = False) -> None:
    if check_int("dim", dim, low=1) % 2 and even:
        raise InvalidParameters(f"dim must be an even int >= 1, got {dim!r}")
    for name, v in (("reg", reg), ("init_std", init_std)):
        check_float(name, v, low=0)


class TorchRecModel(RecModel):
    """A :class:`RecModel` whose prediction is one torch function of per-pair inputs.

    Subclasses implement :meth:`forward` ``(private (k, P_u), user_x (k, l_x), rows (k, w),
    dense) -> (k,)`` and :meth:`reg_term`; the local objective, autograd gradients and batched
    prediction follow.  ``features`` (a :class:`~secemb.data.features.FeatureSet`) supplies
    user features and the item feature codes written into the table; ``None`` means no
    features (``l_x = l_y = 0``).
    """

    dim: int
    reg: float
    init_std: float
    features: FeatureSet | None
    frozen_columns: int = 0
    trainable_width: int
    layout: DenseLayout

    def _set_features(self, features: FeatureSet | None, use: bool = True) -> None:
        self.features = features if use else None
        self.l_x = features.l_x if (features is not None and use) else 0
        self.l_y = features.l_y if (features is not None and use) else 0
        self.frozen_columns = code_columns(self.l_y)

    def _user_x(self, users: np.ndarray) -> np.ndarray:
        if self.l_x == 0:
            return np.zeros((len(users), 0))
        assert self.features is not None  # l_x > 0 comes from it
        return self.features.user[users].astype(np.float64)

    # subclass hooks ---------------------------------------------------------------
    def forward(  # pragma: no cover
        self, private: torch.Tensor, user_x: torch.Tensor, rows: torch.Tensor, dense: torch.Tensor
    ) -> torch.Tensor:
        raise NotImplementedError

    def reg_term(  # pragma: no cover
        self, private: torch.Tensor, user_x: torch.Tensor, rows: torch.Tensor, dense: torch.Tensor
    ) -> torch.Tensor:
        raise NotImplementedError

    # RecModel ---------------------------------------------------------------------
    def init_codes(self, table: np.ndarray) -> None:
        """Write the item feature codes into the trailing columns of ``table``."""
        if self.frozen_columns:
            assert self.features is not None  # frozen columns hold its item codes
            if self.features.num_items != table.shape[0]:
                raise InvalidParameters(
                    f"item features cover {self.features.num_items} items, the table has {table.shape[0]}"
                )
            table[:, self.trainable_width :] = pack_codes(self.features.item)

    def init_private(self, num_users: int, rng: np.random.Generator) -> np.ndarray:
        num_users = check_int("num_users", num_users, low=0)
        if self.features is not None and self.l_x and self.features.num_users != num_users:
            raise InvalidParameters(f"user features cover {self.features.num_users} users, got {num_users}")
        params = np.zeros((num_users, self.private_size), dtype=np.float64)
        emb = self.private_size - 1
        params[:, :emb] = rng.normal(0.0, self.init_std, size=(num_users, emb))
        return params

    def objective_torch(self, rows, dense, private, batch: Batch, *, user: int | None = None):  # noqa: ANN001, ANN201
        import torch

        batch.require(ITEM_POS, RATING)
        item_pos = torch.as_tensor(np.asarray(batch[ITEM_POS], dtype=np.int64))
        ratings = torch.as_tensor(np.asarray(batch[RATING], dtype=np.float64))
        n = rows.shape[0]
        ux = torch.as_tensor(self._user_x(np.array([0 if user is None else user]))).expand(n, -1)
        pred = self.forward(private.unsqueeze(0).expand(n, -1), ux, rows, dense)[item_pos]
        mse = ((pred - ratings) ** 2).mean()
        return mse + self.reg_term(private, ux[:1], rows, dense)

    def local_step(self, rows, dense, user_state, batch: Batch):  # noqa: ANN001, ANN201
        import torch

        rows, item_pos = self._rating_step_inputs(rows, dense, batch)
        rows_t = torch.tensor(rows, requires_grad=True)
        fields = self.layout.leaves(np.asarray(dense, dtype=np.float64))
        priv_t = torch.tensor(user_state.params, requires_grad=True)
        loss = self.objective_torch(rows_t, fields, priv_t, batch, user=user_state.user)
        names = list(fields)
        grads = torch.autograd.grad(loss, (rows_t, priv_t, *fields.values()), allow_unused=True)
        g_rows, g_priv = grads[0], grads[1]
        row_grads = np.zeros(rows.shape) if g_rows is None else g_rows.numpy().copy()
        row_grads[:, self.trainable_width :] = 0.0  # feature codes are constants
        dense_grad = np.zeros(self.dense_size)
        for name, g in zip(names, grads[2:], strict=True):
            if g is not None:
                a, b, _ = self.layout.offsets[name]
                dense_grad[a:b] = g.numpy().reshape(-1)
        if g_priv is not None:
            user_state.apply_gradient(g_priv.numpy())
        return StepResult(row_grads, dense_grad, float(loss.item()))

    def predict(self, table, dense, user_params, users, items):  # noqa: ANN001, ANN201
        import torch

        params = user_params.params if isinstance(user_params, UserStore) else user_params
        users = np.asarray(users, dtype=np.int64)
        items = np.asarray(items, dtype=np.int64)
        out = np.empty(users.shape[0])
        d_t = torch.as_tensor(np.asarray(dense, dtype=np.float64))
        with torch.no_grad():
            for lo in range(0, users.shape[0], 1 << 15):
                u, i = users[lo : lo + (1 << 15)], items[lo : lo + (1 << 15)]
                out[lo : lo + u.size] = self.forward(
                    torch.as_tensor(params[u]), torch.as_tensor(self._user_x(u)), torch.as_tensor(table[i]), d_t
                ).numpy()
        return out

    def item_features(self, rows: torch.Tensor) -> torch.Tensor:
        """0/1 item features (n, l_y) decoded from the code columns of ``rows``."""
        return unpack_codes(rows[:, self.trainable_width :], self.l_y)
