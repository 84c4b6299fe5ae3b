"""Session 21 (helper C, issue 34 follow-up of finding C2's class): every answer a device or the
operator reads is bounded.

* :class:`ApiClient` reads at most ``ANSWER_FLOOR_BYTES`` unless its caller spells out
  ``max_answer_bytes=None`` (the simulations of their own 127.0.0.1 servers only); before, its
  default was unbounded.
* One-server devices (``secemb client`` of SFSL and SecEA) read whole answers before; now each
  stage's answer is read up to ``answer_limit_for`` of the longest honest answer of the stage,
  which the party computes from the round's public parameters (``answer_bytes``): checked here
  against the lengths of real honest answers (in process, the deployed devices' parties) and
  against figures worked out by hand from the message layouts.
* A longer answer -- endless, or a decompression bomb -- fails the device's round before its
  party sees it: nothing more is sent, its state is as it was, and ``secemb client`` exits 1 with
  one line.

The deviating servers are the stubs of ``test_session20_answer_limits_all`` on 127.0.0.1; the
bytes a reader took in are counted where it decodes them.
"""

# ruff: noqa: F811  (the fixtures bomb, decoded and stubs are imported from the session 20 test, then requested)
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from secemb.cli import app
from secemb.client.stages import take_part
from secemb.data.ctr import TaobaoShaped, split_clicks
from secemb.errors import InvalidMessage
from secemb.protocols.exchange import ExchangeRun
from secemb.protocols.secea.coding import SecEAParams
from secemb.protocols.secea.parties import SecEAClient
from secemb.protocols.secea.staged import SECEA_PLAN, SecEANode, SecEAParty, SecEASetupParty
from secemb.protocols.secea.union import union_bloom
from secemb.protocols.sfsl.protocol import SFSLProtocol
from secemb.protocols.sfsl.staged import SFSL_PLAN
from secemb.randomness import CtrDrbg
from secemb.secagg.identity import Roster
from secemb.server.peer import HttpPeer
from secemb.sim.local import LocalStageServer
from secemb.sim.player import play
from secemb.transport.http import HttpStageLink
from secemb.transport.limits import ROUND_DOCUMENT_BYTES
from secemb.transport.network import ANSWER_FLOOR_BYTES, ApiClient, answer_limit_for

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cli"))
from cli_helpers import init_one_server  # type: ignore[import-not-found]  # noqa: E402
from test_session20_answer_limits_all import (  # noqa: E402,F401
    GZIP, PIECE, SOCKET_SLACK, Stub, bomb, decoded, stubs)  # the deviating stubs and their fixtures

MiB = 1 << 20
#: a secure-aggregation share as relayed: sender and recipient ids, two 33-byte field elements, a 16-byte tag
SHARE_CT = 4 + 4 + 33 + 33 + 16
SHARE_COMMITMENTS = 2 * 16  # a signed round's commitments to a relayed record's two shares (session 24)
KEY_BITS = 1024  # SecEA's smallest Paillier modulus


# -- the default -------------------------------------------------------------------------------
def test_every_client_reads_at_most_the_floor_unless_told_otherwise(stubs, decoded) -> None:
    stub = Stub(lambda m, p: ("endless",) if p == "/endless" else ("body", b"ok", {}))
    stubs.append(stub)
    assert ANSWER_FLOOR_BYTES == 64 * MiB
    with ApiClient(stub.url) as api:
        assert api.max_answer_bytes == 64 * MiB
        with pytest.raises(InvalidMessage, match=f"longer than {64 * MiB} bytes"):
            api.get_bytes("/endless")
    assert decoded == [pytest.approx(64 * MiB, abs=PIECE)]
    assert HttpPeer(stub.url, b"k" * 32).api.max_answer_bytes == 64 * MiB  # server 0's link, when not told its own
    with ApiClient(stub.url, max_answer_bytes=None) as api:  # the opt-out: httpx reads and decodes whole
        assert api.get_bytes("/small") == b"ok"
    stub.settled()
    assert stub.seen[-1][:2] == ("GET", "/small") and stub.seen[-1][2] != "identity"  # an unbounded read asks for any
    assert stub.seen[0] == ("GET", "/endless", "identity")


