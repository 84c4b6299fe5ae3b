"""Fixtures shared by the session-21 red-team tests of a deviating one-server node
(``test_session21_sfsl_*.py``, ``test_session21_secea_*.py``; the node is
:class:`session21_deviating_server.DeviatingNode`).  A module's own fixture of the same name
takes precedence over these.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from secemb.data.ctr import TaobaoShaped, split_clicks
from secemb.protocols.exchange import ExchangeRun
from secemb.protocols.sfsl.protocol import SFSLProtocol

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cli"))
from cli_helpers import init_one_server  # type: ignore[import-not-found]  # noqa: E402
from session21_deviating_server import DeviatingNode  # noqa: E402
from session21_secea_setup import Deployment  # noqa: E402


@pytest.fixture
def nodes() -> Iterator[list[DeviatingNode]]:
    """The deviating nodes a test started (it appends them): closed after the test."""
    made: list[DeviatingNode] = []
    yield made
    for node in made:
        node.close()


@pytest.fixture(scope="module")
def sfsl() -> SFSLProtocol:
    """SFSL of taobao-mini's first 8 users (CPP2, batch 8, 3 users a round), in process."""
    clicks = split_clicks(TaobaoShaped("taobao-mini", seed=3).clients(np.arange(8)))
    return SFSLProtocol(ExchangeRun("taobao-mini", users_per_round=3), sfsl_preset="CPP2", batch=8, data=clicks)


@pytest.fixture(scope="module")
def sfsl_credentials(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Device 0's credentials of an SFSL deployment (taobao-mini, 3 users a round, CPP1, batch 8)."""
    root = tmp_path_factory.mktemp("sfsl") / "dep"
    init_one_server(root, "--protocol", "sfsl", "--dataset", "taobao-mini", "--users-per-round", "3",
                    "--option", "sfsl_preset=CPP1", "--option", "batch=8")
    return Path(root / "devices" / "device-0.json")


@pytest.fixture
def secea_deployment(tmp_path: Path) -> Iterator[Deployment]:
    """A one-server SecEA deployment whose silo 0 runs as ``secemb client`` (session21_secea_setup.py;
    helper K): its served nodes closed after the test."""
    made = Deployment(tmp_path / "dep")
    yield made
    made.close()
