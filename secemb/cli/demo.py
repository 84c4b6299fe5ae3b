"""``secemb demo --network``: both servers as processes on 127.0.0.1 and simulated devices
over HTTP, training like ``secemb train`` (same options; with ``--reproducible`` the same
``--json-out`` document and model).

Exit codes: 0 success; 1 ``--verify`` found a mismatch or a round could not be completed;
2 bad usage.
"""

import math
from dataclasses import fields
from pathlib import Path
from typing import Annotated, Any

import typer
from secemb.cli._exchange import protocol_help
from secemb.cli._run_options import (DEFAULTS, MODEL_OPTIONS, TRAINING_OPTIONS, ConfigFile, DataDir, Dataset, Download,
                                     Fresh, Model, Verify, option, run_options, with_shared_options)


#: the command's own options every protocol takes (where and how it runs, output, display)
_OUTPUT = ("protocol", "config", "network", "concurrency", "json_out", "force", "quiet")
#: the command's options only the two-server path uses (beyond Experiment's fields)
_TWO_SERVER = {"reproducible", "deadline", "workdir", "batch_wait_ms"}


def register(app: typer.Typer) -> None:
    """Attach the ``demo`` command to ``app``."""

    @app.command()
    @with_shared_options
    def demo(
        ctx: typer.Context,
        network: Annotated[
            bool,
            typer.Option("--network/--in-process", help="Two server processes and devices over HTTP (default), "
                         "or the in-process simulation (= secemb train)."),
        ] = True,
        config: ConfigFile = None,
        dataset: Dataset = DEFAULTS.dataset,
        data_dir: DataDir = DEFAULTS.data_dir,
        download: Download = DEFAULTS.download,
        model: Model = DEFAULTS.model,
        protocol: Annotated[str, Fresh(lambda: option("protocol", help=protocol_help(
            "A registered protocol that runs in the server deployment (with --network; one server: behind HTTPS)."
        )))] = DEFAULTS.protocol,
        shared_model_options: Any = MODEL_OPTIONS,
        seed: Annotated[int, option("seed", help=(
            "Seed of the public model, the data split and the rounds' users (and, with --reproducible or "
            "--in-process, of the devices' private draws)."))] = DEFAULTS.seed,
        reproducible: Annotated[bool, typer.Option("--reproducible", help=(
            "--network: the simulated devices draw their private state (initialization, samples, padding) from "
            "--seed, so the model equals secemb train's -- a simulation: whoever guesses the seed replays them. "
            "Default: from each device's own entropy, as deployed devices do. --in-process is always "
            "reproducible."))] = False,
        verify: Verify = DEFAULTS.verify,
        json_out: Annotated[Path | None, typer.Option(help="Write the result JSON here.")] = None,
        shared_training_options: Any = TRAINING_OPTIONS,
        force: Annotated[bool, typer.Option("--force", help="Replace an existing --json-out file.")] = False,
        concurrency: Annotated[int, typer.Option(min=1, help="Devices running at the same time.")] = 8,
        deadline: Annotated[float, typer.Option(min=0.1, help="Round deadline, seconds.")] = 120.0,
        batch_wait_ms: Annotated[float | None, typer.Option(min=0.0, max=1000.0, help=(
            "--network: how long each server's batch of device messages waits for more while they come together "
            "(docs/deployment.md, \"Batching\"). Default: the servers' own, 5; 0: no wait."))] = None,
        workdir: Annotated[
            Path | None, typer.Option(help="Keep server configs, state and logs here (empty dir).")
        ] = None,
        quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
        **options: Any,
    ) -> None:
        """Train with two real server processes and N devices on 127.0.0.1.

        With --reproducible, networked and in-process runs with the same options write the
        same JSON document and the same model_sha256; without it the networked devices draw
        their private state from their own entropy (docs/security.md) and no two runs agree.
        Communication figures are the protocol message bytes the devices sent and received
        (HTTP headers excluded).
        """
        from rich.table import Table

        from secemb.cli._console import console as make_console
        from secemb.cli._exchange import exchange_protocol, refuse_exchange_options
        from secemb.cli._report import training_display, warn_noiseless, write_json
        from secemb.cli._usage import check_output, fail
        from secemb.sim.driver import RoundAborted
        from secemb.protocols import protocol_servers
        from secemb.training.networked import run_networked_experiment
        from secemb.data import DataFormatError, DatasetNotFoundError, check_dataset
        from secemb.errors import InvalidParameters, SecembError
        from secemb.training import Experiment, VerificationError, run_experiment

        if json_out is not None:
            json_out = check_output(json_out, "--json-out", force=force, inputs=(dataset, data_dir))
        if workdir is not None:  # the deployment's keys, configs, state and logs go there, by fixed names
            workdir = check_output(workdir, "--workdir", force=False, inputs=(dataset, data_dir), kind="dir")
            if workdir.is_dir() and any(workdir.iterdir()):
                fail(f"--workdir {workdir}: not empty; give a new or empty folder")
        try:
            servers = protocol_servers(protocol)
        except InvalidParameters as exc:
            fail(exc)
        if servers == 1:  # a one-server protocol (secemb.protocols.exchange): its server behind HTTPS, or in process
            _demo_exchange(exchange_protocol(ctx, protocol, _OUTPUT), network, concurrency, json_out, quiet)
            return
        refuse_exchange_options(ctx, protocol, {f.name for f in fields(Experiment)} | set(_OUTPUT) | _TWO_SERVER)
        console = make_console()
        if batch_wait_ms is not None and not network:
            fail("--batch-wait-ms is a setting of the servers: it applies with --network only")
        try:
            exp = Experiment.from_options(run_options(ctx))
            if network:
                _check_networked(protocol)
        except InvalidParameters as exc:
            fail(exc)
        warn_noiseless(exp.protocol, exp.dp_epsilon)
        progress, on_start, on_round, on_epoch = training_display(
            console, quiet, prefix="network | " if network else "in-process | "
        )

        def on_cluster(cluster: Any) -> None:
            console.print(f"server 0 {cluster.url(0)}  server 1 {cluster.url(1)}  (logs in {cluster.workdir})",
                          markup=False)

        try:
            check_dataset(dataset)  # a name with no preset fails as an unknown dataset, before any work
            with progress:
                if network:
                    result = run_networked_experiment(
                        exp, workdir=workdir, concurrency=concurrency, deadline_s=deadline, batch_wait_ms=batch_wait_ms,
                        on_start=on_start, on_round=on_round, on_epoch=on_epoch, on_cluster=on_cluster,
                        device_randomness="reproducible" if reproducible else "private",
                    )
                else:
                    result = run_experiment(exp, on_start=on_start, on_round=on_round, on_epoch=on_epoch)
        except (VerificationError, RoundAborted) as exc:
            fail(f"failed: {exc}", code=1)
        except (InvalidParameters, DatasetNotFoundError, DataFormatError) as exc:
            fail(exc)
        except SecembError as exc:  # e.g. a server process that exited: its log is in the workdir
            keep = " (--workdir DIR keeps the servers' logs)" if network and workdir is None else ""
            fail(f"failed: {exc}{keep}", code=1)

        table = Table(title=f"secemb demo ({'network' if network else 'in-process'}): summary")
        table.add_column("metric")
        table.add_column("value", justify="right")
        table.add_row("upload / user / round", f"{result.upload_bytes_per_user_round:,.0f} B")
        table.add_row("download / user / round", f"{result.download_bytes_per_user_round:,.0f} B")
        table.add_row("device compute / round", f"{result.user_ms_per_round:.3f} ms")
        # the slower server's seconds in its protocol role's calls, a round: in process and over HTTP alike (the
        # servers' own round outcomes there); not the round's wall time, which the devices' steps and waits fill
        table.add_row("server compute / round (slower server)", f"{result.server_s_per_round:.4f} s")
        table.add_row("rounds", str(result.rounds))
        if network:
            table.add_row("aborted rounds (retried)", str(getattr(result, "aborted_rounds", 0)))
        table.add_row("verified rounds", str(result.verified_rounds))
        final = result.final_rmse
        table.add_row("final test RMSE", "n/a" if final is None or math.isnan(final) else f"{final:.4f}")
        table.add_row("wall time", f"{result.wall_s:.1f} s")
        table.add_row("model sha256", result.model_sha256[:16] + "...")
        console.print(table)
        write_json(console, result, json_out)


