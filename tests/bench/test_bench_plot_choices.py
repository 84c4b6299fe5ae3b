"""Issue 32, item 6: the choices every bench plot and table makes -- bars for categorical
comparisons, a log axis only across a decade, integer worker ticks, a flagged speed-up above
the ideal, tables that fit 80 columns, progress with a count -- checked on the drawn figure
and the rendered text, never on timings."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from secemb.bench import plots
from secemb.bench import scale as bench_scale
from secemb.bench.progress import reported
from secemb.cli.bench_output import fit_tables, print_table


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The axes of every figure the plotting functions save (spied before the figure closes)."""
    axes: list[Any] = []
    real = plots._save

    def spy(plt: Any, fig: Any, ax: Any, used: int, title: str, path: str | Path) -> None:
        axes.extend(list(ax.flat)[:used])
        real(plt, fig, ax, used, title, path)

    monkeypatch.setattr(plots, "_save", spy)
    return axes


@pytest.mark.parametrize(("values", "allow", "expected"), [
    ([1.09, 0.94, 1.2], True, "linear"),  # an RMSE: less than one decade
    ([1.0, 9.9], True, "linear"),  # just under a decade
    ([66.1, 874.7], True, "log"),  # 13.2x: a decade
    ([3e3, 2e5], True, "log"),
    ([0.004, 19.6], True, "log"),
    ([0.004, 19.6], False, "linear"),  # the caller did not allow a log axis
    ([0.0, 5.0, 500.0], True, "linear"),  # a zero has no place on a log axis
    ([float("nan"), 1.0, 2.0], True, "linear"),
])
def test_axis_scale_is_log_only_across_a_decade(values: list[float], allow: bool, expected: str) -> None:
    assert plots.axis_scale(values, allow) == expected


def test_a_line_panel_within_a_decade_gets_a_linear_axis_even_when_log_is_allowed(tmp_path: Path,
                                                                                     drawn: list[Any]) -> None:
    plots.line_panels(tmp_path / "p.png", {"rmse": {"a": [1.09, 0.95, 0.94]}, "bytes": {"b": [1e3, 1e5, 1e6]}},
                      xlabel="epoch", ylabel="", title="t", logy=True)
    assert [ax.get_yscale() for ax in drawn] == ["linear", "log"]


def test_whole_number_x_values_get_ticks_at_those_values(tmp_path: Path, drawn: list[Any]) -> None:
    plots.line_panels(tmp_path / "p.png", {"speed-up": {"process": [1.0, 1.9, 3.5]}}, xlabel="workers", ylabel="",
                      title="t", x=[1, 2, 4])
    assert list(drawn[0].get_xticks()) == [1, 2, 4]


def test_many_whole_number_x_values_get_whole_number_ticks_only(tmp_path: Path, drawn: list[Any]) -> None:
    plots.line_panels(tmp_path / "p.png", {"s": {"a": [float(v) for v in range(1, 31)]}}, xlabel="", ylabel="",
                      title="t", x=list(range(1, 31)))
    assert all(float(t).is_integer() for t in drawn[0].get_xticks())


def test_categorical_comparisons_are_labelled_bars_not_joined_points(tmp_path: Path, drawn: list[Any]) -> None:
    from secemb.bench import compare

    rows = [{"protocol": p, "rmse": rmse, "up_bytes": up, "down_bytes": 1e4, "client_s": 0.01, "server_s": s}
            for p, rmse, up, s in (("GREC", 1.0878, 227e3, 17.7), ("SecEA", 0.9155, 248e3, 26.1),
                                   ("SFSL", None, 238e3, 0.12))]
    compare.plot({"rows": rows}, str(tmp_path / "compare.png"))
    assert len(drawn) == 5
    for ax in drawn:
        assert len(ax.containers) == 1 and len(ax.containers[0]) == 3  # one bar per protocol
        assert not [line for line in ax.get_lines() if len(line.get_xdata()) > 1]  # nothing joins them
    rmse = drawn[4]
    assert rmse.get_yscale() == "linear"  # RMSE 0.92-1.09: not a log axis to 10
    assert [t.get_text() for t in rmse.texts] == ["1.088", "0.9155", "n/a"]  # values written on the bars
    assert drawn[3].get_yscale() == "log"  # server seconds 0.12-26.1 span two decades


