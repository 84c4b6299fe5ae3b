"""An adversarial review of the one-server deployments over HTTP (secemb.server.exchange_app,
what ``secemb serve`` hosts for SecEA and SFSL): deviating devices and a restarted server
against the app, driven with signed requests through the app in process (Starlette's test
client: no socket is opened).

Every refusal is a 4xx, never a 5xx, and changes nothing: the genuine message is accepted
after each refused one.  Findings kept as regression tests (named ``test_finding_*``):

* one device's corrupt unmask share wedged the deployment: the secure aggregation finds it only
  when the stage closes, the node left the round open for good, the honest device whose message
  closed the stage got a 400 for a message the server had kept, and every later round was
  refused 409 ("still open") until a restart -- now the round aborts (fixed in the nodes,
  protocols/sfsl/staged.py and protocols/secea/staged.py);
* after a restart the operator's round ids start again at 1, and a SecEA silo that lived
  through it padded its shares of a round id it had used before under the same X25519 keys: the
  same one-time pads twice -- now the silo refuses (protocols/secea/parties.py);
* a SecEA HELLO with another round id than 0 was kept (protocols/secea/parties.py);
* a round document that is not one (a list, a list round id, users or stages an int) crashed
  ``secemb client`` with AttributeError / TypeError -- now InvalidMessage
  (transport/http.py).

The server's view is searched too: no silo's row in any message, in the round's state or in
the log.
"""

from __future__ import annotations

import json
import os
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from secemb.errors import ProtocolError
from secemb.framing import HEADER_BYTES
from secemb.protocols.secea import field
from secemb.protocols.secea.coding import SecEAParams
from secemb.protocols.secea.parties import SecEAClient
from secemb.protocols.secea.staged import SECEA_ROUND_PLAN, SECEA_SETUP_PLAN, SecEANode, SecEAParty, SecEASetupParty
from secemb.protocols.secea.union import union_bloom
from secemb.protocols.stages import RoundPlan
from secemb.randomness import CtrDrbg
from secemb.secagg.identity import Roster
from secemb.server.auth import Verifier
from secemb.server.exchange_app import create_exchange_app
from secemb.server.exchange_state import ExchangeState
from secemb.transport.signing import sign_headers, user_key

torch.set_num_threads(1)

KEY_BITS = 1024  # the smallest Paillier modulus accepted
SETS = [[1, 4, 9], [4, 7], [1, 7, 9, 12]]
LIMIT = 1 << 18


class Http:
    """Signed requests to an exchange app: ``who`` is a device id or ``"admin"``.  The test client's context is
    entered once (the app's lifespan and one event loop for all its requests, as a served app has; outside it
    Starlette starts a thread and an event loop for every request: ~2 ms of CPU each, ~10,000 requests in the files
    that use this class, session 38) and left when the object is collected (the loop's thread is a daemon)."""

    def __init__(self, node: Any, *, admin_secret: bytes, user_secret: bytes, num_users: int,
                 stage_deadline_s: float | None = None, model: Callable[[], bytes] = lambda: b"",
                 state: ExchangeState | None = None) -> None:
        verifier = Verifier(0, os.urandom(32), admin_secret, user_secret, num_users, rate_per_s=10_000.0)
        app = create_exchange_app(node, verifier, max_body_bytes=LIMIT, model=model, read_timeout_s=5.0,
                                  max_body_reads=4, stage_deadline_s=stage_deadline_s, state=state)
        self.client = TestClient(app, raise_server_exceptions=False).__enter__()
        weakref.finalize(self, self.client.__exit__, None, None, None).atexit = False
        self.admin_secret, self.user_secret = admin_secret, user_secret

    def key(self, who: int | str) -> tuple[str, bytes]:
        return ("admin", self.admin_secret) if who == "admin" else (f"user:{who}", user_key(self.user_secret, int(who)))

    def call(self, who: int | str, method: str, path: str, body: bytes = b"",
             key: tuple[str, bytes] | None = None) -> Any:
        key_id, secret = self.key(who) if key is None else key
        headers = sign_headers(key_id, secret, method, path, "", body)
        return self.client.request(method, path, content=body, headers=headers)

    def send(self, who: int, round_id: int, stage: str, body: bytes) -> int:
        return int(self.call(who, "POST", f"/v1/exchange/rounds/{round_id}/{stage}", body).status_code)

    def fetch(self, who: int, round_id: int, stage: str) -> bytes | None:
        resp = self.call(who, "GET", f"/v1/exchange/rounds/{round_id}/{stage}")
        assert resp.status_code in (200, 204), resp.text
        return None if resp.status_code == 204 else resp.content

    def open(self, round_id: int, users: list[int]) -> dict[str, Any]:
        resp = self.call("admin", "POST", "/v1/admin/exchange/rounds",
                         json.dumps({"round_id": round_id, "users": users}).encode())
        assert resp.status_code == 200, resp.text
        out: dict[str, Any] = resp.json()
        return out

    def close(self, round_id: int, stage: str) -> int:
        return int(self.call("admin", "POST", f"/v1/admin/exchange/rounds/{round_id}/{stage}/close").status_code)

    def outcome(self, round_id: int) -> dict[str, Any]:
        resp = self.call("admin", "GET", f"/v1/admin/exchange/rounds/{round_id}")
        assert resp.status_code == 200, resp.text
        out: dict[str, Any] = resp.json()
        return out


