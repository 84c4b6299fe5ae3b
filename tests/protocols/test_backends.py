"""Server evaluation backends: process pool and Ray give bit-identical results to serial."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

from secemb.protocols.backends import ProcessBackend, SerialBackend, ThreadBackend, make_backend
from secemb.protocols.secemb import server as secemb_server
from secemb.protocols.secemb import SecEmbProtocol
from secemb.randomness import CtrDrbg
from secemb.errors import InvalidParameters

#: the servers' peer key, fixed: the replies carry sketch seeds derived from it (verified uploads)
KEY = bytes(range(32))


def _round(backend, layout: str, relay: bool, *, width: int = 5, servers=None, round_id: int = 4,
           silent: int | None = None, expected: np.ndarray | None = None):
    """Five users through one round (of ``servers``, or of new ones, with the peer key
    :data:`KEY`); returns every reply and server 1's sketch answer for the uploaded users (its
    verifier messages: the sketch values of the backend's walk), and the combined aggregate.  The table and the users' choices depend on ``round_id``.  User
    ``silent`` retrieves but does not upload; ``expected`` (m, width) receives the plaintext
    sum of the uploaded rows."""
    proto = SecEmbProtocol(layout=layout, relay=relay, backend=backend)
    cfg = proto.round_config(round_id, 300, width, 2, 12)
    rng = np.random.default_rng(7 + round_id)
    table = rng.integers(0, 2**32, (300, width), dtype=np.uint64).astype(np.uint32)
    s0, s1 = servers or (proto.make_server(0, peer_key=KEY), proto.make_server(1, peer_key=KEY))
    s0.begin_round(cfg, table)
    s1.begin_round(cfg, table)
    users = [proto.make_user(cfg, _rng=CtrDrbg(u + 10 * round_id)) for u in range(5)]
    slots = []
    for _ in range(5):
        if layout == "full":
            slots.append(rng.choice(300, 12, replace=False))
        else:
            placed, _ = cfg.cuckoo().assign(rng.choice(300, 12, replace=False), rng)
            slots.append(placed)
    reqs = [users[u].retrieval_request(slots[u]) for u in range(5)]
    a1 = s1.handle_retrieval_many([(u, reqs[u][1]) for u in range(5)])
    a0 = s0.handle_retrieval_many([(u, reqs[u][0]) for u in range(5)])
    if relay:
        masked = s1.relay_retrieval_many([(u, a0[u]) for u in range(5)])
        a0 = [s0.complete_retrieval(u, masked[u]) for u in range(5)]
    rows = [users[u].retrieval_result(a0[u], a1[u]) for u in range(5)]
    for u in range(5):
        real = slots[u] >= 0
        assert np.array_equal(rows[u][real], table[slots[u][real]])
        grads = np.zeros((cfg.slots, width), np.uint32)
        grads[real] = rng.integers(0, 2**32, (int(real.sum()), width), dtype=np.uint64).astype(np.uint32)
        if u == silent:
            continue
        if expected is not None:
            np.add.at(expected, slots[u][real], grads[real])
        up0, up1 = users[u].upload(grads, np.arange(2, dtype=np.uint32))
        fwd = s0.handle_upload(u, up0)
        if up1 is not None:
            s1.handle_upload(u, up1)
        if fwd is not None:
            s1.relay_upload(u, fwd)
    uploaded = [u for u in range(5) if u != silent]
    answer = s1.verify_answer(uploaded)
    assert s0.verify_rejected(uploaded, answer) == set()  # every device's sketch proof passes
    sparse, dense = s0.combine(s1.aggregate_share())
    return [bytes(a) for a in a0 if a is not None] + [answer], sparse, dense


@pytest.mark.parametrize("layout", ["full", "cuckoo"])
@pytest.mark.parametrize("relay", [False, True])
@pytest.mark.parametrize("kind", ["process", "thread"])
def test_pooled_backends_are_bit_identical_to_serial(layout: str, relay: bool, kind: str) -> None:
    """Several tasks a batch (the cuckoo layout splits by bucket ranges, one per worker), run
    in worker processes or in threads, give the serial round's bytes."""
    serial = _round(SerialBackend(), layout, relay)
    pool = ProcessBackend(workers=2) if kind == "process" else ThreadBackend(workers=3)
    try:
        parallel = _round(pool, layout, relay)
    finally:
        pool.close()
    assert serial[0] == parallel[0]
    assert np.array_equal(serial[1], parallel[1]) and np.array_equal(serial[2], parallel[2])


