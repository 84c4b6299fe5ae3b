"""``secemb bench scale``: worker counts, the smoke-size run through the CLI (results checked
equal to serial inside the benchmark), and bad usage."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from secemb.bench import scale as bench_scale
from secemb.cli import app


def test_default_worker_counts_double_up_to_the_cores() -> None:
    assert bench_scale.default_workers(16) == [1, 2, 4, 8, 16]
    assert bench_scale.default_workers(6) == [1, 2, 4, 6]
    assert bench_scale.default_workers(1) == [1]


def test_bench_scale_runs_serial_and_each_worker_count(tmp_path) -> None:  # noqa: ANN001
    out, png = tmp_path / "scale.json", tmp_path / "scale.png"
    res = CliRunner().invoke(app, ["bench", "scale", "--size", "tiny", "--workers", "1,2", "--repeat", "1",
                                   "--out", str(out), "--plot", str(png)])
    assert res.exit_code == 0, res.output
    assert "process" in res.output and png.stat().st_size > 1000
    result = json.loads(out.read_text())
    records = result["records"]
    assert [(r["backend"], r["workers"]) for r in records] == [
        ("serial", None), ("process", 1), ("process", 2), ("thread", 1), ("thread", 2)]
    assert len({tuple(r["result_sha256"]) for r in records}) == 1  # one digest, the same for all
    two = records[2]
    assert len(two["worker_peak_rss_bytes"]) == 2 and all(p > 0 for p in two["worker_peak_rss_bytes"])
    # both servers' tables (in bucket form: each of the m = 1,682 rows of 65 words in up to
    # 3 buckets) were published at once
    assert two["peak_shared_bytes"] >= 2 * 1682 * 65 * 4
    assert two["speedup"] == pytest.approx(records[0]["server_s_per_round"] / two["server_s_per_round"])
    threads = records[4]  # nothing published: the threads read the server's own table
    assert threads["peak_shared_bytes"] == 0 and threads["worker_peak_rss_bytes"] == []
    assert set(result["machine_ceiling"]) == {"1", "2"} and result["machine_ceiling"]["1"] == 1.0
    assert "machine ceiling (n threads of the AES conversion at once, against one): 1: 1.00x, 2: " in res.output
    assert all(0 < r["server_tasks_s"] < r["server_s_per_round"] for r in records)
    assert all(r["outside_tasks_s"] == pytest.approx(r["server_s_per_round"] - r["server_tasks_s"]) for r in records)
    assert result["amdahl"]["workers"] == 2 and set(result["amdahl"]["speedup_at_most"]) == {"1", "2", "16"}
    assert all(0 <= r["outside_tasks_cpu_s"] <= r["server_cpu_s"] for r in records)
    assert 0 < result["amdahl"]["cpu"]["share"] <= 1
    assert "the same on the CPU clock" in res.output
    assert "Amdahl's law bounds the round's speed-up at n workers by 1: 1.0x, 2: " in res.output


@pytest.mark.parametrize("compiled", [True, False])
def test_machine_ceiling_runs_n_concurrent_streams(monkeypatch: pytest.MonkeyPatch, compiled: bool) -> None:
    """Each trial of n streams converts n * reps times, on n threads at once, each thread into
    one buffer of its own (the compiled kernel; without it, ``convert``); the ceiling of n
    streams is n times one stream's time over theirs."""
    import threading

    import secemb.fss._numba_kernels as nk
    import secemb.fss.convert as conv
    from secemb.fss import kernels

    calls: list[tuple[str, int]] = []
    lock = threading.Lock()
    name, module = ("convert_blocks", nk) if compiled else ("convert", conv)
    real = getattr(module, name)

    def counted(*args):  # noqa: ANN002, ANN202
        with lock:
            calls.append((threading.current_thread().name, id(args[-1]) if compiled else 0))
        return real(*args)

    monkeypatch.setattr(module, name, counted)
    monkeypatch.setattr(kernels, "compiled", lambda: compiled)
    got = bench_scale.machine_ceiling([1, 3], reps=4, trials=2)
    # warm-up (4 calls), one stream twice (8), three streams twice (24)
    assert len(calls) == 4 + 8 + 24 and len({t for t, _ in calls}) >= 4
    if compiled:  # one output buffer per thread, reused by its reps
        by_thread: dict[str, set[int]] = {}
        for t, buf in calls:
            by_thread.setdefault(t, set()).add(buf)
        assert all(len(bufs) == 1 for bufs in by_thread.values())
    # the value of got[3] is a timing (any positive number on a loaded machine): not asserted here
    assert got[1] == 1.0 and got[3] > 0