def secea_world(seed: int) -> tuple[SecEAParams, Any, list[SecEAClient]]:
    params = SecEAParams(3, 1, dim=2)
    rng = CtrDrbg(seed)
    bloom = union_bloom(16, sum(len(s) for s in SETS))
    roster = Roster.generate()  # the silos sign their keys (docs/secea.md, "The signed directory")
    clients = [SecEAClient(i, params, np.array(s), key_bits=KEY_BITS, identity=roster.enroll(i), _rng=rng)
               for i, s in enumerate(SETS)]
    return params, bloom, clients


def secea_node(params: SecEAParams, bloom: Any, seed: int) -> SecEANode:
    return SecEANode(params, bloom, _rng=CtrDrbg(seed))


def http_of(node: Any, secrets: tuple[bytes, bytes] | None = None, num_users: int = 3, **kw: Any) -> Http:
    admin_secret, user_secret = secrets or (os.urandom(32), os.urandom(32))
    return Http(node, admin_secret=admin_secret, user_secret=user_secret, num_users=num_users, **kw)


def play_stage(http: Http, plan: RoundPlan, round_id: int, stage: str, parties: dict[int, Any],
               attack: Callable[[int, bytes], None] | None = None) -> None:
    """Every party sends its message of ``stage`` (``attack(user, genuine)`` runs first for
    party 0), the operator closes the stage, the parties take their answers."""
    for u, party in parties.items():
        body = party.message(stage)
        if attack is not None and u == 0:
            attack(u, body)
        assert http.send(u, round_id, stage, body) == 204
    assert http.close(round_id, stage) == 200
    if plan.replies(stage):
        for u, party in parties.items():
            out = http.fetch(u, round_id, stage)
            assert out is not None
            party.accept(stage, out)


def _refused(status: int) -> bool:
    return 400 <= status < 500


def fuzz(http: Http, round_id: int, stage: str) -> Callable[[int, bytes], None]:
    """An attack: every framing header byte changed, truncations, a byte appended, a body over
    the limit, another round's or another stage's path -- each a 4xx, none kept (the caller
    then sends the genuine message, which must be accepted: not a duplicate)."""
    def attack(u: int, body: bytes) -> None:
        statuses = {}
        for off in range(HEADER_BYTES):  # docs/wire-format.md: magic, version, protocol, kind, flags, party,
            bad = bytearray(body)         # peer, round_id, body_len
            bad[off] ^= 0x01
            statuses[f"header byte {off}"] = http.send(u, round_id, stage, bytes(bad))
        for cut in (0, 1, HEADER_BYTES - 1, HEADER_BYTES, len(body) - 1):
            statuses[f"cut at {cut}"] = http.send(u, round_id, stage, body[:cut])
        statuses["a byte appended"] = http.send(u, round_id, stage, body + b"\0")
        statuses["another round"] = http.send(u, round_id + 1, stage, body)
        statuses["a stage name that is none"] = http.send(u, round_id, "nope", body)
        statuses["over the limit"] = http.send(u, round_id, stage, b"\0" * (LIMIT + 1))
        bad_ones = {k: s for k, s in statuses.items() if not _refused(s)}
        assert not bad_ones, f"{stage}: accepted or 5xx: {bad_ones}"
        assert statuses["over the limit"] == 413
    return attack


