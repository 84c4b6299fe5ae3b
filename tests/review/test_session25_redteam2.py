"""Session 25 (helper K, red team, second pass): helper J's state-directory hold (91a90e7:
``persist.hold_state_dir`` flocks ``server.lock``; the writes check that the held name still gives
the held directory; F3: every opened round without an end record recorded aborted at the start)
and helper I's ``shamir.PointSet`` / ``Points`` (76dfe68, 8810c43: a round's U4 weights once, a
holder set's from them).

Findings (strict xfails at first; K1-K3 fixed by helper M, marks removed: ``drop_staged`` checked
and logged, the directory refused unless the server user's alone, the writes through the held
directory's descriptor -- tests/server/test_s25_state_dir_private.py):

* K1 (low, F2 not closed for the two-server store) -- ``DiskStore.drop_staged`` unlinks
  ``staged.npz`` by name without the held-name check the other writes got: server 1 whose state
  directory was moved aside (or a symlink retargeted) and a second server started on the name
  removes the second server's staged checkpoint.  Proposed fix: ``_check_held(self.state_dir)``
  before the unlink (or ``os.unlink(STAGED, dir_fd=held)``).
* K2 (low, local) -- the hold takes an existing state directory whatever its owner and mode:
  one that others can write in (0777, 0770) or that another user owns.  Whoever can write there
  can rename ``server.lock`` away while the server runs (every later write refused: 503 until a
  restart), and replace ``checkpoint.npz`` / ``journal.jsonl`` / ``binding.json`` between
  restarts (a model or round ids of their choosing).  The lock file is refused unless private
  (F4's fix), the directory holding it is not.  Proposed fix: refuse (``StorageError`` naming
  owner and mode, as for the lock file) a state directory not owned by the server's euid or
  writable by group or others (``st_mode & 0o022``); 0755 stays accepted.
* K3 (low, a window J named) -- ``atomic_write`` checks the name, then writes by name: a
  replacement between the check and the temporary file's creation is not caught, and the
  checkpoint (or binding) lands in the new directory (another server's).  The journal is not
  exposed (its append checks the file on the open descriptor).  Proposed fix, cheap: keep the
  held directory's descriptor (``_Held.dir_fd``) and write through it -- ``os.open(tmp,
  O_CREAT | O_EXCL | O_WRONLY, dir_fd=fd)``, ``os.replace(tmp, name, src_dir_fd=fd,
  dst_dir_fd=fd)``, ``os.fsync(fd)`` -- so a write can only land in the held directory; keep
  the name check to refuse (503) once the name no longer gives it.

Held (each test fails had the defence been missing):

* a lock file hard-linked to another private file of the server's user: held without writing it
  (no ``O_TRUNC``, no pid written); hard-linked to another state directory's held lock: refused
  (``StateInUse``), never two servers;
* a write refused in a moved-aside state directory is a 503 ``{error, detail}`` document through
  the one-server app, never a 5xx; the state moved back, the next open is taken and the round
  ids go on;
* F3 with several aborted rounds whose end records the disk refused, interleaved with clears:
  each round's findings strike once, only after the last clear, the ids are never reused, and a
  second restart writes nothing;
* ``PointSet``: a subset's weights are its own, whatever base they were taken from (Points of one
  round used in another are right), and an error aimed at a check built from the *base's*
  weights (passes it) is refused by the subset's check; ``combine_robust(within=)`` decides as a
  leave-one-out decoder written here by exact interpolation on adversarial share sets (one
  party's error, two parties', an error of degree exactly ``t``, a share at a point outside the
  round refused).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import shamir_textbook as textbook

sys.path[:0] = [str(Path(__file__).parents[1] / "server")]
from test_exchange_attacks import http_of  # noqa: E402
from test_s24_strikes import FP  # noqa: E402

from secemb.errors import InvalidMessage, InvalidParameters, ProtocolError  # noqa: E402
from secemb.protocols.exchange import ExchangeServer  # noqa: E402
from secemb.protocols.secea.coding import SecEAParams  # noqa: E402
from secemb.protocols.secea.staged import SecEANode  # noqa: E402
from secemb.protocols.secea.union import union_bloom  # noqa: E402
from secemb.randomness import CtrDrbg  # noqa: E402
from secemb.secagg import shamir  # noqa: E402
from secemb.secagg.shamir import PRIME, PointSet, Points, ShareCheck, combine_robust  # noqa: E402
from secemb.server import persist  # noqa: E402
from secemb.server.exchange_state import JOURNAL, STRIKES_CLEARED, ExchangeState  # noqa: E402
from secemb.server.persist import LOCK, Journal, StateInUse, StorageError, hold_state_dir  # noqa: E402
from secemb.server.store import STAGED, Checkpoint, DiskStore  # noqa: E402

_GEN = random.Random(2511)  # test data (points, polynomials): public, not secrets


# ------------------------------------------------------------------ the state directory's hold

def _checkpoint(version: int) -> Checkpoint:
    return Checkpoint(version, version, [], None, None, np.zeros((2, 2)), np.zeros(2), "0" * 64)


def test_k1_drop_staged_in_a_replaced_state_directory_leaves_the_new_directorys_staged_checkpoint(
        tmp_path: Path) -> None:
    """Server 1's store holds ``state``; ``state`` is moved aside; a second server (another
    process: two holds of one name in one process cannot be told apart) holds the name's new
    directory and stages a checkpoint there.  Server 1 drops its staged checkpoint: either refused
    (``StorageError``, as its other writes are) or done in its own directory -- the second
    server's ``staged.npz`` stays."""
    path = tmp_path / "state"
    with hold_state_dir(path):
        first = DiskStore(path, 1, FP)
        first.save(_checkpoint(1), staged=True)
        path.rename(tmp_path / "aside")
        subprocess.run([sys.executable, "-c", (
            "import sys\nimport numpy as np\n"
            "from secemb.server.persist import hold_state_dir\n"
            "from secemb.server.store import Checkpoint, DiskStore\n"
            "with hold_state_dir(sys.argv[1]):\n"
            "    ck = Checkpoint(7, 7, [], None, None, np.zeros((2, 2)), np.zeros(2), '0' * 64)\n"
            "    DiskStore(sys.argv[1], 1, sys.argv[2]).save(ck, staged=True)\n"),
            str(path), FP], check=True, timeout=120)
        try:
            first.drop_staged()
        except StorageError:
            pass
        assert (path / STAGED).exists()