@pytest.mark.parametrize("args, message", [
    (["--workers", "1,x"], "--workers must be comma-separated integers"),
    (["--workers", "0"], "worker counts and repeat must be >= 1"),
    (["--size", "huge"], "size must be one of"),
    (["--layout", "rows"], "layout must be 'full' or 'cuckoo'"),
    (["--backends", "process,gpu"], "backends must be some of process, thread"),
])
def test_bench_scale_refuses_bad_usage(tmp_path, args: list[str], message: str) -> None:  # noqa: ANN001
    res = CliRunner().invoke(app, ["bench", "scale", *args, "--out", str(tmp_path / "s.json"),
                                   "--plot", str(tmp_path / "s.png")])
    assert res.exit_code == 2 and message in res.output


def test_measure_splits_the_busier_servers_round_at_the_backends_tasks() -> None:
    """Through a TimedBackend the record holds the busier server's time inside the backend's
    maps (its evaluations), which is part of its round; through a plain backend it is None."""
    from secemb.bench.server import TimedBackend, measure
    from secemb.protocols.backends import SerialBackend, ThreadBackend

    params = {"layout": "cuckoo", "relay": True, "m": 1682, "m_prime": 40, "d": 8, "users": 4}
    plain = measure(**params, backend=SerialBackend())
    assert plain["server_tasks_s_per_round"] is None and plain["server_outside_cpu_s_per_round"] is None
    for inner in (SerialBackend(), ThreadBackend(2)):
        timed = TimedBackend(inner)
        try:
            rec = measure(**params, backend=timed)
        finally:
            timed.close()
        assert 0 < rec["server_tasks_s_per_round"] < rec["server_s_per_round"]
        assert rec["result_sha256"] == plain["result_sha256"]
        # both servers' maps are counted by the backend, the busier server's by the record
        assert rec["server_tasks_s_per_round"] < timed.map_s
        # the server thread's CPU outside the maps is part of the busier server's CPU time
        assert 0 < rec["server_outside_cpu_s_per_round"] < rec["server_cpu_s_per_round"]
    # serially the calling thread runs every task: its CPU in the maps is their CPU
    timed = TimedBackend(SerialBackend())
    timed.map(lambda t: sum(range(t)), [200_000, 200_000])
    assert timed.map_cpu_s > 0 and timed.map_cpu_s <= timed.map_s + 0.01


def test_amdahl_bound_from_the_widest_thread_record() -> None:
    records = [
        {"backend": "serial", "workers": None, "server_s_per_round": 1.0, "server_cpu_s": 2.0},
        {"backend": "process", "workers": 8, "outside_tasks_s": 0.01},
        {"backend": "thread", "workers": 2, "outside_tasks_s": 0.3, "outside_tasks_cpu_s": 0.5},
        {"backend": "thread", "workers": 4, "outside_tasks_s": 0.1, "outside_tasks_cpu_s": 0.1},
    ]
    got = bench_scale.amdahl_bound(records, [1, 2, 16])
    assert got is not None and got["workers"] == 4 and got["share"] == pytest.approx(0.1)
    # 1 / (0.1 + 0.9 / n): 1, 1 / 0.55, 1 / 0.15625
    assert got["speedup_at_most"] == pytest.approx({"1": 1.0, "2": 1.8181818, "16": 6.4})
    # on the CPU clock: 0.1 of 2.0 s, 2 / (0.1 + 1.9 / n): 1, 2 / 1.05, 2 / 0.21875
    assert got["cpu"]["share"] == pytest.approx(0.05)
    assert got["cpu"]["speedup_at_most"] == pytest.approx({"1": 1.0, "2": 1.9047619, "16": 9.1428571})
    assert bench_scale.amdahl_bound([{**records[0], "server_cpu_s": 0.0}, records[3]], [16])["cpu"] is None
    assert bench_scale.amdahl_bound(records[:2], [16]) is None  # no thread record
    assert bench_scale.amdahl_bound([records[0], {**records[2], "workers": 1}], [16]) is None
