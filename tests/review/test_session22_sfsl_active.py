"""Session 22 (helper A): SFSL's secure sums against one deviating server, over HTTP, and the
deployment's roster (docs/secagg.md, "Active server"; docs/deployment.md, "One server").

The victim is device 0 taking part as a deployed device does (``take_part`` over
:class:`~secemb.transport.http.HttpStageLink`) against :class:`session21_deviating_server.DeviatingNode`
on 127.0.0.1; the server's deviations are the session-21 attacks that read a device's goods or
update, each now refused by the device before the message that would leak leaves:

* **key substitution** (the server's own X25519 keys in place of a peer's): the victim refuses the
  key list at ``psu-advertise`` / ``sum-advertise`` -- its Bloom filter (its real goods) or its
  update is never sent;
* **G5, the rows two devices share**: each device's row set travels in the key list as a bitmap
  over the round's candidate rows under the device's signature; clearing a peer's row set fails
  the victim at ``sum-advertise``, before its shares and its masked update.

The deployment: the roster's private key is in ``roster.json`` only (0600), never in the
server's ``exchange.json`` nor its state; the server serves a round with ``roster.json`` moved
away; credentials carry each device's certified identity; ``secemb client`` refuses credentials
without one (exit 2, one line).
"""

from __future__ import annotations

import json
import struct
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

import pytest
from cli_helpers import admin, init_one_server, kill, serve, start_clients, stop  # type: ignore[import-not-found]
from test_session21_sfsl_deviating import _serve, _take_part, _unchanged
from test_session22_door_signatures import USERS, _drive, _round
from typer.testing import CliRunner

from secemb.cli import app
from secemb.errors import InvalidMessage
from secemb.randomness import system_rng
from secemb.secagg import SecAggClient
from secemb.protocols.sfsl.staged import SFSL_PLAN
from secemb.secagg.keys import KeyPair
from secemb.server.exchange_deploy import ExchangeCredentials

STAGES = list(SFSL_PLAN.stages)


def _entry_of(body: bytearray, peer: int) -> tuple[int, int]:
    """Where ``peer``'s record starts in a framed signed key list (32-byte header, count, records
    of one size: docs/secagg.md), and the records' size."""
    count = struct.unpack_from("<I", body, 32)[0]
    entry = (len(body) - 36) // count
    for i in range(count):
        if struct.unpack_from("<I", body, 36 + i * entry)[0] == peer:
            return 36 + i * entry, entry
    raise AssertionError(f"device {peer} is not in the key list")


def _swap_peer_keys(stage: str, peer: int = 1):  # noqa: ANN202 -- a Tamper
    """The key list of ``stage`` with ``peer``'s two X25519 keys replaced by the server's own
    (docs/secagg.md: count, records of id, two keys, certificate, signature [, the secure sum's
    signed row set])."""
    fake = KeyPair.generate().public + KeyPair.generate().public

    def tamper(got: str, answer: bytes) -> bytes | None:
        if got != stage:
            return answer
        body = bytearray(answer)
        at, _ = _entry_of(body, peer)
        body[at + 4 : at + 68] = fake
        return bytes(body)
    return tamper


@pytest.mark.parametrize("stage", ["psu-advertise", "sum-advertise"])
def test_a_device_refuses_a_key_list_with_a_key_its_peer_did_not_sign(sfsl, nodes, stage: str) -> None:
    server = _serve(nodes, sfsl, _swap_peer_keys(stage))
    device = sfsl.make_device(0)
    before = device.device.user_embedding.copy()
    with pytest.raises(InvalidMessage, match="keys for device 1 that device 1 did not sign .the server deviated."):
        _take_part(server, device)
    # nothing after the key list left the device: no shares, no masked filter or update
    assert server.posted == STAGES[: STAGES.index(stage) + 1]
    if stage == "psu-advertise":
        _unchanged(device, before)


def _clear_row_set(got: str, answer: bytes, peer: int = 1) -> bytes | None:
    """The secure sum's key list with ``peer``'s signed row set cleared (G5: nobody masks with it
    on any candidate row; docs/secagg.md: count, records of id, two keys, seed commitment,
    certificate, signature, the bitmap over the candidate rows)."""
    if got != "sum-advertise":
        return answer
    body = bytearray(answer)
    at, entry = _entry_of(body, peer)
    assert any(body[at + 4 + 64 + 216 : at + entry])  # peer 1 holds some candidate row
    body[at + 4 + 64 + 216 : at + entry] = bytes(entry - 4 - 64 - 216)
    return bytes(body)


def test_g5_a_device_refuses_a_row_set_the_server_cleared(sfsl, nodes) -> None:
    server = _serve(nodes, sfsl, _clear_row_set)
    with pytest.raises(InvalidMessage, match="keys for device 1 that device 1 did not sign"):
        _take_part(server, sfsl.make_device(0))
    assert server.posted == STAGES[: STAGES.index("sum-advertise") + 1]  # no shares, no masked update left