@pytest.mark.parametrize("mode, owner", [(0o777, None), (0o770, None), (0o700, 65534)],
                         ids=["writable by others", "writable by the group", "another user's"])
def test_k2_a_state_directory_others_can_write_in_is_refused(mode: int, owner: int | None, tmp_path: Path) -> None:
    """Whoever can write in the state directory can rename ``server.lock`` away under the running
    server (its writes then refused) or replace its checkpoint and journal before a restart; the
    hold should refuse such a directory as it refuses such a lock file (0755: accepted, the next
    test)."""
    if owner is not None and os.geteuid() != 0:
        pytest.skip("giving a directory away needs root")
    path = tmp_path / "state"
    path.mkdir()
    os.chmod(path, mode)
    if owner is not None:
        os.chown(path, owner, owner)
    with pytest.raises(StorageError):
        with hold_state_dir(path):
            pass


def test_a_0755_state_directory_of_the_servers_user_is_held() -> None:
    """The control of K2: a 0755 directory of the server's user (a two-server ``state_dir``
    made under umask 022) is held, its lock file private."""
    with tempfile.TemporaryDirectory() as base:
        path = Path(base) / "state"
        path.mkdir()
        os.chmod(path, 0o755)
        with hold_state_dir(path):
            assert (path / LOCK).stat().st_mode & 0o777 == 0o600


