"""Session 21 (helper G, red team): an SFSL device's Algorithm 2 memo across ``secemb client``
processes (finding G8).

Algorithm 2 is per-client *persistent* state (spec sfsl.md: "Alg 2, index perturbation (per
client, persistent state)"): each index's permanent answer is drawn once and reused, which is what
makes a device's reports over any number of rounds ε∞-LDP (docs/sfsl.md, "Longitudinal
privacy"; CPP2: ε∞ = 2.71 per index).  A deployed device is a ``secemb client`` process, one
round by default (``--rounds 1``).  Before, SFSL's devices kept no state between processes
(``SFSLProtocol`` was not a ``DurableDevices``): each process drew a fresh permanent answer for
every index, so an honest-but-curious server -- no deviation at all -- that reads the device's
download requests over rounds gets independent samples and its majority vote converges to the
device's real goods set S, not to the permanent response (measured: 31 one-round processes, a
CPP2 device's 27 real goods of 2000 recovered exactly).  Now ``SFSLProtocol.make_durable_device``
keeps the memo and the user embedding in the device's state file, written before the request
that follows from a new permanent answer leaves.

Here: device 0 of a CPP2 deployment (taobao-mini, 2000 goods) as ``secemb client`` builds it
(:func:`~secemb.client.stages.deployed_device` with its state file beside its credentials), one
process per round for 31 rounds, each announced the union of every goods.  Expected: every
process after the first starts from the memo the first drew, and the server's majority vote over
the 31 requests is the permanent response S', not S (they differ in about |U|/16 indices).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from secemb.client.stages import deployed_device, device_state_file
from secemb.protocols.device_state import CorruptDeviceState, DeviceStateFile
from secemb.protocols.sfsl import wire
from secemb.protocols.sfsl.protocol import SFSLClient
from secemb.secagg.psu import union_message
from secemb.server.exchange_deploy import ExchangeCredentials

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cli"))
from cli_helpers import init_one_server  # type: ignore[import-not-found]  # noqa: E402

ROUNDS = 31
GOODS = 2000  # taobao-mini


@pytest.fixture(scope="module")
def credentials(tmp_path_factory) -> ExchangeCredentials:
    root = tmp_path_factory.mktemp("sfsl-memo") / "dep"
    init_one_server(root, "--protocol", "sfsl", "--dataset", "taobao-mini", "--users-per-round", "3",
                    "--option", "sfsl_preset=CPP2")
    return ExchangeCredentials.load(root / "devices" / "device-0.json")


def _request(credentials: ExchangeCredentials, round_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Device 0 started as a new ``secemb client`` process, in round ``round_id`` (union: every
    goods): ``(the goods it requests, its memo's yes set before the round, its real set)``."""
    protocol = credentials.protocol(None)
    state = device_state_file(credentials.path, 0, credentials.doc, credentials.key, credentials.ca.read_bytes())
    device = deployed_device(protocol, 0, state)
    assert isinstance(device, SFSLClient)
    before = device.device.perturber.yes.copy()
    doc = protocol.make_server().node.open_round(round_id, [0, 1, 2])
    party = device.party(doc)
    party.accept("psu-unmask", union_message(2 * round_id, np.arange(GOODS)))
    asked = wire.open_request(party.message("download"), round_id, GOODS)
    return asked, before, device.device.real


def test_a_devices_permanent_responses_survive_its_process_and_bound_what_the_server_learns(credentials) -> None:
    asked, first_yes, real = _request(credentials, 1)
    assert first_yes.size == 0  # a fresh device
    votes = np.zeros(GOODS, np.int64)
    votes[asked] += 1
    memos = []
    for r in range(2, ROUNDS + 1):
        asked, yes, _ = _request(credentials, r)
        votes[asked] += 1
        memos.append(yes)
    assert all(np.array_equal(m, memos[0]) for m in memos) and memos[0].size > 0  # the first process's memo, kept
    majority = np.flatnonzero(2 * votes > ROUNDS)
    assert np.array_equal(majority, memos[0])  # the server's best guess is the permanent response ...
    assert not np.array_equal(majority, real)  # ... not the device's real goods


def _state(credentials: ExchangeCredentials) -> DeviceStateFile:
    return device_state_file(credentials.path, 0, credentials.doc, credentials.key, credentials.ca.read_bytes())


@pytest.mark.parametrize("arrays", [
    {"yes": np.array([GOODS]), "no": np.array([1]), "user_embedding": np.zeros(18)},  # a goods id out of range
    {"yes": np.array([3]), "no": np.array([3]), "user_embedding": np.zeros(18)},  # both answers for one goods
    {"yes": np.array([3]), "no": np.array([4]), "user_embedding": np.full(18, np.nan)},
    {"yes": np.array([3]), "no": np.array([4]), "user_embedding": np.zeros(17)},
    {"yes": np.array([3]), "no": np.array([4])},
])
def test_a_state_file_the_device_would_not_write_is_refused_and_kept(credentials, tmp_path: Path,
                                                                    arrays: dict[str, np.ndarray]) -> None:
    state = _state(credentials)
    state = DeviceStateFile(tmp_path / "device-0.state", state.secret, state.binding)
    state.save({}, arrays)
    before = state.path.read_bytes()
    with pytest.raises(CorruptDeviceState, match=f"device state {state.path}: "):
        deployed_device(credentials.protocol(None), 0, state)
    assert state.path.read_bytes() == before
