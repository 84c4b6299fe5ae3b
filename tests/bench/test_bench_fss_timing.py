"""The structure of `bench fss`'s measurement: warm-up, interleaving, best of N, the share
ceiling -- checked with a fake clock, never with real timings."""

from __future__ import annotations

import pytest

from secemb.bench.fss import CEILINGS, ShareAboveCeiling, Timed, check_share, interleaved


class FakeClock:
    """A clock that each workload advances by the next of its scripted durations."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def scripted(clock: FakeClock, log: list[str], name: str, durations: list[float], work: float) -> Timed:
    def run() -> None:
        log.append(name)
        clock.now += durations.pop(0)

    return Timed(work, run)


def test_every_workload_is_warmed_up_once_then_the_references_and_the_figure_alternate() -> None:
    clock, log = FakeClock(), []
    refs = {"openssl": scripted(clock, log, "openssl", [9.0, 1.0, 1.0, 1.0], 100.0),
            "kernel": scripted(clock, log, "kernel", [9.0, 1.0, 1.0, 1.0], 100.0)}
    figure = scripted(clock, log, "figure", [9.0, 1.0, 1.0, 1.0], 10.0)
    interleaved(figure, refs, 3, clock)
    assert log == ["openssl", "kernel", "figure"] + ["openssl", "kernel", "figure"] * 3


def test_the_warm_up_call_is_not_timed_and_the_best_time_is_kept() -> None:
    clock, log = FakeClock(), []
    # the warm-up call (first duration) is the slowest by far: compilation
    ref = scripted(clock, log, "aes", [1000.0, 4.0, 2.0, 5.0], 100.0)
    figure = scripted(clock, log, "figure", [1000.0, 8.0, 10.0, 4.0], 20.0)
    rate, aes = interleaved(figure, {"openssl": ref}, 3, clock)
    assert rate == 20.0 / 4.0  # best of 8, 10, 4
    assert aes == {"openssl": 100.0 / 2.0}  # best of 4, 2, 5


def test_interleaved_without_references_times_the_figure_alone() -> None:
    clock, log = FakeClock(), []
    rate, aes = interleaved(scripted(clock, log, "keygen", [50.0, 3.0, 2.0], 1.0), {}, 2, clock)
    assert (rate, aes, log) == (0.5, {}, ["keygen"] * 3)


def test_interleaved_refuses_zero_repeats() -> None:
    with pytest.raises(ValueError, match="repeats"):
        interleaved(Timed(1.0, lambda: None), {}, 0)


def test_a_share_above_its_ceiling_raises() -> None:
    with pytest.raises(ShareAboveCeiling, match=r"eval_leaves_per_s: measured 0\.510 .* ceiling 0\.5"):
        check_share("eval_leaves_per_s", 0.51, 0.5)


def test_a_share_at_or_below_its_ceiling_passes() -> None:
    check_share("eval_leaves_per_s", 0.5, 0.5)
    check_share("convert_blocks_per_s", 0.99, 1.0)


def test_the_ceilings_are_one_over_the_fewest_aes_blocks_a_unit_costs() -> None:
    # a walk leaf costs two AES blocks (the retrieval answer walks too); conversion counts blocks;
    # eval_full at d = 1 adds a conversion block a leaf; a Half-Tree walk leaf costs one block;
    # end to end, both parties evaluate
    assert CEILINGS == {"eval_leaves_per_s": 0.5, "eval_leaves_per_s_ml100k": 0.5, "convert_blocks_per_s": 1.0,
                        "convert_blocks_per_s_d65": 1.0, "dot_leaves_per_s": 0.5, "eval_full_leaves_per_s": 1 / 3,
                        "halftree_eval_leaves_per_s": 1.0, "halftree_eval_full_leaves_per_s": 0.5,
                        "end_to_end_bgi": 1 / 6, "end_to_end_halftree": 1 / 4}


def test_bench_fss_exits_1_with_one_line_when_a_share_is_above_its_ceiling(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from secemb.bench import fss as bench_fss
    from secemb.cli import app

    def broken(quick: bool = False) -> dict[str, object]:
        check_share("eval_leaves_per_s", 1.83, 0.5)
        return {}

    monkeypatch.setattr(bench_fss, "run", broken)
    res = CliRunner().invoke(app, ["bench", "fss", "--json"])
    assert res.exit_code == 1
    assert res.output.startswith("error: eval_leaves_per_s: measured 1.830") and "Traceback" not in res.output
