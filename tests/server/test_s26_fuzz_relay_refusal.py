"""Session 26 (helper J): the flaky failure of ``test_net_fuzz.py::test_fuzzed_bodies_never_cause_5xx_or_state_changes``
(draw ``(0, 'POST', '/v1/rounds/0/retrieval', 'user:4', 'q0')``, byte 404 of the ``q0`` sample
XOR 170: a 409 and server 0's status changed; Hypothesis's replay did not reproduce it).

Cause: the fuzz test's world is shared by its examples.  An earlier example had sent user 4's
retrieval request to server 1 (the ``q1`` endpoint: a well-formed request, accepted), so server 1
held user 4's roots and the digest of its shared key part.  Byte 404 of ``q0`` lies in that key
part, which server 0 forwards to server 1 (relay): server 1 refused the forward (``RelayTampered``:
it differs from what the device committed to), left user 4 out of the round and raised a
non-halting ``relay_tampered`` alarm, while server 0 had committed user 4's retrieval (its
``retrieved`` went up by one) and answered 409.  That is the documented relay behaviour
(docs/security.md, "Authenticated relay"; docs/deployment.md, alarm ``relay_tampered``: a device
can raise it against server 0), which the test's check allowed for forwarded uploads only.  The
replay met user 4 already retrieved at server 0: a 409 that changes nothing, so no failure.

Here: the sequence replayed deterministically over HTTP, with its exact changes, and the fuzz
test's check (``_check_rejected``) accepting those changes and no others."""

from __future__ import annotations

import copy

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("httpx")

import httpx  # noqa: E402
import test_net_fuzz  # noqa: E402
from test_net_fuzz import _check_rejected, _send  # noqa: E402

world = test_net_fuzz.world  # the fuzz test's two-server world (module scope: one per module)


def test_a_device_key_part_altered_at_server_0_after_its_request_to_server_1_is_a_relay_refusal(world):
    w = world
    path = f"/v1/rounds/{w.r}/retrieval"
    q0 = w.samples["q0"]
    bad = q0[:404] + bytes([q0[404] ^ 170]) + q0[405:]
    # without user 4's request at server 1, server 0 refuses it before anything: no state change
    before = w.snapshot()
    resp = _send(w, 0, "POST", path, bad, "user:4")
    assert resp.status_code == 409 and resp.json()["detail"] == "user 4 must send its retrieval request to server 1 " \
                                                                "first", resp.text
    assert w.snapshot() == before
    # the fuzz test's earlier example: user 4's request at server 1, accepted
    resp = _send(w, 1, "POST", path, w.samples["q1"], "user:4")
    assert resp.status_code == 204, resp.text
    before = w.snapshot()
    resp = _send(w, 0, "POST", path, bad, "user:4")
    assert resp.status_code == 409
    assert resp.json() == {"error": "conflict", "detail": "server 1 did not answer the relayed retrieval (this user "
                           "cannot take part in the round): the other server refused: relay_keys of round 0: the "
                           "forwarded key part differs from the one the device committed to (server 0 altered it, or "
                           "the device sent the servers parts that differ); not evaluated"}
    after = w.snapshot()
    # exactly: server 0 counts user 4 as retrieved, server 1 has one alarm naming user 4's keys
    expected = copy.deepcopy(before)
    expected[0]["round"]["retrieved"] += 1
    assert [{k: v for k, v in a.items() if k != "time_unix"} for a in after[1]["alarms"]] == [
        {"kind": "relay_tampered", "round": 0, "halt": False, "detail": "user 4's retrieval keys as server 0 "
         "forwarded them fail the device's authentication: server 0 altered them, or the device sent the two servers "
         "bytes that do not match; the user is left out"}]
    expected[1]["alarms"] = after[1]["alarms"]
    assert after == expected
    _check_rejected(w, resp, before)  # failed before session 26: only forwarded uploads were allowed for
    # Hypothesis's replay: user 4 already retrieved at server 0, refused with no state change
    before = w.snapshot()
    again = _send(w, 0, "POST", path, bad, "user:4")
    assert again.status_code == 409 and again.json()["detail"] == "user 4 already retrieved in round 0"
    assert w.snapshot() == before


class _Snapshots:
    """A stand-in for :class:`World` whose ``snapshot()`` is a given status pair."""

    def __init__(self, after: list[dict]) -> None:
        self.after = after

    def snapshot(self) -> list[dict]:
        return copy.deepcopy(self.after)


