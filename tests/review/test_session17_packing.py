"""Review of session 17 (60dfbfe, secemb/packing.py): an ``.npz`` that names one array twice
-- the same member twice, or ``a`` and ``a.npy``, which numpy reads under one name -- is
ambiguous (numpy hands back the last one; another zip reader may take the first), and is not
what :func:`~secemb.packing.arrays_bytes` writes: it is refused as malformed, by the packing
and by both files built on it (a checkpoint with two ``__meta__`` members; a device state whose
tag verifies), never read as one of its candidates."""

from __future__ import annotations

import hashlib
import hmac
import io
import struct
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest

from secemb.packing import MalformedPack, arrays_from_bytes, meta_bytes
from secemb.protocols.device_state import CorruptDeviceState, DeviceStateFile
from secemb.server.persist import CorruptState, load_checkpoint

SECRET = b"k" * 32
BINDING = {"device": 4, "deployment": "dep-a"}


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return buf.getvalue()


def _zip(*members: tuple[str, bytes]) -> bytes:
    """An uncompressed zip of ``members`` in order (zipfile warns of a repeated name; it writes it)."""
    raw = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with zipfile.ZipFile(raw, "w") as z:
            for name, data in members:
                z.writestr(name, data)
    return raw.getvalue()


@pytest.mark.parametrize("second", ["a.npy", "a"])
def test_an_npz_naming_an_array_twice_is_refused(second: str) -> None:
    data = _zip(("a.npy", _npy(np.array([1]))), (second, _npy(np.array([2]))))
    with pytest.raises(MalformedPack, match="two members of one name"):
        arrays_from_bytes(data)


def test_a_checkpoint_with_two_metadata_members_is_refused(tmp_path: Path) -> None:
    ck = tmp_path / "checkpoint.npz"
    meta = [np.frombuffer(meta_bytes({"version": v}), np.uint8) for v in (1, 2)]
    ck.write_bytes(_zip(("__meta__.npy", _npy(meta[0])), ("__meta__.npy", _npy(meta[1])),
                        ("table.npy", _npy(np.zeros(2)))))
    with pytest.raises(CorruptState, match="two members of one name"):
        load_checkpoint(ck)


def test_an_authentic_device_state_naming_an_array_twice_is_refused(tmp_path: Path) -> None:
    state = DeviceStateFile(tmp_path / "d.state", SECRET, BINDING)
    head = meta_bytes({"binding": BINDING, "meta": {}})
    arrays = _zip(("x.npy", _npy(np.array([1]))), ("x.npy", _npy(np.array([2]))))
    body = b"SEDSTAT1" + struct.pack("<I", len(head)) + head + arrays
    key = hmac.new(SECRET, b"secemb/device-state/v1/mac", hashlib.sha256).digest()
    state.path.write_bytes(body + hmac.new(key, body, hashlib.sha256).digest())  # the tag verifies
    with pytest.raises(CorruptDeviceState, match="malformed arrays"):
        state.load()
