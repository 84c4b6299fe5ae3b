"""A SecEA silo whose own process restarts goes on from its state file (docs/secea.md, "A silo's
restart"; :meth:`SecEAProtocol.make_durable_device`, :mod:`secemb.protocols.device_state`):
same keys, directory, union, model, Adam state and batch order, so the run's model is the
uninterrupted run's bit for bit, with no new set-up.  A file that is not this silo's of this
deployment, or altered, is refused before anything is used or overwritten; a silo without a
state file (``make_device``) still cannot come back."""

from __future__ import annotations

import stat
from pathlib import Path

import numpy as np
import pytest

from secemb.client.stages import device_state_file
from secemb.data import load_movielens, train_test_split
from secemb.digest import model_sha256
from secemb.errors import InvalidMessage, InvalidParameters, ProtocolError
from secemb.protocols.device_state import CorruptDeviceState, DeviceStateFile
from secemb.protocols.exchange import ExchangeRun
from secemb.protocols.secea.protocol import SecEAProtocol, SecEASilo
from secemb.protocols.stages import SECEA_SETUP_STAGES, SECEA_STAGES
from secemb.secagg.identity import Roster
from secemb.sim.player import Rounds, connect_local

SILOS = [0, 1, 2]
#: each silo's certified identity (what its credentials carry; it keeps it across restarts)
ROSTER = Roster.generate()
IDENTITIES = {u: ROSTER.enroll(u) for u in SILOS}


@pytest.fixture(scope="module")
def split():
    return train_test_split(load_movielens("ml-100k"), 0.2, 0)


def _proto(split, seed: int = 0) -> SecEAProtocol:
    return SecEAProtocol(ExchangeRun("ml-100k", epochs=1, seed=seed), dim=2, secea_items=5, secea_key_bits=1024,
                         data=split)


def _store(root: Path, user: int, *, secret: bytes = b"k" * 32, deployment: str = "dep-a") -> DeviceStateFile:
    return DeviceStateFile(root / f"device-{user}.state", secret, {"device": user, "deployment": deployment})


def _durable(proto: SecEAProtocol, store: DeviceStateFile) -> SecEASilo:
    """Silo ``store``'s device as ``secemb client`` starts it: from its file, then given its identity."""
    silo = proto.make_durable_device(store.binding["device"], store)
    silo.identity = IDENTITIES[store.binding["device"]]
    return silo


def _device(proto: SecEAProtocol, user: int) -> SecEASilo:
    silo = proto.make_device(user)
    silo.identity = IDENTITIES[user]
    return silo


def _doc(round_id: int, stages) -> dict:
    return {"round_id": round_id, "users": SILOS, "stages": list(stages)}


def _round(rounds: Rounds, silos: dict[int, SecEASilo], round_id: int) -> None:
    rec = rounds.play(round_id, {u: s.party(_doc(round_id, SECEA_STAGES)) for u, s in silos.items()})
    assert rec.finished == SILOS and rec.outcome["state"] == "committed"


def _hash(silos: dict[int, SecEASilo]) -> str:
    ordered = [silos[u].silo for u in SILOS]
    return model_sha256(np.vstack([s.item_rows for s in ordered]),
                        np.concatenate([s.user_rows.ravel() for s in ordered]))


def _deployment(proto: SecEAProtocol, root: Path) -> tuple[Rounds, dict[int, SecEASilo]]:
    """A set-up deployment of durable silos, their files in ``root``."""
    rounds = connect_local(proto.make_server())
    silos = {u: _durable(proto, _store(root, u)) for u in SILOS}
    setup = rounds.play(0, {u: s.party(_doc(0, SECEA_SETUP_STAGES)) for u, s in silos.items()})
    assert setup.finished == SILOS and setup.outcome["state"] == "committed"
    return rounds, silos


def test_a_silo_restarted_from_its_state_file_trains_on_to_the_uninterrupted_model(split, tmp_path):
    straight_rounds, straight = _deployment(_proto(split), tmp_path / "straight")
    for k in (1, 2, 3):
        _round(straight_rounds, straight, k)

    proto = _proto(split)
    rounds, silos = _deployment(proto, tmp_path / "restarted")
    for k in (1, 2):
        _round(rounds, silos, k)
    state = tmp_path / "restarted" / "device-2.state"
    assert stat.S_IMODE(state.stat().st_mode) == 0o600
    old_hello = silos[2].client.hello()
    silos[2] = _durable(proto, _store(tmp_path / "restarted", 2))  # silo 2's process started again
    assert silos[2].client.hello() == old_hello and silos[2].last_round == 2  # its keys, its last round
    _round(rounds, silos, 3)  # no new set-up: the server's directory and union still serve
    assert _hash(silos) == _hash(straight)
    # the model did train: not the model of two rounds ago
    assert silos[2].last_round == 3


