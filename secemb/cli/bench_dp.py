"""``secemb bench dp``: SecEmb + DP against epsilon (Figure 6) and against DP-FedRec (Figure 7)."""

from pathlib import Path

import typer

from secemb.cli.bench_output import FORCE_HELP, print_fitted


def register(bench_app: typer.Typer) -> None:
    """Attach ``dp`` to the ``bench`` group."""

    @bench_app.command("dp")
    def dp(
        dataset: str = typer.Option("ml-100k", help="Dataset of every run (MF)."),
        epsilons: str = typer.Option("1,2,4,8,inf", help="Comma-separated target epsilons of Figure 6 (inf: no DP; "
                                     "empty: leave Figure 6 out)."),
        users_per_round: str = typer.Option("100,500", help="Comma-separated round sizes of Figure 6."),
        epochs: int = typer.Option(5, help="Epochs of the Figure 6 runs."),
        fedrec_epsilons: str = typer.Option("1,4", help="Comma-separated target epsilons of Figure 7 (empty: "
                                            "leave Figure 7 out)."),
        fedrec_epochs: int = typer.Option(2, help="Epochs of the Figure 7 runs (both methods)."),
        fedrec_users_per_round: str = typer.Option("100", help="Comma-separated round sizes of Figure 7 (both "
                                                   "methods at each)."),
        rounds_per_epoch: int = typer.Option(0, help="Stop every epoch of every run (both figures, both methods) "
                                             "after this many rounds, where one epoch does not fit (0: whole "
                                             "epochs)."),
        clip: float = typer.Option(0.1, help="L2 bound of a user's round contribution (every run)."),
        delta: float = typer.Option(1e-5, help="Target delta."),
        seed: int = typer.Option(0, help="Seed of every run: the split, the initialization and the Poisson "
                                 "participation (the DP noise is fresh OS randomness in every run)."),
        secure: bool = typer.Option(False, "--secure", help="SecEmb + DP through secemb itself (default: its "
                                    "plaintext twin, the same model under the same noise, without the cryptography)."),
        quick: bool = typer.Option(False, "--quick", help="Small workloads (a smoke test)."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
        out: Path = typer.Option(Path("results/dp.json"), help="Write the JSON result here."),
        force: bool = typer.Option(False, "--force", help=FORCE_HELP),
    ) -> None:
        """MF's test RMSE against the target epsilon (SecEmb + DP, user level, each server's noise),
        and against DP-FedRec's local DP at the same epsilon."""
        from rich.markup import escape
        from rich.table import Table

        from secemb.bench import dp as bench_dp
        from secemb.cli._usage import fail
        from secemb.cli.bench_output import check_outputs, save_json, steps_bar
        from secemb.data import DataFormatError, DatasetNotFoundError
        from secemb.errors import InvalidParameters

        check_outputs(force, ("--out", out))
        if rounds_per_epoch < 0:
            fail(f"--rounds-per-epoch must be >= 0 (0: whole epochs), got {rounds_per_epoch}")
        try:
            eps = tuple(float(x) for x in epsilons.split(",") if x.strip())
            fed = tuple(float(x) for x in fedrec_epsilons.split(",") if x.strip())
            sizes = tuple(int(x) for x in users_per_round.split(",") if x.strip())
            fed_sizes = tuple(int(x) for x in fedrec_users_per_round.split(",") if x.strip())
        except ValueError:
            fail(f"--epsilons/--fedrec-epsilons must be numbers and --users-per-round/--fedrec-users-per-round "
                 f"integers, got {epsilons!r}, {fedrec_epsilons!r}, {users_per_round!r}, {fedrec_users_per_round!r}")
        try:
            with steps_bar(quiet=as_json) as progress:
                result = bench_dp.run(dataset=dataset, epsilons=eps, users_per_round=sizes, epochs=epochs,
                                      fedrec_epsilons=fed, fedrec_epochs=fedrec_epochs,
                                      fedrec_users_per_round=fed_sizes, clip=clip, delta=delta, secure=secure,
                                      quick=quick, rounds_per_epoch=rounds_per_epoch or None, seed=seed,
                                      progress=progress)
        except (InvalidParameters, DatasetNotFoundError, DataFormatError) as exc:
            fail(exc)
        if save_json(result, out, as_json):
            return
        table = Table(title=escape(f"secemb bench dp (MF, {result['dataset']}, clip {result['clip']}, "
                                   f"delta {result['delta']:g}, seed {result['seed']}; SecEmb+DP through "
                                   f"{result['secemb_protocol']}; loss: against no DP, or DP-FedRec against "
                                   "SecEmb+DP)"))
        for col in ("figure", "method", "n_p", "epochs", "eps target", "eps spent", "z", "RMSE", "loss"):
            table.add_column(col, justify="left" if col in ("figure", "method") else "right")
        for row in bench_dp.table_rows(result):
            table.add_row(*map(escape, row))
        print_fitted(table)
        for fig, claim in result["paper"].items():
            typer.echo(f"paper, {fig}: {claim}")
        typer.echo(f"wrote {out}")
