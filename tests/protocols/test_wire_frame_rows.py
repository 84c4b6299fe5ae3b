"""Issue 37: a batch of messages of one kind framed as the rows of one array
(``wire.frame_rows``: the header ``framing.header`` gives, then the body the caller writes) is,
row by row, what ``wire.frame`` makes of each body; the header is the documented one."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from secemb.errors import InvalidParameters
from secemb.framing import HEADER_BYTES, header
from secemb.protocols import wire
from secemb.protocols.names import wire_id


def test_the_header_is_the_documented_layout_of_a_body_length() -> None:
    # docs/wire-format.md: magic, version 2, protocol, kind, flags 0, party, peer, round, body length
    assert header(9, 3, 1, 2, 77, 5) == struct.pack("<4sBBBBIIQQ", b"SEMB", 2, 9, 3, 0, 1, 2, 77, 5)
    with pytest.raises(InvalidParameters, match="cannot frame"):
        header(9, 3, -1, 0, 0, 5)


@pytest.mark.parametrize("protocol, kind, party", [("secemb", "retrieval_request", 1), (None, "dense", 0),
                                                   ("secemb", "upload", 0)])
def test_filled_rows_are_the_framed_messages(protocol: str | None, kind: str, party: int) -> None:
    bodies = np.random.default_rng(3).integers(0, 256, (4, 11), dtype=np.uint8)
    rows = wire.frame_rows(protocol, kind, party, 12, 11, 4)
    assert rows.shape == (4, HEADER_BYTES + 11) and rows.dtype == np.uint8
    rows[:, HEADER_BYTES:] = bodies
    assert [r.tobytes() for r in rows] == [wire.frame(protocol, kind, party, 12, b.tobytes()) for b in bodies]
    got = wire.open_message(rows[2].tobytes(), protocol, kind, party, 12, 11)
    assert bytes(got) == bodies[2].tobytes()
    assert rows[0, 5] == (0 if protocol is None else wire_id(protocol))