def test_k3_a_replacement_right_after_the_check_does_not_put_the_checkpoint_in_the_new_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The state directory is moved aside and made again right after the held-name check returns
    (what a process that can write in the parent wins by exchanging the directories in a loop):
    the checkpoint must be refused or land in the held (moved) directory, never in the new one."""
    path = tmp_path / "state"
    real = persist._check_held

    def check_then_replace(directory: Path) -> int | None:
        held = real(directory)
        if not (tmp_path / "aside").exists():
            path.rename(tmp_path / "aside")
            path.mkdir(mode=0o700)
        return held

    with hold_state_dir(path):
        monkeypatch.setattr(persist, "_check_held", check_then_replace)
        try:
            persist.save_checkpoint(path / "checkpoint.npz", {"round": 1}, {})
        except StorageError:
            pass
        assert not (path / "checkpoint.npz").exists()


def test_a_lock_file_hard_linked_to_a_private_file_is_held_without_writing_it(tmp_path: Path) -> None:
    """``server.lock`` a hard link to another private file of the server's user (a key file
    here): the hold opens it read-only, neither truncates nor writes it.  Would fail were the lock
    file opened with ``O_TRUNC`` or a pid written into it."""
    key = tmp_path / "server.key"
    key.write_bytes(b"secret key bytes")
    os.chmod(key, 0o600)
    path = tmp_path / "state"
    path.mkdir(mode=0o700)
    os.link(key, path / LOCK)
    with hold_state_dir(path):
        assert key.read_bytes() == b"secret key bytes"
    assert key.read_bytes() == b"secret key bytes"


def test_a_lock_file_hard_linked_to_another_held_directorys_lock_is_refused(tmp_path: Path) -> None:
    """Two state directories whose ``server.lock`` is one file (a copy made with ``cp -al``): while
    one is held, the other is refused (``StateInUse``), and no write of the held one's is refused
    for it.  Would fail were the lock on the directory (two holds) or the held check by path."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(mode=0o700)
    b.mkdir(mode=0o700)
    with hold_state_dir(a):
        os.link(a / LOCK, b / LOCK)
        with pytest.raises(StateInUse):
            with hold_state_dir(b):
                pytest.fail("two holds of one lock file")
        persist.atomic_write(a / "binding.json", b"{}")


def _secea_state(path: Path) -> tuple[SecEANode, ExchangeState]:
    params = SecEAParams(3, 1, dim=2)
    node = SecEANode(params, union_bloom(16, 9), key_bits=1024, _rng=CtrDrbg(1))
    return node, ExchangeState(path, FP, ExchangeServer(node, 1 << 20, lambda: b"", 3))


def test_a_write_refused_in_a_moved_state_directory_is_a_503_document_and_the_ids_go_on(tmp_path: Path) -> None:
    """The one-server app over a held state directory moved aside: opening a round and clearing the
    strikes are answered 503 with the ``{error, detail}`` document naming the replacement, never a
    5xx other than it, nothing journaled; moved back, the same open is taken (id 1 was not used).
    Would fail were ``StorageError`` not mapped (500) or the write done in the new directory."""
    path = tmp_path / "state"
    with hold_state_dir(path):
        node, state = _secea_state(path)
        http = http_of(node, state=state)
        path.rename(tmp_path / "aside")
        path.mkdir(mode=0o700)
        for method, route, body in (("POST", "/v1/admin/exchange/rounds", {"round_id": 1, "users": [0, 1, 2]}),
                                    ("POST", "/v1/admin/exchange/strikes/clear", {})):
            resp = http.call("admin", method, route, json.dumps(body).encode())
            assert resp.status_code == 503, resp.text
            doc = resp.json()
            assert set(doc) == {"error", "detail"} and "since this server started" in doc["detail"], doc
        assert list(path.iterdir()) == []
        assert Journal(tmp_path / "aside" / JOURNAL).records() == []
        path.rmdir()
        (tmp_path / "aside").rename(path)
        assert http.open(1, [0, 1, 2])["round_id"] == 1


def _journal_rounds(path: Path, rounds: list[tuple[str, int, list[int]]]) -> None:
    """Write a journal by hand: ``("open", r, [])``, ``("found", r, names)``, ``("clear", r, [])``
    (the strikes cleared through round ``r``)."""
    journal = Journal(path / JOURNAL)
    for event, rid, names in rounds:
        if event == "open":
            journal.append({"event": "open", "round_id": rid, "users": [0, 1, 2]})
        elif event == "found":
            journal.append({"event": "found", "round_id": rid, "proven_bad_shares": names})
        else:
            journal.append({"event": STRIKES_CLEARED, "through_round": rid, "strikes": {}})


