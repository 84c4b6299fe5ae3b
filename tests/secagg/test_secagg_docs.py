"""docs/secagg.md's example runs and opens the survivors' sum."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

DOC = Path(__file__).resolve().parents[2] / "docs" / "secagg.md"


def test_the_usage_example_runs():
    code = re.search(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    assert code is not None
    scope: dict[str, object] = {}
    exec(code.group(1), scope)  # noqa: S102 - the repository's own documentation
    assert np.array_equal(scope["total"], np.full((1000, 1), 3 + 8 + 12, np.uint32))
