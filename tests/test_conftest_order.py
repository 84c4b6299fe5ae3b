"""tests/conftest.py's scheduling hint names files that exist, and the collection puts them first."""

from __future__ import annotations

from pathlib import Path

from conftest import LONGEST_FIRST, pytest_collection_modifyitems


def test_every_longest_first_file_exists():
    here = Path(__file__).parent
    assert [name for name in LONGEST_FIRST if not (here / name).is_file()] == []


def test_the_longest_files_come_first_and_each_file_keeps_its_order():
    here = Path(__file__).parent

    class Item:
        def __init__(self, name: str, i: int) -> None:
            self.path, self.i = here / name, i

    items = [Item("a/test_x.py", 0), Item(LONGEST_FIRST[1], 1), Item("a/test_x.py", 2), Item(LONGEST_FIRST[0], 3),
             Item(LONGEST_FIRST[1], 4)]
    pytest_collection_modifyitems(None, None, items)  # type: ignore[arg-type]
    assert [item.i for item in items] == [3, 1, 4, 0, 2]