def secea_setup(http: Http, clients: list[SecEAClient], bloom: Any, round_id: int,
                attack: Callable[[str], Callable[[int, bytes], None] | None] = lambda s: None) -> None:
    doc = http.open(round_id, [0, 1, 2])
    assert doc["setup"] and doc["stages"] == list(SECEA_SETUP_PLAN.stages)
    parties = {i: SecEASetupParty(c, bloom, round_id, _rng=CtrDrbg(100 + i)) for i, c in enumerate(clients)}
    for stage in SECEA_SETUP_PLAN.stages:
        play_stage(http, SECEA_SETUP_PLAN, round_id, stage, parties, attack(stage))
    assert http.outcome(round_id)["state"] == "committed"


def secea_round(http: Http, clients: list[SecEAClient], round_id: int, rows: list[np.ndarray],
                attack: Callable[[str], Callable[[int, bytes], None] | None] = lambda s: None) -> dict[int, SecEAParty]:
    http.open(round_id, [0, 1, 2])
    parties = {i: SecEAParty(c, round_id, rows[i]) for i, c in enumerate(clients)}
    for stage in SECEA_ROUND_PLAN.stages:
        play_stage(http, SECEA_ROUND_PLAN, round_id, stage, parties, attack(stage))
    assert http.outcome(round_id)["state"] == "committed"
    return parties


def test_every_stage_refuses_malformed_bodies_with_a_4xx_and_keeps_nothing():
    """At each of SecEA's seven stage endpoints, silo 0's message with any one framing header
    byte changed, truncated, extended, over the limit, or for another round or stage is a 4xx;
    the genuine message is then accepted and the round commits with the exact averages."""
    params, bloom, clients = secea_world(1)
    http = http_of(secea_node(params, bloom, 1))
    secea_setup(http, clients, bloom, 1, attack=lambda stage: fuzz(http, 1, stage))
    rows = [np.full((len(s), 2), float(v + 1)) for v, s in enumerate(SETS)]
    parties = secea_round(http, clients, 2, rows, attack=lambda stage: fuzz(http, 2, stage))
    # entity 4 is held by silos 0 and 1 (rows 1.0 and 2.0): the average is 1.5
    assert parties[0].average is not None and parties[0].average[1].tolist() == [1.5, 1.5]


def test_stage_order_duplicates_and_strangers_are_refused():
    params, bloom, clients = secea_world(2)
    http = http_of(secea_node(params, bloom, 2))
    doc = http.open(1, [0, 1, 2])
    parties = {i: SecEASetupParty(c, bloom, 1, _rng=CtrDrbg(i)) for i, c in enumerate(clients)}
    hello = {i: p.message("secea-keys") for i, p in parties.items()}
    assert doc["stages"][0] == "secea-keys"
    assert http.send(0, 1, "psu-advertise", hello[0]) == 409  # not the open stage
    assert http.send(0, 1, "secea-share", hello[0]) == 422  # not a stage of the set-up
    assert http.send(1, 1, "secea-keys", hello[0]) == 400  # silo 1 posting silo 0's HELLO (sender field)
    assert http.call(0, "GET", "/v1/exchange/rounds/1/secea-keys").status_code == 409  # no answers yet
    for i in range(3):
        assert http.send(i, 1, "secea-keys", hello[i]) == 204
    assert http.send(0, 1, "secea-keys", hello[0]) == 400  # twice
    assert http.close(1, "secea-keys") == 200
    assert http.close(1, "secea-keys") == 409  # closed already
    assert http.send(2, 1, "secea-keys", hello[2]) == 409  # the stage is over


