"""The client records of a secure-aggregation shares or relayed message, laid out by hand
(docs/secagg.md), for the tests of tests/secagg (:mod:`secagg_rounds`) and the red-team reviews of
tests/review (session 25: ``record_at`` and ``flip_tag`` were written twice, in secagg_rounds and
test_session23_redteam_f2).  A module of its own in tests/, imported by name, as round_setup is.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from secemb.secagg import messages, shamir

H = messages.HEADER_BYTES
N = shamir.SHARE_BYTES
CT = 8 + 2 * N + 16  # a sealed share pair: the two ids, two shares, the GCM tag (laid out by hand)


def record_at(msg: bytes, ident: int, signed: bool) -> int:
    """Offset of ``ident``'s record (its id, the share ciphertext and, signed, two 16-byte share
    commitments) in a shares or relayed message; an ``AssertionError`` where it has none."""
    size = 4 + CT + (32 if signed else 0)
    for i in range(struct.unpack_from("<I", msg, H)[0]):
        at = H + 4 + i * size
        if struct.unpack_from("<I", msg, at)[0] == ident:
            return at
    raise AssertionError(f"no record for {ident}")


def flip_tag(msg: bytes, ident: int, signed: bool) -> bytes:
    """A shares or relayed message with the last byte of ``ident``'s ciphertext (in its GCM tag)
    flipped: it does not open."""
    at = record_at(msg, ident, signed) + 4 + CT - 1
    return msg[:at] + bytes([msg[at] ^ 1]) + msg[at + 1 :]


def omit_seeds(ids: list[int], omitters: int) -> Callable[[int, bytes], bytes]:
    """Finding C2's plan over any client ids, as an unmask-message edit ``edit(client, msg)``: the
    last ``omitters`` clients (by rank in ``ids``) each leave out of their unmask messages the seed
    shares of the clients whose rank has their bit set (never their own), so nearly every seed has
    a holder set of its own (session 25: written twice, in the red team's and I's point-set tests)."""
    rank = {u: k for k, u in enumerate(ids)}
    first = len(ids) - omitters

    def edit(u: int, msg: bytes) -> bytes:
        if rank[u] < first:
            return msg
        rd = messages.Reader(memoryview(msg)[H:], "unmask")
        parts = [dict(rd.records(N, "owner")), dict(rd.records(N, "owner"))]
        rd.end()
        parts[1] = {v: s for v, s in parts[1].items() if v == u or not (rank[v] >> (rank[u] - first)) & 1}
        body = [len(p).to_bytes(4, "little") + b"".join(v.to_bytes(4, "little") + s for v, s in sorted(p.items()))
                for p in parts]
        return messages.frame("unmask", int.from_bytes(msg[16:24], "little"), u, *body)

    return edit
