"""Issue 32 item 4: raw ids end to end.  A rating file's own ids (``user0``, ``The Matrix``)
are kept with the saved model (``items.json`` public, ``users.json`` beside the devices'
state); ``secemb recommend`` and ``secemb infer`` take ``--user`` as a raw id (``--index`` for
the internal index) and print raw item ids and titles; the Python API returns both.  Models
saved without ids keep working (ids = indices, stated); an unknown id or a malformed id file is
one ``error:`` line and exit 2.

The expected ids are computed here from the rows the tests write (sorted distinct tokens), not
by the code under test.  Training runs the default protocol (SecEmb), as the issue's acceptance
command does."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
from cli_helpers import assert_usage_error, run_cli

from secemb.data import load_dataset, read_own_ratings
from secemb.data.ids import IdMap
from secemb.errors import InvalidParameters
from secemb.inference.trained import TrainedModel

USERS = [f"user{i}" for i in range(12)]
ITEMS = ["The Matrix", "Heat", "Alien", "Up", "Jaws", "Big", "Fargo", "Se7en", "Rocky", "Tron", "Brazil", "Ran",
         "Psycho", "Vertigo"]


def _rows() -> list[tuple[str, str, int]]:
    rng = random.Random(7)
    return [(u, it, rng.randint(1, 5)) for u in USERS for it in rng.sample(ITEMS, 6)]


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model trained through the CLI on a CSV with string ids."""
    root = tmp_path_factory.mktemp("rawids")
    csv = root / "ratings.csv"
    csv.write_text("user,item,rating\n" + "".join(f"{u},{it},{r}\n" for u, it, r in _rows()), encoding="utf-8")
    res = run_cli("train", "--dataset", str(csv), "--epochs", "1", "--dim", "4", "-q",
                  "--save-model", str(root / "model"))
    assert res.exit_code == 0, res.output
    assert "--user user0" in res.output  # the hint names a raw id
    return root / "model"


def _json(*args: str) -> dict:
    res = run_cli(*args, "--json")
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_a_csv_with_string_ids_trains_and_recommend_prints_raw_item_ids(saved: Path) -> None:
    """The issue's acceptance: ``secemb recommend --model-dir M --user user0`` prints raw item ids."""
    res = run_cli("recommend", "--model-dir", str(saved), "--user", "user0", "-k", "5")
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0].startswith("top 5 unrated items for user user0 (index 0) (mf, secemb, ")
    rated = {it for u, it, _ in _rows() if u == "user0"}
    printed = [line.split("  ")[-2].strip() for line in lines[2:]]  # rank, item, score: the item column
    assert len(printed) == 5 and set(printed) <= set(ITEMS) - rated, printed
    doc = _json("recommend", "--model-dir", str(saved), "--user", "user0", "-k", "5")
    order = sorted(ITEMS)  # indices are the ranks of the raw ids in sorted order
    assert doc["user"] == sorted(USERS).index("user0") and doc["user_id"] == "user0" and doc["raw_ids"] is True
    assert doc["item_ids"] == [order[i] for i in doc["items"]] == printed
    assert doc["titles"] is None  # a CSV has no titles


def test_index_form_and_user_form_agree(saved: Path) -> None:
    index = sorted(USERS).index("user11")  # 3: user0, user1, user10, user11, ...
    by_id = _json("recommend", "--model-dir", str(saved), "--user", "user11")
    by_index = _json("recommend", "--model-dir", str(saved), "--index", str(index))
    assert by_id == by_index and by_id["user"] == index == 3


def test_unknown_user_id_or_both_forms_exit_2(saved: Path) -> None:
    assert_usage_error(run_cli("recommend", "--model-dir", str(saved), "--user", "nobody"), "unknown user id 'nobody'")
    assert_usage_error(run_cli("recommend", "--model-dir", str(saved), "--user", "0"), "unknown user id '0'")
    assert_usage_error(run_cli("recommend", "--model-dir", str(saved), "--index", "12"),
                       "--index must be in [0, 11] (the model's 12 users), got 12")
    # session 39 (helper U's finding): the option is named, as infer names it too
    assert_usage_error(run_cli("recommend", "--model-dir", str(saved), "--index", "-1"), "--index must be in [0, 11]")
    assert_usage_error(run_cli("infer", "--model-dir", str(saved), "--index", "12", "--items", "Heat"),
                       "--index must be in [0, 11] (the model's 12 users), got 12")
    assert_usage_error(run_cli("recommend", "--model-dir", str(saved), "--user", "user0", "--index", "0"),
                       "one of the two")
    assert_usage_error(run_cli("recommend", "--model-dir", str(saved)), "one of the two")


