"""Review of session 18's packing (secemb/packing.py): :func:`~secemb.packing.meta_from_bytes`
reads back only what :func:`~secemb.packing.meta_bytes` writes -- JSON, so no ``NaN`` /
``Infinity`` (``meta_bytes`` refuses them; Python's ``json`` reads them by default, handing a
checkpoint's loader a float it never wrote) and no object naming one key twice (ambiguous, as
an ``.npz`` naming one array twice is: Python keeps the last, another reader may take the
first).  Each is refused as malformed, by the packing and by the checkpoint built on it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from secemb.packing import MalformedPack, arrays_bytes, meta_bytes, meta_from_bytes
from secemb.server.persist import CorruptState, load_checkpoint

NOT_JSON = [b'{"lr": NaN}', b'{"lr": Infinity}', b'{"a": {"lr": -Infinity}}']
TWICE = [b'{"version": 1, "version": 2}', b'{"a": {"k": 1, "k": 1}}']


@pytest.mark.parametrize("data", NOT_JSON + TWICE)
def test_metadata_meta_bytes_cannot_write_is_refused(data: bytes) -> None:
    with pytest.raises(MalformedPack, match="metadata"):
        meta_from_bytes(data)


@pytest.mark.parametrize("data", NOT_JSON[:1] + TWICE[:1])
def test_a_checkpoint_with_such_metadata_is_corrupt(tmp_path: Path, data: bytes) -> None:
    ck = tmp_path / "checkpoint.npz"
    ck.write_bytes(arrays_bytes({"__meta__": np.frombuffer(data, np.uint8), "table": np.zeros(2)}))
    with pytest.raises(CorruptState, match="metadata"):
        load_checkpoint(ck)


def test_what_meta_bytes_writes_still_reads_back() -> None:
    meta = {"b": [1, 2.5, None, "x"], "a": {"nested": True, "big": 2**70, "neg": -0.0}}
    assert meta_from_bytes(meta_bytes(meta)) == meta
    with pytest.raises(ValueError):
        meta_bytes({"lr": float("nan")})  # the writer's side, for comparison


def test_a_server_checkpoint_with_an_infinite_version_is_corrupt_not_a_traceback(tmp_path: Path) -> None:
    """What the NaN/Infinity reading led to: the store's ``int(meta["version"])`` of ``Infinity``
    raised OverflowError -- a traceback at the server's start instead of CorruptState."""
    from secemb.server.store import CHECKPOINT, DiskStore

    meta = (b'{"fingerprint": "f", "format": 1, "included": [], "last_round": 0, "m_prime": 4, "mean_count": 1.0, '
            b'"model_sha256": "", "opt_steps": 0, "party": 0, "version": Infinity}')
    (tmp_path / CHECKPOINT).write_bytes(arrays_bytes({"__meta__": np.frombuffer(meta, np.uint8),
                                                      "table": np.zeros((2, 2)), "dense": np.zeros(2)}))
    with pytest.raises(CorruptState, match="metadata"):
        DiskStore(tmp_path, 0, "f").load()