def test_the_node_refuses_sum_rows_outside_the_union_and_the_round_commits(sfsl) -> None:
    """The secure sum's candidate rows are the PSU union's goods and their categories: a device
    whose sum-advertise names a goods outside the union (made with a config without the candidates,
    as a deviating device would; its signature is its own) is refused at receipt with nothing kept
    (``InvalidMessage``: a 400 over HTTP); its genuine advertise is taken after it and the round
    commits with every device."""
    node, parties = _round(sfsl, pin=True)
    _drive(node, parties, "sum-advertise")
    genuine = {u: p.message("sum-advertise") for u, p in parties.items()}
    config, union = parties[0].sum_config, parties[0].union
    assert union is not None and config.public_from is not None
    outside = int(np.setdiff1d(np.arange(node.server.space.goods), union)[0])
    rows = np.concatenate([[outside], np.arange(config.public_from, config.length)])
    loose = replace(config, candidates=None)
    bad = SecAggClient(0, loose, identity=parties[0].identity, _rng=system_rng).advertise(rows)
    with pytest.raises(InvalidMessage, match="advertise of client 0: rows outside the round's candidate rows"):
        node.receive(1, "sum-advertise", 0, bad)
    for u in USERS:
        node.receive(1, "sum-advertise", u, genuine[u])
    node.close(1, "sum-advertise")
    for u, p in parties.items():
        p.accept("sum-advertise", node.reply(1, "sum-advertise", u))  # type: ignore[arg-type]
    _drive(node, parties, None, after="sum-advertise")
    assert node.outcome(1)["state"] == "committed" and node.outcome(1)["survivors"] == USERS


def test_an_honest_round_through_the_deviating_node_still_commits(sfsl, nodes) -> None:
    server = _serve(nodes, sfsl)
    assert _take_part(server, sfsl.make_device(0))["outcome"] == "committed"
    assert server.posted == STAGES


# ---------------------------------------------------------------- the deployment's roster

@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("s22") / "dep"
    init_one_server(root, "--protocol", "sfsl", "--dataset", "taobao-mini", "--users-per-round", "3",
                    "--option", "sfsl_preset=CPP1", "--option", "batch=8", "--stage-deadline", "150")
    return root


def _roster(root: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((root / "roster.json").read_text())
    return doc


def test_the_roster_key_is_the_operators_only(deployment: Path) -> None:
    roster = _roster(deployment)
    assert (deployment / "roster.json").stat().st_mode & 0o777 == 0o600
    assert roster["format"] == "secemb-roster/1" and len(bytes.fromhex(roster["private"])) == 32
    assert roster["private"] not in (deployment / "exchange.json").read_text()
    for u in range(3):
        creds = ExchangeCredentials.load(deployment / "devices" / f"device-{u}.json")
        ident = creds.identity
        assert ident is not None and ident.user == u
        assert ident.pin.public.hex() == roster["public"] and ident.pin.deployment.hex() == roster["deployment"]
        assert roster["private"] not in creds.path.read_text()


def test_a_round_runs_with_the_roster_off_the_server_and_the_state_holds_no_roster_secret(
        deployment: Path, tmp_path: Path) -> None:
    secret = _roster(deployment)["private"]
    (deployment / "roster.json").rename(tmp_path / "roster.json")  # the operator keeps it elsewhere
    server = serve(deployment)
    clients: list[subprocess.Popen] = []
    try:
        clients = start_clients(deployment, "--wait", "90")
        admin("open-round", "--deployment", str(deployment), "--participants", "0-2")
        for proc in clients:
            out, err = proc.communicate(timeout=400)
            assert proc.returncode == 0, (out, err)
            assert json.loads(out.decode().strip().splitlines()[-1])["outcome"] == "committed"
    finally:
        kill(clients)
        stop(server)
        (tmp_path / "roster.json").rename(deployment / "roster.json")
    state = [p for p in (deployment / "state").rglob("*") if p.is_file()]
    assert state  # the checkpoint and the journal of the committed round
    for p in [*state, deployment / "exchange.json"]:
        raw = p.read_bytes()
        assert secret.encode() not in raw and bytes.fromhex(secret) not in raw, p


def test_add_devices_reads_the_roster_where_the_operator_keeps_it(deployment: Path, tmp_path: Path) -> None:
    moved = tmp_path / "kept" / "roster.json"
    moved.parent.mkdir()
    (deployment / "roster.json").rename(moved)
    try:
        res = CliRunner().invoke(app, ["admin", "add-devices", "--deployment", str(deployment), "--users", "3",
                                       "--out", str(tmp_path / "devs")])
        assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output  # no roster there
        written = admin("add-devices", "--deployment", str(deployment), "--users", "3", "--out",
                        str(tmp_path / "devs"), "--roster", str(moved))["written"]
    finally:
        moved.rename(deployment / "roster.json")
    ident = ExchangeCredentials.load(written[0]).identity
    assert ident is not None and ident.user == 3 and ident.pin.public.hex() == _roster(deployment)["public"]


def test_secemb_client_refuses_credentials_without_an_identity(deployment: Path, tmp_path: Path) -> None:
    doc = json.loads((deployment / "devices" / "device-0.json").read_text())
    for name, change in (("none", None), ("altered", "flip")):
        if change is None:
            doc2 = {k: v for k, v in doc.items() if k != "identity"}
        else:
            cert = bytearray(bytes.fromhex(doc["identity"]["certificate"]))
            cert[-1] ^= 1
            doc2 = doc | {"identity": doc["identity"] | {"certificate": cert.hex()}}
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(doc2))
        path.chmod(0o600)
        res = CliRunner().invoke(app, ["client", "--user", "0", "--credentials", str(path), "--wait", "1"])
        assert res.exit_code == 2, res.output
        lines = res.output.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in res.output, res.output
        error = json.loads(lines[0])["error"]
        assert ("carries no device identity" if change is None else "field 'identity'") in error, error
