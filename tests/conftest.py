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
pytest_plugins = ["_server_template", "_cli_cache"]

# The suite starts many Python processes (server processes, CLI runs, device processes).  Where the
# environment asks Python for no bytecode cache (``PYTHONDONTWRITEBYTECODE``, as some sandboxes set),
# each of them compiled secemb's ~150 modules from source again (~0.5 s of CPU a server process,
# session 34, helper E); the cache (``__pycache__/``, ignored by git) is what a user's checkout has.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


#: the suite's longest files (seconds summed over their tests in a fresh-clone CI, session 36), run first:
#: ``--dist loadfile`` hands out files in collection order, and a long file handed out last leaves the
#: other workers idle at the end (a scheduling hint only: tests/test_conftest_order.py checks they exist)
LONGEST_FIRST = (
    "engine/test_engine_twins.py",  # 82 s
    "review/test_session36_redteam.py",  # 79 s
    "engine/test_engine_twins_2.py",  # 78 s
    "review/test_session30_fuzz.py",  # 73 s
    "engine/test_engine_twins_1.py",  # 64 s
    "server/test_net_faults.py",  # 63 s
    "fss/test_fss_gpu.py",  # 60 s
    "review/test_session25_fuzz_exchange.py",  # 43 s
    "review/test_session27_redteam_kernels.py",  # 42 s
    "fss/test_cpu_profiles.py",  # 39 s
    "cli/test_secea_deploy.py",  # 33 s
    "server/test_net_flood.py",  # 32 s
)


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """The files of :data:`LONGEST_FIRST` first, in its order; every file's tests keep their order."""
    here = os.path.dirname(__file__)
    rank = {os.path.join(here, name): i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(str(item.path), len(rank)))  # stable: the rest as collected


@pytest.fixture
def secemb_round() -> Callable[..., SecEmbRound]:
    """:func:`begin`: a SecEmb round begun at both servers."""
    return begin