def test_an_open_round_document_with_a_bad_round_id_or_user_is_refused_and_opens_nothing():
    """The operator's round document is checked before the node sees it: a round id or a user id
    that is not an int (a bool, a float, a string) or users that are not a list are a 422."""
    params, bloom, _ = secea_world(5)
    http = http_of(secea_node(params, bloom, 5))
    for doc in ({"round_id": True, "users": [0, 1, 2]}, {"round_id": 1.0, "users": [0, 1, 2]},
                {"round_id": "1", "users": [0, 1, 2]}, {"round_id": 1, "users": [0, True, 2]},
                {"round_id": 1, "users": [0, 1.0, 2]}, {"round_id": 1, "users": "012"}):
        resp = http.call("admin", "POST", "/v1/admin/exchange/rounds", json.dumps(doc).encode())
        assert resp.status_code == 422, (doc, resp.text)
    assert http.call("admin", "GET", "/v1/exchange/round").status_code == 409  # nothing was opened
    assert http.open(1, [0, 1, 2])["round_id"] == 1


def test_signatures_and_credential_classes_are_enforced():
    """A device signing as another device, an operator endpoint called with a device's key, a
    device endpoint called with the operator's, a replayed signed request, an unknown device id:
    401 or 403, and nothing opened or kept."""
    params, bloom, clients = secea_world(3)
    http = http_of(secea_node(params, bloom, 3))
    opened = json.dumps({"round_id": 1, "users": [0, 1, 2]}).encode()
    for path, method, body in [("/v1/admin/exchange/rounds", "POST", opened),
                               ("/v1/admin/exchange/rounds/1/secea-keys/close", "POST", b""),
                               ("/v1/admin/exchange/rounds/1", "GET", b""), ("/v1/admin/model", "GET", b"")]:
        assert http.call(0, method, path, body).status_code == 403, path
    assert http.call("admin", "GET", "/v1/exchange/round").status_code == 409  # nothing was opened
    http.open(1, [0, 1, 2])
    hello = clients[0].hello()
    path = "/v1/exchange/rounds/1/secea-keys"
    assert http.call("admin", "POST", path, hello).status_code == 403
    assert http.call(1, "POST", path, hello, key=("user:1", user_key(http.user_secret, 0))).status_code == 401
    assert http.call(7, "POST", path, hello).status_code == 401  # no such device
    headers = sign_headers("user:0", user_key(http.user_secret, 0), "POST", path, "", hello)
    assert http.client.post(path, content=hello, headers=headers).status_code == 204
    assert http.client.post(path, content=hello, headers=headers).status_code == 401  # the same request again


def test_finding_a_restarted_server_and_a_silo_that_lived_through_it_never_reuse_a_pad():
    """The server keeps no state: after a restart (a fresh node, the same deployment secrets)
    the old round is 409 everywhere (no 5xx); the operator's round ids start at 1 again
    (``secemb admin open-round``), the set-up runs again with the silos' same keys, and the silo
    refuses to pad shares for a round id it used before (it did: the same pads twice); a later
    id commits with the exact averages."""
    params, bloom, clients = secea_world(4)
    secrets = (os.urandom(32), os.urandom(32))
    http = http_of(secea_node(params, bloom, 4), secrets)
    secea_setup(http, clients, bloom, 1)
    rows = [np.full((len(s), 2), float(v)) for v, s in enumerate(SETS)]
    http.open(2, [0, 1, 2])
    before = {i: SecEAParty(c, 2, rows[i]) for i, c in enumerate(clients)}
    for i, p in before.items():
        assert http.send(i, 2, "secea-share", p.message("secea-share")) == 204
    # the server restarts mid-round 2
    http = http_of(secea_node(params, bloom, 5), secrets)
    for method, path in [("GET", "/v1/exchange/round"), ("POST", "/v1/exchange/rounds/2/secea-answer"),
                         ("GET", "/v1/exchange/rounds/2/secea-share")]:
        assert http.call(0, method, path, b"x" if method == "POST" else b"").status_code == 409, path
    assert http.call("admin", "GET", "/v1/admin/exchange/rounds/2").status_code == 409
    secea_setup(http, clients, bloom, 1)
    http.open(2, [0, 1, 2])
    with pytest.raises(ProtocolError, match="not after round 2"):
        SecEAParty(clients[0], 2, rows[0]).message("secea-share")
    assert http.call("admin", "POST", "/v1/admin/exchange/rounds/2/secea-share/close").status_code == 409  # aborted
    parties = secea_round(http, clients, 3, rows)
    assert parties[2].average is not None and parties[2].average[0].tolist() == [1.0, 1.0]  # entity 1: silos 0, 2


