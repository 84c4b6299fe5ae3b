"""Session 21 (helper G, red team): a deviating server against SFSL devices over HTTP.

SFSL's paper assumes an honest-but-curious server (docs/security.md, "One-server protocols"):
what such a server learns -- the union, each device's perturbed request S'' (randomized
response), the secure sum -- is the protocol's leakage, and an active server that substitutes
keys or key lists reads a device's update (``test_limit_a_server_that_runs_the_other_devices_reads_one_devices_update``;
docs/secagg.md, "Threshold").  What the deployment enforces anyway, and what these tests show
over HTTP (a victim device as ``secemb client`` runs it: :func:`secemb.client.stages.take_part`
over :class:`~secemb.transport.http.HttpStageLink`, against
:class:`session21_deviating_server.DeviatingNode` on 127.0.0.1, an honest node behind it):

* a message the device cannot read fails its round with :class:`InvalidMessage` -- in-process
  mutations of every answer of every stage (bytes flipped, cut, extended, counts set to 0, 1,
  2^32 - 1) found no other exception;
* **G3, a key list of more devices than the round's.**  A device computes and sends Shamir
  shares, each under an agreement and AES-GCM, for every client of the server's key list, and
  the transport reads up to its 64 MiB floor: before, ~1 million invented clients were read
  and answered (measured: 62 us of CPU per listed client, a 94-byte record each in the upload).
  Now an answer longer than the longest honest answer at the round's public sizes
  (``SFSLParty.answer_bytes``: 240 bytes for a key list of 3 devices) is refused before it is
  read;
* **G4, training settings other than the deployment's.**  The device checked only that the
  document's settings were ones it could train with: a server announcing a million epochs kept
  it training for hours, and any step size, batch, quantization range or level count was taken.
  Now the settings must be the deployment's (the device's own credentials name them), with the
  step size decayed for the round as the server decays it (``announced_settings``); a round id
  off the node's range or a round of fewer than 2 devices is an ``InvalidMessage`` too (it was
  an ``InvalidParameters`` of the secure aggregation's round id, raised outside the check).

A refusal leaves the device as it was: nothing sent after it, its private user embedding and
Algorithm 2's memo unchanged; ``secemb client`` exits 1 with one line.
"""

from __future__ import annotations

import json
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from secemb.cli import app
from secemb.client.stages import take_part
from secemb.errors import InvalidMessage, SecembError
from secemb.protocols.sfsl.protocol import SFSLClient
from secemb.protocols.sfsl.staged import SFSL_PLAN
from secemb.secagg import messages
from secemb.secagg.keys import KeyPair
from secemb.server.exchange_deploy import ExchangeCredentials
from secemb.transport.http import HttpStageLink
from secemb.transport.network import ApiClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from session21_deviating_server import DeviatingNode, Tamper, honest  # noqa: E402

USERS = [0, 1, 2]
#: the longest honest key list of a round of 3 devices, by hand (docs/secagg.md: header, count,
#: 3 x (id, two 32-byte keys, a 32-byte seed commitment (since session 23), a 120-byte certificate,
#: a 64-byte signature): SFSL's secure aggregations are signed rounds since session 22; the secure
#: sum's entries carry one more field, the device's signed row set over the round's candidate rows,
#: ceil(|candidates| / 8) bytes)
ENTRY = 4 + 32 + 32 + 32 + 120 + 64
KEYS_3 = 32 + 4 + 3 * ENTRY
#: the clients a deviating server invents
FAKE = 1000


def _serve(nodes: list[DeviatingNode], protocol: Any, tamper: Tamper = honest,
           change: dict[str, Any] | None = None) -> DeviatingNode:
    """Round 1 of ``protocol``'s node for devices 0-2 on a deviating node: devices 1 and 2 in
    process, the round document served with ``change`` applied, answers to device 0 through
    ``tamper``."""
    node = protocol.make_server().node
    doc = node.open_round(1, USERS)
    others = {u: protocol.make_device(u).party(doc) for u in USERS[1:]}
    nodes.append(DeviatingNode(node, doc | (change or {}), others, tamper=tamper))
    return nodes[-1]


def _take_part(server: DeviatingNode, device: SFSLClient) -> dict[str, Any]:
    with ApiClient(server.url, "user:0", b"k" * 32) as api:
        return take_part(HttpStageLink(0, api), device, SFSL_PLAN, server.doc, wait_s=5.0, poll_s=0.01)


