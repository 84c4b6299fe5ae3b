"""Runs the README's Python snippet (its ```python block), verbatim: CI's bare-install step."""

import re
from pathlib import Path

readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
(snippet,) = re.findall(r"```python\n(.*?)```", readme, flags=re.S)
exec(compile(snippet, "README.md (python snippet)", "exec"))
