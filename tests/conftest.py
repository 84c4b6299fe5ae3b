"""Fixtures shared by the test folders.

``secemb_round``: one SecEmb round begun at both servers (:func:`round_setup.begin`: the
protocol, its round configuration, a table of uniform ring words drawn from
``default_rng(seed)``, both servers' ``begin_round``), the set-up of the two-server round tests
of tests/protocols and tests/fss.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

import pytest

from round_setup import SecEmbRound, begin

#: the harness's server processes fork from a warm template (tests/_server_template.py)
pytest_plugins = ["_server_template"]

# The suite starts many Python processes (server processes, CLI runs, device processes).  Where the
# environment asks Python for no bytecode cache (``PYTHONDONTWRITEBYTECODE``, as some sandboxes set),
# each of them compiled secemb's ~150 modules from source again (~0.5 s of CPU a server process,
# session 34, helper E); the cache (``__pycache__/``, ignored by git) is what a user's checkout has.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


@pytest.fixture
def secemb_round() -> Callable[..., SecEmbRound]:
    """:func:`begin`: a SecEmb round begun at both servers."""
    return begin
