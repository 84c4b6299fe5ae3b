"""``secemb bench overhead``: the secure path's CPU beyond plaintext against its DPF kernels'
CPU, and the whole training process against plaintext (issue 37, goal 1)."""

from __future__ import annotations

import json

import typer


def register(bench_app: typer.Typer) -> None:
    """Attach ``overhead`` to the ``bench`` group."""

    @bench_app.command("overhead")
    def overhead(
        dataset: str = typer.Option("ml-100k", help="Dataset of both training runs."),
        epochs: int = typer.Option(2, min=2, help="Epochs of each run; the per-epoch figure is the last epoch's."),
        data_dir: str = typer.Option(None, "--data-dir", envvar="SECEMB_DATA_DIR", help="Directory of MovieLens "
                                     "files."),
        no_process: bool = typer.Option(False, "--no-process", help="Skip the two whole-process runs."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    ) -> None:
        """Per epoch: secure CPU beyond plaintext / DPF kernels' thread CPU (goal <= 1.25); whole
        `secemb train`: secure / plaintext process CPU (goal <= 1.5); one run, this machine."""
        from rich.console import Console

        from secemb.bench import overhead as bench_overhead
        from secemb.cli._usage import fail
        from secemb.cli.bench_output import print_table
        from secemb.errors import SecembError

        console = Console(stderr=True)
        try:
            with console.status("measuring") as status:
                result = bench_overhead.run(dataset, epochs, data_dir=data_dir, process=not no_process,
                                            progress=lambda step: status.update(step))
        except SecembError as exc:
            fail(exc)
        if as_json:
            typer.echo(json.dumps(result, indent=2))
            return
        m = result["machine"]
        print_table(f"secemb bench overhead ({result['dataset']}, kernels: {result['kernels']})",
                    [("measure", "left"), ("value", "right"), ("goal", "right")], bench_overhead.table_rows(result))
        load = result["loadavg"]
        typer.echo(f"machine: {m['processor']}, {m['cores']} cores; load average {load['before'][0]:.1f} before, "
                   f"{load['after'][0]:.1f} after (CPU clocks; compare figures of one run only)")