@pytest.mark.parametrize("layout", ["full", "cuckoo"])
@pytest.mark.parametrize("relay", [False, True])
def test_thread_backend_aggregates_with_a_silent_user(layout: str, relay: bool) -> None:
    """A user that retrieved and went silent is taken out of the aggregate the threads build
    (the folded part, the control-bit product and the scatter are split by ranges): the sum
    of the others' rows, as the serial backend gives it."""
    expected = np.zeros((300, 5), np.uint32)
    serial = _round(SerialBackend(), layout, relay, silent=2, expected=expected)
    pool = ThreadBackend(workers=3)
    try:
        threaded = _round(pool, layout, relay, silent=2)
    finally:
        pool.close()
    assert np.array_equal(serial[1], expected) and np.array_equal(threaded[1], expected)
    assert np.array_equal(threaded[2], np.arange(2, dtype=np.uint32) * 4)


def test_ray_backend_is_bit_identical_to_serial() -> None:
    pytest.importorskip("ray")
    backend = make_backend("ray", workers=2)
    try:
        serial = _round(SerialBackend(), "cuckoo", True)
        distributed = _round(backend, "cuckoo", True)
    finally:
        # the local Ray instance it started (session 25: left running, its daemons and two idle
        # workers took ~3 s of CPU a minute and 0.9 GB for the rest of the suite)
        backend.close()
    assert serial[0] == distributed[0]
    assert np.array_equal(serial[1], distributed[1]) and np.array_equal(serial[2], distributed[2])


def test_make_backend_fails_if_name_unknown() -> None:
    with pytest.raises(InvalidParameters, match="backend must be"):
        make_backend("threads")
    with pytest.raises(InvalidParameters, match="workers must be"):
        make_backend("thread", workers=0)


@pytest.mark.parametrize("layout", ["full", "cuckoo"])
def test_batches_split_by_memory_bound_are_bit_identical(monkeypatch, layout: str) -> None:
    """A batch whose leaf state exceeds EVAL_BYTES is evaluated in several tasks (one per
    user at the smallest bound; the cuckoo layout: one per bucket) with the same replies and
    aggregate."""
    class Counting(SerialBackend):
        def __init__(self) -> None:
            super().__init__()
            self.task_counts: list[int] = []

        def map(self, fn, tasks):  # noqa: ANN001, ANN201
            self.task_counts.append(len(tasks))
            return super().map(fn, tasks)

    whole = Counting()
    reference = _round(whole, layout, False)
    assert max(whole.task_counts) == 1
    monkeypatch.setattr(secemb_server, "EVAL_BYTES", 1)
    split = Counting()
    chunked = _round(split, layout, False)
    assert max(split.task_counts) == (5 if layout == "full" else 15)  # a task per user / per bucket
    assert reference[0] == chunked[0]
    assert np.array_equal(reference[1], chunked[1]) and np.array_equal(reference[2], chunked[2])


class _Recording(ProcessBackend):
    """A process backend that records the pickled size of every task it ships."""

    def __init__(self, workers: int) -> None:
        super().__init__(workers)
        self.task_bytes: list[int] = []

    def map(self, fn, tasks):  # noqa: ANN001, ANN201
        self.task_bytes += [len(pickle.dumps(t)) for t in tasks]
        return super().map(fn, tasks)


