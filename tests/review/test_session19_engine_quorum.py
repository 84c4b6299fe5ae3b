"""Session 19 review (helper J) of bounded payloads (issue 34 (b)) at the nodes, in process: the
quorum change (server 0 counts a device once its upload and its proof are in).

Finding J2: a device's proof is a second request after its upload.  When the quorum is reached
(by other devices' proofs) or the deadline passes while an honest device's proof is on its
way, the close takes every *uploaded* device and treats the one without a proof like a cheater
whose proof failed: a rejection counted against it (three and it is refused at the door) and a
``device_rejected`` alarm.  Leaving it out is right (its payload is unchecked); the strike and
the alarm are not -- it did nothing but arrive after the quorum.  Fixed (lead, session 19): the
close leaves a device without a proof out like a dropout (``SecEmbServer.unproved``), no strike.

Regression (passes): that device's proof after the close is refused (Conflict) and changes
nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
import test_bounded_nodes as tbn  # type: ignore[import-not-found]  # noqa: E402

from secemb.client.device import Device  # noqa: E402
from secemb.server.errors import Conflict  # noqa: E402


def test_a_device_still_proving_at_the_quorum_is_left_out_without_a_strike() -> None:
    servers = tbn._servers()
    leader, _ = tbn._nodes(servers)
    try:
        r = int(leader.open_round(participants=tbn.USERS, deadline_s=30.0, quorum=3)["round_id"])
        rnd = leader.round
        assert rnd is not None
        late = tbn.USERS[3]
        tbn._upload(servers, late)  # honest: its proof would follow, had the round not closed
        for u in tbn.USERS[:3]:
            client = servers.servers().device(u)
            Device(client, *tbn.RATINGS.of(u)).participate(client.round_info())
        out = leader.close_round(r, "quorum reached")  # what the closer thread does now (counted 3 >= quorum 3)
        assert out["state"] == "committed", out
        assert late not in out.get("included", [late])  # left out: its payload is unchecked
        assert leader.rejections.get(late, 0) == 0, "an honest device in flight got a rejection strike"
        assert late not in rnd.rejected
    finally:
        servers.stop()


def test_a_proof_after_the_close_is_refused_and_changes_nothing() -> None:
    """The late device's challenge and proof after the close: Conflict (409 over HTTP), the
    committed round's included set unchanged, no 5xx."""
    servers = tbn._servers()
    leader, _ = tbn._nodes(servers)
    try:
        r = int(leader.open_round(participants=tbn.USERS, deadline_s=30.0, quorum=3)["round_id"])
        late = tbn._upload(servers, tbn.USERS[3])
        for u in tbn.USERS[:3]:
            client = servers.servers().device(u)
            Device(client, *tbn.RATINGS.of(u)).participate(client.round_info())
        out = leader.close_round(r, "quorum reached")
        assert out["state"] == "committed" and out["included"] == sorted(tbn.USERS[:3]), out
        with pytest.raises(Conflict):
            late.prove()
        refused = leader.proof_many(r, [(tbn.USERS[3], b"\0" * 64)])[0]
        assert isinstance(refused, Conflict)
        assert leader.round_status(r, None)["included"] == sorted(tbn.USERS[:3])
    finally:
        servers.stop()