def test_the_python_api_returns_indices_and_raw_ids(saved: Path) -> None:
    trained = TrainedModel.load(saved)
    rec = trained.recommend(user_id="user0", k=4)
    assert rec == rec and rec.user == 0 and rec.user_id == "user0" and rec.raw_ids
    assert list(rec.item_ids) == [sorted(ITEMS)[i] for i in rec.items.tolist()]
    same = trained.recommend(0, 4)
    assert same.items.tolist() == rec.items.tolist() and same.item_ids == rec.item_ids
    with pytest.raises(InvalidParameters, match="unknown user id"):
        trained.recommend(user_id="user99")
    with pytest.raises(InvalidParameters, match="one of the two"):
        trained.recommend(0, user_id="user0")


def test_item_ids_are_public_and_user_ids_sit_with_the_devices_state(saved: Path) -> None:
    manifest = json.loads((saved / "manifest.json").read_text())
    assert manifest["ids"] == {"items": "items.json", "users": "users.json"}
    items = json.loads((saved / "items.json").read_text())
    users = json.loads((saved / "users.json").read_text())
    assert items == {"format": "secemb-items", "version": 1, "ids": sorted(ITEMS), "titles": None}
    assert users == {"format": "secemb-users", "version": 1, "ids": sorted(USERS)}
    assert not any(u in (saved / "items.json").read_text() for u in USERS)


def test_a_model_saved_without_ids_uses_indices_and_says_so(saved: Path, tmp_path: Path) -> None:
    old = Path(shutil.copytree(saved, tmp_path / "old"))
    manifest = json.loads((old / "manifest.json").read_text())
    del manifest["ids"]  # as written before ids were recorded
    (old / "manifest.json").write_text(json.dumps(manifest))
    (old / "items.json").unlink()
    (old / "users.json").unlink()
    res = run_cli("recommend", "--model-dir", str(old), "--user", "3", "-k", "2")
    assert res.exit_code == 0, res.output
    assert "for user 3 (mf, secemb" in res.stdout and "ids are indices" in res.stdout
    doc = _json("recommend", "--model-dir", str(old), "--index", "3", "-k", "2")
    assert doc["raw_ids"] is False and doc["item_ids"] == [str(i) for i in doc["items"]] and doc["user_id"] == "3"
    assert doc["items"] == _json("recommend", "--model-dir", str(saved), "--index", "3", "-k", "2")["items"]


def _edit_items(saved: Path, tmp_path: Path, change) -> Path:  # noqa: ANN001
    folder = Path(shutil.copytree(saved, tmp_path / "edited"))
    doc = json.loads((folder / "items.json").read_text())
    change(doc)
    (folder / "items.json").write_text(json.dumps(doc))
    return folder


def test_an_edited_title_is_accepted(saved: Path, tmp_path: Path) -> None:
    def titled(doc: dict) -> None:
        doc["titles"] = [f"{i} (film)" for i in doc["ids"]]

    doc = _json("recommend", "--model-dir", str(_edit_items(saved, tmp_path, titled)), "--user", "user0", "-k", "3")
    assert doc["titles"] == [f"{i} (film)" for i in doc["item_ids"]]


@pytest.mark.parametrize("change, text", [
    (lambda d: d["ids"].__setitem__(1, d["ids"][0]), "occurs twice"),
    (lambda d: d["ids"].pop(), "expected 14 (one per index), got 13"),
    (lambda d: d["ids"].__setitem__(0, 5), "list of non-empty strings"),
    (lambda d: d.__setitem__("titles", ["x"]), "titles must be a list of 14 strings"),
    (lambda d: d.__setitem__("format", "pickle"), "expected format 'secemb-items' version 1"),
])
def test_a_malformed_items_file_exits_2_naming_it(saved: Path, tmp_path: Path, change, text: str) -> None:  # noqa: ANN001
    folder = _edit_items(saved, tmp_path, change)
    assert_usage_error(run_cli("recommend", "--model-dir", str(folder), "--user", "user0"), text)
    assert "items.json" in run_cli("recommend", "--model-dir", str(folder), "--user", "user0").stderr