# -- the honest answers' sizes -----------------------------------------------------------------
@pytest.fixture(scope="module")
def sfsl() -> SFSLProtocol:
    clicks = split_clicks(TaobaoShaped("taobao-mini", seed=3).clients(np.arange(8)))
    return SFSLProtocol(ExchangeRun("taobao-mini", users_per_round=3), sfsl_preset="CPP1", batch=8, data=clicks)


#: taobao-mini's public sizes: 2000 goods, 60 categories, d = 18, DIN's 49,242 dense values, so
#: the secure sum's row space has 2000 + 60 + ceil(49242 / 18) = 4796 rows of 19 words
G, C, D, MLP, ROWS = 2000, 60, 18, 49242, 4796
#: the longest honest answer of each stage of an SFSL round of 3 devices, by hand (docs/secagg.md, sfsl/wire.py)
#: (session 22: both secure aggregations are signed rounds -- each key-list entry carries a 120-byte
#: certificate and a 64-byte signature, since session 23 after a 32-byte seed commitment; the secure
#: sum's entries then the device's signed row set, a bitmap over the round's candidate rows,
#: ``_sum_row_set`` below; its shares carry no row data; since session 24 each relayed record ends
#: with the dealer's two 16-byte share commitments, SHARE_COMMITMENTS)
SFSL_LONGEST = {
    "psu-advertise": 32 + 4 + 3 * (4 + 32 + 32 + 32 + 120 + 64),  # signed keys and seed commitment: 888
    "psu-shares": 32 + 4 + 2 * (4 + SHARE_CT + SHARE_COMMITMENTS),  # relayed: 288
    "psu-masked": 32 + 4 + 3 * 4,                          # survivors: 48
    "psu-consistency": 32 + 4 + 3 * (4 + 64),              # signatures of the survivor list: 240
    "psu-unmask": 32 + 4 + 4 * G,                          # the union of every goods
    "download": 32 + 4 * (G * D + C * D + MLP),            # the submodel of every goods and category
    "sum-advertise": 32 + 4 + 3 * (4 + 32 + 32 + 32 + 120 + 64),  # + 3 x _sum_row_set(candidates)
    "sum-shares": 32 + 4 + 2 * (4 + SHARE_CT + SHARE_COMMITMENTS),
    "sum-masked": 32 + 4 + 3 * 4,
    "sum-consistency": 32 + 4 + 3 * (4 + 64),
}


