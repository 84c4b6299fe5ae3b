"""Session 21 review (helper D) of the verified uploads (issue 34) with bounded payloads on (a
deployment's default), at the nodes in process: finding D2, a device whose keys fail check (a)
or (c) evaded the record, the alarm and the door by sending no bound proof.

docs/security.md, "The check": a device whose upload digests differ "is left out of the round
exactly like a dropout ..., recorded in the round's outcome (``rejected``), and server 0 raises a
non-halting ``device_rejected`` alarm", and 3 such rounds refuse it at the door.  "Bounded
payloads: the check" adds that a device that uploaded but sent no proof is left out like a
dropout with no rejection counted, because its proof may still have been on its way (finding J2).
The close took the devices without a proof out *before* the digest comparison, so a device whose
keys are not point functions (``two-points``), or differ between the servers
(``inconsistent-keys``), was never compared: with ``bound`` it was left out silently in every
round, never recorded, never reported, never refused -- while the same device is rejected without
``bound``.  An honest device whose proof is late has equal digests, so comparing the silent
devices' digests strikes only cheaters (the second test: no strike, J2 kept).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_bounded_nodes as tbn  # type: ignore[import-not-found]  # noqa: E402
import test_session21_verify_journal as j21  # noqa: E402

from secemb.client.device import Device, RoundSession  # noqa: E402
from secemb.protocols.adversary import with_attack  # noqa: E402
from secemb.server.node import LeaderNode  # noqa: E402

USERS = tbn.USERS
HONEST, ATTACKER = USERS[:4], USERS[4]


def silent_upload(srv: j21.InProcessServers, user: int, attack: str | None) -> None:
    """Device ``user`` retrieves, trains and uploads (running ``attack`` if given) and never
    sends its bound proof."""
    client = srv.servers().device(user)
    info = client.round_info()
    proto = None if attack is None else with_attack(info.make_protocol(), attack)
    model = info.make_model()
    session = RoundSession(client, info, protocol=proto, task=model.task)
    session.prepare(*tbn.RATINGS.of(user))
    session.retrieve()
    state = model.new_user_store(1, tbn.np.random.default_rng(0), info.adam()).state(0)  # public test data
    session.train(lambda rows, dense, batch: model.local_step(rows, dense, state, batch))
    session.upload()


def _round_with_a_silent_device(layout: str, relay: bool, attack: str | None) -> tuple[dict[str, Any], LeaderNode]:
    """One bounded round: the honest devices take part in full, ``ATTACKER`` uploads (with keys
    of ``attack``, or honest ones for ``None``) and sends no proof; the round's outcome and server 0."""
    srv = j21.servers(layout, relay)
    leader = srv.nodes[0]
    assert isinstance(leader, LeaderNode)
    try:
        r = int(leader.open_round(participants=USERS, deadline_s=30.0)["round_id"])
        for u in HONEST:
            client = srv.servers().device(u)
            Device(client, *tbn.RATINGS.of(u)).participate(client.round_info())
        silent_upload(srv, ATTACKER, attack)
        return leader.close_round(r), leader
    finally:
        srv.stop()


@pytest.mark.parametrize("attack", ["two-points", "inconsistent-keys"])
@pytest.mark.parametrize(("layout", "relay"), [("cuckoo", True), ("cuckoo", False), ("full", False)])
def test_a_device_with_bad_keys_and_no_proof_is_rejected_and_reported(layout: str, relay: bool, attack: str) -> None:
    out, leader = _round_with_a_silent_device(layout, relay, attack)
    assert out["state"] == "committed" and out["included"] == sorted(HONEST), out
    assert out["rejected"] == [ATTACKER], out
    assert leader.rejections == {ATTACKER: 1}
    assert [a["kind"] for a in leader.alarms] == ["device_rejected"]


@pytest.mark.parametrize(("layout", "relay"), [("cuckoo", True), ("full", False)])
def test_an_honest_device_without_its_proof_is_still_left_out_without_a_strike(layout: str, relay: bool) -> None:
    out, leader = _round_with_a_silent_device(layout, relay, None)
    assert out["state"] == "committed" and out["included"] == sorted(HONEST) and out["rejected"] == [], out
    assert leader.rejections == {} and leader.alarms == []


@pytest.mark.parametrize("attack", ["two-points", "inconsistent-keys", "oversized-payload", "wrapped-dense"])
@pytest.mark.parametrize(("layout", "relay"), [("cuckoo", True), ("full", False)])
def test_every_simulated_attack_reaches_the_check_under_bound(layout: str, relay: bool, attack: str) -> None:
    """Finding D3 (the simulation, ``secemb.protocols.adversary``): with bounded payloads the
    request to server 1 ends with the device's proof seed ``sigma``.  ``two-points`` with relay
    wrote its forged digest over ``sigma`` (server 1 refused the relay as tampered: a false
    ``relay_tampered`` accusation of server 0, the attack never reached the digests), and
    ``inconsistent-keys`` sent a request without ``sigma`` (refused as malformed).  Each attacker
    now takes part to the end and is rejected by the check, and server 1 raises no alarm."""
    srv = j21.servers(layout, relay)
    leader, follower = srv.nodes
    assert isinstance(leader, LeaderNode)
    try:
        r = j21.play(srv, HONEST, [ATTACKER], attack)
        out = leader.close_round(r)
        assert out["state"] == "committed" and out["included"] == sorted(HONEST), out
        assert out["rejected"] == [ATTACKER], out
        assert follower.alarms == []
    finally:
        srv.stop()