def test_a_speed_up_above_the_ideal_is_flagged_on_the_plot(tmp_path: Path, drawn: list[Any]) -> None:
    def rec(backend: str, n: int | None, x: float) -> dict[str, Any]:
        return {"backend": backend, "workers": n, "speedup": x, "evaluation_speedup": x}

    result = {"size": "ml-1m", "m": 3883, "m_prime": 300, "users": 100, "layout": "cuckoo", "relay": True,
              "load_average": [1.0], "machine": {"cores": 2}, "machine_ceiling": {"1": 1.0, "2": 1.9},
              "records": [rec("serial", None, 1.0), rec("process", 1, 0.98), rec("process", 2, 2.13),
                          rec("thread", 1, 1.0), rec("thread", 2, 1.7)]}
    assert bench_scale.above_ideal(result) == [("process", 2, 2.13)]
    bench_scale.plot(result, str(tmp_path / "scale.png"))
    ax = drawn[0]
    flags = [line for line in ax.get_lines() if line.get_label() == "warning"]
    assert len(flags) == 1 and list(flags[0].get_xdata()) == [2] and list(flags[0].get_ydata()) == [2.13]
    assert any("2.13x > ideal 2x" in t.get_text() for t in ax.texts)
    assert list(ax.get_xticks()) == [1, 2]  # workers: never 1.5
    assert ax.get_yscale() == "linear"


def test_a_speed_up_at_the_ideal_is_not_flagged() -> None:
    records = [{"backend": "serial", "workers": None, "speedup": 1.0},
               {"backend": "thread", "workers": 2, "speedup": 2.01}]  # within the 2 % tolerance
    assert bench_scale.above_ideal({"records": records}) == []


WIDE = [("protocol", "left"), ("clients", "left"), ("training", "left"), ("accuracy", "right"), ("up KB", "right"),
        ("down KB", "right"), ("client s", "right"), ("server s", "right"),
        ("what the server (or a coalition) learns", "left")]
ROW = ("SecEmb (paper: full layout, no relay)", "943 devices, 2 servers", "1 epoch(s)", "RMSE 1.0878", "183.4",
       "104.1", "0.010", "24.46", "each of 2 non-colluding servers: the aggregate update; not which or how many "
       "items a user rated (m' public)")


def render(width: int) -> str:
    buf = io.StringIO()
    print_table("secemb bench compare", WIDE, [ROW], Console(file=buf, width=width))
    return buf.getvalue()


def test_a_wide_table_is_split_to_fit_80_columns_and_cuts_nothing() -> None:
    text = render(80)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text
    for header in ("protocol", "clients", "accuracy", "up KB", "server s", "learns"):
        assert header in text
    assert "24.46" in text and "(m' public)" in text.replace("\n", " ").replace("│", " ").replace("  ", " ")
    tables = fit_tables("t", WIDE, [ROW], 80)
    assert len(tables) > 1 and all(t.columns[0].header == "protocol" for t in tables)  # each part keeps the key


def test_a_table_that_fits_stays_one_table() -> None:
    assert len(fit_tables("t", WIDE[:3], [ROW[:3]], 120)) == 1


def test_reported_counts_every_step_and_ends_done() -> None:
    calls: list[tuple[str, int, int]] = []
    items = list(reported(["a", "b", "c"], lambda *c: calls.append(c), str.upper))
    assert items == ["a", "b", "c"]
    assert calls == [("A", 0, 3), ("B", 1, 3), ("C", 2, 3), ("done", 3, 3)]


def test_categorical_x_keeps_its_names_in_the_given_order(tmp_path: Path, drawn: list[Any]) -> None:
    plots.line_panels(tmp_path / "p.png", {"mf": {"secemb": [0.03, 0.05]}}, xlabel="dataset", ylabel="", title="t",
                      x=["ml-1m", "ml-100k"], logy=True)
    drawn[0].figure.canvas.draw()
    assert [t.get_text() for t in drawn[0].get_xticklabels()] == ["ml-1m", "ml-100k"]


def test_crowded_whole_number_x_values_get_a_whole_number_locator(tmp_path: Path, drawn: list[Any]) -> None:
    plots.line_panels(tmp_path / "p.png", {"s": {"a": [1.0, 2.0, 3.0, 4.0]}}, xlabel="n", ylabel="", title="t",
                      x=[4, 6, 60, 100])
    ticks = list(drawn[0].get_xticks())
    assert ticks != [4, 6, 60, 100] and all(float(t).is_integer() for t in ticks)
