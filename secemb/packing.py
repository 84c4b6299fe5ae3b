"""Metadata and numpy arrays as bytes: the one packing behind the files that hold both (a
server's checkpoint, :mod:`secemb.server.persist`; a device's state file,
:mod:`secemb.protocols.device_state`), each of which frames the pieces its own way.

* :func:`meta_bytes` / :func:`meta_from_bytes` -- the metadata as canonical JSON (sorted keys,
  no ``NaN``/``Infinity``, UTF-8), read back as a JSON object;
* :func:`arrays_bytes` / :func:`arrays_from_bytes` -- the arrays as an uncompressed ``.npz``
  (``numpy.savez``), read back without pickle (no object arrays either way).

What cannot be read back raises :class:`MalformedPack`; each file format turns it into its own
error.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from secemb.errors import SecembError

__all__ = ["MalformedPack", "arrays_bytes", "arrays_from_bytes", "meta_bytes", "meta_from_bytes"]

#: ``numpy.savez``'s own parameters, which cannot name an array
_SAVEZ_PARAMETERS = ("file", "allow_pickle")


class MalformedPack(SecembError):
    """Bytes that are not packed metadata or arrays (the message says what is wrong)."""


def meta_bytes(meta: Mapping[str, Any]) -> bytes:
    """``meta`` as canonical JSON: keys sorted, UTF-8.

    Raises
    ------
    ValueError
        A value is ``NaN`` or infinite (not JSON).
    TypeError
        A value is not JSON-able.
    """
    return json.dumps(dict(meta), sort_keys=True, allow_nan=False).encode()


def meta_from_bytes(data: bytes) -> dict[str, Any]:
    """The JSON object :func:`meta_bytes` wrote.

    Raises
    ------
    MalformedPack
        Not UTF-8, not JSON (``NaN`` and ``Infinity`` are not), not a JSON object, or an
        object naming a key twice (which one is meant is ambiguous).
    """
    try:
        meta = json.loads(data.decode(), parse_constant=_not_json, object_pairs_hook=_distinct_keys)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise MalformedPack(f"metadata is not JSON: {type(exc).__name__}: {exc}") from None
    if not isinstance(meta, dict):
        raise MalformedPack("metadata is not an object")
    return meta


def _not_json(name: str) -> Any:
    """``json.loads``' hook for ``NaN``, ``Infinity``, ``-Infinity``: refused (not JSON)."""
    raise ValueError(f"{name} is not JSON")


def _distinct_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``' hook for an object: its pairs as a dict, refused if a key comes twice."""
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("an object names a key twice")
    return out


def arrays_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    """``arrays`` as an uncompressed ``.npz`` (one ``NAME.npy`` member each, in order).

    Raises
    ------
    ValueError
        A name is one of ``numpy.savez``'s parameters (``file``, ``allow_pickle``), or an array
        holds objects (they would need pickle).
    """
    for name in _SAVEZ_PARAMETERS:
        if name in arrays:
            raise ValueError(f"array name {name!r} is reserved")
    buf = io.BytesIO()
    np.savez(buf, allow_pickle=False, **arrays)
    return buf.getvalue()


def arrays_from_bytes(data: bytes) -> dict[str, np.ndarray]:
    """The arrays :func:`arrays_bytes` wrote, by name, read without pickle.

    Raises
    ------
    MalformedPack
        Not an ``.npz`` of numpy arrays (truncated, altered, a member that is not a ``.npy``
        array, an object array, two members of one name).
    """
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            names = npz.files
            arrays = {name: npz[name] for name in names}
    except Exception as exc:  # noqa: BLE001 - zipfile, zlib, ValueError, EOFError, ...: all mean "not arrays"
        raise MalformedPack(f"not an npz of arrays: {type(exc).__name__}: {exc}") from None
    if len(arrays) != len(names):  # "a.npy" twice, or "a" and "a.npy": which one is meant is ambiguous
        raise MalformedPack("not an npz of arrays: two members of one name")
    if not all(isinstance(a, np.ndarray) for a in arrays.values()):  # NpzFile hands a non-.npy member as bytes
        raise MalformedPack("not an npz of arrays: a member is not a .npy array")
    return arrays
