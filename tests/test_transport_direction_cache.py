"""The in-process transport checks each (source, destination) pair of names once and then
remembers its direction (issue 37: 28,434 endpoint parses an ML-100K epoch); refusals are
not remembered, and names that are not ``str`` are refused as before."""

from __future__ import annotations

import pytest

from secemb.errors import InvalidParameters
from secemb.transport.inprocess import DOWNLOAD, SERVER, UPLOAD, InProcessTransport


def test_directions_are_remembered_and_refusals_repeat() -> None:
    tp = InProcessTransport()
    for _ in range(2):
        assert tp.send("user:3", "server0", b"ab", stage="x") == 2
        assert tp.send("server1", "user:3", b"c", stage="x") == 1
        assert tp.send("server0", "server1", b"", stage="x") == 0
        with pytest.raises(InvalidParameters, match="users cannot message each other"):
            tp.send("user:1", "user:2", b"", stage="x")
        with pytest.raises(InvalidParameters, match="same endpoint"):
            tp.send("server0", "server0", b"", stage="x")
        with pytest.raises(InvalidParameters, match="endpoint must be"):
            tp.send("user:01", "server0", b"", stage="x")
    assert {(r.src, r.direction) for r in tp.records()} == {("user:3", UPLOAD), ("server1", DOWNLOAD),
                                                            ("server0", SERVER)}


@pytest.mark.parametrize("name", [["server0"], None, 7])
def test_names_that_are_not_str_are_refused(name: object) -> None:
    with pytest.raises(InvalidParameters, match="endpoint must be a str"):
        InProcessTransport().send(name, "server0", b"", stage="x")  # type: ignore[arg-type]