def _unchanged(device: SFSLClient, embedding: np.ndarray) -> None:
    assert np.array_equal(device.device.user_embedding, embedding)
    assert device.device._perturbed.size == device.device.perturber.yes.size == device.device.perturber.no.size == 0


def test_an_honest_round_through_the_deviating_node_commits(sfsl, nodes) -> None:
    """The harness: without a deviation device 0's round over HTTP commits and the model moves."""
    server = _serve(nodes, sfsl)
    before = server.node.server.table.copy()
    assert _take_part(server, sfsl.make_device(0))["outcome"] == "committed"
    assert server.posted == list(SFSL_PLAN.stages)
    assert not np.array_equal(server.node.server.table, before)


def _inflated(stage: str, honest_bytes: list[int] | None = None) -> Tamper:
    """The key list of ``stage`` with :data:`FAKE` invented clients after the real ones, each with
    a valid key pair (and a zero certificate, signature [and row set]), by the layout of
    docs/secagg.md (count, records of id, two keys, certificate and signature [, row set]); the
    honest list's length is appended to ``honest_bytes``."""
    def tamper(got: str, answer: bytes) -> bytes | None:
        if got != stage:
            return answer
        if honest_bytes is not None:
            honest_bytes.append(len(answer))
        head, body = answer[:32], answer[32:]
        count = struct.unpack_from("<I", body)[0]
        records = body[4:]
        key = KeyPair.generate().public
        rest = len(records) // count - 4 - 64  # certificate, signature [, row set]
        fake = b"".join(struct.pack("<I", 100 + i) + key + key + bytes(rest) for i in range(FAKE))
        round_id = struct.unpack_from("<Q", head, 16)[0]
        return messages.frame("keys", round_id, messages.SERVER, struct.pack("<I", count + FAKE), records, fake)
    return tamper


