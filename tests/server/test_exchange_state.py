"""A one-server server's durable state (secemb.server.exchange_state, what ``secemb serve`` keeps
in DEPLOYMENT/state): the app's round keeper (StageCloser) over SecEA's and SFSL's nodes in
process, "restarted" by building a fresh node and state over the same directory.

After a restart the model (SFSL's table and dense vector; SecEA's key directory and union) is
the one of the last committed round, the round document is that round's, a used round id is
refused and the next one commits; a round open at the restart is aborted; a corrupt or foreign
state is refused with nothing written."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from secemb.errors import InvalidParameters, ProtocolError
from secemb.protocols.exchange import ExchangeServer
from secemb.protocols.secea.coding import SecEAParams
from secemb.protocols.secea.parties import SecEAClient
from secemb.protocols.secea.staged import SecEANode, SecEAParty, SecEASetupParty
from secemb.protocols.secea.union import union_bloom
from secemb.randomness import CtrDrbg
from secemb.secagg.identity import Roster
from secemb.server.exchange_app import StageCloser
from secemb.server.exchange_state import ExchangeState
from secemb.server.persist import CorruptState, Journal

torch.set_num_threads(1)

SETS = [[1, 4, 9], [4, 7], [1, 7, 9, 12]]
FP = "f" * 64


def play(rounds: StageCloser, round_id: int, make: Callable[[dict[str, Any]], dict[int, Any]], *,
         stop_after: str | None = None) -> str:
    """Open ``round_id`` for silos / devices 0-2, make their parties from the round document,
    run its stages (the operator closes each; up to ``stop_after`` only, left open); the round's state."""
    doc = rounds.open_round(round_id, [0, 1, 2])
    parties = make(doc)
    for stage in doc["stages"]:
        for u, party in parties.items():
            rounds.receive(round_id, stage, u, party.message(stage))
        if stage == stop_after:
            return "open"
        rounds.close(round_id, stage)
        if rounds.node.plan.replies(stage):
            for u, party in parties.items():
                answer = rounds.node.reply(round_id, stage, u)
                assert answer is not None
                party.accept(stage, answer)
    return str(rounds.document()["state"])


class SecEAWorld:
    """Three silos (1024-bit keys) that live through the server's restarts."""

    def __init__(self) -> None:
        self.params = SecEAParams(3, 1, dim=2)
        self.bloom = union_bloom(16, sum(len(s) for s in SETS))
        rng = CtrDrbg(1)
        roster = Roster.generate()  # the silos sign their keys (docs/secea.md, "The signed directory")
        self.clients = [SecEAClient(i, self.params, np.array(s), key_bits=1024, identity=roster.enroll(i), _rng=rng)
                        for i, s in enumerate(SETS)]

    def server(self, state_dir: Path, seed: int) -> tuple[StageCloser, ExchangeState]:
        """A fresh server (node and state) over ``state_dir``."""
        node = SecEANode(self.params, self.bloom, key_bits=1024, _rng=CtrDrbg(seed))
        state = ExchangeState(state_dir, FP, ExchangeServer(node, 1 << 20, lambda: b"", 3))
        return StageCloser(node, state=state), state

    def setup(self, rounds: StageCloser, round_id: int) -> str:
        return play(rounds, round_id, lambda doc: {i: SecEASetupParty(c, self.bloom, round_id, _rng=CtrDrbg(10 + i))
                                                   for i, c in enumerate(self.clients)})

    def round(self, rounds: StageCloser, round_id: int, **kw: Any) -> tuple[str, dict[int, SecEAParty]]:
        rows = [np.full((len(s), 2), float(v + 1)) for v, s in enumerate(SETS)]
        parties = {i: SecEAParty(c, round_id, rows[i]) for i, c in enumerate(self.clients)}
        return play(rounds, round_id, lambda doc: parties, **kw), parties


def test_secea_goes_on_after_a_restart_with_the_set_up_and_round_ids_kept(tmp_path: Path) -> None:
    world = SecEAWorld()
    rounds, _ = world.server(tmp_path, 1)
    assert world.setup(rounds, 1) == "committed"
    assert world.round(rounds, 2)[0] == "committed"
    # restart: a fresh node with fresh randomness; the silos keep their directory and union
    rounds, state = world.server(tmp_path, 2)
    doc = rounds.document()
    union_size = 5  # {1, 4, 7, 9, 12}
    assert (doc["round_id"], doc["state"], doc["stage"], doc["union_size"]) == (2, "committed", None, union_size)
    for used in (1, 2):
        with pytest.raises(ProtocolError, match=f"round {used} does not follow round 2"):
            rounds.open_round(used, [0, 1, 2])
    state_after, parties = world.round(rounds, 3)
    assert state_after == "committed"
    # entity 4 is held by silos 0 and 1 (rows 1.0 and 2.0): the average is 1.5
    assert parties[0].average is not None and parties[0].average[1].tolist() == [1.5, 1.5]
    assert state.last is not None and state.last["round_id"] == 3


