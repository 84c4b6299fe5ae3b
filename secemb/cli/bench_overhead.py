"""``secemb bench overhead``: the secure path's CPU beyond plaintext against its DPF kernels'
CPU, and the whole training process against plaintext (issue 37, goal 1)."""

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
        repeat: int = typer.Option(1, min=1, help="Alternating pairs of in-process runs (plaintext, secure); "
                                   "with more than one, the median per-epoch ratio and its range."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    ) -> None:
        """Per epoch: secure CPU beyond plaintext / DPF kernels' thread CPU (goal <= 1.25), and,
        informative, beyond / (kernels + the other cryptography's thread CPU: HMAC, SHA-256
        digests, row tags, sketch seeds, OS randomness; per category in --json); whole
        `secemb train`: secure / plaintext process CPU (goal <= 1.5); one run, this machine."""
        from secemb.bench import overhead as bench_overhead
        from secemb.cli.bench_output import report_goals

        report_goals("overhead", lambda progress: bench_overhead.run(dataset, epochs, data_dir=data_dir,
                                                                     process=not no_process, repeat=repeat,
                                                                     progress=progress),
                     bench_overhead.table_rows, as_json, lambda _: " (CPU clocks; compare figures of one run only)")
