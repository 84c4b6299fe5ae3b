"""tests/conftest.py's scheduling hint names files that exist, and the collection puts them first."""

from __future__ import annotations

import importlib.util
from pathlib import Path

# this folder's conftest by its path: `import conftest` may find another folder's (tests/server/conftest.py)
_spec = importlib.util.spec_from_file_location("tests_root_conftest", Path(__file__).with_name("conftest.py"))
assert _spec is not None and _spec.loader is not None
_root = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_root)
LONGEST_FIRST, pytest_collection_modifyitems = _root.LONGEST_FIRST, _root.pytest_collection_modifyitems


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