def test_finding_a_corrupt_psu_share_aborts_the_set_up_instead_of_wedging_the_server():
    """Silos 0 and 1 flip a bit of their PSU unmask messages (well-formed shares of wrong values:
    only the sum's opening shows them; two wrong shares with one spare cannot be attributed -- one
    alone is named and the set-up commits since session 23, tests/secagg/test_secagg_seed_commitment.py).
    The stage's close is a 409 (the round aborted), the round document says so, and a new set-up
    (the next id) commits."""
    params, bloom, clients = secea_world(6)
    http = http_of(secea_node(params, bloom, 6))
    http.open(1, [0, 1, 2])
    parties = {i: SecEASetupParty(c, bloom, 1, _rng=CtrDrbg(i)) for i, c in enumerate(clients)}
    for stage in SECEA_SETUP_PLAN.stages[:-1]:
        play_stage(http, SECEA_SETUP_PLAN, 1, stage, parties)
    for i, p in parties.items():
        body = bytearray(p.message("psu-unmask"))
        if i in (0, 1):
            body[-2] ^= 0x01  # inside the last share of the self-mask seeds
        assert http.send(i, 1, "psu-unmask", bytes(body)) == 204
    assert http.close(1, "psu-unmask") == 409
    doc = http.call(0, "GET", "/v1/exchange/round").json()
    assert doc["state"] == "aborted" and doc["stage"] is None
    secea_setup(http, clients, bloom, 2)


def test_finding_a_corrupt_sum_share_with_a_stage_deadline_aborts_and_the_next_round_runs():
    """As ``secemb serve`` runs it (the server closes a stage once every device still in has
    sent): SFSL, devices 0 and 1 corrupt their unmask messages of the secure sum (each share
    checked against its dealer's commitment since session 24: both are named and left out, one
    genuine share is below the threshold of 2; before, two wrong shares with one spare were caught
    and nobody named).  The honest device whose message closes the stage gets its 204 (it got a
    400 for a message the server had kept), the round aborts with the model unchanged, and the
    next round opens and commits (it was refused 409, "round 1 is still open", until a restart)."""
    from secemb.data.ctr import TaobaoShaped, split_clicks
    from secemb.protocols.exchange import ExchangeRun
    from secemb.protocols.sfsl.protocol import SFSLProtocol
    from secemb.protocols.sfsl.staged import SFSL_PLAN

    clicks = split_clicks(TaobaoShaped("taobao-mini", seed=3).clients(np.arange(8)))
    proto = SFSLProtocol(ExchangeRun("taobao-mini", users_per_round=3), sfsl_preset="CPP1", batch=8, data=clicks)
    hosted = proto.make_server()
    http = http_of(hosted.node, stage_deadline_s=600.0, model=hosted.model)
    devices = {u: proto.make_device(u) for u in range(3)}
    model0 = hosted.model()

    def one_round(round_id: int, corrupt: bool) -> str:
        doc = http.open(round_id, [0, 1, 2])
        parties = {u: devices[u].party(doc) for u in range(3)}
        for stage in SFSL_PLAN.stages:
            for u in range(3):
                body = parties[u].message(stage)
                if corrupt and stage == "sum-unmask" and u in (0, 1):
                    body = body[:-5] + bytes([body[-5] ^ 1]) + body[-4:]
                assert http.send(u, round_id, stage, body) == 204, (stage, u)
            if SFSL_PLAN.replies(stage):
                for u in range(3):
                    answer = http.fetch(u, round_id, stage)
                    assert answer is not None
                    parties[u].accept(stage, answer)
        doc = http.call(0, "GET", "/v1/exchange/round").json()
        assert doc["round_id"] == round_id and doc["stage"] is None
        return str(doc["state"])

    assert one_round(1, corrupt=True) == "aborted"
    # caught by the share commitments (docs/secagg.md): both liars named, too few genuine shares left
    outcome = http.outcome(1)
    assert "besides those of clients [0, 1] (found lying), threshold 2" in outcome["reason"]
    assert outcome["bad_shares"] == [0, 1]
    assert hosted.model() == model0
    assert one_round(2, corrupt=False) == "committed"
    assert hosted.model() != model0