def test_a_silo_restarted_during_a_round_never_pads_that_round_again(split, tmp_path):
    proto = _proto(split)
    rounds, silos = _deployment(proto, tmp_path)
    party = silos[2].party(_doc(1, SECEA_STAGES))
    party.message("secea-share")  # padded and handed out, then silo 2 stops before the round ends
    back = _durable(proto, _store(tmp_path, 2))
    assert back.client.last_upload == 1 and back.last_round == 0
    model, order = back.silo.state(), back.gen.bit_generator.state
    with pytest.raises(InvalidMessage, match="pads are used once"):
        back.party(_doc(1, SECEA_STAGES))  # refused before its local training: the silo is unchanged
    assert back.gen.bit_generator.state == order
    assert all(np.array_equal(v, back.silo.state()[k]) for k, v in model.items())
    with pytest.raises(ProtocolError, match="pads are used once"):  # the client's own guard behind it
        back.round_party(1).message("secea-share")
    with pytest.raises(InvalidMessage, match="no second one"):
        back.party(_doc(2, SECEA_SETUP_STAGES))


def _refused(proto: SecEAProtocol, store: DeviceStateFile, match: str) -> None:
    before = store.path.read_bytes() if store.path.exists() else None
    with pytest.raises(CorruptDeviceState, match=match):
        proto.make_durable_device(store.binding["device"], store)
    assert (store.path.read_bytes() if store.path.exists() else None) == before  # nothing overwritten


