"""``secemb admin``: the operator's commands.

``secemb admin init`` creates the deployment's private certificate authority and both
servers' certificates (``secemb.server.tls.init_pki``): what each server's ``[tls]`` section
names.  Exit codes: 0 success, 2 bad usage (e.g. a directory that already holds a CA).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

admin_app = typer.Typer(help="Operator commands of a deployment (docs/deployment.md).", no_args_is_help=True)


@admin_app.command("init")
def init(
    out: Annotated[Path, typer.Option(help="Directory for the CA and the certificates (created, 0700).")],
    host0: Annotated[list[str], typer.Option(help="A host name or IP address of server 0 (repeatable).")],
    host1: Annotated[list[str], typer.Option(help="A host name or IP address of server 1 (repeatable).")],
) -> None:
    """Create a private CA and both servers' TLS certificates (keys written 0600); print the
    [tls] section of each server's configuration.  Devices and the operator pin ca.pem."""
    from secemb.cli._usage import fail
    from secemb.errors import InvalidParameters
    from secemb.server.tls import init_pki

    try:
        files = init_pki(out, (host0, host1))
    except (InvalidParameters, OSError) as exc:
        fail(exc)
    for party in (0, 1):
        typer.echo(f"# server{party}.toml\n[tls]\nca = \"{files.ca}\"\ncert = \"{files.cert(party)}\"\n"
                   f"key = \"{files.key(party)}\"\n")


def register(app: typer.Typer) -> None:
    """Attach the ``admin`` command group to ``app``."""
    app.add_typer(admin_app, name="admin")
