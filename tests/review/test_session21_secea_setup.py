"""Session 21 (helper K), finding G6's fix: a SecEA silo takes part in one set-up, unless its
operator approves another (``secemb client --new-set-up``; docs/secea_deployment.md), and takes a union
only within the deployment's public entities.  The honest paths, over HTTP on 127.0.0.1 with
silo 0 run by ``secemb client`` as deployed (its state file beside its credentials): its first
set-up, its restart after it (it goes on from its state, no new set-up), and a new set-up its
operator approved -- one per approval, with fresh keys, its model kept.  The selective-failure
probe itself is ``test_session21_secea_union_oracle.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from secemb.cli import app
from secemb.client.stages import device_state_file, take_part
from secemb.errors import ProtocolError
from secemb.protocols.device_state import DeviceStateFile
from secemb.protocols.secea.staged import SECEA_PLAN
from secemb.server.exchange_deploy import ExchangeCredentials
from secemb.transport.http import HttpStageLink
from secemb.transport.network import ApiClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from session21_secea_setup import CHOSEN, SETUP_STAGES, Deployment, replacing_union, union_less  # noqa: E402


def _committed(secea_deployment: Deployment, round_id: int, *args: str) -> None:
    code, line = secea_deployment.client(*args)
    assert code == 0 and line["round_id"] == round_id and line["outcome"] == "committed", line


def _refused_set_up(secea_deployment: Deployment, round_id: int, before: int, done: str) -> None:
    """Set-up ``round_id`` refused at its round document: one line, exit 1, nothing sent."""
    served = secea_deployment.set_up(round_id)
    code, line = secea_deployment.client()
    assert code == 1 and line["error"] == (f"round {round_id}: silo 0 took part in a set-up before (round {before}, "
                                           f"{done}): it takes no second one without its operator (secemb client "
                                           "--new-set-up)")
    assert served.posted == []


def test_a_first_set_up_commits_and_the_restarted_silo_goes_on_from_its_state(secea_deployment: Deployment) -> None:
    served = secea_deployment.set_up(1)
    _committed(secea_deployment, 1)
    assert served.posted == SETUP_STAGES
    meta, arrays = secea_deployment.state()
    assert meta["setup_round"] == 1 and meta["last_round"] == 1
    assert arrays["union"].tolist() == CHOSEN  # the honest union: the public entities every silo holds
    keys = meta["client"]["x25519"]
    secea_deployment.round(2)
    _committed(secea_deployment, 2)  # a new process: from its state file, no set-up
    meta, _ = secea_deployment.state()
    assert meta["last_round"] == 2 and meta["setup_round"] == 1 and meta["client"]["x25519"] == keys
    _refused_set_up(secea_deployment, 3, 1, "completed")


def test_an_operator_approved_set_up_is_taken_once_per_approval_with_fresh_keys(secea_deployment: Deployment) -> None:
    secea_deployment.set_up(1, union_less(CHOSEN[0], 1))
    assert secea_deployment.client()[0] == 1  # the probe; then the operator looks, and approves one set-up
    secea_deployment.set_up(2)
    _committed(secea_deployment, 2, "--new-set-up")
    meta, arrays = secea_deployment.state()
    assert meta["setup_round"] == 2 and meta["last_round"] == 2 and arrays["union"].tolist() == CHOSEN
    first_keys = meta["client"]["x25519"]
    secea_deployment.round(3)
    _committed(secea_deployment, 3)
    _refused_set_up(secea_deployment, 4, 2, "completed")  # the approval was for one set-up
    model = {k: v for k, v in secea_deployment.state()[1].items() if k.startswith(("param", "adam"))}
    # approved again, on a server that restarted its round ids: fresh keys, the trained model kept
    secea_deployment.set_up(1)
    _committed(secea_deployment, 1, "--new-set-up")
    meta, arrays = secea_deployment.state()
    assert meta["setup_round"] == 1 and meta["last_round"] == 1 and meta["client"]["x25519"] != first_keys
    assert all(np.array_equal(arrays[k], v) for k, v in model.items())
    secea_deployment.round(2)
    _committed(secea_deployment, 2)


def test_a_union_of_ids_outside_the_public_entities_is_refused_before_it_is_used(secea_deployment: Deployment) -> None:
    """The deployment averages the 6 most-rated items, public: an honest union holds no other id
    (the exact filter), so one with another id of the 1682-item domain is the server's, and one
    longer than a union of all 6 is refused before it is read (G's note: a union inflated to
    the domain would make each later RELAY grow with its square)."""
    secea_deployment.set_up(1, replacing_union([5, *CHOSEN[1:]], 1))  # also without 651, silo 0's: that goes unsaid
    code, line = secea_deployment.client()
    assert code == 1 and line["error"] == "round 1: union: ids outside the 6 public entities of the deployment (1 of 6)"
    secea_deployment.set_up(2, replacing_union(np.arange(1682), 2))
    code, line = secea_deployment.client("--new-set-up")
    assert code == 1 and "longer than any honest answer (60 bytes)" in line["error"], line
    meta, arrays = secea_deployment.state()
    assert meta["setup_round"] == 2 and "client" not in meta and "union" not in arrays


def test_a_set_up_record_with_a_last_round_but_no_keys_is_refused_and_kept(secea_deployment: Deployment) -> None:
    """A state file the silo never writes (a completed round without the keys of its set-up),
    correctly tagged: ``secemb client`` exits 2 and leaves the file as it was."""
    secea_deployment.set_up(1, union_less(CHOSEN[0], 1))
    assert secea_deployment.client()[0] == 1
    creds = ExchangeCredentials.load(secea_deployment.creds)
    store = device_state_file(creds.path, 0, creds.doc, creds.key, creds.ca.read_bytes())
    meta, arrays = store.load()
    store.save({**meta, "last_round": 3}, arrays)
    kept = secea_deployment.state_path.read_bytes()
    code, line = secea_deployment.client("--new-set-up")
    assert code == 2 and line["error"].endswith("SecEA silo state: a last round but no keys"), line
    assert secea_deployment.state_path.read_bytes() == kept


def test_new_set_up_is_bad_usage_for_a_two_server_device() -> None:
    """Only a SecEA silo takes ``--new-set-up``: a two-server device refuses it before it reaches a
    server (exit 2, one line)."""
    res = CliRunner().invoke(app, ["client", "--user", "0", "--server0", "http://127.0.0.1:9", "--server1",
                                   "http://127.0.0.1:9", "--new-set-up", "--wait", "1"],
                             env={"SECEMB_DEVICE_KEY0": "11" * 32, "SECEMB_DEVICE_KEY1": "22" * 32})
    assert res.exit_code == 2 and json.loads(res.output) == {
        "user": 0, "error": "bad usage: --new-set-up is a SecEA silo's (a one-server deployment's credentials)"}


def test_a_silo_whose_set_up_record_cannot_be_written_sends_nothing(secea_deployment: Deployment,
                                                                    tmp_path: Path) -> None:
    """The record comes before the HELLO: a disk that refuses it fails the set-up before the silo
    sends anything (over HTTP, the deployed silo's ``take_part``)."""
    (tmp_path / "a-file").write_bytes(b"")
    silo = secea_deployment.protocol.make_durable_device(0, DeviceStateFile(tmp_path / "a-file" / "device-0.state",
                                                                      b"k" * 32, {"device": 0}))
    identity = secea_deployment.credentials(0).identity
    assert identity is not None
    silo.identity = identity
    served = secea_deployment.set_up(1)
    with ApiClient(served.url, "user:0", b"k" * 32) as api, pytest.raises(ProtocolError, match="cannot be written"):
        take_part(HttpStageLink(0, api), silo, SECEA_PLAN, served.doc, wait_s=5.0, poll_s=0.01)
    assert served.posted == [] and silo.setup_round == 1 and not silo.client.set_up
