"""``secemb serve``: run one of the two servers.

Exit codes: 0 after a clean shutdown (Ctrl-C / SIGTERM); 2 bad usage (missing or invalid
configuration, a state directory that belongs to another configuration, a port in use -- the
last checked before any state is read).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    """Attach the ``serve`` command to ``app``."""

    @app.command()
    def serve(
        party: Annotated[
            int | None, typer.Option(min=0, max=1, help="Which server: 0 (leader) or 1 (default: the file's).")
        ] = None,
        config: Annotated[
            Path | None, typer.Option(help="Configuration file (.toml or .json; docs/deployment.md).")
        ] = None,
        host: Annotated[str | None, typer.Option(help="Listen address (overrides the file).")] = None,
        port: Annotated[int | None, typer.Option(min=0, max=65535, help="Listen port (overrides the file).")] = None,
        peer_url: Annotated[str | None, typer.Option(help="The other server's URL (overrides the file).")] = None,
        state_dir: Annotated[
            Path | None, typer.Option(help="Checkpoint and journal directory (overrides the file).")
        ] = None,
        log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
        insecure_http: Annotated[bool, typer.Option(
            "--insecure-http",
            help="Plain HTTP instead of TLS; refused unless the host is a loopback address.")] = False,
    ) -> None:
        """Serve the round protocol over HTTP (FastAPI on uvicorn) until interrupted.

        TLS by default: the [tls] files of the configuration ('secemb admin init' writes them).
        Secrets may come from the file or from SECEMB_PEER_SECRET, SECEMB_ADMIN_SECRET and
        SECEMB_USER_SECRET (hex).  The API is described in docs/openapi.json.
        """
        from rich.console import Console

        from secemb.cli._usage import fail
        from secemb.errors import InvalidParameters
        from secemb.server import load_config
        from secemb.server import serve as run
        from secemb.server.persist import CorruptState, StorageError

        console = Console(stderr=True)
        try:
            cfg = load_config(config, party=party, host=host, port=port, peer_url=peer_url,
                              state_dir=str(state_dir) if state_dir is not None else None,
                              insecure_http=True if insecure_http else None)
            cfg.check_listener()
        except InvalidParameters as exc:
            fail(exc)
        scheme = "http" if cfg.insecure_http else "https"
        console.print(
            f"secemb server {cfg.party} on {scheme}://{cfg.host}:{cfg.port} | peer {cfg.peer_url} | "
            f"{cfg.protocol} ({cfg.layout}{', relay' if cfg.relay else ''}) | state {cfg.state_dir}",
            markup=False,
        )
        try:
            run(cfg, log_level=log_level)
        except (CorruptState, StorageError, InvalidParameters) as exc:  # InvalidParameters: e.g. a port in use
            fail(exc)
