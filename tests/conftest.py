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


#: the suite's longest files (seconds summed over their tests in the junit report of an idle run of the README's
#: test command with ``--junitxml``, session 43), run first: ``--dist loadfile`` hands out files in collection order
#: once :func:`pytest_configure` turns off xdist's own reordering (by number of tests, its default since
#: xdist 3: before session 43 this list had no effect there), and a long file handed out last leaves the
#: other workers idle at the end (a scheduling hint only: tests/test_conftest_order.py checks they exist)
LONGEST_FIRST = (
    "fss/test_fss_gpu.py",  # 54 s
    "engine/test_engine_twins_2.py",  # 43 s
    "engine/test_engine_twins.py",  # 41 s
    "test_lint.py",  # 40 s
    "review/test_session42_redteam.py",  # 37 s
    "privacy/test_privacy.py",  # 34 s
    "engine/test_engine_twins_1.py",  # 33 s
    "review/test_session27_redteam_kernels.py",  # 29 s
    "fss/test_s29_sketch.py",  # 26 s
    "review/test_session35_redteam.py",  # 26 s
    "server/test_net_flood.py",  # 25 s
    "server/test_s42_quorum_agreed.py",  # 24 s
    "server/test_net_faults.py",  # 22 s
    "server/test_net_dropouts.py",  # 22 s
)


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, files go out in the collection's order (:data:`LONGEST_FIRST` first), not
    xdist's (``--no-loadscope-reorder``: ``loadscopereorder`` is its option's destination)."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """The files of :data:`LONGEST_FIRST` first, in its order; every file's tests keep their order."""
    here = os.path.dirname(__file__)
    rank = {os.path.join(here, name): i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(str(item.path), len(rank)))  # stable: the rest as collected


@pytest.fixture
def secemb_round() -> Callable[..., SecEmbRound]:
    """:func:`begin`: a SecEmb round begun at both servers."""
    return begin