def test_f3_several_aborted_rounds_and_clears_strike_once_a_round_after_the_last_clear(tmp_path: Path) -> None:
    """Rounds 1-6 opened with findings and no end record (aborted while the server ran, their ends
    refused by the disk, or open at a stop), clears through rounds 2 and 3 (each written after
    the round it names, as the server writes the last ended round's id), and two finding records
    of round 5 (the second adds device 1).  The restart: device 0 struck once for each of rounds
    4, 5 and 6 (after the last clear; round 5's repeated name counted once),
    device 1 once (round 5); each round recorded aborted with its names; round ids 1-6 refused
    after; a second restart writes nothing and counts the same.  Counted here by hand."""
    path = tmp_path / "state"
    path.mkdir(mode=0o700)
    _journal_rounds(path, [("open", 1, []), ("found", 1, [0]), ("open", 2, []), ("found", 2, [0, 2]),
                           ("clear", 2, []), ("open", 3, []), ("found", 3, [2]), ("clear", 3, []),
                           ("open", 4, []), ("found", 4, [0]), ("open", 5, []), ("found", 5, [0]),
                           ("found", 5, [0, 1]), ("open", 6, []), ("found", 6, [0])])
    _, state = _secea_state(path)
    assert state.strikes == {0: 3, 1: 1}
    ends = [r for r in Journal(path / JOURNAL).records() if r["event"] == "end"]
    assert [(r["round_id"], r["round"]["state"], r["round"]["proven_bad_shares"]) for r in ends] == [
        (1, "aborted", [0]), (2, "aborted", [0, 2]), (3, "aborted", [2]), (4, "aborted", [0]),
        (5, "aborted", [0, 1]), (6, "aborted", [0])]
    for rid in range(1, 7):
        with pytest.raises(ProtocolError):
            state.opening(rid, [0, 1, 2])
    size = (path / JOURNAL).stat().st_size
    _, again = _secea_state(path)
    assert again.strikes == {0: 3, 1: 1} and (path / JOURNAL).stat().st_size == size
    again.opening(7, [0, 1, 2])


# ------------------------------------------------------------------ PointSet

def _sparse(n: int) -> list[int]:
    return [u + 1 for u in _GEN.sample(range(2**32 - 1), n)]


def test_points_of_one_round_are_right_in_another() -> None:
    """A holder set's weights taken from two different rounds' point sets (both holding it, one
    missing many more points than the other) are the textbook weights of the set itself, so
    :class:`Points` carried from one round into another decide alike.  Would fail were a subset's
    weights the base's without the product over the points it misses."""
    xs = _sparse(25)
    small = PointSet(xs + _sparse(3))
    large = PointSet(xs + _sparse(20))
    want = textbook.weights(xs)
    assert list(small.subset(xs).weights) == list(large.subset(xs).weights) == want
    t = 10
    f = [_GEN.randrange(PRIME) for _ in range(t)]
    ys = [textbook.poly_at(f, x) for x in xs]
    assert ShareCheck(small.subset(xs), t).consistent(ys) and ShareCheck(large.subset(xs), t).consistent(ys)
    assert shamir.lagrange_at_zero(small.subset(xs)) == textbook.lagrange_at_zero(xs)


def test_an_error_aimed_at_the_bases_weights_is_refused_by_the_subsets_check() -> None:
    """Honest shares at a holder set ``S`` (missing four of the round's points) plus an error ``e``
    with ``sum_i c_i e_i = 0`` for the coefficients ``c_i = W_i (x_i - a)^(d-1)`` of the *round's*
    weights ``W`` (a check that forgot the product over the missing points, with the same ``a``,
    passes it; checked here): the check with ``S``'s own weights, with that ``a``, refuses it, and
    exact interpolation agrees."""
    base = _sparse(30)
    xs = base[:26]
    t, a = 12, _GEN.randrange(PRIME)
    d = len(xs) - t
    wide = textbook.weights(base)
    c = [wide[k] * pow(x - a, d - 1, PRIME) % PRIME for k, x in enumerate(xs)]
    f = [_GEN.randrange(PRIME) for _ in range(t)]
    ys = [textbook.poly_at(f, x) for x in xs]
    bad = list(ys)
    bad[3] = (bad[3] + 1) % PRIME
    bad[17] = (bad[17] - c[3] * pow(c[17], -1, PRIME)) % PRIME
    assert sum(ck * (b - y) for ck, b, y in zip(c, bad, ys, strict=True)) % PRIME == 0
    assert not textbook.on_one_polynomial(xs, t, bad)
    fixed = a.to_bytes(shamir.SHARE_BYTES, "little")
    assert not ShareCheck(PointSet(base).subset(xs), t, _rng=lambda n: fixed).consistent(bad)
    assert ShareCheck(PointSet(base).subset(xs), t, _rng=lambda n: fixed).consistent(ys)


