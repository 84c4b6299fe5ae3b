"""``secemb bench popularity`` (Figure 2(a)): ratings per item, most rated first, read from a
file in ML-10M's ``ratings.dat`` format (a tiny made-up one: real data is never committed)."""

import json

import numpy as np
from typer.testing import CliRunner

from secemb.bench.popularity import long_tail
from secemb.cli import app
from secemb.data import RatingData

# ML-10M's format: UserID::MovieID::Rating::Timestamp, half-star ratings; raw ids need not be dense
_ROWS = [(1, 50, 4.5), (1, 7, 3.0), (1, 300, 0.5), (2, 50, 5.0), (2, 7, 2.5), (3, 50, 1.0), (4, 50, 4.0),
         (4, 9, 3.5), (5, 7, 2.0), (5, 50, 3.0)]


def _ratings_dat(folder):
    folder.mkdir(parents=True, exist_ok=True)
    lines = [f"{u}::{i}::{r:g}::{978300760 + k}" for k, (u, i, r) in enumerate(_ROWS)]
    (folder / "ratings.dat").write_text("\n".join(lines) + "\n")
    return folder


def test_long_tail_counts_and_shares():
    # 10 items: item 3 rated 6 times, item 0 three times, item 8 once, the rest never
    items = np.array([3] * 6 + [0] * 3 + [8])
    data = RatingData("toy", 10, 10, np.arange(10), items, np.ones(10, np.float32))
    res = long_tail(data)
    assert res["counts"] == [6, 3, 1, 0, 0, 0, 0, 0, 0, 0]
    assert res["ratings"] == 10 and res["max"] == 6 and res["median"] == 0.0
    # top 10 % = 1 item: 6 of 10 ratings; top 20 % = 2 items: 9 of 10; top 1 % rounds up to one item
    assert res["head_share"] == {"0.01": 0.6, "0.1": 0.6, "0.2": 0.9}
    assert res["items_for_half"] == 0.1  # the most rated item alone holds half
    assert res["items_below_10"] == 10


def test_cli_reads_ml10m_ratings_dat(tmp_path):
    folder = _ratings_dat(tmp_path / "data" / "ml-10M100K")
    out, png = tmp_path / "pop.json", tmp_path / "pop.png"
    r = CliRunner().invoke(app, ["bench", "popularity", "--dataset", "ml-10m", "--data-dir", str(folder),
                                 "--out", str(out), "--plot", str(png)])
    assert r.exit_code == 0, r.output
    res = json.loads(out.read_text())
    # movie 50: 5 ratings, movie 7: 3, movies 9 and 300: 1 each (4 rated movies, ids remapped)
    assert res["counts"] == [5, 3, 1, 1]
    assert res["dataset"] == "ml-10m" and res["stand_in"] is False
    assert png.stat().st_size > 1000
    assert "ml-10m: 4 items, 10 ratings" in r.output


def test_cli_without_the_files_is_a_clear_error(tmp_path):
    r = CliRunner().invoke(app, ["bench", "popularity", "--dataset", "ml-10m", "--data-dir", str(tmp_path),
                                 "--out", str(tmp_path / "p.json"), "--plot", str(tmp_path / "p.png")])
    assert r.exit_code == 2
    assert "error:" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "p.json").exists()
