"""``secemb bench secea``: SecEA on MovieLens-100K silos (our experiment; the paper has none)."""

from pathlib import Path

import typer

from secemb.cli.bench_output import FORCE_HELP, print_fitted


def register(bench_app: typer.Typer) -> None:
    """Attach ``secea`` to the ``bench`` group."""

    @bench_app.command("secea")
    def secea(
        silos: str = typer.Option("3,5,7", help="Comma-separated numbers of silos N."),
        rounds: int = typer.Option(10, help="Aggregation rounds of the accuracy runs."),
        local_epochs: int = typer.Option(2, help="Local MF epochs per round."),
        threshold: int = typer.Option(1, help="T, colluding silos tolerated (T < N/2)."),
        cost_items: int = typer.Option(100, help="Most-rated items in the full-protocol round (0: all)."),
        key_bits: int = typer.Option(2048, help="Paillier modulus bits of the full-protocol runs."),
        protocol_silos: str = typer.Option("3", help="Comma-separated N of the full-protocol accuracy runs."),
        protocol_items: int = typer.Option(20, help="Most-rated items the full-protocol accuracy runs average "
                                                    "(0: all; Paillier's work grows with N * sum |E_n|)."),
        secemb_epochs: int = typer.Option(10, help="Epochs of the SecEmb run beside it (0: skip)."),
        parts: str = typer.Option("accuracy,protocol,cost",
                                  help="Comma-separated parts to run: accuracy, protocol, cost."),
        quick: bool = typer.Option(False, "--quick", help="Small workloads (a smoke test)."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
        out: Path = typer.Option(Path("results/secea.json"), help="Write the JSON result here."),
        force: bool = typer.Option(False, "--force", help=FORCE_HELP),
    ) -> None:
        """ML-100K users in N silos, items as entities: local MF epochs, then the item rows
        averaged by SecEA's arithmetic (beside local-only, FedAvg, PSI-style and SecEmb); SecEA's
        accuracy run by the complete protocol (X25519 pads, Paillier; what ``secemb train
        --protocol secea`` runs) on the most-rated items beside its arithmetic on the same
        setting; and one round of the complete protocol measured: bytes per silo, seconds per
        party."""
        from rich.markup import escape
        from rich.table import Table

        from secemb.bench import secea as bench_secea
        from secemb.cli._usage import fail
        from secemb.cli.bench_output import check_outputs, save_json, steps_bar
        from secemb.data import DataFormatError, DatasetNotFoundError
        from secemb.errors import InvalidParameters

        check_outputs(force, ("--out", out))
        counts, protocol_counts = _counts("--silos", silos), _counts("--protocol-silos", protocol_silos)
        try:
            with steps_bar(quiet=as_json) as progress:
                result = bench_secea.run(silos=counts, rounds=rounds, local_epochs=local_epochs,
                                         threshold=threshold, cost_items=cost_items, key_bits=key_bits,
                                         protocol_silos=protocol_counts, protocol_items=protocol_items,
                                         secemb_epochs=secemb_epochs, quick=quick,
                                         parts=tuple(x.strip() for x in parts.split(",") if x.strip()),
                                         progress=progress)
        except (InvalidParameters, DatasetNotFoundError, DataFormatError) as exc:
            fail(exc)
        if save_json(result, out, as_json):
            return
        done = result["accuracy"][0]["rounds"] if result["accuracy"] else 0
        acc = Table(title=f"SecEA on ML-100K silos: test RMSE after {done} rounds x {local_epochs} local epochs "
                          "(SecEA: its arithmetic only, every item)")
        for col in ("N", "K", "items per silo", "local", "FedAvg", "PSI-style", "SecEA (arithmetic)",
                    "SecEA = fixed-point avg", "SecEA arithmetic s"):
            acc.add_column(col, justify="right")
        for row in bench_secea.accuracy_rows(result):
            acc.add_row(*map(escape, row))
        print_fitted(acc)
        full = Table(title=f"SecEA's accuracy run by the complete protocol ({key_bits}-bit Paillier) beside its "
                           "arithmetic only, same setting: test RMSE after the last round")
        for col in ("N", "items averaged", "entities per silo", "rounds", "SecEA (protocol)", "SecEA (arithmetic)",
                    "equal", "run s protocol / arithmetic", "ratio"):
            full.add_column(col, justify="right")
        for row in bench_secea.protocol_rows(result):
            full.add_row(*map(escape, row))
        print_fitted(full)
        if "secemb" in result:
            typer.echo(f"SecEmb MF (two servers, per-user devices), {result['secemb']['epochs']} epochs: "
                       f"test RMSE {result['secemb']['rmse'][-1]:.4f}")
        cost = Table(title=f"One full SecEA round ({key_bits}-bit Paillier), per silo (mean)")
        for col in ("N", "M", "|E_n|", "up MB", "down MB", "field el. up", "ciphertexts up", "silo s online + offline",
                    "server s online + offline",
                    "server ms/op", "exact"):
            cost.add_column(col, justify="right")
        for row in bench_secea.cost_rows(result):
            cost.add_row(*map(escape, row))
        print_fitted(cost)
        typer.echo(f"seconds: {result['warm_up']}")
        typer.echo(f"wrote {out}")


def _counts(flag: str, text: str) -> tuple[int, ...]:
    """``text`` as comma-separated integers, else exit 2 naming ``flag``."""
    from secemb.cli._usage import fail

    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        fail(f"{flag} must be comma-separated integers, got {text!r}")
