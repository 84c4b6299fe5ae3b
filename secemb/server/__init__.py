"""The secemb server process: one of the two non-colluding parties, over HTTP.

``secemb serve --party {0,1} --config FILE`` runs :func:`serve`.  Inside, a
:func:`~secemb.server.node.make_node` builds the party's node (leader or follower), which drives the
protocol's own server role (the objects the in-process simulation uses) and adds rounds, the agreed user
set, persistence and the peer calls; :func:`~secemb.server.app.create_app` puts it behind FastAPI with signed requests.
See ``docs/deployment.md``.
"""

from __future__ import annotations

from secemb.collector import sparing_the_setup_heap
from secemb.server.config import ServerConfig, load_config
from secemb.server.node import make_node
from secemb.server.persist import hold_state_dir

__all__ = ["ServerConfig", "load_config", "serve"]


def serve(cfg: ServerConfig, *, log_level: str = "warning") -> None:
    """Run server ``cfg.party`` until interrupted (blocks): over TLS, or plain HTTP on
    loopback with ``insecure_http``.

    The server holds ``cfg.state_dir`` while it runs (:func:`~secemb.server.persist.hold_state_dir`,
    taken once the address is bound, before the state is read).  Its garbage collections skip
    what it loaded before serving (:func:`secemb.collector.sparing_the_setup_heap`).

    Raises
    ------
    InvalidParameters: TLS files missing, a plain ``http://`` peer URL with TLS, or the listening
    address cannot be bound (a port in use: checked before any state is read or written).
    secemb.server.persist.StateInUse: another server holds the state directory.
    secemb.server.persist.StorageError: the state directory or its lock file cannot be made, or the
    lock file is not a private file of this process's user.
    """
    import logging

    from secemb.server import listener
    from secemb.server.app import create_app

    cfg.check_listener()
    sock = listener.bind(cfg.host, cfg.port)
    try:
        logging.basicConfig(level=getattr(logging, log_level.upper(), logging.WARNING),
                            format=f"%(asctime)s server{cfg.party} %(levelname)s %(message)s")
        with hold_state_dir(cfg.state_dir):
            node = make_node(cfg)
            app = create_app(node)
            try:
                with sparing_the_setup_heap():  # the rounds' collections skip the modules, kernels and state loaded
                    listener.run(app, cfg, log_level=log_level, sock=sock)
            finally:
                node.stop()
    finally:
        sock.close()