class _Api:
    """A device's API client whose server answers ``doc`` to every GET (a deviating server)."""

    def __init__(self, doc: Any) -> None:
        self.doc = doc

    def get_json(self, path: str, **limits: Any) -> Any:  # ApiClient's (most_bytes: the document's limit)
        return self.doc


@pytest.mark.parametrize("doc", [[1, 2], "open", None, {"round_id": 1},
                                 {"round_id": [1], "users": [0], "state": "open"},
                                 {"round_id": 1, "users": 3, "state": "open"},
                                 {"round_id": 1, "users": [0, "1"], "state": "open"},
                                 {"round_id": 1, "users": [0], "stages": 5, "state": "open"},
                                 {"round_id": True, "users": [0], "state": "open"},
                                 {"round_id": 1, "users": [0], "state": "open", "stage": 3}])
def test_finding_a_malformed_round_document_is_an_invalid_message_not_a_crash(doc):
    """The device reads the round document the server writes; one that is not a document (a
    list, a round id that is a list, users an int, stages an int) crashed ``secemb client``
    with a builtin error (AttributeError, TypeError: a traceback); now it is InvalidMessage,
    which the client reports."""
    from secemb.transport.http import HttpStageLink
    from secemb.errors import InvalidMessage

    with pytest.raises(InvalidMessage, match="round document is malformed"):
        HttpStageLink(0, _Api(doc)).round_info()  # type: ignore[arg-type]


@pytest.mark.parametrize("doc", [[1], None, {}, {"state": 3}, {"state": None, "reason": "x"}])
def test_a_malformed_round_outcome_is_an_invalid_message_naming_the_server(doc):
    """The operator's stage link reads a round's outcome from the server: one without a str
    ``state`` is InvalidMessage naming the server and the request, as the two-server admin link's
    answers are (tests/cli/test_admin_server_answers.py); a well-formed one is returned as is."""
    from secemb.errors import InvalidMessage
    from secemb.transport.http import HttpStageAdmin

    class Api(_Api):
        base_url = "https://server.invalid"

    with pytest.raises(InvalidMessage, match=r"^the server \(https://server\.invalid/v1/admin/exchange/rounds/4\): "
                                             r"(a JSON object expected|field 'state': str expected)"):
        HttpStageAdmin(Api(doc)).round_status(4)  # type: ignore[arg-type]
    good = {"state": "committed", "survivors": [0, 1]}
    assert HttpStageAdmin(Api(good)).round_status(4) == good  # type: ignore[arg-type]


@pytest.mark.parametrize("doc", [[1], None, {"round_id": "1", "users": [0]}, {"round_id": 1, "users": 0},
                                 {"round_id": 1, "users": [0], "stages": [3]}])
def test_the_operators_stage_link_checks_the_round_documents_it_reads(doc):
    """The operator's stage link reads round documents as the device's does: opening a round and
    reading the current one (``secemb admin open-round`` reads its round id) raise InvalidMessage
    for an answer that is not one, where they returned it unchecked (a later ``int(doc[...])`` or
    ``.get`` crashed with a builtin error); well-formed ones are returned as they are."""
    from secemb.errors import InvalidMessage
    from secemb.transport.http import HttpStageAdmin

    class Api(_Api):
        def post_json(self, path: str, body: Any = None) -> Any:
            return self.doc

    with pytest.raises(InvalidMessage, match="round document is malformed"):
        HttpStageAdmin(Api(doc)).open_round(1, [0])  # type: ignore[arg-type]
    current = doc | {"state": "open", "stage": None} if isinstance(doc, dict) else doc
    with pytest.raises(InvalidMessage, match="round document is malformed"):
        HttpStageAdmin(Api(current)).round_info()  # type: ignore[arg-type]
    opened = {"round_id": 1, "users": [0, 1], "stages": ["a", "b"]}
    assert HttpStageAdmin(Api(opened)).open_round(1, [0, 1]) == opened  # type: ignore[arg-type]
    with pytest.raises(InvalidMessage, match="round document is malformed"):  # no state: not the current round's
        HttpStageAdmin(Api(opened)).round_info()  # type: ignore[arg-type]
    now = opened | {"state": "open", "stage": "a"}
    assert HttpStageAdmin(Api(now)).round_info() == now  # type: ignore[arg-type]


