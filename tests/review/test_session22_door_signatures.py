"""Session 22 (helper E): the one server checks each device's signed message at receipt.

Before, SFSL's and SecEA's server had no roster pin: it checked a signed advertise's signature
under the key its certificate named (SFSL) or only the lengths of a HELLO (SecEA), so ONE
device that sent a certificate not the roster's made every honest device refuse the key list /
directory as the server's deviation -- the round failed for all, blamed on the server.  Now
``exchange.json`` holds the roster's public pin (``secemb admin init``), ``secemb serve`` gives it
to the node (:class:`~secemb.protocols.exchange.RosterPinnedNode`), and the node refuses such a
message (HTTP 400, nothing kept): the device is absent from the stage as a dropout is.

* SFSL over HTTP (a node on 127.0.0.1): one device's advertise with a corrupted signature or a
  certificate of a key not the roster's is refused with 400, and the round of the others gives
  the model of the in-process round where that device drops out before advertising, bit for bit
  (same CSPRNG stream); the model moved.
* SFSL at the node: each kind of bad advertise (both secure sums) and a bad consistency
  signature is refused and nothing of it kept (the genuine message is taken after it); without
  the pin the foreign certificate passes the server and the honest device refuses the key list
  (the denial of service this fixes).
* SecEA at the node and over HTTP: a HELLO whose certificate or signature does not verify (or was
  signed for another set-up or silo), or a PSU advertise under another roster, is refused (400 over
  HTTP) naming the silo; a silo that then sends its genuine message is set up with the others;
  one that does not leaves the set-up aborted naming who sent (every silo is needed), no silo is
  told the server deviated; a server checkpoint of unsigned HELLOs (written before session 22) is
  refused saying to start a new set-up.
* The deployment: ``exchange.json`` holds the roster's public pin and never its key;
  ``add-devices`` refuses a roster that is not the pinned one; ``secemb serve`` refuses a
  configuration without a pin (written before session 22) with one line that says what to do; a
  malformed pin is a bad file.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from _server_template import run  # type: ignore[import-not-found]
from secemb.data.ctr import ClickData, TaobaoShaped, split_clicks
from secemb.errors import InvalidMessage, InvalidParameters, ProtocolError
from secemb.protocols.exchange import ExchangeParty, ExchangeRecord, ExchangeServer, RosterPinnedNode
from secemb.protocols.secea.coding import SecEAParams
from secemb.protocols.secea.parties import SecEAClient
from secemb.protocols.secea.staged import SecEANode, SecEASetupParty
from secemb.protocols.secea.union import union_bloom
from secemb.protocols.sfsl import SFSLRun, TrainingSettings, train_sfsl
from secemb.protocols.sfsl.protocol import ExchangePlayer, model_bytes
from secemb.protocols.sfsl.simulate import SFSLResult
from secemb.protocols.sfsl.staged import SFSLNode, SFSLParty
from secemb.randomness import CtrDrbg, system_rng
from secemb.secagg import SecAggClient
from secemb.secagg.identity import CERTIFICATE_BYTES, PRIVATE_BYTES, Identity, Roster
from secemb.server.exchange_deploy import ExchangeDeployment
from secemb.sim.cluster import free_port
from secemb.sim.exchange import NodeServer
from secemb.sim.player import Rounds, connect_local
from secemb.transport.errors import RemoteError
from secemb.transport.http import HttpStageAdmin, HttpStageLink
from secemb.transport.network import ApiClient
from secemb.transport.signing import user_key

torch.set_num_threads(1)

#: a signed advertise: frame header (32), two X25519 keys (64), seed commitment (32, since session 23),
#: certificate (120), signature (64), rows
CERT_AT = 32 + 64 + 32
SIG_AT = CERT_AT + CERTIFICATE_BYTES


def _flip(body: bytes, at: int) -> bytes:
    out = bytearray(body)
    out[at] ^= 1
    return bytes(out)


def _foreign(identity: Identity) -> Identity:
    """An identity of the same device and deployment certified by a key that is not the roster's
    (its own signatures verify under the key its certificate names)."""
    return Roster(identity.pin.deployment, system_rng(PRIVATE_BYTES)).enroll(identity.user)


def _bad_advertise(kind: str, party: SFSLParty, stage: str) -> bytes:
    """Device ``party``'s advertise of ``stage`` gone bad (``kind``), from a client of its own
    randomness (the party's CSPRNG stream is not drawn from: as a device that sent nothing)."""
    config = party.psu_config if stage == "psu-advertise" else party.sum_config
    ident = _foreign(party.identity) if kind == "certificate" else party.identity
    rows = None if stage == "psu-advertise" else np.arange(party.sum_config.public_from or 0, party.space.length)
    body = SecAggClient(party.device.user, config, identity=ident, _rng=system_rng).advertise(rows)
    return _flip(body, SIG_AT + 5) if kind == "signature" else body


# ---------------------------------------------------------------- SFSL over HTTP

@pytest.fixture(scope="module")
def clicks() -> tuple[ClickData, ClickData]:
    return split_clicks(TaobaoShaped("taobao-mini", seed=3).clients(np.arange(12)))


RUN = SFSLRun(preset="CPP2", clients_per_round=3, rounds=1, settings=TrainingSettings(batch=8), seed=4, eval_every=1)


def _bad_first(r: int, chosen: Any) -> tuple[dict[int, int], dict[int, int]]:
    return {int(min(chosen)): 0}, {}  # the lowest chosen id sends nothing from psu-advertise on


@pytest.fixture(scope="module")
def reference(clicks: tuple[ClickData, ClickData]) -> SFSLResult:
    """The round in process with the lowest chosen device a dropout before its advertise."""
    def player(server, settings):  # noqa: ANN001, ANN202
        node = SFSLNode(server, settings)
        hosted = ExchangeServer(node, 1 << 30, lambda: model_bytes(server), 1 << 20)
        return ExchangePlayer(connect_local(hosted), server.space, node.bloom, server.table.shape)
    return train_sfsl(clicks[0], clicks[1], RUN, dropouts=_bad_first, _rng=CtrDrbg(11), player=player)


class _Refused:
    """Device ``user``'s link that records the server's refusal of a message instead of raising."""

    def __init__(self, link: HttpStageLink, refused: list[RemoteError]) -> None:
        self.link, self.refused = link, refused

    def send(self, round_id: int, stage: str, body: bytes) -> None:
        try:
            self.link.send(round_id, stage, body)
        except RemoteError as exc:
            self.refused.append(exc)

    def fetch(self, round_id: int, stage: str) -> bytes | None:
        return self.link.fetch(round_id, stage)


class _BadParty:
    """The lowest device's party: its ``psu-advertise`` gone bad (:func:`_bad_advertise`)."""

    def __init__(self, party: SFSLParty, kind: str) -> None:
        self.party, self.kind = party, kind

    def message(self, stage: str) -> bytes:
        assert stage == "psu-advertise", stage  # refused: the device is out of the round after it
        return _bad_advertise(self.kind, self.party, stage)

    def accept(self, stage: str, body: bytes) -> None:
        raise AssertionError(f"the refused device got an answer of {stage}")


class _HttpRounds:
    """Rounds over HTTP against ``host`` whose lowest device sends a bad advertise."""

    def __init__(self, host: NodeServer, plan: Any, kind: str) -> None:
        self.host, self.kind, self.refused = host, kind, []  # type: ignore[var-annotated]
        self.apis: list[ApiClient] = []
        admin = HttpStageAdmin(self._api("admin", host.admin_secret))
        self.rounds = Rounds(plan, admin, self._link, admin.model)
        self.bad: int | None = None

    def _api(self, key_id: str, key: bytes) -> ApiClient:
        self.apis.append(ApiClient(self.host.url, key_id, key, tls=self.host.tls, timeout=120.0,
                                   max_answer_bytes=None))
        return self.apis[-1]

    def _link(self, u: int) -> Any:
        link = HttpStageLink(u, self._api(f"user:{u}", user_key(self.host.user_secret, u)))
        return _Refused(link, self.refused) if u == self.bad else link

    def play(self, round_id: int, parties: Mapping[int, ExchangeParty], *,
             silent_from: Mapping[int, str] | None = None) -> ExchangeRecord:
        assert not silent_from
        self.bad = min(parties)
        party = parties[self.bad]
        assert isinstance(party, SFSLParty)
        return self.rounds.play(round_id, {**parties, self.bad: _BadParty(party, self.kind)})

    def model(self) -> bytes:
        return self.rounds.model()

    def close(self) -> None:
        for api in self.apis:
            api.close()


@pytest.mark.parametrize("kind", ["signature", "certificate"])
def test_over_http_one_device_with_a_bad_advertise_is_a_dropout_and_the_others_round_commits(
        clicks: tuple[ClickData, ClickData], reference: SFSLResult, kind: str) -> None:
    roster = Roster.generate()
    made: list[tuple[NodeServer, _HttpRounds]] = []

    def player(server, settings):  # noqa: ANN001, ANN202
        node = SFSLNode(server, settings, pin=roster.pin)
        host = NodeServer(ExchangeServer(node, 1 << 26, lambda: model_bytes(server), 64)).start()
        made.append((host, _HttpRounds(host, node.plan, kind)))
        return ExchangePlayer(made[-1][1], server.space, node.bloom, server.table.shape, roster=roster)

    try:
        res = train_sfsl(clicks[0], clicks[1], RUN, _rng=CtrDrbg(11), player=player)
    finally:
        for host, rounds in made:
            rounds.close()
            host.stop()
    refused = made[0][1].refused
    assert [(e.status, e.error) for e in refused] == [(400, "invalid_message")], refused
    bad = made[0][1].bad
    said = (f"advertise of client {bad}: the signature does not verify" if kind == "signature"
            else f"the certificate of device {bad} is not the roster's")
    assert said in refused[0].detail, refused[0].detail
    (rep,) = res.reports
    assert made[0][1].bad not in rep.survivors and len(rep.survivors) == 2
    assert rep.survivors == reference.reports[0].survivors
    # the others' round is the round in which the device dropped out before advertising, bit for bit
    assert res.table is not None and reference.table is not None
    assert np.array_equal(res.table, reference.table) and np.array_equal(res.dense, reference.dense)  # type: ignore[arg-type]
    start = train_sfsl(clicks[0], clicks[1], SFSLRun(preset="CPP2", clients_per_round=3, rounds=1, seed=4, eval_every=1,
                                        settings=TrainingSettings(lr=0.0, batch=8)), _rng=CtrDrbg(11))
    assert start.table is not None and not np.array_equal(start.table, res.table)  # the round moved the model


# ---------------------------------------------------------------- SFSL at the node

USERS = [0, 1, 2]


def _drive(node: SFSLNode, parties: dict[int, SFSLParty], until: str | None, after: str | None = None) -> None:
    """Every stage after ``after`` (default: from the first) and before ``until`` (default: to
    the last): each party's message, the close, the answers."""
    stages = list(node.plan.stages)
    for stage in stages[0 if after is None else stages.index(after) + 1:]:
        if stage == until:
            return
        for u, p in parties.items():
            node.receive(1, stage, u, p.message(stage))
        node.close(1, stage)
        if not node.plan.replies(stage):
            continue
        for u, p in parties.items():
            if (out := node.reply(1, stage, u)) is not None:
                p.accept(stage, out)


def _round(sfsl: Any, pin: bool) -> tuple[SFSLNode, dict[int, SFSLParty]]:
    node = sfsl.make_server().node
    assert isinstance(node, SFSLNode) and isinstance(node, RosterPinnedNode) and node.pin is None
    node.pin = sfsl.roster.pin if pin else None
    doc = node.open_round(1, USERS)
    return node, {u: sfsl.make_device(u).party(doc) for u in USERS}


@pytest.mark.parametrize("kind", ["signature", "certificate", "another-device", "another-deployment"])
@pytest.mark.parametrize("stage", ["psu-advertise", "sum-advertise"])
def test_the_node_refuses_a_bad_advertise_and_keeps_nothing_of_it(sfsl, stage: str, kind: str) -> None:
    node, parties = _round(sfsl, pin=True)
    _drive(node, parties, stage)
    genuine = {u: p.message(stage) for u, p in parties.items()}
    if kind in ("signature", "certificate"):
        bad = _bad_advertise(kind, parties[0], stage) if kind == "certificate" else _flip(genuine[0], SIG_AT + 5)
        said = "does not verify" if kind == "signature" else "not the roster's"
    elif kind == "another-device":  # device 1's certificate in device 0's advertise
        bad = genuine[0][:CERT_AT] + genuine[1][CERT_AT:SIG_AT] + genuine[0][SIG_AT:]
        said = "the certificate of device 0 is for device 1"
    else:
        other = Roster.generate().enroll(0)  # a valid certificate, signed, of another deployment
        config = parties[0].psu_config if stage == "psu-advertise" else parties[0].sum_config
        rows = None if stage == "psu-advertise" else np.arange(config.public_from or 0, parties[0].space.length)
        bad = SecAggClient(0, config, identity=other, _rng=system_rng).advertise(rows)
        said = "of another deployment"
    with pytest.raises(InvalidMessage, match=said):
        node.receive(1, stage, 0, bad)
    for u in USERS:  # nothing of the refused one was kept: device 0's genuine message is taken after it
        node.receive(1, stage, u, genuine[u])
    node.close(1, stage)
    for u, p in parties.items():
        p.accept(stage, node.reply(1, stage, u))  # type: ignore[arg-type]
    _drive(node, parties, None, after=stage)  # the rest of the round
    assert node.outcome(1)["state"] == "committed" and node.outcome(1)["survivors"] == USERS


def test_without_the_pin_a_foreign_certificate_passed_the_server_and_failed_every_honest_device(sfsl) -> None:
    """What the pin fixes: the server's own check (the signature under the key the certificate
    names) passes a certificate of a key not the roster's; each honest device then refuses the
    key list as the server's deviation."""
    node, parties = _round(sfsl, pin=False)
    node.receive(1, "psu-advertise", 0, _bad_advertise("certificate", parties[0], "psu-advertise"))
    for u in USERS[1:]:
        node.receive(1, "psu-advertise", u, parties[u].message("psu-advertise"))
    node.close(1, "psu-advertise")
    for u in USERS[1:]:
        parties[u].accept("psu-advertise", node.reply(1, "psu-advertise", u))  # type: ignore[arg-type]
        with pytest.raises(InvalidMessage, match="not the roster's"):
            parties[u].message("psu-shares")


def test_the_node_refuses_a_bad_consistency_signature_and_keeps_nothing_of_it(sfsl) -> None:
    node, parties = _round(sfsl, pin=True)
    _drive(node, parties, "psu-consistency")
    genuine = {u: p.message("psu-consistency") for u, p in parties.items()}
    with pytest.raises(InvalidMessage, match="consistency of client 2: the signature does not verify"):
        node.receive(1, "psu-consistency", 2, _flip(genuine[2], len(genuine[2]) - 1))
    for u in USERS:
        node.receive(1, "psu-consistency", u, genuine[u])
    node.close(1, "psu-consistency")
    assert all(node.reply(1, "psu-consistency", u) is not None for u in USERS)


# ---------------------------------------------------------------- SecEA

SETS = [[1, 4, 9], [4, 7], [1, 7, 9, 12]]
SETUP = 3  # the set-up's round id (a deployment's first round need not be 0; the HELLO signs it)


def _secea(roster: Roster, seed: int = 5) -> tuple[SecEANode, list[SecEASetupParty]]:
    params, rng = SecEAParams(3, 1, dim=2), CtrDrbg(seed)
    bloom = union_bloom(16, sum(len(s) for s in SETS))
    node = SecEANode(params, bloom, key_bits=1024, pin=roster.pin, _rng=rng)
    clients = [SecEAClient(i, params, np.array(s), key_bits=1024, identity=roster.enroll(i), _rng=rng)
               for i, s in enumerate(SETS)]
    return node, [SecEASetupParty(c, bloom, SETUP, _rng=rng) for c in clients]


def _bad_hellos(roster: Roster, party: SecEASetupParty) -> dict[str, tuple[bytes, str]]:
    """Silo 1's HELLO gone bad, each with what the refusal says."""
    client, genuine = party.client, party.client.hello(SETUP)
    cert_at = 32 + 32  # wire header (32), X25519 key (32), then the certificate
    out = {"signature": (_flip(genuine, cert_at + CERTIFICATE_BYTES + 3), "silo 1's signature: the signature does "
                                                                        "not verify"),
           "certificate": (_flip(genuine, cert_at + 40), "the certificate of device 1 is not the roster's")}
    client.sign_with(_foreign(roster.enroll(1)))
    out["foreign-roster"] = (client.hello(SETUP), "the certificate of device 1 is not the roster's")
    other = roster.enroll(2).certificate.to_bytes()
    out["another-silo"] = (genuine[:cert_at] + other + genuine[cert_at + CERTIFICATE_BYTES:],
                           "the certificate of device 1 is for device 2")
    client.sign_with(roster.enroll(1))
    out["another-set-up"] = (client.hello(SETUP + 1), "silo 1's signature: the signature does not verify")
    assert client.hello(SETUP) != genuine  # a fresh certificate: the same keys, signed again
    return out


@pytest.mark.parametrize("kind", ["signature", "certificate", "foreign-roster", "another-silo", "another-set-up"])
def test_secea_node_refuses_a_bad_hello_and_the_genuine_one_after_it_sets_every_silo_up(kind: str) -> None:
    roster = Roster.generate()
    node, parties = _secea(roster)
    node.open_round(SETUP, [0, 1, 2])
    bad, said = _bad_hellos(roster, parties[1])[kind]
    with pytest.raises(InvalidMessage, match=f"HELLO of silo 1 refused: .*{said}"):
        node.receive(SETUP, "secea-keys", 1, bad)
    for stage in parties[0].stages:
        for i, p in enumerate(parties):
            node.receive(SETUP, stage, i, p.message(stage))
        node.close(SETUP, stage)
        for i, p in enumerate(parties):
            p.accept(stage, node.reply(SETUP, stage, i))  # type: ignore[arg-type]
    assert node.outcome(SETUP)["state"] == "committed"
    want = sorted(set().union(*SETS))
    assert all(p.union is not None and p.union.tolist() == want for p in parties)


def test_secea_node_refuses_a_psu_advertise_under_another_roster() -> None:
    roster = Roster.generate()
    node, parties = _secea(roster)
    node.open_round(SETUP, [0, 1, 2])
    for stage in parties[0].stages:
        if stage == "psu-advertise":
            ident = parties[1].client.identity
            assert ident is not None
            bad = SecAggClient(1, parties[1].config, identity=_foreign(ident), _rng=system_rng).advertise()
            with pytest.raises(InvalidMessage, match="the certificate of device 1 is not the roster's"):
                node.receive(SETUP, stage, 1, bad)
        for i, p in enumerate(parties):
            node.receive(SETUP, stage, i, p.message(stage))  # silo 1's genuine one is taken after it
        node.close(SETUP, stage)
        for i, p in enumerate(parties):
            p.accept(stage, node.reply(SETUP, stage, i))  # type: ignore[arg-type]
    assert node.outcome(SETUP)["state"] == "committed"


def test_secea_set_up_without_one_silos_valid_hello_aborts_naming_who_sent() -> None:
    roster = Roster.generate()
    node, parties = _secea(roster)
    node.open_round(SETUP, [0, 1, 2])
    bad, _ = _bad_hellos(roster, parties[1])["foreign-roster"]
    with pytest.raises(InvalidMessage):
        node.receive(SETUP, "secea-keys", 1, bad)
    for i in (0, 2):
        node.receive(SETUP, "secea-keys", i, parties[i].message("secea-keys"))
    with pytest.raises(ProtocolError, match=r"needs HELLO from all 3 clients, got \[0, 2\]"):
        node.close(SETUP, "secea-keys")
    assert node.outcome(SETUP)["state"] == "aborted"  # no directory went out: no silo blames the server


def test_secea_over_http_a_bad_hello_is_a_400_that_names_the_silo_and_changes_nothing() -> None:
    roster = Roster.generate()
    node, parties = _secea(roster)
    bad, _ = _bad_hellos(roster, parties[1])["foreign-roster"]
    with NodeServer(ExchangeServer(node, 1 << 20, lambda: b"", 3)) as host:
        def api(key_id: str, key: bytes) -> ApiClient:
            return ApiClient(host.url, key_id, key, tls=host.tls, max_answer_bytes=None)
        with api("admin", host.admin_secret) as admin_api, \
                api("user:1", user_key(host.user_secret, 1)) as silo:
            admin = HttpStageAdmin(admin_api)
            admin.open_round(SETUP, [0, 1, 2])
            with pytest.raises(RemoteError) as err:
                HttpStageLink(1, silo).send(SETUP, "secea-keys", bad)
            assert err.value.status == 400 and "HELLO of silo 1 refused" in err.value.detail, err.value
            assert "not the roster's" in err.value.detail
            HttpStageLink(1, silo).send(SETUP, "secea-keys", parties[1].message("secea-keys"))  # taken after it


def test_a_secea_checkpoint_of_unsigned_hellos_is_refused_with_what_to_do() -> None:
    """A server checkpoint written before session 22 (an unsigned set-up's HELLOs) is refused by a
    signed node's restore: start a new set-up."""
    params, rng = SecEAParams(3, 1, dim=2), CtrDrbg(2)
    bloom = union_bloom(16, sum(len(s) for s in SETS))
    old = SecEANode(params, bloom, key_bits=1024, signed=False, _rng=rng)
    parties = [SecEASetupParty(SecEAClient(i, params, np.array(s), key_bits=1024, signed=False, _rng=rng), bloom,
                               0, _rng=rng) for i, s in enumerate(SETS)]
    old.open_round(0, [0, 1, 2])
    for stage in parties[0].stages:
        for i, p in enumerate(parties):
            old.receive(0, stage, i, p.message(stage))
        old.close(0, stage)
        for i, p in enumerate(parties):
            p.accept(stage, old.reply(0, stage, i))  # type: ignore[arg-type]
    meta, arrays = old.state()
    with pytest.raises(InvalidParameters, match=r"SecEA state: silo 0's HELLO is not a signed one of this "
                                                r"deployment .*before session 22.*start a new set-up"):
        SecEANode(params, bloom, key_bits=1024, pin=Roster.generate().pin).restore(meta, arrays)


# ---------------------------------------------------------------- the deployment

@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from cli_helpers import init_one_server  # type: ignore[import-not-found]
    root = tmp_path_factory.mktemp("s22e") / "dep"
    init_one_server(root, "--protocol", "sfsl", "--dataset", "taobao-mini", "--users-per-round", "3",
                    "--option", "sfsl_preset=CPP1", "--option", "batch=8")
    return root


def test_exchange_json_holds_the_rosters_public_pin_and_never_its_key(deployment: Path) -> None:
    roster = json.loads((deployment / "roster.json").read_text())
    text = (deployment / "exchange.json").read_text()
    doc = json.loads(text)
    assert doc["roster_pin"] == {"deployment": roster["deployment"], "public": roster["public"]}
    assert roster["private"] not in text
    pin = ExchangeDeployment.load(deployment).pin
    assert pin is not None and pin.public.hex() == roster["public"] and pin.deployment.hex() == roster["deployment"]


def test_add_devices_refuses_another_deployments_roster(deployment: Path, tmp_path: Path) -> None:
    other = Roster.generate()
    path = tmp_path / "roster.json"
    path.write_text(json.dumps({"format": "secemb-roster/1", "deployment": other.deployment.hex(),
                                "private": other.private.hex(), "public": other.public.hex()}))
    with pytest.raises(InvalidParameters, match="is not this deployment's roster"):
        ExchangeDeployment.load(deployment).add_devices([5], tmp_path / "devs", path)
    assert not (tmp_path / "devs").exists()  # nothing written


def _copy(deployment: Path, tmp_path: Path, change: dict[str, Any] | None) -> Path:
    """``deployment``'s exchange.json in ``tmp_path`` with ``change`` (``None`` values: removed)."""
    doc = json.loads((deployment / "exchange.json").read_text())
    for k, v in (change or {}).items():
        if v is None:
            doc.pop(k)
        else:
            doc[k] = v
    path = tmp_path / "exchange.json"
    path.write_text(json.dumps(doc))
    os.chmod(path, 0o600)
    return path


@pytest.mark.parametrize("pin", [{"deployment": "00", "public": "11" * 32}, {"public": "11" * 32}, "x"])
def test_a_malformed_pin_is_a_bad_configuration(deployment: Path, tmp_path: Path, pin: Any) -> None:
    with pytest.raises(InvalidParameters, match="field 'roster_pin'"):
        ExchangeDeployment.load(_copy(deployment, tmp_path, {"roster_pin": pin}))


def test_secemb_serve_refuses_a_configuration_without_a_pin_with_one_line(deployment: Path, tmp_path: Path) -> None:
    path = _copy(deployment, tmp_path, {"roster_pin": None, "host": "127.0.0.1", "port": free_port()})
    assert ExchangeDeployment.load(path).pin is None  # the file itself is read as before
    res = run([sys.executable, "-m", "secemb", "serve", "--config", str(path)], timeout=300)  # forked where it can be
    out = (res.stdout + res.stderr).decode()
    assert res.returncode == 2, out
    lines = out.strip().splitlines()
    assert "Traceback" not in out and len(lines) == 1, out
    assert "no roster pin" in lines[0] and "roster_pin" in lines[0] and "secemb admin init" in lines[0], lines[0]