def test_a_round_open_at_the_restart_is_aborted_and_its_id_never_used_again(tmp_path: Path) -> None:
    world = SecEAWorld()
    rounds, _ = world.server(tmp_path, 1)
    assert world.setup(rounds, 1) == "committed"
    assert world.round(rounds, 2, stop_after="secea-share")[0] == "open"  # the silos padded round 2's shares
    rounds, _ = world.server(tmp_path, 2)
    doc = rounds.document(operator=True)
    assert (doc["round_id"], doc["state"], doc["stage"]) == (2, "aborted", None)
    assert "aborted at the restart" in doc["reason"]
    with pytest.raises(ProtocolError, match="does not follow round 2"):
        rounds.open_round(2, [0, 1, 2])
    assert world.round(rounds, 3)[0] == "committed"
    # a second restart still knows round 2 ended aborted and round 3 committed
    rounds, _ = world.server(tmp_path, 3)
    assert (rounds.document()["round_id"], rounds.document()["state"]) == (3, "committed")


def test_a_refused_open_keeps_its_id_free(tmp_path: Path) -> None:
    world = SecEAWorld()
    rounds, state = world.server(tmp_path, 1)
    with pytest.raises(ProtocolError, match="set-up .* comes first"):
        rounds.open_round(1, [0, 1])
    assert state.last is None
    assert world.setup(rounds, 1) == "committed"
    rounds, _ = world.server(tmp_path, 2)
    with pytest.raises(InvalidParameters):
        rounds.open_round(2, [0, 5])
    rounds, _ = world.server(tmp_path, 3)
    assert rounds.document()["round_id"] == 1
    assert world.round(rounds, 2)[0] == "committed"


def sfsl_world() -> tuple[Any, dict[int, Any]]:
    from secemb.data.ctr import TaobaoShaped, split_clicks
    from secemb.protocols.exchange import ExchangeRun
    from secemb.protocols.sfsl.protocol import SFSLProtocol

    clicks = split_clicks(TaobaoShaped("taobao-mini", seed=3).clients(np.arange(8)))
    proto = SFSLProtocol(ExchangeRun("taobao-mini", users_per_round=3), sfsl_preset="CPP1", batch=8, data=clicks)
    return proto, {u: proto.make_device(u) for u in range(3)}


def sha(server: ExchangeServer) -> str:
    return hashlib.sha256(server.model()).hexdigest()


def test_sfsl_model_and_round_ids_survive_a_restart(tmp_path: Path) -> None:
    proto, devices = sfsl_world()

    def server() -> tuple[StageCloser, ExchangeServer]:
        hosted = proto.make_server()
        return StageCloser(hosted.node, state=ExchangeState(tmp_path, FP, hosted)), hosted

    def one(rounds: StageCloser, round_id: int) -> str:
        return play(rounds, round_id, lambda doc: {u: devices[u].party(doc) for u in range(3)})

    rounds, hosted = server()
    initial = sha(hosted)
    assert one(rounds, 1) == "committed"
    trained = sha(hosted)
    assert trained != initial
    rounds, hosted = server()  # restart: make_server() gives the initial model, the state restores round 1's
    assert sha(hosted) == trained
    assert rounds.document()["round_id"] == 1 and rounds.document()["settings"]["lr"] > 0
    assert one(rounds, 2) == "committed" and sha(hosted) != trained


def test_a_corrupt_or_foreign_state_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    world = SecEAWorld()
    rounds, _ = world.server(tmp_path, 1)
    assert world.setup(rounds, 1) == "committed"
    files = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert set(files) == {"binding.json", "checkpoint.npz", "journal.jsonl"}
    node = SecEANode(world.params, world.bloom, key_bits=1024)
    with pytest.raises(CorruptState, match="another configuration"):
        ExchangeState(tmp_path, "0" * 64, ExchangeServer(node, 1 << 20, lambda: b"", 3))
    ck = tmp_path / "checkpoint.npz"
    ck.write_bytes(files["checkpoint.npz"][:-7] + b"garbage")
    with pytest.raises(CorruptState, match="unreadable"):
        world.server(tmp_path, 2)
    assert ck.read_bytes() == files["checkpoint.npz"][:-7] + b"garbage"
    assert (tmp_path / "journal.jsonl").read_bytes() == files["journal.jsonl"]
    # a journal damaged before its last record
    ck.write_bytes(files["checkpoint.npz"])
    journal = tmp_path / "journal.jsonl"
    journal.write_bytes(b"0" + files["journal.jsonl"][1:])
    with pytest.raises(CorruptState, match="damaged"):
        world.server(tmp_path, 3)
    assert journal.read_bytes() == b"0" + files["journal.jsonl"][1:]


