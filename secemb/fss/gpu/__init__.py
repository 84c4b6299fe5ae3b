"""The servers' full-domain DPF work on a CUDA device (optional extra ``secemb[gpu]``: Triton).

Hazmat layer.  The same evaluation as :mod:`secemb.fss.fused` -- tree walk with correction
words and control bits, retrieval conversion and inner product with the table, aggregation
conversion summed onto items (full layout) or buckets (cuckoo layout) -- as Triton kernels
(:mod:`secemb.fss.gpu._triton`) driven by :mod:`secemb.fss.gpu.evaluate`.  Same AES-based PRG
(AES-128 under the fixed keys of :func:`secemb.fss.prg.fixed_key`, here as T-tables), same key
format (:mod:`secemb.fss.keys`), exact ring arithmetic: results are bit-identical to the CPU
path's, which ``tests/fss/test_fss_gpu.py`` checks under Triton's CPU interpreter
(``TRITON_INTERPRET=1``) when no GPU is present and on the GPU when one is.

Importing this package needs neither torch nor Triton; :func:`device` says where the kernels
would run, or why they cannot.
"""

from __future__ import annotations

import importlib.util
import os
from typing import TYPE_CHECKING, Any

import numpy as np

from secemb.errors import InvalidParameters

if TYPE_CHECKING:
    import torch

    from secemb.fss.cuckoo import CuckooLayout
    from secemb.fss.keys import DPFKeys
    from secemb.fss.sketch import SketchCheck

__all__ = ["DeviceTable", "cuda_device", "device", "interpreting"]


def interpreting() -> bool:
    """Whether Triton runs its CPU interpreter (``TRITON_INTERPRET=1``, read when the kernels
    are first imported)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _require_triton() -> None:
    if importlib.util.find_spec("triton") is None:
        raise InvalidParameters("the gpu backend needs Triton: pip install 'secemb[gpu]'")


def cuda_device() -> torch.device:
    """The CUDA device (for measurements: never the interpreter).

    Raises
    ------
    InvalidParameters
        Triton is not installed, or torch sees no CUDA device.
    """
    _require_triton()
    import torch

    if not torch.cuda.is_available():
        raise InvalidParameters(
            "no CUDA device: torch.cuda.is_available() is False (torch "
            f"{torch.__version__}); GPU figures can only be measured on a GPU"
        )
    return torch.device("cuda")


def device() -> torch.device:
    """Where the kernels run: the CPU under Triton's interpreter (``TRITON_INTERPRET=1``, slow,
    for tests), else the CUDA device.

    Raises
    ------
    InvalidParameters
        Triton is not installed, or there is neither a CUDA device nor the interpreter.
    """
    _require_triton()
    import torch

    if interpreting():
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise InvalidParameters(
            "the gpu backend needs a CUDA device and torch sees none (torch.cuda.is_available() is "
            "False); TRITON_INTERPRET=1 runs the same kernels on the CPU (slowly, for tests)"
        )
    return torch.device("cuda")


class DeviceTable:
    """A round's table resident on the device, in its layout's form: ``(1, m, D)`` for the
    full layout, the bucket form ``(B, M, D)`` (zero rows for padding) for a cuckoo layout.
    Every batch of users' keys of the round is evaluated against it
    (:meth:`evaluate`), so the table crosses to the device once per round.

    Parameters
    ----------
    table: ring (m, D), uint32 or uint64.
    layout: ``"full"`` or the round's :class:`~secemb.fss.cuckoo.CuckooLayout`.
    dev: the torch device (:func:`device`).
    """

    def __init__(self, table: np.ndarray, layout: str | CuckooLayout, dev: torch.device) -> None:
        from secemb.fss.gpu.evaluate import upload_table

        if table.dtype not in (np.dtype(np.uint32), np.dtype(np.uint64)) or table.ndim != 2:
            raise InvalidParameters(f"tables must be 2-D uint32 or uint64, got {table.dtype} {table.shape}")
        self.layout = layout
        self.dtype = table.dtype
        self.device = dev
        self.data = upload_table(table, None if isinstance(layout, str) else layout.gather_index, dev)

    @property
    def groups(self) -> int:
        """Tables in the layout's form: 1 (full) or the number of buckets."""
        return int(self.data.shape[0])

    def evaluate(self, party: int, keys: DPFKeys, width: int,
                 check: SketchCheck | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:func:`secemb.fss.gpu.evaluate.evaluate` of ``keys`` against this table (with
        ``check``, the keys' sketch values are added into ``check.values``)."""
        from secemb.fss.gpu.evaluate import evaluate

        return evaluate(party, keys, self, width, check)

    def bits_product(self, t: np.ndarray, cw: np.ndarray) -> np.ndarray:
        """``out[g] = t[g] @ cw[g]`` in the ring on the device: the cuckoo layout's control-bit
        part of the aggregation, ``t`` uint8 (B, M, U) 0/1, ``cw`` ring (B, U, w) -> ring
        (B, M, w) (:func:`secemb.fss.gpu.evaluate.bits_product`)."""
        from secemb.fss.gpu.evaluate import bits_product

        return bits_product(t, cw, self.device)

    def bits_part(self, bits: list[np.ndarray], cws: list[np.ndarray]) -> np.ndarray:
        """``sum_u sum_i t_u[i, j] CW_u[i]`` on the device: the control-bit part of the round's
        aggregate over users ``u`` (unsigned: a party ``b`` server takes ``(-1)^b`` of it), in the
        layout's form.  Full layout: each user's packed control-bit rows uint8 (S, ceil(m / 8))
        (what :meth:`evaluate` returns) and words ring (S, w) -> ring (m, w)
        (:func:`~secemb.fss.gpu.evaluate.packed_bits_product`); cuckoo layout: each user's bits
        uint8 (B, M) and words (B, w) -> ring (B, M, w) (:meth:`bits_product`).  Equal, bit for
        bit, to the CPU's (:meth:`secemb.fss.fused.PreparedAggregation.apply_bits`,
        :func:`secemb.fss.fused.bits_product`)."""
        from secemb.fss.gpu.evaluate import packed_bits_product

        if isinstance(self.layout, str):
            return packed_bits_product(np.concatenate(bits), np.concatenate(cws), int(self.data.shape[1]),
                                       self.device)
        return self.bits_product(np.stack(bits, axis=2), np.stack(cws, axis=1))

    def __getstate__(self) -> Any:  # noqa: ANN401 - never pickled
        raise TypeError("a DeviceTable lives on its device and is not shipped to other processes")
