"""secemb.packing: the metadata and arrays packing shared by a server's checkpoint
(server/persist.py) and a device's state file (protocols/device_state.py).

The two files under tests/fixtures were written by the code before the packing was shared
(commit e60b6ad: ``save_checkpoint`` and ``DeviceStateFile.save`` of the inputs in
:func:`_inputs`); they must still load, and today's writers must lay out the same inputs the
same way (header bytes, ``.npz`` members and their bytes, the tag).
"""

from __future__ import annotations

import hashlib
import hmac
import io
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest

from secemb.packing import MalformedPack, arrays_bytes, arrays_from_bytes, meta_bytes, meta_from_bytes
from secemb.protocols.device_state import CorruptDeviceState, DeviceStateFile
from secemb.server.persist import CorruptState, load_checkpoint, save_checkpoint

FIXTURES = Path(__file__).parent / "fixtures"
SECRET = b"k" * 32
BINDING = {"device": 4, "deployment": "dep-a"}


def _inputs() -> dict[str, np.ndarray]:
    return {"table": np.arange(6, dtype=np.uint32).reshape(2, 3), "dense": np.array([0.5, -1.25]),
            "moments": np.array([[7, -8]], dtype=np.int64)}


def _assert_arrays(got: dict[str, np.ndarray]) -> None:
    assert list(got) == ["table", "dense", "moments"]
    assert got["table"].dtype == np.uint32 and got["table"].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert got["dense"].dtype == np.float64 and got["dense"].tolist() == [0.5, -1.25]
    assert got["moments"].dtype == np.int64 and got["moments"].tolist() == [[7, -8]]


def _members(npz: bytes) -> list[tuple[str, int, bytes]]:
    """Each zip member's name, compression and bytes, in order."""
    with zipfile.ZipFile(io.BytesIO(npz)) as z:
        return [(i.filename, i.compress_type, z.read(i)) for i in z.infolist()]


def test_an_old_checkpoint_loads_and_a_new_one_is_laid_out_alike(tmp_path: Path) -> None:
    old = FIXTURES / "checkpoint-v1.npz"
    got = load_checkpoint(old)
    assert got is not None
    meta, arrays = got
    assert meta == {"version": 3, "m_prime": 7, "note": "caf\u00e9"}
    _assert_arrays(arrays)
    save_checkpoint(tmp_path / "c.npz", {"version": 3, "m_prime": 7, "note": "caf\u00e9"}, _inputs())
    new = _members((tmp_path / "c.npz").read_bytes())
    assert [(name, kind) for name, kind, _ in new] == [("__meta__.npy", zipfile.ZIP_STORED), ("table.npy", 0),
                                                       ("dense.npy", 0), ("moments.npy", 0)]
    assert new == _members(old.read_bytes())
    # the metadata member: the canonical JSON's UTF-8 bytes as a uint8 vector
    meta_member = np.load(io.BytesIO(new[0][2]), allow_pickle=False)
    assert meta_member.dtype == np.uint8
    assert meta_member.tobytes() == b'{"m_prime": 7, "note": "caf\\u00e9", "version": 3}'


def test_an_old_device_state_loads_and_a_new_one_is_laid_out_alike(tmp_path: Path) -> None:
    old = (FIXTURES / "device-state-v1.state").read_bytes()
    meta, arrays = DeviceStateFile(FIXTURES / "device-state-v1.state", SECRET, BINDING).load()
    assert meta == {"round": 2, "note": "caf\u00e9"}
    _assert_arrays(arrays)
    state = DeviceStateFile(tmp_path / "d.state", SECRET, BINDING)
    state.save({"round": 2, "note": "caf\u00e9"}, _inputs())
    new = state.path.read_bytes()
    head = b'{"binding": {"deployment": "dep-a", "device": 4}, "meta": {"note": "caf\\u00e9", "round": 2}}'
    for data in (old, new):  # MAGIC | u32 length | meta | NPZ | HMAC-SHA256 under the derived key
        assert data[:12] == b"SEDSTAT1" + struct.pack("<I", len(head)) and data[12:12 + len(head)] == head
        key = hmac.new(SECRET, b"secemb/device-state/v1/mac", hashlib.sha256).digest()
        assert data[-32:] == hmac.new(key, data[:-32], hashlib.sha256).digest()
    assert _members(new[12 + len(head):-32]) == _members(old[12 + len(head):-32])
    assert [name for name, _, _ in _members(new[12 + len(head):-32])] == ["table.npy", "dense.npy", "moments.npy"]


def test_meta_round_trips_canonically_and_refuses_what_is_not_an_object() -> None:
    assert meta_bytes({"b": 1, "a": [1.5, None]}) == b'{"a": [1.5, null], "b": 1}'
    assert meta_from_bytes(b'{"a": [1.5, null], "b": 1}') == {"a": [1.5, None], "b": 1}
    with pytest.raises(ValueError):
        meta_bytes({"x": float("nan")})
    for bad, why in ((b"[1, 2]", "not an object"), (b"{", "not JSON"), (b"\xff{}", "not JSON"),
                     (b"[" * 100_000, "not JSON")):
        with pytest.raises(MalformedPack, match=why):
            meta_from_bytes(bad)


def test_arrays_round_trip_and_refuse_what_is_not_plain_arrays() -> None:
    data = arrays_bytes(_inputs())
    _assert_arrays(arrays_from_bytes(data))
    for name in ("file", "allow_pickle"):
        with pytest.raises(ValueError, match="reserved"):
            arrays_bytes({name: np.zeros(1)})
    with pytest.raises(ValueError):  # objects would need pickle
        arrays_bytes({"o": np.array([{}], dtype=object)})
    raw = io.BytesIO()
    with zipfile.ZipFile(raw, "w") as z:
        z.writestr("x.txt", b"not an array")
    buf = io.BytesIO()
    np.save(buf, np.array([b"a"], dtype=object), allow_pickle=True)
    pickled = io.BytesIO()
    with zipfile.ZipFile(pickled, "w") as z:
        z.writestr("o.npy", buf.getvalue())
    for bad in (b"", b"garbage", data[:-7], raw.getvalue(), pickled.getvalue()):
        with pytest.raises(MalformedPack, match="not an npz of arrays"):
            arrays_from_bytes(bad)


def test_both_files_refuse_packing_they_cannot_read(tmp_path: Path) -> None:
    ck = tmp_path / "checkpoint.npz"
    ck.write_bytes(arrays_bytes({"table": np.zeros(2)}))  # arrays, but no metadata member
    with pytest.raises(CorruptState, match="unreadable: no __meta__ member"):
        load_checkpoint(ck)
    ck.write_bytes(arrays_bytes({"__meta__": np.frombuffer(b"[1]", dtype=np.uint8)}))
    with pytest.raises(CorruptState, match="unreadable: metadata is not an object"):
        load_checkpoint(ck)
    with pytest.raises(ValueError, match="reserved"):
        save_checkpoint(ck, {}, {"__meta__": np.zeros(1)})
    state = DeviceStateFile(tmp_path / "d.state", SECRET, BINDING)
    head = meta_bytes({"binding": BINDING, "meta": {}})
    body = b"SEDSTAT1" + struct.pack("<I", len(head)) + head + b"no arrays here"
    key = hmac.new(SECRET, b"secemb/device-state/v1/mac", hashlib.sha256).digest()
    state.path.write_bytes(body + hmac.new(key, body, hashlib.sha256).digest())  # authentic, but not arrays
    with pytest.raises(CorruptDeviceState, match="malformed arrays"):
        state.load()
