"""TrainConfig checks its counts and alpha with the one integer/real check (secemb.errors
check_int / check_float): a refused value is InvalidParameters naming the field, the bound and
the value -- also for a value of the wrong type, which raised a builtin error before -- and a
numpy integer is taken as the int it is (stored as a Python int: the result document is JSON)."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import numpy as np
import pytest

from secemb.errors import InvalidParameters
from secemb.round.results import TrainConfig


@pytest.mark.parametrize(("field", "value", "says"), [
    ("epochs", 0, "epochs must be an int >= 1, got 0"),
    ("users_per_round", True, "users_per_round must be an int >= 1, got True"),
    ("seed", -1, "seed must be an int >= 0, got -1"),
    ("m_prime_update", 1.0, "m_prime_update must be an int >= 0, got 1.0"),
    ("m_prime", 0, "m_prime must be an int >= 1, got 0"),
    ("rounds_per_epoch", "2", "rounds_per_epoch must be an int >= 1, got '2'"),
    ("early_stop", 0, "early_stop must be an int >= 1, got 0"),
    ("alpha", 0, "alpha must be a finite number > 0, got 0"),
    ("alpha", "2.5", "alpha must be a finite number > 0, got '2.5'"),  # math.isfinite's TypeError before
    ("alpha", float("inf"), "alpha must be a finite number > 0, got inf"),
])
def test_a_bad_count_or_alpha_is_refused_naming_it(field, value, says):
    with pytest.raises(InvalidParameters, match=f"^{says}$"):
        TrainConfig(**{field: value})


def test_numpy_integers_are_taken_as_python_ints():
    numpy_ints: dict[str, Any] = {"epochs": np.int64(2), "users_per_round": np.int32(7), "seed": np.uint8(3),
                                  "m_prime": np.int64(4)}
    cfg = TrainConfig(**numpy_ints)
    assert (cfg.epochs, cfg.users_per_round, cfg.seed, cfg.m_prime) == (2, 7, 3, 4)
    assert all(type(v) is int for v in (cfg.epochs, cfg.users_per_round, cfg.seed, cfg.m_prime))
    assert cfg.rounds_per_epoch is None and cfg.early_stop is None
    assert json.loads(json.dumps(asdict(cfg)))["epochs"] == 2  # the document a result writes takes them
