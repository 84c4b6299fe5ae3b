"""Fixtures shared by the test folders.

``secemb_round``: one SecEmb round begun at both servers (:func:`round_setup.begin`: the
protocol, its round configuration, a table of uniform ring words drawn from
``default_rng(seed)``, both servers' ``begin_round``), the set-up of the two-server round tests
of tests/protocols and tests/fss.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from round_setup import SecEmbRound, begin


@pytest.fixture
def secemb_round() -> Callable[..., SecEmbRound]:
    """:func:`begin`: a SecEmb round begun at both servers."""
    return begin