@pytest.mark.parametrize("layout", ["full", "cuckoo"])
def test_tasks_carry_keys_and_a_handle_not_the_table(layout: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing of the table's size is pickled per task: a table 400 times wider (2.4 MB
    instead of 6 kB) leaves every task's pickle the same size to within a few bytes (the
    width itself), and the results stay bit-identical to serial.  (The cache bound on a
    task's folded rows is lifted, so that both widths split into the same tasks.)"""
    monkeypatch.setattr(secemb_server, "FOLD_BYTES", 1 << 60)
    sizes = {}
    for width in (5, 2000):
        pool = _Recording(workers=2)
        try:
            parallel = _round(pool, layout, False, width=width)
        finally:
            pool.close()
        serial = _round(SerialBackend(), layout, False, width=width)
        assert serial[0] == parallel[0]
        assert np.array_equal(serial[1], parallel[1]) and np.array_equal(serial[2], parallel[2])
        sizes[width] = pool.task_bytes
    assert len(sizes[5]) == len(sizes[2000]) > 2  # the same tasks at both widths, over 2 workers
    assert max(abs(a - b) for a, b in zip(sizes[5], sizes[2000], strict=True)) <= 8
    assert max(sizes[2000]) < 300 * 2000 * 4 // 20


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="POSIX shared memory shows in /dev/shm on Linux")
def test_shared_tables_live_for_their_round_only() -> None:
    """Each server's table is one segment while its round lasts; the next round's
    begin_round unlinks it, close() unlinks the last ones; workers read each round's own
    table (two rounds with different tables, bit-identical to serial)."""
    serial = [_round(SerialBackend(), "cuckoo", False, round_id=r) for r in (1, 2)]
    pool = ProcessBackend(workers=2)
    servers = (SecEmbProtocol(layout="cuckoo", backend=pool).make_server(0, peer_key=KEY),
               SecEmbProtocol(layout="cuckoo", backend=pool).make_server(1, peer_key=KEY))
    try:
        first = _round(pool, "cuckoo", False, servers=servers, round_id=1)
        names1 = set(pool._segments)
        assert len(names1) == 2 and all(os.path.exists(f"/dev/shm/{n}") for n in names1)
        second = _round(pool, "cuckoo", False, servers=servers, round_id=2)
        names2 = set(pool._segments)
        assert len(names2) == 2 and not names1 & names2
        assert not any(os.path.exists(f"/dev/shm/{n}") for n in names1)
    finally:
        pool.close()
    assert not any(os.path.exists(f"/dev/shm/{n}") for n in names2)
    for got, want in zip((first, second), serial, strict=True):
        assert got[0] == want[0]
        assert np.array_equal(got[1], want[1]) and np.array_equal(got[2], want[2])


def test_published_tables_are_read_only_in_the_workers() -> None:
    """A task cannot write to the round's table (it is every worker's and the next task's)."""
    pool = ProcessBackend(workers=2)
    try:
        handle = pool.publish(np.arange(12, dtype=np.uint32).reshape(3, 4))
        flags = pool.map(_writeable, [handle, handle])
        assert flags == [False, False]
        assert not handle.get().flags.writeable and handle.get()[2, 3] == 11
    finally:
        pool.close()


def _writeable(handle) -> bool:  # noqa: ANN001 - runs in a worker
    return bool(handle.get().flags.writeable)


_KERNEL_LOADS = """
import json
from numba.core.registry import CPUDispatcher
import secemb.fss._numba_kernels as k
from secemb.protocols.backends import ProcessBackend

def loads(_=None):
    # signatures this process loaded from numba's cache or compiled itself (a forked worker
    # inherits its parent's counts; one that loads again counts more)
    ds = [d for d in vars(k).values() if isinstance(d, CPUDispatcher)]
    return sum(sum(d.stats.cache_hits.values()) + sum(d.stats.cache_misses.values()) for d in ds)

if __name__ == "__main__":
    before = loads()
    pool = ProcessBackend(workers=2)
    try:
        pool.pool()
        print(json.dumps({"before": before, "parent": loads(), "workers": pool.map(loads, [0, 1, 2, 3])}))
    finally:
        pool.close()
"""


