"""``secemb credentials``: the device's side of enrolment.

Each server's operator issues the device one half of its credentials (``secemb admin
add-devices`` in that operator's half); ``merge`` combines the two halves into the one file
``secemb client --credentials`` and ``secemb infer --credentials`` read.  Exit codes: 0
written, 2 bad usage (a half unreadable, two halves of one server, halves that disagree, an
output that exists).
"""

import json
from pathlib import Path
from typing import Annotated

import typer

credentials_app = typer.Typer(help="A device's credentials (docs/deployment.md, 'Two operators, two halves').",
                              no_args_is_help=True)


@credentials_app.command("merge")
def merge(
    half_a: Annotated[Path, typer.Argument(help="One server's half ('secemb admin add-devices' of its operator).")],
    half_b: Annotated[Path, typer.Argument(help="The other server's half.")],
    out: Annotated[Path, typer.Option(help="The credentials file to write (0600; must not exist).")],
) -> None:
    """Merge a device's two halves, one from each server's operator and in either order, into
    OUT: both servers' URLs and CAs (each pins its own server) and the device's key at each.
    Refused if they are not one half of each server for one user announcing one model and
    ring.  Prints the user and the file."""
    from secemb.cli._usage import fail
    from secemb.transport.credentials import DeviceHalf, merge_halves
    from secemb.errors import InvalidParameters

    if out.exists():
        fail(f"--out {out} exists: refusing to replace it")
    try:
        creds = merge_halves(DeviceHalf.load(half_a), DeviceHalf.load(half_b))
        path = creds.save(out)
    except InvalidParameters as exc:
        fail(exc)
    except OSError as exc:
        fail(f"--out {out}: {exc.strerror or exc}")
    typer.echo(json.dumps({"user": creds.user, "written": str(path)}))


def register(app: typer.Typer) -> None:
    """Attach the ``credentials`` command group to ``app``."""
    app.add_typer(credentials_app, name="credentials")