@pytest.mark.parametrize("rid", [True, "1", -1, 1.0, None])
def test_a_journal_record_without_a_round_id_is_refused(tmp_path: Path, rid: Any) -> None:
    Journal(tmp_path / "journal.jsonl").append({"event": "open", "round_id": rid, "users": [0, 1, 2]})
    written = (tmp_path / "journal.jsonl").read_bytes()
    with pytest.raises(CorruptState, match=rf"^journal .*journal.jsonl: round_id must be an int >= 0, got {rid!r}$"):
        SecEAWorld().server(tmp_path, 1)
    assert (tmp_path / "journal.jsonl").read_bytes() == written and not (tmp_path / "checkpoint.npz").exists()


def test_a_checkpoint_the_disk_refuses_is_written_before_the_next_round_opens(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The set-up commits but its checkpoint write fails (disk full): the round stays committed
    in memory, the next open is refused (StorageError, 503 over HTTP) while the disk refuses,
    and goes through -- checkpoint first -- once it accepts."""
    import secemb.server.exchange_state as es
    from secemb.server.persist import StorageError

    def full(*args: Any, **kwargs: Any) -> None:
        raise StorageError("could not write file checkpoint.npz: ENOSPC")

    world = SecEAWorld()
    rounds, state = world.server(tmp_path, 1)
    save = es.save_checkpoint
    monkeypatch.setattr(es, "save_checkpoint", full)
    assert world.setup(rounds, 1) == "committed"
    assert not (tmp_path / "checkpoint.npz").exists()
    with pytest.raises(StorageError, match="ENOSPC"):
        rounds.open_round(2, [0, 1, 2])
    monkeypatch.setattr(es, "save_checkpoint", save)
    assert world.round(rounds, 2)[0] == "committed"
    rounds, _ = world.server(tmp_path, 2)
    assert (rounds.document()["round_id"], rounds.document()["state"]) == (2, "committed")
    assert world.round(rounds, 3)[0] == "committed"


def test_a_node_without_state_hooks_cannot_restart_over_a_committed_round(tmp_path: Path) -> None:
    """A protocol whose node is no DurableExchangeNode (no ``state`` / ``restore``): its round
    ids are kept, but a restart after a committed round is refused rather than serving the
    initial model as if it were the trained one."""
    server = ExchangeServer(object(), 1, lambda: b"model", 2)  # type: ignore[arg-type]
    state = ExchangeState(tmp_path, FP, server)
    state.opening(1, [0, 1])
    state.ended({"round_id": 1, "users": [0, 1], "stages": [], "stage": None, "state": "committed", "reason": None})
    with pytest.raises(CorruptState, match="cannot restore a committed state"):
        ExchangeState(tmp_path, FP, server)


def test_a_lost_or_older_checkpoint_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    """Session 24 (helper L's left item): a journal recording a committed round whose checkpoint is
    missing, or a checkpoint of an earlier round (an older backup), would serve an older model under
    the later round's document; the start is refused, naming the round, and nothing is written (as
    the two-server server's "A lost checkpoint")."""
    proto, devices = sfsl_world()

    def server() -> StageCloser:
        hosted = proto.make_server()
        return StageCloser(hosted.node, state=ExchangeState(tmp_path, FP, hosted))

    rounds = server()
    assert play(rounds, 1, lambda doc: {u: devices[u].party(doc) for u in range(3)}) == "committed"
    first = (tmp_path / "checkpoint.npz").read_bytes()
    rounds = server()
    assert play(rounds, 2, lambda doc: {u: devices[u].party(doc) for u in range(3)}) == "committed"
    files = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    (tmp_path / "checkpoint.npz").write_bytes(first)  # an older backup put back
    with pytest.raises(CorruptState, match="the checkpoint of round 1, but its journal records 1 later committed "
                                           r"round\(s\) \(the last: round 2\)"):
        server()
    (tmp_path / "checkpoint.npz").unlink()  # lost
    with pytest.raises(CorruptState, match=r"no checkpoint, but its journal records 2 later committed round\(s\)"):
        server()
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == {
        k: v for k, v in files.items() if k != "checkpoint.npz"}
    (tmp_path / "checkpoint.npz").write_bytes(files["checkpoint.npz"])  # restored: it goes on
    assert server().document()["round_id"] == 2
