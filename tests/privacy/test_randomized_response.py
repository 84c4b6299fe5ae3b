"""Algorithm 2 of secure federated submodel learning: presets, privacy levels, perturbation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from secemb.errors import InvalidParameters
from secemb.privacy.randomized_response import (
    CPP_PRESETS,
    IndexPerturber,
    RRParams,
    event_probabilities,
    get_cpp,
)
from secemb.randomness import CtrDrbg

# Table V of secure-federated-submodel-learning.txt, typed in from the paper:
# preset: (p5, p6, eps_1, eps_inf)
TABLE_V = {
    "CPP2": (0.883, 0.117, 2.02, 2.71),
    "CPP3": (0.781, 0.219, 1.27, 1.95),
    "CPP4": (0.625, 0.375, 0.51, 1.10),
}


@pytest.mark.parametrize("name", sorted(TABLE_V))
def test_table_v_epsilons_match_paper_to_two_decimals(name: str) -> None:
    p5, p6, eps1, eps_inf = TABLE_V[name]
    params = get_cpp(name)
    assert round(params.p5, 3) == p5
    assert round(params.p6, 3) == p6
    assert round(params.eps_one, 2) == eps1
    assert round(params.eps_inf, 2) == eps_inf


def test_extreme_presets() -> None:
    # CPP1 reveals the real set (eps infinite), CPP5 answers yes to everything (eps 0)
    assert get_cpp("cpp1").eps_inf == math.inf and get_cpp("CPP1").eps_one == math.inf
    assert get_cpp("CPP5").eps_inf == 0.0 and get_cpp("CPP5").eps_one == 0.0
    assert (get_cpp("CPP1").p5, get_cpp("CPP1").p6) == (1.0, 0.0)


def test_event_probabilities_hand_computed() -> None:
    # CPP1, every index single-owned among n = 100: the server pins each owner (p7 = 1, p8 = 0)
    assert event_probabilities(CPP_PRESETS["CPP1"], np.ones(5, dtype=np.int64), 100) == (1.0, 0.0)
    # CPP1, an index with two owners: never Event 1, never Event 2
    assert event_probabilities(CPP_PRESETS["CPP1"], np.array([2]), 100) == (0.0, 0.0)
    # CPP2, n = 2, one owner: p7 = p5 (1 - p6) = (226/256)^2, p8 = (1 - p5) p6 = (30/256)^2
    p7, p8 = event_probabilities(CPP_PRESETS["CPP2"], np.array([1]), 2)
    assert p7 == pytest.approx(51076 / 65536, abs=1e-12)
    assert p8 == pytest.approx(900 / 65536, abs=1e-12)
    # the average over indices, not the value at the mean owner count
    p7_mix, _ = event_probabilities(CPP_PRESETS["CPP1"], np.array([1, 2]), 100)
    assert p7_mix == 0.5
    # CPP5: nothing is ever learnt
    assert event_probabilities(CPP_PRESETS["CPP5"], np.array([1, 3, 7]), 10) == (0.0, 0.0)


def test_event_probabilities_rejects_bad_counts() -> None:
    with pytest.raises(InvalidParameters):
        event_probabilities(CPP_PRESETS["CPP2"], np.array([0]), 10)
    with pytest.raises(InvalidParameters):
        event_probabilities(CPP_PRESETS["CPP2"], np.array([11]), 10)
    with pytest.raises(InvalidParameters):
        event_probabilities(CPP_PRESETS["CPP2"], np.array([], dtype=np.int64), 10)


def test_params_validated() -> None:
    with pytest.raises(InvalidParameters):
        RRParams(1.5, 0, 1, 0)
    with pytest.raises(InvalidParameters):
        RRParams(True, 0, 1, 0)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameters, match="available"):
        get_cpp("CPP9")


def test_cpp1_and_cpp5_are_deterministic() -> None:
    union = np.arange(0, 50, dtype=np.int64)
    real = np.array([3, 7, 11, 60])
    assert IndexPerturber(real, CPP_PRESETS["CPP1"]).perturb(union).tolist() == [3, 7, 11]
    assert IndexPerturber(real, CPP_PRESETS["CPP5"]).perturb(union).tolist() == union.tolist()


def test_memo_is_permanent_and_rates_match_p5_p6() -> None:
    params = CPP_PRESETS["CPP3"]
    union = np.arange(20_000, dtype=np.int64)
    real = np.arange(0, 20_000, 2, dtype=np.int64)  # half the union
    client = IndexPerturber(real, params)
    rng = CtrDrbg(7)
    first = client.perturb(union, _rng=rng)
    memo = client.state_dict()
    # the permanent answers: yes-rate p1 on owned, p2 on others (binomial sd ~0.0033)
    owned_yes = np.isin(real, memo["yes"]).mean()
    other_yes = np.isin(union[1::2], memo["yes"]).mean()
    assert abs(owned_yes - params.p1) < 0.02 and abs(other_yes - params.p2) < 0.02
    # reports: p5 on owned, p6 on others
    assert abs(np.isin(real, first).mean() - params.p5) < 0.02
    assert abs(np.isin(union[1::2], first).mean() - params.p6) < 0.02
    # a second round re-uses the memo (no new permanent answers), only the report is redrawn
    second = client.perturb(union, _rng=rng)
    assert np.array_equal(client.state_dict()["yes"], memo["yes"])
    assert not np.array_equal(first, second)
    # new indices are answered once and appended
    client.perturb(np.arange(20_000, 20_100), _rng=rng)
    assert client.yes.size + client.no.size == 20_100
    # a restored memo continues identically
    other = IndexPerturber(real, params)
    other.load_state_dict(client.state_dict())
    assert np.array_equal(other.yes, client.yes)


def test_memo_state_validated() -> None:
    client = IndexPerturber(np.array([1, 2]), CPP_PRESETS["CPP2"])
    with pytest.raises(InvalidParameters):
        client.load_state_dict({"yes": np.array([1]), "no": np.array([1])})
    with pytest.raises(InvalidParameters):
        client.load_state_dict({"yes": np.array([1.5]), "no": np.array([], dtype=np.int64)})
    with pytest.raises(InvalidParameters):
        client.perturb(np.array([[1]]))


def test_succinct_set() -> None:
    client = IndexPerturber(np.array([5, 1, 9]), CPP_PRESETS["CPP2"])
    assert client.succinct(np.array([1, 2, 9, 10])).tolist() == [1, 9]
