"""Digests of a model's public arrays, and the check of a digest's written form.

* :func:`model_sha256` -- the public model (table and dense vector): what a run's result, a
  saved folder's manifest and a round document name the model by;
* :func:`table_sha256` -- a public table alone, its shape included (GREC's frozen recommender);
* :func:`is_sha256_hex` -- whether a value is a SHA-256 as these write it.

Below every party (DESIGN §2): the servers, the devices, the saved-model format and the
drivers all hash the same bytes; this module imports numpy and :mod:`secemb.errors` only.
"""

from __future__ import annotations

import hashlib
import re

import numpy as np

from secemb.errors import InvalidParameters

__all__ = ["is_sha256_hex", "model_sha256", "table_sha256"]

_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def is_sha256_hex(value: object) -> bool:
    """Whether ``value`` is a SHA-256 as this package writes it (:func:`model_sha256`,
    :func:`table_sha256`, a round document's, a saved file's): a str of 64 lowercase hex digits."""
    return isinstance(value, str) and _SHA256_HEX.fullmatch(value) is not None


def model_sha256(table: np.ndarray, dense: np.ndarray) -> str:
    """SHA-256 of the public model: ``table`` (row-major) then ``dense``, as little-endian
    float64 bytes (hashed in place where they are already such: no copy of the model)."""
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(table, dtype="<f8").data)
    h.update(np.ascontiguousarray(dense, dtype="<f8").data)
    return h.hexdigest()


def table_sha256(table: np.ndarray) -> str:
    """SHA-256 of a public table alone (a 2-D array): its shape ``(rows, columns)`` as two
    little-endian int64, then its entries as little-endian float64, row-major (C order).  The
    shape enters so that the same entries in another shape hash otherwise.  GREC's denoiser
    freezes its recommender's table: the servers of a ``grec-denoiser`` deployment announce this
    hash of their frozen table in the round document (``model.recommender_table_sha256``), and a
    device compares the hash of its own recommender's table
    (:meth:`secemb.client.device.RoundInfo.check_model`).

    Raises
    ------
    InvalidParameters
        ``table`` is not 2-D.
    """
    table = np.asarray(table)
    if table.ndim != 2:
        raise InvalidParameters(f"table_sha256 takes a 2-D table, got shape {table.shape}")
    h = hashlib.sha256(np.array(table.shape, dtype="<i8").tobytes())
    h.update(np.ascontiguousarray(table, dtype="<f8").tobytes())
    return h.hexdigest()
