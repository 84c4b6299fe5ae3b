"""secemb: privacy-preserving federated recommendation with sparse embeddings.

Two non-colluding servers hold the public item embeddings.  Users privately retrieve the rows
they need through DPF-based PIR and upload row-sparse gradients that the servers aggregate
securely (SecEmb).  The hazmat layer (:mod:`secemb.fss`, :mod:`secemb.ring`,
:mod:`secemb.sharing`) sits below the protocols (:mod:`secemb.protocols`) and the ``secemb``
command line.  Importing this package is cheap: it does not import torch.

From Python (a notebook)::

    import secemb
    result = secemb.Experiment(dataset="synthetic-mini", model="mf", protocol="secemb").run()
    result.metrics, result.traffic, result.model.recommend(user=0, k=10)

``secemb.Experiment`` is :class:`secemb.training.Experiment`, imported on first use.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = ["Experiment", "__version__"]


def __getattr__(name: str) -> Any:
    """``secemb.Experiment``, imported on first use (the training stack is not cheap)."""
    if name == "Experiment":
        from secemb.training.experiment import Experiment

        return Experiment
    raise AttributeError(f"module 'secemb' has no attribute {name!r}")
