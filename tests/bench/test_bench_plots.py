"""Issue 13, item 10: comm.png was 5,070 x 432 px with datasets in string order and log-axis bars
that looked empty; item 12: matplotlib is the `bench` extra, and its absence is a clear error."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from secemb.bench import comm, plots
from secemb.data import synthetic_like
from secemb.data.features import synthetic_features


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def assert_readable(path: Path) -> None:
    """Fits a screen at 100 %: at most 1,200 x 1,000 px, at least 400 px wide, aspect 0.6-2.5."""
    width, height = png_size(path)
    assert 400 <= width <= 1200 and 250 <= height <= 1000, (width, height)
    assert 0.6 <= width / height <= 2.5, (width, height)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_line_panels_png_size_and_aspect(tmp_path: Path, n: int) -> None:
    panels = {f"model {k}": {"a": [1.0, 10.0, 100.0], "b": [0.1, float("nan"), 3.0]} for k in range(n)}
    path = tmp_path / "p.png"
    plots.line_panels(path, panels, xlabel="dataset", ylabel="MB", title="t", x=["ml-100k", "ml-1m", "yelp"],
                      logy=True)
    if n <= 4:
        assert_readable(path)
    else:  # a third row: taller, still two panels wide
        assert png_size(path)[0] <= 1200


def test_comm_png_is_small_multiples_in_natural_dataset_order(tmp_path: Path, monkeypatch) -> None:
    data = synthetic_like(30, 60, 600, seed=0, name="tiny")
    for name, shape in (("tiny-b", (60, 8, 20)), ("tiny-a", (60, 8, 20))):  # natural order: b before a
        monkeypatch.setitem(comm.DATASETS, name, shape)
        monkeypatch.setitem(comm._CACHE, name, (data, synthetic_features("ml-100k", 30, 60)))
    drawn = {}
    real = plots.line_panels

    def spy(path, panels, **kw):  # noqa: ANN001, ANN003, ANN202
        drawn.update(panels=panels, x=kw["x"])
        return real(path, panels, **kw)

    monkeypatch.setattr(plots, "line_panels", spy)
    comm.run(models=("mf", "ncf", "fm", "deepfm"), datasets=("tiny-a", "tiny-b"), protocols=("secemb", "secfedrec"),
             out=tmp_path)
    assert drawn["x"] == ["tiny-b", "tiny-a"]  # Table 7's order (the registry's), not string order
    assert list(drawn["panels"]) == ["mf", "ncf", "fm", "deepfm"]
    assert all(np.isfinite(v).all() for series in drawn["panels"].values() for v in series.values())
    assert_readable(tmp_path / "comm.png")


def test_server_plot_is_readable(tmp_path: Path) -> None:
    from secemb.bench.server import plot

    sweep = [{"m": m, "layout": lay, "server_s_per_round": m / 1e4 * (3 if lay == "full" else 1), "users": 10,
              "m_prime": 50} for m in (1000, 10_000, 100_000) for lay in ("full", "cuckoo")]
    plot(sweep, str(tmp_path / "server.png"))
    assert_readable(tmp_path / "server.png")


def test_bench_without_matplotlib_exits_2_naming_the_extra(tmp_path: Path, monkeypatch) -> None:
    from secemb.cli import app

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    res = CliRunner().invoke(app, ["bench", "comm", "--models", "mf", "--datasets", "ml-100k", "--protocols",
                                   "secemb", "--out", str(tmp_path), "-q"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert res.stderr == ("error: the plots of secemb bench need matplotlib, which is not installed: "
                          "pip install 'secemb[bench]'\n")
    assert not (tmp_path / "rows.jsonl").exists()  # refused before measuring
    with pytest.raises(plots.PlotsUnavailable):
        plots.line_panels(tmp_path / "x.png", {"a": {"s": [1.0]}}, xlabel="", ylabel="", title="")