def _demo_exchange(protocol: Any, network: bool, concurrency: int, json_out: Path | None, quiet: bool) -> None:
    """``secemb demo --protocol P`` for a one-server P: its server behind HTTPS on 127.0.0.1
    (``--network``) or in process."""
    from rich.table import Table

    from secemb.cli._console import console as make_console
    from secemb.cli._exchange import summary_rows
    from secemb.cli._report import training_display, write_json
    from secemb.cli._usage import fail
    from secemb.data import DataFormatError, DatasetNotFoundError
    from secemb.sim.player import train_exchange
    from secemb.errors import InvalidParameters
    from secemb.sim.exchange import train_networked
    from secemb.transport.errors import RemoteError, Unreachable

    console = make_console()
    progress, on_start, on_round, on_epoch = training_display(
        console, quiet, prefix="network | " if network else "in-process | ")
    try:
        with progress:
            if network:
                result = train_networked(
                    protocol, concurrency=concurrency, on_start=on_start, on_round=on_round, on_epoch=on_epoch,
                    on_server=lambda url: console.print(f"{protocol.name} server (one server) {url}", markup=False))
            else:
                result = train_exchange(protocol, on_start=on_start, on_round=on_round, on_epoch=on_epoch)
    except (RemoteError, Unreachable) as exc:
        fail(f"failed: {exc}", code=1)
    except (InvalidParameters, DatasetNotFoundError, DataFormatError) as exc:
        fail(exc)
    table = Table(title=f"secemb demo {protocol.name} ({'network' if network else 'in-process'}): summary")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for row in summary_rows(result):
        table.add_row(*row)
    console.print(table)
    write_json(console, result, json_out)


def _check_networked(protocol: str) -> None:
    """Raise InvalidParameters unless ``protocol`` runs in the server deployment (``--network``);
    the message names those that do."""
    from secemb.errors import InvalidParameters
    from secemb.protocols import available_protocols, protocol_class

    if protocol_class(protocol).capabilities.networked:
        return
    networked = []
    for name in available_protocols(2):
        try:
            if protocol_class(name).capabilities.networked:
                networked.append(name)
        except InvalidParameters:  # its module needs an extra that is not installed
            continue
    raise InvalidParameters(f"--protocol {protocol} runs in process only (it declares networked=False: no server "
                            f"deployment): use --in-process, or --network with one of {', '.join(networked)}")
