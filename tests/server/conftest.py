"""The network tests need the ``server`` extra (FastAPI, uvicorn, httpx): without it they are
not collected (``pip install -e '.[test,server]'``)."""

import importlib.util

collect_ignore_glob = [] if all(importlib.util.find_spec(m) for m in ("fastapi", "uvicorn", "httpx")) else ["test_net_*.py"]
