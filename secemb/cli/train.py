"""``secemb train``: federated training of a recommender with a chosen protocol.

Exit codes: 0 success; 1 ``--verify`` found a mismatch; 2 bad usage (unknown dataset, model,
protocol or metric, a protocol not available yet, missing data files, a bad value, an output
that is an input, an existing result without ``--force``, or a path that cannot be written --
all checked before any training).
"""

import math
import shlex
from dataclasses import fields
from pathlib import Path
from typing import Annotated, Any

import typer
from secemb.cli._exchange import protocol_help
from secemb.cli._run_options import (DEFAULTS, MODEL_OPTIONS, TRAINING_OPTIONS, ConfigFile, DataDir, Dataset, Download,
                                     EarlyStop, Fresh, MPrimeUpdate, Metrics, Model, Seed, ValidFraction, Verify,
                                     described, option, run_options, with_shared_options)


#: the command's own options every protocol takes (output and display)
_OUTPUT = ("protocol", "config", "json_out", "force", "quiet")
#: seconds of kernel compilation in a run from which the summary names them (a fresh install's first run: ~50 s)
COMPILE_NOTE_S = 1.0
#: the command's options only the two-server path uses (beyond Experiment's fields)
_TWO_SERVER = {"adversary", "adversaries", "save_model"}


def _mb(nbytes: float) -> str:
    return f"{nbytes / 1e6:.4f}"


def register(app: typer.Typer) -> None:
    """Attach the ``train`` command to ``app``."""

    @app.command()
    @with_shared_options
    def train(
        ctx: typer.Context,
        config: ConfigFile = None,
        dataset: Dataset = DEFAULTS.dataset,
        data_dir: DataDir = DEFAULTS.data_dir,
        download: Download = DEFAULTS.download,
        model: Model = DEFAULTS.model,
        protocol: Annotated[
            str, Fresh(lambda: option("protocol", help=protocol_help(described("protocol"))))] = DEFAULTS.protocol,
        shared_model_options: Any = MODEL_OPTIONS,
        m_prime_update: MPrimeUpdate = DEFAULTS.m_prime_update,
        seed: Seed = DEFAULTS.seed,
        verify: Verify = DEFAULTS.verify,
        json_out: Annotated[Path | None, typer.Option(help="Write the result JSON here.")] = None,
        adversary: Annotated[
            str | None,
            typer.Option(metavar="ATTACK", help="Simulate malicious devices running ATTACK: two-points, "
                                                "inconsistent-keys, oversized-payload, wrapped-dense or random-bytes "
                                                "(--protocol secemb; the JSON reports rejected_devices per round; "
                                                "docs/security.md).")
        ] = None,
        adversaries: Annotated[
            int, typer.Option(min=1, metavar="K", help="How many devices run --adversary (users 0..K-1).")
        ] = 1,
        shared_training_options: Any = TRAINING_OPTIONS,
        metrics: Metrics = None,
        valid_fraction: ValidFraction = DEFAULTS.valid_fraction,
        early_stop: EarlyStop = DEFAULTS.early_stop,
        save_model: Annotated[
            Path | None,
            typer.Option(help="Write the trained model here (public model, each device's private state, a "
                              "manifest; docs/training.md) for 'secemb recommend'."),
        ] = None,
        force: Annotated[bool, typer.Option("--force", help="Replace an existing --json-out file or "
                                                            "--save-model model.")] = False,
        quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
        **options: Any,
    ) -> None:
        """Train a federated recommender and report accuracy, communication and time.

        Communication is the length of the bytes that crossed the in-process transport;
        1 MB = 10^6 bytes.
        """
        from rich.table import Table

        from secemb.cli._console import console as make_console
        from secemb.cli._exchange import exchange_protocol, refuse_exchange_options
        from secemb.cli._report import save_model_dir, training_display, warn_noiseless, write_json
        from secemb.cli._usage import check_output, fail
        from secemb.data import DataFormatError, DatasetNotFoundError, check_dataset
        from secemb.errors import InvalidParameters
        from secemb.protocols import protocol_servers
        from secemb.training import Experiment, VerificationError

        inputs = (dataset, data_dir)
        if json_out is not None:
            json_out = check_output(json_out, "--json-out", force=force, inputs=inputs)
        if save_model is not None:
            save_model = check_output(save_model, "--save-model", force=force, inputs=inputs, kind="model-dir")
            if json_out is not None and json_out.resolve().is_relative_to(save_model.resolve()):
                fail(f"--json-out {json_out}: lies in --save-model {save_model}, which is replaced whole; choose a "
                     "path outside it")
        if adversary is not None:
            from secemb.protocols.adversary import ATTACKS

            if adversary not in ATTACKS:
                fail(f"--adversary must be one of {', '.join(ATTACKS)}, got {adversary!r}")
            if protocol != "secemb":
                fail(f"--adversary simulates attacks on --protocol secemb, not {protocol!r}")
        try:
            servers = protocol_servers(protocol)
        except InvalidParameters as exc:
            fail(exc)
        if servers == 1:  # a one-server protocol (secemb.protocols.exchange) trains itself through the engine
            _train_exchange(exchange_protocol(ctx, protocol, _OUTPUT), json_out, quiet)
            return
        refuse_exchange_options(ctx, protocol, {f.name for f in fields(Experiment)} | set(_OUTPUT) | _TWO_SERVER)
        console = make_console()
        try:
            exp = Experiment.from_options(run_options(ctx))
        except InvalidParameters as exc:
            fail(exc)
        warn_noiseless(exp.protocol, exp.dp_epsilon)
        progress, on_start, on_round, on_epoch = training_display(console, quiet)

        try:
            check_dataset(dataset)  # a name with no preset fails as an unknown dataset, before any work
            behavior, record = None, None
            if adversary is not None:
                from secemb.protocols.adversary import AdversaryRecord, attack_behavior

                behavior, record = attack_behavior(adversary, adversaries), AdversaryRecord(adversary, adversaries)
            from secemb.fss.kernels import compile_clock

            with progress, compile_clock() as compiling:
                run = exp.run(on_start=on_start, on_round=on_round, on_epoch=on_epoch, behavior=behavior,
                              after_round=None if record is None else record.after_round)
        except VerificationError as exc:
            fail(f"verification failed: {exc}", code=1)
        except (InvalidParameters, DatasetNotFoundError, DataFormatError) as exc:
            fail(exc)
        result = run.train_result

        table = Table(title="secemb train: summary")
        table.add_column("metric")
        table.add_column("value", justify="right")
        up, down = result.upload_bytes_per_user_round, result.download_bytes_per_user_round
        table.add_row("upload / user / round", f"{up:,.0f} B ({_mb(up)} MB)")
        table.add_row("download / user / round", f"{down:,.0f} B ({_mb(down)} MB)")
        s2s = result.server_bytes_per_round
        table.add_row("server <-> server / round", f"{s2s:,.0f} B ({_mb(s2s)} MB)")
        if result.count_bytes_per_user:
            table.add_row(
                "Eq. 11 count upload / user (once)", f"{result.count_bytes_per_user:,.0f} B"
            )
        table.add_row("user compute / round", f"{result.user_ms_per_round:.3f} ms")
        table.add_row(
            "server compute / round (slower server)", f"{result.server_s_per_round:.4f} s"
        )
        if compiling() >= COMPILE_NOTE_S:  # a fresh install's first run: the wall time (and a compute figure
            # whose role calls compiled a kernel) includes it
            table.add_row("compiling the kernels (the first run after an install; then cached on disk)",
                          f"{compiling():.1f} s, included in the times above")
        table.add_row("rounds", str(result.rounds))
        table.add_row("verified rounds", str(result.verified_rounds))
        if early_stop is not None:
            sel = result.selection()
            table.add_row(f"epoch kept (best validation {sel['metric'].upper()})",
                          f"{sel['epoch_kept']} of {sel['epochs_run']} run")
        for name, value in run.metrics.items():
            table.add_row(f"final test {name.upper()}", "n/a" if value is None or math.isnan(value) else f"{value:.4f}")
        table.add_row("wall time", f"{result.wall_s:.1f} s")
        table.add_row("model sha256", result.model_sha256[:16] + "...")
        if result.privacy is not None:
            p = result.privacy
            table.add_row("DP epsilon spent (target)", f"{p['epsilon']:.3f} ({p['epsilon_target']:g}), "
                          f"delta {p['delta']:g}, z = {p['noise_multiplier']:.3f}")
        if record is not None:
            left_out = sum(len(r["rejected_devices"]) + len(r["refused_devices"]) for r in record.rounds)
            kept = sum(len(r["malicious_included"]) for r in record.rounds)
            table.add_row(f"malicious devices ({adversary}) left out / included", f"{left_out} / {kept}")
        console.print(table)

        write_json(console, result if record is None else _WithAdversary(result, record), json_out)
        if save_model is not None:
            save_model_dir(run.model, save_model)
            console.print(f"saved the model to {save_model} (try: secemb recommend --model-dir {save_model} --user "
                          f"{shlex.quote(run.model.user_id(0))})", markup=False)


