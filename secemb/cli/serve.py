"""``secemb serve``: run one of the two servers, or the one server of a one-server protocol
(``--config`` an ``exchange.json`` written by ``secemb admin init --protocol P``).

A server's settings are layered as a training run's (:mod:`secemb.options`): the command line
(``--host``, ``--port``, ``--backend``, ...) > the ``--config`` file > the defaults, those it shares
with ``secemb train`` (``--backend``, ``--workers``, the ``[protocol]`` and ``[training]`` keys)
from :class:`~secemb.options.RunOptions` (:func:`secemb.server.config.load_config`).

Exit codes: 0 after a clean shutdown (Ctrl-C / SIGTERM); 2 bad usage (missing or invalid
configuration, a state directory that belongs to another configuration or that another server
holds (:func:`secemb.server.persist.hold_state_dir`), a port in use -- the last checked before
any state is read; for one server: an option it has no use for, its protocol's data missing, a
state in DIR/state that cannot be restored).
"""

from pathlib import Path
from typing import Annotated, Any

import typer

from secemb.cli._run_options import DEFAULTS, described, option


def register(app: typer.Typer) -> None:
    """Attach the ``serve`` command to ``app``."""

    @app.command()
    def serve(
        party: Annotated[
            int | None, typer.Option(min=0, max=1, help="Which server: 0 (leader) or 1 (default: the file's).")
        ] = None,
        config: Annotated[
            Path | None, typer.Option(
                help="Configuration file (.toml or .json; docs/deployment.md); the command line overrides it.")
        ] = None,
        host: Annotated[str | None, typer.Option(help="Listen address (overrides the file).")] = None,
        port: Annotated[int | None, typer.Option(min=0, max=65535, help="Listen port (overrides the file).")] = None,
        peer_url: Annotated[str | None, typer.Option(help="The other server's URL (overrides the file).")] = None,
        state_dir: Annotated[
            Path | None, typer.Option(help="Checkpoint and journal directory (overrides the file).")
        ] = None,
        log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
        data_dir: Annotated[Path | None, typer.Option(
            envvar="SECEMB_DATA_DIR", help="One server: where its protocol's dataset files are.")] = None,
        insecure_http: Annotated[bool, typer.Option(
            "--insecure-http",
            help="Plain HTTP instead of TLS; refused unless the host is a loopback address.")] = False,
        backend: Annotated[str | None, option("backend", help=(
            f"{described('backend')} Overrides the file's [protocol] backend; default: {DEFAULTS.backend}."))] = None,
        workers: Annotated[int | None, option("workers", help=(
            f"{described('workers')} Overrides the file's [protocol] workers."))] = None,
    ) -> None:
        """Serve the round protocol over HTTP (FastAPI on uvicorn) until interrupted.

        TLS by default: the [tls] files of the configuration ('secemb admin init' writes them).
        Secrets may come from the file or from SECEMB_PEER_SECRET, SECEMB_ADMIN_SECRET and
        SECEMB_USER_SECRET (hex).  The API is described in docs/openapi.json.  At start-up one line
        says whether devices prove bounded payloads (on by default where they apply; a warning for
        bound = false: docs/deployment.md, 'Bounded payloads').

        One server (--config DIR/exchange.json of 'secemb admin init --protocol P'): TLS always,
        no peer, its state in DIR/state (docs/deployment.md, 'One server').
        """
        from secemb.cli._console import console as make_console
        from secemb.cli._usage import fail
        from secemb.errors import InvalidParameters
        from secemb.server import load_config
        from secemb.server import serve as run
        from secemb.server.exchange_deploy import exchange_config_path
        from secemb.server.persist import CorruptState, StateInUse, StorageError

        from secemb.sim.allocator import keeping_round_heap

        keeping_round_heap()  # each round reuses the heap pages the last one freed (docs/results.md, "Session 25")
        console = make_console(stderr=True)
        if config is not None and exchange_config_path(config) is not None:
            if (party is not None or peer_url is not None or state_dir is not None or insecure_http
                    or backend is not None or workers is not None):
                fail("a one-server deployment has no --party, --peer-url, --state-dir, --backend or --workers, and "
                     "no --insecure-http (TLS always)")
            _serve_exchange(console, config, host, port, data_dir, log_level)
            return
        if data_dir is not None:
            fail("--data-dir is for a one-server deployment (--config DIR/exchange.json)")
        try:
            cfg = load_config(config, party=party, host=host, port=port, peer_url=peer_url,
                              state_dir=str(state_dir) if state_dir is not None else None,
                              insecure_http=True if insecure_http else None, backend=backend, workers=workers)
            cfg.check_listener()
        except InvalidParameters as exc:
            fail(exc)
        scheme = "http" if cfg.insecure_http else "https"
        console.print(
            f"secemb server {cfg.party} on {scheme}://{cfg.host}:{cfg.port} | peer {cfg.peer_url} | "
            f"{cfg.protocol} ({cfg.layout}{', relay' if cfg.relay else ''}) | state {cfg.state_dir}",
            markup=False,
        )
        _announce_bounds(cfg.payload_bounds())
        try:
            run(cfg, log_level=log_level)
        except (CorruptState, StateInUse, StorageError, InvalidParameters) as exc:  # InvalidParameters: a busy port
            fail(exc)


def _announce_bounds(bounds: dict[str, Any]) -> None:
    """The one start-up line on payload bounds, on stderr, never wrapped
    (:meth:`~secemb.server.config.ServerConfig.payload_bounds`): a warning when ``bound = false`` turned them off
    where they apply."""
    typer.echo(("warning: " if bounds["turned_off"] else "") + bounds["detail"], err=True)


def _serve_exchange(console: Any, config: Path, host: str | None, port: int | None, data_dir: Path | None,
                    log_level: str) -> None:
    """``secemb serve`` of a one-server deployment (:func:`secemb.server.exchange_deploy.serve_exchange`)."""
    from secemb.cli._usage import fail
    from secemb.data import DataFormatError, DatasetNotFoundError
    from secemb.errors import InvalidParameters
    from secemb.server.exchange_deploy import ExchangeDeployment, serve_exchange
    from secemb.server.persist import CorruptState, StateInUse, StorageError

    try:
        dep = ExchangeDeployment.load(config)
        serve_exchange(dep, host=host, port=port, data_dir=data_dir, log_level=log_level,
                       announce=lambda line: console.print(line, markup=False))
    except (InvalidParameters, DatasetNotFoundError, DataFormatError, CorruptState, StateInUse, StorageError) as exc:
        fail(exc)