def test_state_files_of_another_silo_deployment_or_altered_are_refused(split, tmp_path):
    proto = _proto(split)
    _deployment(proto, tmp_path)
    own = _store(tmp_path, 1)
    # silo 0's file handed to silo 1 (same deployment, same credentials secret: the binding names silo 0)
    (tmp_path / "swap").mkdir()
    (tmp_path / "swap" / "device-1.state").write_bytes((tmp_path / "device-0.state").read_bytes())
    _refused(proto, _store(tmp_path / "swap", 1), "another device or deployment .device differs")
    # another deployment's binding, and another device secret under the same binding
    _refused(proto, _store(tmp_path, 1, deployment="dep-b"), "deployment differs")
    _refused(proto, _store(tmp_path, 1, secret=b"x" * 32), "authentication tag")
    # one bit flipped anywhere: the tag
    data = bytearray(own.path.read_bytes())
    for pos in (40, len(data) // 2, len(data) - 1):
        flipped = bytearray(data)
        flipped[pos] ^= 1
        own.path.write_bytes(bytes(flipped))
        _refused(proto, own, "authentication tag|another device|malformed")
    # a header nested past the JSON parser's recursion limit (read before the tag is checked)
    deep = b"[" * 100_000
    own.path.write_bytes(b"SEDSTAT1" + len(deep).to_bytes(4, "little") + deep + bytes(32))
    _refused(proto, own, "authentication tag")
    own.path.write_bytes(bytes(data[:20]))
    _refused(proto, own, "not a device state file")
    own.path.write_bytes(b"")
    _refused(proto, own, "not a device state file")


def test_a_correctly_tagged_state_that_does_not_fit_the_silo_is_refused(split, tmp_path):
    proto = _proto(split)
    _deployment(proto, tmp_path)
    store = _store(tmp_path, 1)
    meta, arrays = store.load()
    good = dict(meta), dict(arrays)

    def rewrite(meta_change=None, arrays_change=None):
        m, a = dict(good[0]), dict(good[1])
        m |= meta_change or {}
        a |= arrays_change or {}
        store.save(m, a)

    rewrite(arrays_change={"param2": np.zeros((1, 2), np.float32)})
    _refused(proto, store, "param2 must be finite float32")
    rewrite(arrays_change={"union": good[1]["union"][1:]})
    _refused(proto, store, "union")
    rewrite(meta_change={"client": {**good[0]["client"], "x25519": "00" * 32}})
    _refused(proto, store, "directory does not carry this client's own keys")
    rewrite(meta_change={"client": {**good[0]["client"], "paillier_q": "7"}})
    _refused(proto, store, "1024-bit key")
    rewrite(meta_change={"client": {k: v for k, v in good[0]["client"].items() if k != "setup_round"}})
    _refused(proto, store, "keys missing or malformed")  # the set-up its directory's signatures name
    rewrite(meta_change={"last_round": -3})
    _refused(proto, store, "last_round")
    rewrite(meta_change={"batch_order": {"bit_generator": "MT19937"}})
    _refused(proto, store, "device state")


def test_a_restored_directory_is_verified_when_the_silo_gets_its_identity(split, tmp_path):
    """A signed silo started from its file verifies the stored directory once it is given its
    identity (``secemb client`` gives it right after): a correctly tagged file whose directory has
    a byte of silo 1's X25519 key changed is refused then, and before it the silo pads nothing."""
    proto = _proto(split)
    _deployment(proto, tmp_path)
    store = _store(tmp_path, 0)
    meta, arrays = store.load()
    directory = arrays["directory"].copy()
    first = 32 + 2 + 2 + 32 + 184  # header, count, silo 0's id, key, certificate and signature: its len(n)
    silo1_key = first + 2 + int.from_bytes(directory[first:first + 2].tobytes(), "little") + 2
    directory[silo1_key + 5] ^= 1
    store.save(meta, arrays | {"directory": directory})
    silo = proto.make_durable_device(0, store)  # read and checked but its signatures, which need the identity
    assert silo.identity is None and not silo.client.set_up
    model, order, kept = silo.silo.state(), silo.gen.bit_generator.state, store.path.read_bytes()
    with pytest.raises(ProtocolError, match="silo 0 has no identity yet"):
        silo.party(_doc(1, SECEA_STAGES))  # before it trains or writes anything
    assert silo.gen.bit_generator.state == order and store.path.read_bytes() == kept
    assert all(np.array_equal(v, silo.silo.state()[k]) for k, v in model.items())
    with pytest.raises(ProtocolError, match="no identity"):
        silo.client.hello()
    with pytest.raises(ProtocolError, match="directory and the union"):
        silo.round_party(1).message("secea-share")
    with pytest.raises(InvalidParameters, match=r"^SecEA silo state: the directory gives silo 1 keys not signed by "
                                                r"silo 1 \(silo 1's signature: the signature does not verify\)"):
        silo.identity = IDENTITIES[0]
    with pytest.raises(ProtocolError, match="directory and the union"):
        silo.round_party(1).message("secea-share")
    intact = proto.make_durable_device(1, _store(tmp_path, 1))
    intact.identity = IDENTITIES[1]
    assert intact.client.set_up
    with pytest.raises(ProtocolError, match="set up in set-up 0: set-up 3 takes new keys"):
        intact.client.hello(3)  # its statement names set-up 0; another set-up starts from renewed()


def test_a_silo_without_a_state_file_still_has_new_keys_and_no_union(split):
    proto = _proto(split)
    hosted = proto.make_server()
    rounds = connect_local(hosted)
    silos = {u: _device(proto, u) for u in SILOS}
    setup = rounds.play(0, {u: s.setup_party(0) for u, s in silos.items()})
    assert setup.finished == SILOS and setup.outcome["state"] == "committed"
    restarted = _device(proto, 2)
    assert restarted.client.hello() != silos[2].client.hello()
    doc = hosted.node.open_round(1, SILOS)
    assert doc["setup"] is False and doc["stages"] == list(SECEA_STAGES)
    with pytest.raises(ProtocolError, match="directory and the union"):
        restarted.party(doc).message("secea-share")


def test_the_state_file_holds_no_secret_in_a_refusal_message(split, tmp_path):
    proto = _proto(split)
    _deployment(proto, tmp_path)
    store = _store(tmp_path, 1)
    meta, arrays = store.load()
    secret_hex = meta["client"]["paillier_p"]
    store.save({**meta, "last_round": "x"}, arrays)
    with pytest.raises(CorruptDeviceState) as err:
        proto.make_durable_device(1, store)
    assert secret_hex not in str(err.value) and meta["client"]["x25519"] not in str(err.value)


def test_the_state_file_goes_beside_the_credentials_never_over_them(tmp_path):
    """``device-U.json`` -> ``device-U.state``; credentials named ``*.state`` keep their file (the
    silo's first save would have replaced them, key and all)."""
    doc = {"protocol": "secea", "run": {"dataset": "ml-100k"}, "options": {}}
    assert device_state_file(tmp_path / "device-1.json", 1, doc, b"k" * 32, b"ca").path == tmp_path / "device-1.state"
    creds = tmp_path / "device-1.state"
    assert device_state_file(creds, 1, doc, b"k" * 32, b"ca").path == tmp_path / "device-1.state.state"