def test_a_round_whose_stages_are_not_the_protocols_is_refused_before_any_message():
    from secemb.client.stages import take_part
    from secemb.transport.http import HttpStageLink
    from secemb.errors import InvalidParameters
    from secemb.protocols.secea.staged import SECEA_PLAN

    params, bloom, clients = secea_world(7)
    doc = {"round_id": 1, "users": [0, 1, 2], "stages": ["secea-keys", "bogus"], "stage": "secea-keys",
           "state": "open"}
    link = HttpStageLink(0, _Api(doc))  # type: ignore[arg-type]
    assert link.round_info() == doc

    class Device:
        def party(self, round_doc: Any) -> Any:
            return SecEASetupParty(clients[0], bloom, 1)

    with pytest.raises(InvalidParameters, match="subsequence"):
        take_part(link, Device(), SECEA_PLAN, doc, wait_s=1.0)


def test_the_server_receives_keeps_and_logs_no_silos_rows_in_the_clear(caplog):
    """What the server learns: over a set-up and a round, no silo's embedding value appears in
    any message the node received or sent, in what it keeps of the round, or in any log record
    (at DEBUG) -- neither as float64 nor as the row of 32-bit fixed-point field elements the
    silo encodes it to (that row is checked to be in the silo's own plaintext, so the search
    would find a row sent in the clear)."""
    import logging

    from secemb.protocols.secea import coding

    caplog.set_level(logging.DEBUG)
    params, bloom, clients = secea_world(8)
    node = secea_node(params, bloom, 8)
    seen: list[bytes] = []
    receive = node.receive

    def spy(round_id: int, stage: str, user: int, body: bytes) -> None:
        seen.append(body)
        receive(round_id, stage, user, body)

    node.receive = spy  # type: ignore[method-assign]
    http = http_of(node)
    secea_setup(http, clients, bloom, 1)
    gen = np.random.default_rng(8)  # test data only
    rows = [gen.uniform(-1.0, 1.0, size=(len(s), 2)) for s in SETS]
    secea_round(http, clients, 2, rows)
    assert node._round is not None
    kept = [b for per in (node._round.received, node._round.replies) for msgs in per.values() for b in msgs.values()]
    logs = "\n".join(r.getMessage() for r in caplog.records).encode()
    hay = seen + kept + [logs]
    assert len(seen) == 3 * 8 and logs  # every message (set-up 6, round 2); the app logged something
    needles = []
    for v, silo_rows in enumerate(rows):
        fixed = np.rint(silo_rows * 2.0**params.frac_bits).astype(np.int64) % field.P
        own = np.searchsorted(np.array([1, 4, 7, 9, 12]), SETS[v])
        plain = coding.expand(params, 5, own, silo_rows).astype("<u4").tobytes()
        for row, enc in zip(silo_rows, fixed, strict=True):
            words = np.append(enc, 1).astype("<u4").tobytes()  # (round(h 2^f), 1): a row of Eq. 3 as sent
            assert words in plain  # the search finds a row sent in the clear
            needles += [words] + [np.float64(x).tobytes() for x in row]  # 12 and 8 bytes: no chance match
    found = [n for n in needles for h in hay if n in h]
    assert not found, f"{len(found)} of {len(needles)} values found in the server's view"


def test_limit_any_device_reads_who_takes_part_in_the_round():
    """The one-server round document lists the round's devices, and every device may read it,
    one not in the round too (the two-server ``GET /v1/round`` tells a device only whether it
    takes part).  SFSL, a round of devices 0-2 read by device 3."""
    from secemb.data.ctr import TaobaoShaped, split_clicks
    from secemb.protocols.exchange import ExchangeRun
    from secemb.protocols.sfsl.protocol import SFSLProtocol

    clicks = split_clicks(TaobaoShaped("taobao-mini", seed=3).clients(np.arange(8)))
    proto = SFSLProtocol(ExchangeRun("taobao-mini", users_per_round=3), data=clicks)
    http = http_of(proto.make_server().node, num_users=4)
    http.open(1, [0, 1, 2])
    doc = http.call(3, "GET", "/v1/exchange/round").json()
    assert doc["users"] == [0, 1, 2] and doc["stage"] == "psu-advertise"