_BEFORE = [
    {"party": 0, "halted": False, "alarms": [], "model_version": 0,
     "round": {"round_id": 0, "state": "open", "retrieved": 3, "uploaded": 1}},
    {"party": 1, "halted": False, "alarms": [{"kind": "relay_tampered", "round": 0, "halt": False, "time_unix": 1.0,
                                              "detail": "user 9's upload as server 0 forwarded them fail (...)"}],
     "model_version": 0, "round": {"round_id": 0, "state": "open", "retrieved": 4, "uploaded": 1}},
]
_KEYS_DETAIL = ("server 1 did not answer the relayed retrieval (this user cannot take part in the round): the other "
                "server refused: relay_keys of round 0: the forwarded key part differs from the one the device "
                "committed to (server 0 altered it, or the device sent the servers parts that differ); not evaluated")
_UPLOAD_DETAIL = ("server 1 did not take the forwarded upload (it will not count): the other server refused: round 0: "
                  "user 7's forwarded upload fails authentication")
_KEYS_ALARM = {"kind": "relay_tampered", "round": 0, "halt": False, "time_unix": 2.0,
               "detail": "user 4's retrieval keys as server 0 forwarded them fail the device's authentication: "
                         "server 0 altered them, or the device sent the two servers bytes that do not match; the user "
                         "is left out"}
_UPLOAD_ALARM = {**_KEYS_ALARM, "detail": _KEYS_ALARM["detail"].replace("user 4's retrieval keys", "user 7's upload")}


def _after(counter: str, alarm: dict, *changes: tuple[int, tuple[str, ...], object]) -> list[dict]:
    """``_BEFORE`` with server 0's round ``counter`` one up and ``alarm`` raised at server 1, then
    each change ``(party, keys, value)`` made: the value at that party's ``keys`` replaced."""
    out = copy.deepcopy(_BEFORE)
    out[0]["round"][counter] += 1
    out[1]["alarms"].append(alarm)
    for party, keys, value in changes:
        doc = out[party]
        for k in keys[:-1]:
            doc = doc[k]
        doc[keys[-1]] = value
    return out


def _check(detail: str, after: list[dict], status: int = 409) -> None:
    _check_rejected(_Snapshots(after), httpx.Response(status, json={"error": "conflict", "detail": detail}),
                    copy.deepcopy(_BEFORE))


@pytest.mark.parametrize(("detail", "counter", "alarm"), [(_KEYS_DETAIL, "retrieved", _KEYS_ALARM),
                                                          (_UPLOAD_DETAIL, "uploaded", _UPLOAD_ALARM)])
def test_the_fuzz_check_allows_a_relay_refusal_exactly_its_changes(detail, counter, alarm):
    _check(detail, _after(counter, alarm))
    other = "uploaded" if counter == "retrieved" else "retrieved"
    wrong = [
        _after(other, alarm),  # the other counter moved
        _after(counter, alarm, (0, ("round", counter), _BEFORE[0]["round"][counter] + 2)),  # two more
        [_BEFORE[0], _after(counter, alarm)[1]],  # server 0 counted nothing
        [_after(counter, alarm)[0], _BEFORE[1]],  # no alarm
        _after(counter, {**alarm, "kind": "device_rejected"}),  # another alarm
        _after(counter, {**alarm, "halt": True}),  # a halting one
        _after(counter, _UPLOAD_ALARM if alarm is _KEYS_ALARM else _KEYS_ALARM),  # naming the other forward
        _after(counter, alarm, (1, ("alarms",), [alarm])),  # an earlier alarm gone
        _after(counter, alarm, (1, ("halted",), True)),
        _after(counter, alarm, (0, ("model_version",), 1)),
        _after(counter, alarm, (1, ("round", "retrieved"), 5)),  # server 1's round moved
    ]
    for after in wrong:
        with pytest.raises(AssertionError):
            _check(detail, after)
    # two alarms raised
    two = _after(counter, alarm)
    two[1]["alarms"].append(alarm)
    with pytest.raises(AssertionError):
        _check(detail, two)


@pytest.mark.parametrize("detail", [
    _KEYS_DETAIL.replace("server 1 did not answer", "server 1 did not take"),  # server 0's wording of another refusal
    "relay_keys of round 0: the forwarded key part differs from the one the device committed to (server 0 altered "
    "it); not evaluated",  # server 1's own refusal (a peer call): server 0 is not involved
    "user 4 already retrieved in round 0",
])
def test_other_refusals_may_change_nothing(detail):
    _check(detail, copy.deepcopy(_BEFORE))
    with pytest.raises(AssertionError):
        _check(detail, _after("retrieved", _KEYS_ALARM))


def test_a_relay_refusal_with_another_status_may_change_nothing():
    with pytest.raises(AssertionError):
        _check(_KEYS_DETAIL, _after("retrieved", _KEYS_ALARM), status=400)