class _WithAdversary:
    """A result document with the run's malicious devices: ``adversary`` (per round, who was
    rejected, refused or included) and ``rejected_devices`` (per committed round, the ids the
    servers' verification left out)."""

    def __init__(self, result: Any, record: Any) -> None:
        self.result, self.record = result, record

    def to_dict(self) -> dict[str, Any]:
        return {**self.result.to_dict(), "adversary": self.record.to_dict(),
                "rejected_devices": [r["rejected_devices"] for r in self.record.rounds]}


def _train_exchange(protocol: Any, json_out: Path | None, quiet: bool) -> None:
    """``secemb train --protocol P`` for a one-server P: its rounds through the engine in process."""
    from rich.table import Table

    from secemb.cli._console import console as make_console
    from secemb.cli._exchange import summary_rows
    from secemb.cli._report import training_display, write_json
    from secemb.cli._usage import fail
    from secemb.data import DataFormatError, DatasetNotFoundError
    from secemb.sim.player import train_exchange
    from secemb.errors import InvalidParameters

    console = make_console()
    progress, on_start, on_round, on_epoch = training_display(console, quiet)
    try:
        with progress:
            result = train_exchange(protocol, on_start=on_start, on_round=on_round, on_epoch=on_epoch)
    except (InvalidParameters, DatasetNotFoundError, DataFormatError) as exc:
        fail(exc)
    table = Table(title=f"secemb train ({protocol.name}, one server): summary")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for row in summary_rows(result):
        table.add_row(*row)
    console.print(table)
    write_json(console, result, json_out)