def test_odd_round_ids_and_stage_names_in_paths_are_4xx():
    """Path parameters a device or the operator controls: negative, signed, spaced, hex,
    exponent, huge or non-ASCII round ids and stage names that are none -- a 4xx each."""
    params, bloom, clients = secea_world(10)
    http = http_of(secea_node(params, bloom, 10))
    http.open(1, [0, 1, 2])
    hello = clients[0].hello()
    statuses = {}
    for rid in ("-1", "+1", " 1", "0x1", "1e0", "01", str(2**62), str(2**64), "１", "1.0", ""):
        statuses[f"send {rid!r}"] = http.send(0, rid, "secea-keys", hello)  # type: ignore[arg-type]
        statuses[f"close {rid!r}"] = http.close(rid, "secea-keys")  # type: ignore[arg-type]
        statuses[f"outcome {rid!r}"] = http.call("admin", "GET", f"/v1/admin/exchange/rounds/{rid}").status_code
    for stage in ("SECEA-KEYS", "secea-keys ", "psu-", "-", "x" * 2000, "secea-keys%00", "..%2F..%2Fadmin"):
        statuses[f"send {stage[:20]!r}"] = http.send(0, 1, stage, hello)
        statuses[f"fetch {stage[:20]!r}"] = http.call(0, "GET", f"/v1/exchange/rounds/1/{stage}").status_code
    assert all(400 <= s < 500 for s in statuses.values()), {k: s for k, s in statuses.items() if not 400 <= s < 500}
    assert http.send(0, 1, "secea-keys", hello) == 204  # nothing was kept


def test_a_device_that_stops_mid_round_under_a_stage_deadline_is_left_behind():
    """As ``secemb serve`` runs it: SFSL with a stage deadline, device 2 stops after the PSU's
    shares.  The stage waits for it until the deadline, then closes at the next read of the
    round with the two devices that sent (the threshold); the round commits over them, device
    2's late message is refused (409), and the next round runs with all three."""
    import time

    from secemb.data.ctr import TaobaoShaped, split_clicks
    from secemb.protocols.exchange import ExchangeRun
    from secemb.protocols.sfsl.protocol import SFSLProtocol
    from secemb.protocols.sfsl.staged import SFSL_PLAN

    clicks = split_clicks(TaobaoShaped("taobao-mini", seed=3).clients(np.arange(8)))
    proto = SFSLProtocol(ExchangeRun("taobao-mini", users_per_round=3), sfsl_preset="CPP1", batch=8, data=clicks)
    hosted = proto.make_server()
    deadline_s = 1.0
    http = http_of(hosted.node, stage_deadline_s=deadline_s, model=hosted.model)
    devices = {u: proto.make_device(u) for u in range(3)}
    doc = http.open(1, [0, 1, 2])
    parties = {u: devices[u].party(doc) for u in range(3)}
    live = [0, 1, 2]
    for stage in SFSL_PLAN.stages:
        if stage == "psu-masked":
            live = [0, 1]
            late = parties[2].message(stage)
        for u in live:
            assert http.send(u, 1, stage, parties[u].message(stage)) == 204
        now = http.call(0, "GET", "/v1/exchange/round").json()
        if stage == "psu-masked":
            assert now["stage"] == "psu-masked"  # waiting for device 2
            time.sleep(deadline_s + 0.2)
            now = http.call(0, "GET", "/v1/exchange/round").json()
            assert http.send(2, 1, stage, late) == 409
        assert now["stage"] != stage and now["state"] in ("open", "committed"), now
        if SFSL_PLAN.replies(stage):
            for u in live:
                answer = http.fetch(u, 1, stage)
                assert answer is not None
                parties[u].accept(stage, answer)
    assert http.outcome(1)["state"] == "committed" and http.outcome(1)["survivors"] == [0, 1]
    doc = http.open(2, [0, 1, 2])
    parties = {u: devices[u].party(doc) for u in range(3)}
    for stage in SFSL_PLAN.stages:
        for u in range(3):
            assert http.send(u, 2, stage, parties[u].message(stage)) == 204
        if SFSL_PLAN.replies(stage):
            for u in range(3):
                answer = http.fetch(u, 2, stage)
                assert answer is not None
                parties[u].accept(stage, answer)
    assert http.outcome(2)["state"] == "committed" and http.outcome(2)["survivors"] == [0, 1, 2]
