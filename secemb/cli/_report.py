"""What ``secemb train`` and ``secemb demo`` show while and after they train: a progress bar
over rounds, one line per epoch, the run's header line, and the JSON result file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

#: The progress bar's status until the first round ends, which may compile the kernels.
FIRST_ROUND = "round 1: the first run after an install compiles the kernels first (about a minute, once)"


def warn_noiseless(protocol: str, dp_epsilon: float) -> None:
    """Warn on stderr where a run of DP-FedRec has no ``--dp-epsilon``: its devices then add no noise, and
    the run trains plaintext's model with none of its privacy (``secemb train`` and ``secemb demo``)."""
    if protocol == "dp-fedrec" and dp_epsilon == float("inf"):  # its noise comes from --dp-epsilon only
        typer.echo("warning: --protocol dp-fedrec without --dp-epsilon: the devices add no noise, so the run has "
                   "none of DP-FedRec's privacy (docs/baselines.md); give --dp-epsilon E", err=True)


def describe(cfg: dict[str, Any], prefix: str = "") -> str:
    """One line naming the run from its result ``config`` document."""
    if cfg.get("servers") == 1:  # a one-server protocol (secemb.protocols.exchange): the keys its config must have
        extra = "".join(f" {k}={cfg[k]}" for k in ("model", "dim", "lr") if k in cfg)
        return (f"{prefix}{cfg['protocol']} (one server) | {cfg['dataset']} |{extra} | "
                f"{cfg['users_per_round']} users/round, {cfg['total_rounds']} rounds")
    return (
        f"{prefix}{cfg['protocol']} ({cfg['layout']}{', relay' if cfg['relay'] else ''}) | {cfg['dataset']} | "
        f"{cfg['model']} d={cfg['dim']} lr={cfg['lr']} reg={cfg['reg']} | {cfg['active_users']} users, "
        f"{cfg['num_items']} items | m'={cfg['m_prime']} ({cfg['m_prime_source']}) | "
        f"{cfg['users_per_round']} users/round, {cfg['total_rounds']} rounds"
    )


def training_display(
    console: Console, quiet: bool, prefix: str = ""
) -> tuple[Progress, Callable[[dict[str, Any]], None], Callable[[Any], None], Callable[[Any], None]]:
    """``(progress, on_start, on_round, on_epoch)`` for the training drivers' callbacks; the
    progress bar disappears when done and is off with ``quiet``."""
    progress = Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TextColumn("{task.fields[status]}"), console=console, disable=quiet, transient=True,
    )
    task: dict[str, Any] = {}

    def on_start(cfg: dict[str, Any]) -> None:
        console.print(describe(cfg, prefix), markup=False, soft_wrap=True)  # one line, piped too
        # the first round loads the compiled kernels: on a fresh install it compiles them (about a minute, once)
        task["id"] = progress.add_task("rounds", total=cfg["total_rounds"], status=FIRST_ROUND)

    def on_round(r: Any) -> None:
        progress.update(task["id"], advance=1, status=f"epoch {r.epoch} loss {r.train_loss:.4f}")

    def on_epoch(e: Any) -> None:
        def fmt(v: float | None) -> str:
            return "n/a" if v is None else f"{v:.4f}"

        # RMSE as before; every other metric of the run (e.g. a sequential model's hr@10) by name
        shown = [f"test RMSE {fmt(e.test_rmse)}"] if "rmse" in e.test_metrics or not e.test_metrics else []
        shown += [f"test {name} {fmt(v)}" for name, v in e.test_metrics.items() if name != "rmse"]
        progress.console.print(f"epoch {e.epoch:4d}  {'  '.join(shown)}  train loss {e.train_loss:.4f}")

    return progress, on_start, on_round, on_epoch


def write_json(console: Console, result: Any, path: Path | None) -> None:
    """Write ``result.to_dict()`` to ``path`` (if given) as strict JSON, atomically, and say so.
    A document with NaN or an infinity, or a write the disk refuses, is one ``error:`` line and
    exit 1 (the run finished; its result is not written, an earlier file at ``path`` is kept)."""
    from secemb.cli._usage import fail
    from secemb.outputs import NonFiniteValue, atomic_write_text, dumps_strict

    if path is None:
        return
    try:
        atomic_write_text(path, dumps_strict(result.to_dict(), indent=2) + "\n")
    except NonFiniteValue as exc:
        fail(f"{path} not written: the result is {exc}", code=1)
    except OSError as exc:
        fail(f"{path} not written: {exc.strerror or exc}", code=1)
    console.print(f"wrote {path}", markup=False)


def save_model_dir(model: Any, folder: Path) -> None:
    """``model.save`` into a temporary folder that then replaces ``folder``
    (:func:`secemb.outputs.atomic_dir`): an interrupted or failed save leaves ``folder`` as it
    was.  A write the disk refuses is one ``error:`` line and exit 1."""
    from secemb.cli._usage import fail
    from secemb.outputs import atomic_dir

    try:
        with atomic_dir(folder) as tmp:
            model.save(tmp)
    except OSError as exc:
        fail(f"--save-model {folder}: the model was not saved: {exc.strerror or exc}", code=1)