def _textbook_robust(xs: list[int], shares: list[list[int]], t: int) -> tuple[list[int], int | None] | None:
    """What ``combine_robust`` must answer, by exact interpolation: ``(secrets, None)`` if every
    column lies on one polynomial of degree below ``t``; else ``(secrets, i)`` for the first party
    ``i`` whose removal makes every column do so (with ``len(xs) >= t + 2``); else ``None``
    (refused)."""
    cols = [list(col) for col in zip(*shares, strict=True)]

    def secrets(keep: list[int]) -> list[int]:
        lam = textbook.lagrange_at_zero([xs[j] for j in keep[:t]])
        return [sum(lv * col[j] for lv, j in zip(lam, keep[:t], strict=True)) % PRIME for col in cols]

    if all(textbook.on_one_polynomial(xs, t, col) for col in cols):
        return secrets(list(range(len(xs)))), None
    if len(xs) < t + 2:
        return None
    for i in range(len(xs)):
        rest = [j for j in range(len(xs)) if j != i]
        if all(textbook.on_one_polynomial([xs[j] for j in rest], t, [col[j] for j in rest]) for col in cols):
            return secrets(rest), i
    return None


@pytest.mark.parametrize("case", ["honest", "one party", "one party, degree t", "two parties",
                                  "one party, t + 1 parties", "one party, t + 2 parties"])
def test_combine_robust_within_a_round_decides_as_exact_interpolation(case: str) -> None:
    """Holder sets of a sparse round (subsets missing 0 to 8 of 40 points, shuffled), three secrets,
    threshold 14, the error of ``case`` (a random moved share; a polynomial of degree exactly ``t``
    on one party's shares of every secret; two parties' moved shares; one party wrong where only
    ``t + 1`` or ``t + 2`` hold): ``combine_robust(within=PointSet(round))`` answers as the decoder
    written here, or refuses (``InvalidMessage``) where it finds none; 6 sets a case."""
    t = 14
    base = _sparse(40)
    points = PointSet(base)
    for _ in range(6):
        if case.endswith("t + 1 parties") or case.endswith("t + 2 parties"):
            xs = _GEN.sample(base, t + (1 if "t + 1" in case else 2))
        else:
            xs = _GEN.sample(base, 40 - _GEN.randrange(9))
        polys = [[_GEN.randrange(PRIME) for _ in range(t)] for _ in range(3)]
        shares = [[textbook.poly_at(f, x) for f in polys] for x in xs]
        liars = [] if case == "honest" else _GEN.sample(range(len(xs)), 2 if case == "two parties" else 1)
        for i in liars:
            if case == "one party, degree t":
                top = [_GEN.randrange(PRIME) for _ in range(t)] + [_GEN.randrange(1, PRIME)]
                shares[i] = [(s + textbook.poly_at(top, xs[i])) % PRIME for s in shares[i]]
            else:
                k = _GEN.randrange(3)
                shares[i][k] = (shares[i][k] + _GEN.randrange(1, PRIME)) % PRIME
        want = _textbook_robust(xs, shares, t)
        if want is None:
            with pytest.raises(InvalidMessage):
                combine_robust(xs, shares, t, within=points)
        else:
            assert combine_robust(xs, shares, t, within=points) == want, case
            if want[1] is not None:
                assert want[1] == liars[0] and want[0] == [f[0] for f in polys]


def test_combine_robust_refuses_a_party_outside_the_round() -> None:
    """A holder at a point the round's set lacks: ``InvalidParameters``, never weights computed
    from the set for a point it does not hold."""
    base = _sparse(20)
    outsider = _sparse(1)[0]
    xs = base[:14] + [outsider]
    shares = [[textbook.poly_at([5, 6, 7], x)] for x in xs]
    with pytest.raises(InvalidParameters):
        combine_robust(xs, shares, 3, within=PointSet(base))
    with pytest.raises(InvalidParameters):
        PointSet(base).subset(xs)
    assert isinstance(PointSet(base).subset(base[:3]), Points)