def test_forked_workers_inherit_the_loaded_kernels() -> None:
    """The pool's parent loads the compiled kernels before it forks, so its workers load none
    themselves (issue 37: numba's first-call cost once per machine, not once per worker)."""
    import multiprocessing

    from secemb.fss import kernels

    if not kernels.available() or multiprocessing.get_start_method() != "fork":
        pytest.skip("needs numba with AES-NI and forked workers")
    proc = subprocess.run([sys.executable, "-c", _KERNEL_LOADS], capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["before"] == 0 and got["parent"] > 0
    assert got["workers"] == [got["parent"]] * 4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop_cluster(temp_dir: str) -> None:
    """Stop this test's Ray cluster only: the processes whose command line names its temp
    dir, and their descendants (``ray stop`` would stop every Ray on the machine)."""
    parent: dict[int, int] = {}
    ours: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                if temp_dir.encode() in fh.read():
                    ours.add(int(entry))
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as fh:
                parent[int(entry)] = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    grown = True
    while grown:
        more = {pid for pid, ppid in parent.items() if ppid in ours} - ours
        ours |= more
        grown = bool(more)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in ours:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(os.path.exists(f"/proc/{pid}") for pid in ours):
            time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="finds the cluster's processes through /proc (Linux)")
def test_ray_backend_on_a_two_node_cluster_is_bit_identical_to_serial(monkeypatch) -> None:  # noqa: ANN001
    """A real multi-node Ray cluster on loopback: a head and a second node (one CPU each)
    started here with ``ray start``; the round's tasks run on both nodes, reading the table
    from the object store, and the replies and aggregate equal the serial backend's."""
    ray = pytest.importorskip("ray")
    from secemb.protocols.backends import RayBackend

    if shutil.which("ray") is None:
        pytest.skip("the ray command is not on PATH")
    # a token in ~/.ray would turn on token authentication for this cluster only in part
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    temp_dir = tempfile.mkdtemp(prefix="secemb-ray-")  # short: Ray's socket paths must fit
    port = _free_port()
    common = ["--num-cpus", "1", "--node-ip-address", "127.0.0.1", "--disable-usage-stats"]
    if ray.is_initialized():
        ray.shutdown()
    backend = None
    try:
        subprocess.run(["ray", "start", "--head", "--port", str(port), "--temp-dir", temp_dir,
                        "--include-dashboard", "false", *common],
                       env=env, check=True, timeout=180, capture_output=True)
        subprocess.run(["ray", "start", "--address", f"127.0.0.1:{port}", *common],
                       env=env, check=True, timeout=180, capture_output=True)

        class OnNodes(RayBackend):
            """Records the node of every task."""

            nodes: set[str] = set()

            def map(self, fn, tasks):  # noqa: ANN001, ANN201
                def tagged(task):  # noqa: ANN001, ANN202 - pickled by value to the nodes
                    import ray as worker_ray

                    return worker_ray.get_runtime_context().get_node_id(), fn(task)

                out = super().map(tagged, tasks)
                self.nodes.update(node for node, _ in out)
                return [r for _, r in out]

        backend = OnNodes(address=f"127.0.0.1:{port}", workers=2)
        assert sum(1 for n in ray.nodes() if n["Alive"]) == 2
        for layout in ("full", "cuckoo"):
            distributed = _round(backend, layout, True)
            serial = _round(SerialBackend(), layout, True)
            assert serial[0] == distributed[0]
            assert np.array_equal(serial[1], distributed[1]) and np.array_equal(serial[2], distributed[2])
        assert len(OnNodes.nodes) == 2
    finally:
        if backend is not None:
            backend.close()
        _stop_cluster(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)


def _big_or_fail(n: int) -> tuple[np.ndarray, int]:  # runs in a worker
    if n < 0:
        raise ValueError("task failed")
    return np.full(1 << 16, n, np.uint32), n  # 256 KiB: returned through shared memory


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="POSIX shared memory shows in /dev/shm on Linux")
def test_large_results_come_back_through_shared_memory_and_leave_none_behind() -> None:
    pool = ProcessBackend(workers=2)
    try:
        before = {n for n in os.listdir("/dev/shm") if n.startswith("psm_")}
        out = pool.map(_big_or_fail, [1, 2, 3])
        assert [int(a[0]) for a, _ in out] == [1, 2, 3] and [n for _, n in out] == [1, 2, 3]
        assert all(a.shape == (1 << 16,) and a.flags.writeable for a, _ in out)
        with pytest.raises(ValueError, match="task failed"):
            pool.map(_big_or_fail, [4, -1, 5])  # the others' segments are still collected
        assert {n for n in os.listdir("/dev/shm") if n.startswith("psm_")} <= before
    finally:
        pool.close()


