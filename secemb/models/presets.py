"""Hyperparameters of SecEmb's experiments (ICML 2025, Appendix I, Table 8).

Every run in the paper: 80/20 split, 200 epochs, 100 users per round, Adam, MSE plus an L2
term.  ``m_prime`` is the paper's m' per dataset (200, 300, 300, 500, 500).  The synthetic
dataset (a stand-in with ML-100K's shape) uses the ML-100K preset.
"""

from __future__ import annotations

from dataclasses import dataclass

from secemb.errors import InvalidParameters

__all__ = ["PAPER_M_PRIME", "PRESETS", "Preset", "get_preset"]


@dataclass(frozen=True)
class Preset:
    """Embedding size, learning rate, L2 weight and the paper's m' for one model and dataset."""

    dim: int
    lr: float
    reg: float
    m_prime: int


PAPER_M_PRIME = {"ml-100k": 200, "ml-1m": 300, "ml-10m": 300, "ml-25m": 500, "yelp": 500}

_DATASETS = ("ml-100k", "ml-1m", "ml-10m", "ml-25m", "yelp")
# model -> (dims, learning rates, regularization weights), columns in _DATASETS order.
_TABLE8 = {
    "mf": (
        (64, 64, 64, 64, 64),
        (0.025, 0.025, 0.01, 0.01, 0.01),
        (0.01, 0.001, 0.001, 0.001, 0.01),
    ),
    "ncf": ((16, 16, 24, 24, 20), (0.001, 0.0001, 0.001, 0.001, 0.001), (0.001, 0, 0, 0, 0)),
    "fm": ((64, 64, 64, 64, 64), (0.025, 0.025, 0.005, 0.005, 0.01), (0.1, 0.001, 0, 0, 0.01)),
    "deepfm": ((64, 64, 64, 64, 64), (0.025, 0.025, 0.005, 0.005, 0.01), (0.1, 0.001, 0, 0, 0.001)),
    # Appendix K.6: the sequence models keep their own papers' settings on every dataset (d = 50,
    # Adam 1e-3; L2 0 for SASRec, 1e-6 for Caser).  Their m' is chosen by the task (the
    # largest request), not taken from this table.
    "sasrec": ((50,) * 5, (0.001,) * 5, (0.0,) * 5),
    "caser": ((50,) * 5, (0.001,) * 5, (1e-6,) * 5),
}

PRESETS: dict[str, dict[str, Preset]] = {
    model: {
        ds: Preset(dims[j], float(lrs[j]), float(regs[j]), PAPER_M_PRIME[ds])
        for j, ds in enumerate(_DATASETS)
    }
    for model, (dims, lrs, regs) in _TABLE8.items()
}

_ALIASES = {"synthetic": "ml-100k"}


def get_preset(model: str, dataset: str) -> Preset:
    """The Table 8 preset of ``model`` on ``dataset`` (``"synthetic"`` maps to ML-100K).

    Raises
    ------
    InvalidParameters
        If there is no preset for the pair; the message lists the known names.
    """
    if model not in PRESETS:
        raise InvalidParameters(f"no preset for model {model!r}; known: {sorted(PRESETS)}")
    ds = _ALIASES.get(dataset, dataset)
    if ds not in PRESETS[model]:
        known = sorted([*PRESETS[model], *_ALIASES])
        raise InvalidParameters(f"no preset for dataset {dataset!r}; known: {known}")
    return PRESETS[model][ds]
