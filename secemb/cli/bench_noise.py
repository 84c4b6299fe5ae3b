"""``secemb bench noise``: the discrete-Gaussian samplers' rate (samples per second)."""

from pathlib import Path

import typer

from secemb.cli.bench_output import FORCE_HELP


def register(bench_app: typer.Typer) -> None:
    """Attach ``noise`` to the ``bench`` group."""

    @bench_app.command("noise")
    def noise(
        sigma: float = typer.Option(44_487.0, help="Noise scale in ring units (default: a DP-FedRec device's at "
                                    "eps 1 over 2 epochs)."),
        n: int = typer.Option(5_976_705, help="Samples per call (default: a Yelp-stand-in upload's coordinates)."),
        repeats: int = typer.Option(7, help="Timed calls per sampler (interleaved)."),
        rejection: bool = typer.Option(True, help="Also time the rejection sampler at the same sigma."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
        out: Path = typer.Option(Path("results/noise.json"), help="Write the JSON result here."),
        force: bool = typer.Option(False, "--force", help=FORCE_HELP),
    ) -> None:
        """Seconds per call and samples per second of the CDT and rejection samplers of the
        discrete Gaussian, and of the OS randomness the CDT draws."""
        from secemb.bench import noise as bench_noise
        from secemb.cli._usage import fail
        from secemb.cli.bench_output import check_outputs, save_json
        from secemb.errors import InvalidParameters

        check_outputs(force, ("--out", out))
        try:
            result = bench_noise.run(sigma, n, repeats, rejection=rejection)
        except InvalidParameters as exc:
            fail(exc)
        if save_json(result, out, as_json):
            return
        typer.echo(f"sigma {result['sigma']:g}, {result['n']:,} samples a call, {result['repeats']} calls each "
                   f"(table built in {result['table_build_s']:.2f} s)")
        for name, r in result["samplers"].items():
            typer.echo(f"  {name:14s} median {1e3 * r['median_s']:8.1f} ms  min {1e3 * r['min_s']:8.1f} ms  "
                       f"{r['samples_per_s'] / 1e6:7.2f} M samples/s")
        typer.echo(f"wrote {out}")
