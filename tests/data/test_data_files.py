"""Issue 13, item 7: your own rating file (--dataset PATH): CSV, TSV, RecBole .inter."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from secemb.data import DataFormatError, DatasetNotFoundError, load_dataset, read_own_ratings
from secemb.errors import InvalidParameters


def _file(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_csv_with_header_token_ids_and_timestamps(tmp_path: Path) -> None:
    path = _file(tmp_path, "r.csv", "userId,movieId,rating,timestamp\nbob,m2,5,300\nalice,m1,4,100\nbob,m1,3.5,200\n")
    data = load_dataset(str(path))
    assert (data.name, data.num_users, data.num_items) == (str(path), 2, 2)
    assert data.users.tolist() == [1, 0, 1] and data.items.tolist() == [1, 0, 0]  # sorted raw ids
    assert data.ratings.dtype == np.float32 and data.ratings.tolist() == [5.0, 4.0, 3.5]
    assert data.timestamps.tolist() == [300, 100, 200]


def test_header_columns_in_any_order_extra_columns_ignored(tmp_path: Path) -> None:
    path = _file(tmp_path, "r.csv", 'Rating,Item_ID,note,User ID\n4,"10",x,1\n2,20,"a, b",7\n')
    data = read_own_ratings(path)
    assert data.ratings.tolist() == [4.0, 2.0] and data.users.tolist() == [0, 1] and data.timestamps is None


def test_tsv_without_header_integer_ids_in_numeric_order(tmp_path: Path) -> None:
    path = _file(tmp_path, "r.tsv", "10\t5\t1\n9\t100\t2\n10\t20\t3\n\n")
    data = read_own_ratings(path)
    assert data.users.tolist() == [1, 0, 1]  # 9 < 10 numerically, though "10" < "9" as text
    assert data.items.tolist() == [0, 2, 1] and data.timestamps is None


def test_recbole_inter_keeps_float_timestamps(tmp_path: Path) -> None:
    path = _file(tmp_path, "x.inter", "item_id:token\tuser_id:token\trating:float\ttimestamp:float\n"
                 "a\tu1\t3\t881250949.0\nb\tu2\t4\t881250950\n")
    data = read_own_ratings(path)
    assert data.timestamps.tolist() == [881250949, 881250950] and data.num_users == 2


@pytest.mark.parametrize(
    "name, text, line, message",
    [
        ("r.csv", "1,2,3\n1,2\n", 2, "expected 3 fields, found 2"),
        ("r.csv", "user,item,rating\n1,2,3\n2,3,x\n", 3, "rating is not a number: 'x'"),
        ("r.csv", "1,2,3,4\n2,2,nan,4\n", 2, "rating is not finite: 'nan'"),
        ("r.csv", "1,2,3,4\n2,2,3,-1\n", 2, "timestamp: expected whole seconds >= 0, got '-1'"),
        ("r.tsv", "1\t2\t3\n2\t\t3\n", 2, "item id is empty"),
        ("r.tsv", "1\t2\n", 1, "expected 3 or 4 fields (user, item, rating[, timestamp]), found 2"),
        ("r.inter", "user_id:token\titem_id:token\tvalue:float\n1\t2\t3\n", 1, "missing rating"),
    ],
)
def test_malformed_line_is_reported_with_its_number(tmp_path: Path, name: str, text: str, line: int,
                                                    message: str) -> None:
    path = _file(tmp_path, name, text)
    with pytest.raises(DataFormatError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
                       .replace("]", r"\]")) as info:
        read_own_ratings(path)
    assert info.value.line == line and str(info.value).startswith(f"{path}, line {line}: ")


@pytest.mark.parametrize("text", ["", "\n\n", "user,item,rating\n"])
def test_empty_file_is_refused(tmp_path: Path, text: str) -> None:
    with pytest.raises(DataFormatError, match="no ratings in file"):
        read_own_ratings(_file(tmp_path, "r.csv", text))


def test_one_user_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DataFormatError, match="users: expected at least 2 .*, got 1"):
        read_own_ratings(_file(tmp_path, "r.csv", "u,1,4\nu,2,5\n"))


def test_missing_file_and_unknown_suffix(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError, match="not found"):
        load_dataset(str(tmp_path / "absent.csv"))
    with pytest.raises(DataFormatError, match="expected a .csv, .tsv or .inter file, got '.txt'"):
        read_own_ratings(_file(tmp_path, "r.txt", "1,2,3\n"))
    with pytest.raises(InvalidParameters, match="or the path of a .csv, .tsv or .inter file"):
        load_dataset(str(tmp_path / "r.parquet"))


def test_cli_reports_a_malformed_data_file_without_a_traceback(tmp_path: Path) -> None:
    from secemb.cli import app

    path = _file(tmp_path, "u.data", "1\t2\t3\t4\n2\t2\t3\n")
    res = CliRunner().invoke(app, ["train", "--dataset", "ml-100k", "--data-dir", str(tmp_path), "--epochs", "1", "-q"])
    assert res.exit_code == 2 and res.stderr.startswith(f"error: {path}, line 2: ") and "Traceback" not in res.output


def test_train_on_own_csv_end_to_end_through_the_cli(tmp_path: Path) -> None:
    from secemb.cli import app

    rng = np.random.default_rng(0)
    lines = [f"user{u},item{i},{rng.integers(1, 6)},{1000 + k}" for k, (u, i) in
             enumerate((u, i) for u in range(30) for i in rng.choice(40, size=8, replace=False))]
    path = _file(tmp_path, "mine.csv", "user,item,rating,timestamp\n" + "\n".join(lines) + "\n")
    out = tmp_path / "result.json"
    res = CliRunner().invoke(app, ["train", "--dataset", str(path), "--epochs", "1", "-q", "--json-out", str(out)])
    assert res.exit_code == 0, res.output
    assert f'"dataset": "{path}"' in out.read_text()