def _sum_row_set(union: np.ndarray, goods_category: np.ndarray) -> int:
    """Bytes of a signed row set in the secure sum's key list: a bit per candidate row, i.e. per
    goods of the PSU's ``union`` and per category of those goods."""
    return -(-(union.size + np.unique(goods_category[union]).size) // 8)


def test_an_sfsl_devices_limits_are_the_longest_honest_answers(sfsl) -> None:
    hosted = sfsl.make_server()
    server = LocalStageServer(hosted.node)
    devices = {u: sfsl.make_device(u) for u in range(3)}
    assert devices[0].space.length == ROWS and devices[0].num_users == 200
    doc = server.admin.open_round(1, [0, 1, 2])
    parties = {u: devices[u].party(doc) for u in range(3)}
    rec = play(SFSL_PLAN, server.admin, {u: server.link(u) for u in range(3)}, parties, 1)
    assert rec.finished == [0, 1, 2] and server.admin.round_status(1)["state"] == "committed"
    union = parties[0].union
    assert union is not None and all(np.array_equal(parties[u].union, union) for u in range(3))
    longest = SFSL_LONGEST | {"sum-advertise": SFSL_LONGEST["sum-advertise"]
                              + 3 * _sum_row_set(union, hosted.node.server.goods_category)}
    assert 0 < longest["sum-advertise"] - SFSL_LONGEST["sum-advertise"] <= 3 * -(-(G + C) // 8)
    for u in range(3):
        assert {s: parties[u].answer_bytes(s) for s in SFSL_LONGEST} == longest
        assert set(rec.down[u]) == set(SFSL_LONGEST)
        for stage, got in rec.down[u].items():
            assert got <= longest[stage], (u, stage, got)
        for stage in ("psu-advertise", "psu-shares", "psu-masked", "psu-consistency", "sum-advertise", "sum-masked",
                      "sum-consistency"):
            assert rec.down[u][stage] == longest[stage]  # every device in: the bound is met exactly
    with pytest.raises(ValueError, match="no answer"):
        parties[0].answer_bytes("sum-unmask")


def test_an_sfsl_device_refuses_a_round_of_users_the_dataset_does_not_have(sfsl) -> None:
    """What bounds an SFSL device's answers is the number of devices of the round, so a round
    document may not name more than the dataset's users (200) or the same one twice."""
    doc = sfsl.make_server().node.open_round(1, [0, 1, 2])
    device = sfsl.make_device(0)
    for users in ([0, 1, 200], [0, 1, 1], [0, -1, 2], [0, 1, True]):
        with pytest.raises(InvalidMessage, match="not an SFSL round document"):
            device.party(doc | {"users": users})


SETS = [[1, 3, 5], [3, 4], [5, 6, 7, 8]]


def _secea_world() -> tuple[SecEAParams, Any, SecEANode, list[SecEAClient]]:
    params = SecEAParams(3, 1, dim=2)
    rng = CtrDrbg(5)
    bloom = union_bloom(16, sum(len(s) for s in SETS))
    roster = Roster.generate()  # the silos sign their keys (docs/secea.md, "The signed directory")
    clients = [SecEAClient(i, params, np.array(s), key_bits=KEY_BITS, identity=roster.enroll(i), _rng=rng)
               for i, s in enumerate(SETS)]
    return params, bloom, SecEANode(params, bloom, key_bits=KEY_BITS, _rng=CtrDrbg(6)), clients


def test_a_secea_silos_limits_are_the_longest_honest_answers() -> None:
    params, bloom, node, clients = _secea_world()
    server = LocalStageServer(node)
    links = {u: server.link(u) for u in range(3)}
    setup = {u: SecEASetupParty(c, bloom, 1, _rng=CtrDrbg(10 + u)) for u, c in enumerate(clients)}
    doc = server.admin.open_round(1, [0, 1, 2])
    rec = play(SECEA_PLAN.only(doc["stages"]), server.admin, links, setup, 1)
    assert rec.finished == [0, 1, 2]
    n = 3
    longest = {
        "secea-keys": 32 + 2 + n * (2 + 32 + 120 + 64 + 2 + KEY_BITS // 8),  # DIRECTORY, signed: 1078
        "psu-advertise": 32 + 4 + n * (4 + 32 + 32 + 32 + 120 + 64),  # signed: commitment, certificate, signature
        "psu-shares": 32 + 4 + (n - 1) * (4 + SHARE_CT + SHARE_COMMITMENTS),
        "psu-masked": 32 + 4 + 4 * n,
        "psu-consistency": 32 + 4 + n * (4 + 64),  # the survivors' signatures
        "psu-unmask": 32 + 4 + 4 * bloom.domain,
    }
    for u in range(3):
        assert {s: setup[u].answer_bytes(s) for s in longest} == longest
        assert rec.down[u] == {s: longest[s] for s in longest if s != "psu-unmask"} | {"psu-unmask": 32 + 4 + 4 * 7}
    m, w = 7, params.width  # the union {1, 3, 4, 5, 6, 7, 8}
    rows = [np.full((len(s), 2), 0.5) for s in SETS]
    parties = {u: SecEAParty(c, 2, rows[u]) for u, c in enumerate(clients)}
    doc = server.admin.open_round(2, [0, 1, 2])
    rec = play(SECEA_PLAN.only(doc["stages"]), server.admin, links, parties, 2)
    assert rec.finished == [0, 1, 2] and parties[0].average is not None
    for u, c in enumerate(clients):
        ct, chunks = c.paillier_key.ciphertext_bytes, c.paillier_key.chunks(w)
        assert ct == 2 * KEY_BITS // 8
        relay = 32 + 8 + (n - 1) * (6 + 4 * (m * w + m * m))  # every sender asking for all M entities
        result = 32 + 8 + n * (2 + len(SETS[u]) * chunks * ct)
        assert parties[u].answer_bytes("secea-share") == relay
        assert parties[u].answer_bytes("secea-answer") == result
        others = [v for v in range(3) if v != u]
        assert rec.down[u]["secea-share"] == 32 + 8 + sum(6 + 4 * (m * w + len(SETS[v]) * m) for v in others) < relay
        assert rec.down[u]["secea-answer"] == result  # every silo answered: met exactly


# -- a deviating server ------------------------------------------------------------------------
def _stage_server(stubs: list[Stub], doc: dict[str, Any], stages: list[str], attack: tuple[Any, ...]) -> Stub:
    """A one-server node on 127.0.0.1 for one device: ``GET /v1/exchange/round`` is ``doc`` at
    the stage after the last one the device sent, a message is taken (200), and the answer of the
    first stage is ``attack``."""
    sent: list[str] = []

    def answers(method: str, path: str) -> tuple[Any, ...]:
        if path == "/v1/exchange/round":
            return ("json", doc | {"state": "open", "stage": stages[len(sent)]})
        if method == "POST":
            sent.append(path.rsplit("/", 1)[1])
            return ("body", b"", {})
        return attack

    stub = Stub(answers)
    stubs.append(stub)
    return stub


class _One:
    """A device that takes part with ``party``."""

    def __init__(self, party: Any) -> None:
        self._party = party

    def party(self, doc: Any) -> Any:
        return self._party


@pytest.mark.parametrize("kind", ["endless", "bomb"])
def test_an_sfsl_device_refuses_a_longer_answer_and_sends_nothing_more(stubs, decoded, bomb, sfsl, kind) -> None:
    doc = sfsl.make_server().node.open_round(1, [0, 1, 2])
    stub = _stage_server(stubs, doc, list(SFSL_PLAN.stages), ("endless",) if kind == "endless" else
                         ("body", bomb, GZIP))
    device = sfsl.make_device(0)
    before = device.device.user_embedding.copy()
    limit = ANSWER_FLOOR_BYTES + 4 * SFSL_LONGEST["psu-advertise"]
    with ApiClient(stub.url, "user:0", b"k" * 32) as api, pytest.raises(InvalidMessage,
                                                                       match=f"longer than {limit} bytes"):
        take_part(HttpStageLink(0, api), device, SFSL_PLAN, doc, wait_s=5.0, poll_s=0.01)
    assert api.max_answer_bytes == ANSWER_FLOOR_BYTES  # back to the floor for the round documents
    stub.settled()
    posts = [p for (m, p, _) in stub.seen if m == "POST"]
    assert posts == ["/v1/exchange/rounds/1/psu-advertise"]  # nothing sent after the answer
    assert ("GET", "/v1/exchange/rounds/1/psu-advertise", "identity") in stub.seen
    assert np.array_equal(device.device.user_embedding, before) and device.device._perturbed.size == 0
    assert decoded[-1] <= limit + PIECE
    if kind == "endless":
        assert stub.sent <= limit + SOCKET_SLACK


def test_a_secea_silo_refuses_an_endless_relay_and_keeps_its_model(stubs, decoded) -> None:
    """The largest answer of SecEA (the relayed shares and queries, quadratic in the union):
    the silo has uploaded, reads at most its limit of the RELAY, sends no ANSWER, and its
    averages are never written."""
    params, bloom, node, clients = _secea_world()
    server = LocalStageServer(node)
    setup = {u: SecEASetupParty(c, bloom, 1, _rng=CtrDrbg(10 + u)) for u, c in enumerate(clients)}
    doc = server.admin.open_round(1, [0, 1, 2])
    assert play(SECEA_PLAN.only(doc["stages"]), server.admin, {u: server.link(u) for u in range(3)},
                setup, 1).finished == [0, 1, 2]
    written: list[np.ndarray] = []
    party = SecEAParty(clients[0], 2, np.full((3, 2), 0.5), on_average=written.append)
    doc = {"round_id": 2, "users": [0, 1, 2], "stages": ["secea-share", "secea-answer"]}
    stub = _stage_server(stubs, doc, ["secea-share", "secea-answer", "secea-answer"], ("endless",))
    limit = answer_limit_for(32 + 8 + 2 * (6 + 4 * (7 * params.width + 7 * 7)))
    with ApiClient(stub.url, "user:0", b"k" * 32) as api, pytest.raises(InvalidMessage,
                                                                       match=f"longer than {limit} bytes"):
        take_part(HttpStageLink(0, api), _One(party), SECEA_PLAN, doc, wait_s=5.0, poll_s=0.01)
    stub.settled()
    assert [p for (m, p, _) in stub.seen if m == "POST"] == ["/v1/exchange/rounds/2/secea-share"]
    assert written == [] and party.average is None
    assert decoded[-1] <= limit + PIECE and stub.sent <= limit + SOCKET_SLACK


# -- secemb client -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def credentials(tmp_path_factory) -> Path:
    """Device 0's credentials of an SFSL deployment (taobao-mini, 3 users a round)."""
    root = tmp_path_factory.mktemp("sfsl") / "dep"
    init_one_server(root, "--protocol", "sfsl", "--dataset", "taobao-mini", "--users-per-round", "3",
                    "--option", "sfsl_preset=CPP1", "--option", "batch=8")
    return root / "devices" / "device-0.json"


def _client_of(credentials: Path, url: str, tmp_path: Path) -> Path:
    """``credentials`` pointing at ``url`` (a copy beside the CA file it names)."""
    doc = json.loads(credentials.read_text())
    doc["url"] = url
    doc["ca"] = str((credentials.parent / doc["ca"]).resolve())
    out = tmp_path / "device-0.json"
    out.write_text(json.dumps(doc))
    out.chmod(0o600)
    return out


def _one_line(res: Any) -> dict[str, Any]:
    assert res.exit_code == 1, (res.output, res.exception)
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.output, res.output
    out: dict[str, Any] = json.loads(lines[0])
    return out


def test_secemb_client_of_sfsl_gives_up_on_an_endless_round_document(stubs, decoded, credentials, tmp_path) -> None:
    stub = Stub(lambda m, p: ("endless",))
    stubs.append(stub)
    creds = _client_of(credentials, stub.url, tmp_path)
    res = CliRunner().invoke(app, ["client", "--user", "0", "--credentials", str(creds), "--wait", "1"])
    doc = _one_line(res)
    assert doc["error"].startswith("no open round for user 0 within 1.0 s (the last poll failed:"), doc
    assert f"longer than {ROUND_DOCUMENT_BYTES} bytes" in doc["error"], doc  # the document's limit (S41-R2)
    stub.settled()
    assert {p for (_, p, _) in stub.seen} == {"/v1/exchange/round"}
    assert decoded and max(decoded) <= ROUND_DOCUMENT_BYTES + PIECE


def test_secemb_client_of_sfsl_fails_its_round_on_a_bomb_answer(stubs, decoded, bomb, sfsl, credentials,
                                                                 tmp_path) -> None:
    doc = sfsl.make_server().node.open_round(1, [0, 1, 2])
    stub = _stage_server(stubs, doc, list(SFSL_PLAN.stages), ("body", bomb, GZIP))
    creds = _client_of(credentials, stub.url, tmp_path)
    res = CliRunner().invoke(app, ["client", "--user", "0", "--credentials", str(creds), "--wait", "5"])
    limit = ANSWER_FLOOR_BYTES + 4 * SFSL_LONGEST["psu-advertise"]
    out = _one_line(res)
    assert out["error"] == f"round 1: GET {stub.url}/v1/exchange/rounds/1/psu-advertise: the answer is longer than " \
                           f"{limit} bytes", out
    stub.settled()
    assert [p for (m, p, _) in stub.seen if m == "POST"] == ["/v1/exchange/rounds/1/psu-advertise"]
    assert decoded[-1] <= limit + PIECE