@pytest.mark.parametrize("stage", ["psu-advertise", "sum-advertise"])
def test_a_device_refuses_a_key_list_of_more_devices_than_the_round(sfsl, nodes, stage: str) -> None:
    honest: list[int] = []
    server = _serve(nodes, sfsl, _inflated(stage, honest))
    device = sfsl.make_device(0)
    before = device.device.user_embedding.copy()
    with pytest.raises(InvalidMessage, match=rf"the answer of {stage}: \d+ bytes, longer than any honest answer "
                                             rf"\((\d+) bytes\)") as refused:
        _take_part(server, device)
    longest = int(str(refused.value).rsplit("(", 1)[1].split()[0])
    if stage == "psu-advertise":
        assert longest == KEYS_3
    else:  # 3 entries, each with a bitmap over at most every goods and category row of taobao-mini
        space = server.node.server.space
        bitmap = (longest - KEYS_3) // 3
        assert longest == KEYS_3 + 3 * bitmap and 1 <= bitmap <= -(-(space.goods + space.categories) // 8)
    assert honest == [longest]  # every device of the round listed: the honest list is the longest
    assert server.posted == list(SFSL_PLAN.stages)[:list(SFSL_PLAN.stages).index(stage) + 1]
    if stage == "psu-advertise":
        _unchanged(device, before)


def _settings(**change: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda doc: {"settings": doc["settings"] | change}


#: a round document's changes (of round 1's honest document) and why each is refused
DOCUMENTS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "a-million-epochs": _settings(epochs=10**6),
    "another-batch": _settings(batch=1),
    "round-5-step-size": _settings(lr=0.999 ** 4),  # the deployment's decay, for another round
    "a-larger-step-size": _settings(lr=1e300),
    "another-range": _settings(bound=1e-6),
    "two-levels": _settings(levels=2),
    "a-lower-weight-cap": _settings(max_weight=1),
    "a-negative-round-id": lambda doc: {"round_id": -1},
    "a-round-id-past-the-node's": lambda doc: {"round_id": 2**62},
    "one-device": lambda doc: {"users": [0]},
}


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_a_device_refuses_a_round_document_other_than_the_deployments(sfsl, name: str) -> None:
    doc = sfsl.make_server().node.open_round(1, USERS)
    device = sfsl.make_device(0)
    assert device.party(doc).settings.epochs == 1  # the honest document is taken
    before = device.device.user_embedding.copy()
    with pytest.raises(InvalidMessage, match="not an SFSL round document for user 0"):
        device.party(doc | DOCUMENTS[name](doc))
    _unchanged(device, before)


def test_a_device_takes_the_decayed_step_size_of_a_later_round(sfsl) -> None:
    node = sfsl.make_server().node
    doc = node.open_round(5, USERS)
    assert doc["settings"]["lr"] == 0.999 ** 4  # SFSLProtocol's default lr 1.0, decayed x0.999 a round
    assert sfsl.make_device(0).party(doc).settings.lr == 0.999 ** 4


def test_over_http_a_device_refuses_a_million_epochs_before_any_message(sfsl, nodes) -> None:
    doc = sfsl.make_server().node.open_round(1, USERS)
    server = _serve(nodes, sfsl, change=DOCUMENTS["a-million-epochs"](doc))
    device = sfsl.make_device(0)
    before = device.device.user_embedding.copy()
    with pytest.raises(InvalidMessage, match=r"settings other than the deployment's"):
        _take_part(server, device)
    assert server.posted == [] and not [p for (m, p) in server.seen if m == "POST"]
    _unchanged(device, before)


def _client(credentials: Path, server: DeviatingNode, tmp_path: Path) -> dict[str, Any]:
    """``secemb client`` of device 0 against ``server``: its one output line (exit 1, no traceback)."""
    doc = json.loads(credentials.read_text())
    doc |= {"url": server.url, "ca": str((credentials.parent / doc["ca"]).resolve())}
    path = tmp_path / "device-0.json"
    path.write_text(json.dumps(doc))
    path.chmod(0o600)
    res = CliRunner().invoke(app, ["client", "--user", "0", "--credentials", str(path), "--wait", "10"])
    assert res.exit_code == 1 and (res.exception is None or isinstance(res.exception, SystemExit)), res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.output, res.output
    out: dict[str, Any] = json.loads(lines[0])
    return out


def test_secemb_client_of_sfsl_refuses_an_inflated_key_list_with_one_line(sfsl_credentials, nodes, tmp_path) -> None:
    protocol = ExchangeCredentials.load(sfsl_credentials).protocol(None)
    server = _serve(nodes, protocol, _inflated("psu-advertise"))
    n = 32 + 4 + (3 + FAKE) * ENTRY
    assert _client(sfsl_credentials, server, tmp_path) == {
        "user": 0, "error": f"round 1: the answer of psu-advertise: {n} bytes, longer than any honest answer "
                            f"({KEYS_3} bytes)"}
    assert server.posted == ["psu-advertise"]


def test_secemb_client_of_sfsl_refuses_a_million_epochs_with_one_line(sfsl_credentials, nodes, tmp_path) -> None:
    protocol = ExchangeCredentials.load(sfsl_credentials).protocol(None)
    doc = protocol.make_server().node.open_round(1, USERS)
    server = _serve(nodes, protocol, change=DOCUMENTS["a-million-epochs"](doc))
    assert _client(sfsl_credentials, server, tmp_path) == {
        "user": 0, "error": "round 1: not an SFSL round document for user 0 (settings other than the deployment's)"}
    assert server.posted == []


def test_a_dripped_answer_fails_the_devices_round_within_its_request_timeout(sfsl, nodes) -> None:
    """A server that writes the 240-byte key list one byte every 25 ms (6 s in all) keeps every
    read of a device whose requests time out after 1 s alive; an answer must keep 32 KiB/s once
    its timeout has passed (G7's fix, ``ApiClient``), so the device's round fails after about a
    second (the margin here is 2 s) -- before, with a 30 s timeout and a 64 MiB answer, a drip
    held a device for years."""
    node = sfsl.make_server().node
    doc = node.open_round(1, USERS)
    server = DeviatingNode(node, doc, {u: sfsl.make_device(u).party(doc) for u in USERS[1:]},
                           drip=("psu-advertise", 0.025))
    nodes.append(server)
    t0 = time.monotonic()
    with ApiClient(server.url, "user:0", b"k" * 32, timeout=1.0) as api, pytest.raises(SecembError):
        take_part(HttpStageLink(0, api), sfsl.make_device(0), SFSL_PLAN, doc, wait_s=5.0, poll_s=0.01)
    assert time.monotonic() - t0 < 3.0
