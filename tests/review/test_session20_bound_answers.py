"""Session 20 review (helper C) of bounded payloads (issue 34 (b)) at server 0's node, in process:
what a deviating server 1 does with its answer to the check request.

Server 0 bounds the answer only by its exact length in the role
(:meth:`~secemb.protocols.secemb.SecEmbServer.bound_rejected`).  Regressions (they pass): a
truncated, extended, empty, re-framed (another kind, round or party) answer, or one with a field
element not below ``p``, aborts the close with the reason named and no traceback; nothing is
committed, no device gets a rejection strike or an alarm, and the next round commits.

Limit, pinned: an answer of the right form whose field elements are garbage rejects every device
of the round, and each gets a rejection strike at server 0 (three refuse it at the door) -- the
same power server 1 has over the upload digests' comparison.  Server 0 cannot tell a device
that cheated from a server 1 that lied; the operator sees every device of the round rejected at
once (``device_rejected``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
import test_bounded_nodes as tbn  # type: ignore[import-not-found]  # noqa: E402

from secemb.client.device import Device  # noqa: E402
from secemb.framing import HEADER_BYTES, ROUND_ID_OFFSET  # noqa: E402
from secemb.fss.field import P  # noqa: E402
from secemb.protocols.secemb.sizes import NAME  # noqa: E402
from secemb.protocols.wire import frame  # noqa: E402
from secemb.sim.local import LocalPeer  # noqa: E402

PROVED = tbn.USERS[:3]


def _other_round(answer: bytes) -> bytes:
    r = int.from_bytes(answer[ROUND_ID_OFFSET : ROUND_ID_OFFSET + 8], "little")
    return frame(NAME, "bound_answer", 0, r + 1, answer[HEADER_BYTES:])


def _element_p(answer: bytes) -> bytes:
    return answer[:HEADER_BYTES] + P.to_bytes(8, "little") + answer[HEADER_BYTES + 8 :]


MALFORMED: dict[str, Callable[[bytes], bytes]] = {
    "truncated": lambda a: a[:-8],
    "extended": lambda a: a + bytes(8),
    "empty": lambda a: b"",
    "header only": lambda a: frame(NAME, "bound_answer", 0, 0, b"")[:HEADER_BYTES],
    "another kind": lambda a: frame(NAME, "bound_request", 0, 0, a[HEADER_BYTES:])[:HEADER_BYTES] + a[HEADER_BYTES:],
    "another round": _other_round,
    "server 1's party": lambda a: a[:8] + (1).to_bytes(4, "little") + a[12:],
    "element p": _element_p,
}


def _round_with_answer(monkeypatch: pytest.MonkeyPatch, change: Callable[[bytes], bytes]) -> tuple[Any, dict]:
    """A round of three devices that proved, closed with server 1's answer through ``change``;
    the servers (stopped by the caller) and the close's outcome."""
    servers = tbn._servers()
    leader, _ = tbn._nodes(servers)
    r = tbn._open(servers)
    for u in PROVED:
        client = servers.servers().device(u)
        Device(client, *tbn.RATINGS.of(u)).participate(client.round_info())
    real = LocalPeer.bound

    def deviating(self: LocalPeer, round_id: int, body: bytes) -> bytes:
        return change(real(self, round_id, body))

    with monkeypatch.context() as m:
        m.setattr(LocalPeer, "bound", deviating)
        out = leader.close_round(r)
    return servers, out


@pytest.mark.parametrize("name", list(MALFORMED))
def test_a_malformed_check_answer_aborts_the_close_and_strikes_nobody(monkeypatch: pytest.MonkeyPatch,
                                                                      name: str) -> None:
    servers, out = _round_with_answer(monkeypatch, MALFORMED[name])
    leader, _ = tbn._nodes(servers)
    try:
        assert out["state"] == "aborted" and "bound proofs' check failed" in out["reason"], out
        assert "Traceback" not in out["reason"]
        assert leader.version == 0 and leader.rejections == {}
        assert "device_rejected" not in {a["kind"] for a in leader.status()["alarms"]}
        r = tbn._open(servers)  # the next round commits
        for u in PROVED:
            client = servers.servers().device(u)
            Device(client, *tbn.RATINGS.of(u)).participate(client.round_info())
        assert leader.close_round(r)["state"] == "committed"
    finally:
        servers.stop()


def test_limit_a_well_formed_garbage_answer_rejects_and_strikes_every_device(monkeypatch: pytest.MonkeyPatch) -> None:
    def garbage(answer: bytes) -> bytes:
        words = np.arange((len(answer) - HEADER_BYTES) // 8, dtype="<u8").tobytes()  # small words: below p
        return answer[:HEADER_BYTES] + words

    servers, out = _round_with_answer(monkeypatch, garbage)
    leader, _ = tbn._nodes(servers)
    try:
        assert out["state"] == "aborted", out  # no device left: below the floor
        assert sorted(out["rejected"]) == sorted(PROVED)
        assert leader.rejections == dict.fromkeys(PROVED, 1)
    finally:
        servers.stop()