def test_infer_takes_raw_ids_and_prints_them(saved: Path) -> None:
    doc = _json("infer", "--model-dir", str(saved), "--user", "user0", "-k", "3")
    assert doc["user"] == 0 and doc["user_id"] == "user0"
    assert doc["item_ids"] == [sorted(ITEMS)[i] for i in doc["items"]]
    scored = _json("infer", "--model-dir", str(saved), "--index", "0", "--items", "Heat,The Matrix")
    assert scored["item_ids"] == ["Heat", "The Matrix"] and scored["items"] == [sorted(ITEMS).index("Heat"),
                                                                                sorted(ITEMS).index("The Matrix")]
    assert_usage_error(run_cli("infer", "--model-dir", str(saved), "--user", "user0", "--items", "Nope"),
                 "unknown item id 'Nope'")
    assert_usage_error(run_cli("infer", "--model-dir", str(saved), "--user", "ghost"), "unknown user id 'ghost'")
    assert_usage_error(run_cli("infer", "--model-dir", str(saved), "--user", "user0", "--items", " , "),
                       "at least one item")


# ---------------------------------------------------------------------- loaders: ids and titles


def test_movielens_100k_keeps_raw_ids_in_numeric_order_and_latin1_titles(tmp_path: Path) -> None:
    (tmp_path / "u.data").write_text("10\t2\t3\t881250949\n2\t10\t4\t881250950\n2\t2\t5\t881250951\n")
    flags = "|0" * 19
    (tmp_path / "u.item").write_bytes(f"2|Misérables, Les (1995)|01-Jan-1995||url{flags}\n"
                                      f"10|GoldenEye (1995)|01-Jan-1995||url{flags}\n".encode("latin-1"))
    data = load_dataset("ml-100k", tmp_path)
    assert data.ids == IdMap(("2", "10"), ("2", "10"), ("Misérables, Les (1995)", "GoldenEye (1995)"))


def test_movielens_1m_titles_from_movies_dat_and_none_without_it(tmp_path: Path) -> None:
    (tmp_path / "ratings.dat").write_text("1::5::3::978300760\n7::3::4::978300761\n")
    assert load_dataset("ml-1m", tmp_path).ids == IdMap(("1", "7"), ("3", "5"), None)
    (tmp_path / "movies.dat").write_text("5::Heat (1995)::Action|Crime\n9::Unrated (1999)::Drama\n")
    assert load_dataset("ml-1m", tmp_path).ids == IdMap(("1", "7"), ("3", "5"), ("", "Heat (1995)"))


def test_recbole_inter_file_takes_titles_from_its_item_file(tmp_path: Path) -> None:
    (tmp_path / "mine.inter").write_text("user_id:token\titem_id:token\trating:float\n"
                                         "a\tm1\t4\nb\tm2\t3\nb\tm1\t5\n")
    (tmp_path / "mine.item").write_text("item_id:token\tmovie_title:token_seq\tclass:token_seq\n"
                                        "m2\tSecond Film\tDrama\nm1\tFirst Film\tComedy\n")
    assert read_own_ratings(tmp_path / "mine.inter").ids == IdMap(("a", "b"), ("m1", "m2"),
                                                                  ("First Film", "Second Film"))


def test_integer_ids_of_a_csv_are_canonical_and_found_with_leading_zeros(tmp_path: Path) -> None:
    (tmp_path / "r.csv").write_text("007,3,4\n12,3,5\n12,40,1\n")
    ids = read_own_ratings(tmp_path / "r.csv").ids
    assert ids == IdMap(("7", "12"), ("3", "40"))
    assert ids.user_index("007") == 0 and ids.user_index("12") == 1
    with pytest.raises(InvalidParameters, match="unknown user id '8'"):
        ids.user_index("8")