@pytest.mark.parametrize("relay", [False, True])
def test_the_cache_bound_splits_buckets_without_changing_the_round(relay: bool,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A cuckoo batch folded in one range of buckets, or in one range per bucket (a cache
    bound of one byte, for a batch of any size), gives the same replies and aggregate."""
    whole = _round(SerialBackend(), "cuckoo", relay)
    monkeypatch.setattr(secemb_server, "FOLD_BYTES", 1)
    monkeypatch.setattr(secemb_server, "FOLD_USERS", 1)
    split = _round(SerialBackend(), "cuckoo", relay)
    assert whole[0] == split[0]
    assert np.array_equal(whole[1], split[1]) and np.array_equal(whole[2], split[2])


def _refusals(secemb_round, backend) -> tuple[list, list]:
    """Six users' relay retrieval through ``backend`` with bad items in both batches: user 1's
    request truncated, user 2's first root claiming the other party, user 3's forwarded key part
    altered by server 0, user 4's forward sent twice.  Server 0's and server 1's per-item results."""
    from secemb.fss.keys import HEADER_BYTES
    from secemb.protocols.secemb.sizes import request_bytes

    proto, cfg, rng, _, s0, s1 = secemb_round(layout="cuckoo", relay=True, backend=backend, round_id=2, num_items=300,
                                              width=5, dense_size=2, m_prime=12, seed=3)
    reqs = []
    for u in range(6):
        placed, _ = cfg.cuckoo().assign(rng.choice(300, 12, replace=False), rng)
        reqs.append(proto.make_user(cfg, _rng=CtrDrbg(50 + u)).retrieval_request(placed))
    bad_root = bytearray(reqs[2][0])
    bad_root[len(bad_root) - request_bytes(cfg) + HEADER_BYTES] ^= 1  # bit 0 of the first root: the key's party
    sent = [r0 for r0, _ in reqs]
    sent[1], sent[2] = sent[1][:-1], bytes(bad_root)
    assert all(out is None for out in s1.handle_retrieval_many([(u, r1) for u, (_, r1) in enumerate(reqs)]))
    out0 = s0.handle_retrieval_many(list(enumerate(sent)))
    forwards = [(u, f) for u, f in enumerate(out0) if isinstance(f, bytes)]  # users 0, 3, 4, 5
    forwards[1] = (3, forwards[1][1][:-1] + bytes([forwards[1][1][-1] ^ 1]))
    forwards.append(forwards[2])
    return out0, s1.relay_retrieval_many(forwards)


def test_threads_refuse_a_batch_s_bad_items_as_serial_does(secemb_round) -> None:
    """Parsing, key digests, forwarded-part hashes and relay masks run in ranges of users on
    the thread backend: the same items are refused with the same errors, the others get the
    serial backend's bytes."""
    from secemb.errors import InvalidMessage, ProtocolError, RelayTampered

    serial = _refusals(secemb_round, SerialBackend())
    pool = ThreadBackend(workers=3)
    try:
        threaded = _refusals(secemb_round, pool)
    finally:
        pool.close()
    out0, out1 = serial
    assert [type(x) for x in out0] == [bytes, InvalidMessage, InvalidMessage, bytes, bytes, bytes]
    assert "root control bit" in str(out0[2])
    assert [type(x) for x in out1] == [bytes, RelayTampered, bytes, bytes, ProtocolError]
    for a, b in zip(serial[0] + serial[1], threaded[0] + threaded[1], strict=True):
        assert (a == b) if isinstance(a, bytes) else (type(a) is type(b) and str(a) == str(b))
