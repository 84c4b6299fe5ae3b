"""``--protocol sfsl`` in ``secemb train`` and ``secemb demo``: which options it takes, the
refusal (exit 2) of those it cannot honour, and the run (:mod:`secemb.engine.sfsl`)."""

from __future__ import annotations

import math
from typing import Any

from secemb.cli._usage import fail

__all__ = ["check_preset", "sfsl_options", "summary_rows"]

#: options of ``secemb train`` / ``demo`` that SFSL has no use for, with the value that means "not given"
_UNUSED: dict[str, Any] = {
    "layout": None, "relay": None, "expansion": 1.25, "backend": "serial", "workers": None, "m_prime": None,
    "alpha": 2.5, "verify": False, "reg": None, "ring_bits": 32, "lazy_adam": True, "dp_epsilon": math.inf,
    "m_prime_update": 0, "dp_delta": 1e-5, "dp_clip": 1.0, "dp_level": "user", "save_model": None,
    "deadline": 120.0, "workdir": None,
}
_FLAGS = {"lazy_adam": "--dense-adam", "relay": "--relay/--no-relay"}


def check_preset(protocol: str, preset: str | None) -> None:
    """Exit 2 if ``--sfsl-preset`` is given for a protocol other than sfsl."""
    if preset is not None and protocol != "sfsl":
        fail(f"--sfsl-preset is an option of --protocol sfsl, not of --protocol {protocol}")


def sfsl_options(*, preset: str | None, model: str | None, metrics: str | None, dataset: str,
                 users_per_round: int, epochs: int, lr: float | None, dim: int | None, seed: int,
                 **unused: Any) -> Any:
    """The :class:`~secemb.engine.sfsl.SFSLOptions` of the command line, or exit 2 naming the
    first option SFSL cannot honour (``unused``: the other options, by parameter name)."""
    from secemb.engine.sfsl import SFSLOptions
    from secemb.errors import InvalidParameters
    from secemb.privacy.randomized_response import get_cpp

    for name, value in unused.items():
        default = _UNUSED[name]
        if value != default:
            flag = _FLAGS.get(name, "--" + name.replace("_", "-"))
            fail(f"--protocol sfsl does not take {flag} (SFSL has one server, no ring or Adam, no DP noise; "
                 "docs/sfsl.md)")
    if model not in (None, "din"):
        fail(f"--protocol sfsl trains DIN on click samples: --model must be din, got {model!r}")
    if metrics is not None and [m.strip() for m in metrics.split(",")] != ["auc"]:
        fail(f"--protocol sfsl scores AUC only: --metrics must be auc, got {metrics!r}")
    try:
        get_cpp(preset or "CPP2")
        return SFSLOptions(dataset=dataset, preset=(preset or "CPP2").upper(), users_per_round=users_per_round,
                           epochs=epochs, lr=1.0 if lr is None else lr, dim=18 if dim is None else dim, seed=seed)
    except InvalidParameters as exc:
        fail(exc)


def summary_rows(result: Any) -> list[tuple[str, str]]:
    """The summary table of an SFSL run (the rows of ``secemb train``'s table that apply)."""
    up, down = result.upload_bytes_per_user_round, result.download_bytes_per_user_round
    rows = [("upload / user / round", f"{up:,.0f} B ({up / 1e6:.4f} MB)"),
            ("download / user / round", f"{down:,.0f} B ({down / 1e6:.4f} MB)"),
            ("user compute / round", f"{result.user_ms_per_round:.3f} ms"),
            ("server compute / round (one server)", f"{result.server_s_per_round:.4f} s"),
            ("rounds", str(result.rounds))]
    final = result.epochs[-1].test_metrics.get("auc") if result.epochs else None
    rows.append(("final test AUC", "n/a" if final is None else f"{final:.4f}"))
    rows.append(("wall time", f"{result.wall_s:.1f} s"))
    rows.append(("model sha256", result.model_sha256[:16] + "..."))
    return rows
