"""A deployment's directory: what ``secemb admin init`` writes and the operator's other
commands (and the local cluster of ``secemb demo --network``) read.

Layout of ``root`` (0700)::

    tls/                 the private CA and both servers' certificates (:func:`~secemb.server.tls.init_pki`)
    server0.json         server 0's configuration, its secrets included (0600)
    server1.json         server 1's (0600): hand it to server 1's operator
    operator.json        both servers' URLs, admin secrets and the CA path (0600): the operator's
    devices/device-U.json  per-device credentials (``add-devices``; 0600): URLs, CA, the device's two keys

Secrets are fresh from :func:`secrets.token_bytes`: one peer secret shared by the two servers,
and per server its own admin secret and its own device-key secret.  A device receives only
its own two keys (:class:`~secemb.client.credentials.DeviceCredentials`), never a master
secret.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from secemb.client.credentials import DeviceCredentials
from secemb.errors import InvalidParameters
from secemb.server.config import ServerConfig, config_document, load_config
from secemb.server.tls import TlsFiles, client_context, init_pki, write_private
from secemb.transport.network import ApiClient
from secemb.transport.signing import user_key

__all__ = ["Deployment", "init_deployment"]

_OPERATOR = "operator.json"


@dataclass(frozen=True)
class Deployment:
    """The files of a deployment under ``root`` (see the module docstring)."""

    root: Path

    @property
    def pki(self) -> TlsFiles:
        return TlsFiles(self.root / "tls")

    def config_path(self, party: int) -> Path:
        return self.root / f"server{party}.json"

    def config(self, party: int) -> ServerConfig:
        """Server ``party``'s configuration (raises ``InvalidParameters`` if unreadable)."""
        return load_config(self.config_path(party))

    def _operator(self) -> dict[str, Any]:
        try:
            doc: dict[str, Any] = json.loads((self.root / _OPERATOR).read_text())
        except (OSError, ValueError) as exc:
            raise InvalidParameters(f"{self.root}: not a deployment directory ({_OPERATOR}: {exc})") from None
        return doc

    def url(self, party: int) -> str:
        return str(self._operator()["urls"][party])

    def admin(self, party: int, *, timeout: float = 60.0) -> ApiClient:
        """The operator's signed client for server ``party`` (its own admin secret, the CA pinned)."""
        op = self._operator()
        return ApiClient(op["urls"][party], "admin", bytes.fromhex(op["admin"][party]), timeout=timeout,
                         tls=client_context(Path(op["ca"])))

    def devices(self, users: Iterable[int]) -> list[DeviceCredentials]:
        """Each device's credentials: its key at each server, derived from that server's
        device-key secret (the configurations are read once)."""
        cfgs, op = [self.config(p) for p in (0, 1)], self._operator()
        urls, model = (op["urls"][0], op["urls"][1]), {"name": cfgs[0].model, "hparams": dict(cfgs[0].model_hparams)}
        out = []
        for user in users:
            if not 0 <= user < cfgs[0].num_users:
                raise InvalidParameters(f"user must be in [0, {cfgs[0].num_users}), got {user}")
            keys = (user_key(cfgs[0].user_secret, user), user_key(cfgs[1].user_secret, user))
            out.append(DeviceCredentials(user, urls, keys, Path(op["ca"]), model, cfgs[0].ring_bits))
        return out

    def add_devices(self, users: Iterable[int], out: Path | None = None) -> list[Path]:
        """Write each device's credentials file (0600) into ``out`` (default ``root/devices``, 0700)."""
        creds = self.devices(users)  # all checked before any file is written
        out = Path(out) if out is not None else self.root / "devices"
        out.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(out, 0o700)
        return [c.save(out / f"device-{c.user}.json") for c in creds]


def init_deployment(root: str | os.PathLike, hosts: Sequence[Sequence[str]], *, ports: Sequence[int] = (8700, 8701),
                    **settings: Any) -> Deployment:
    """Create a deployment in ``root``: the CA and certificates, fresh secrets, both servers'
    configurations (server ``p`` listens on ``hosts[p][0]:ports[p]``, state in
    ``root/state{p}``) and the operator's file.  ``settings``: the remaining
    :class:`~secemb.server.config.ServerConfig` fields (the model, protocol, training and
    rounds settings; ``num_items`` and ``num_users`` at least).

    Raises
    ------
    InvalidParameters
        ``root`` already holds a deployment (nothing is replaced), or a setting is invalid.
    """
    root = Path(root)
    dep = Deployment(root)
    if (root / _OPERATOR).exists() or any(dep.config_path(p).exists() for p in (0, 1)):
        raise InvalidParameters(f"{root} already holds a deployment: refusing to replace it (use a fresh directory)")
    if len(ports) != 2:
        raise InvalidParameters(f"ports: give one per server, got {ports!r}")
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(root, 0o700)
    pki = init_pki(root / "tls", hosts)
    peer = secrets.token_bytes(32)
    admin = (secrets.token_bytes(32), secrets.token_bytes(32))
    urls = [f"https://{_url_host(hosts[p][0])}:{ports[p]}" for p in (0, 1)]
    cfgs = [
        ServerConfig(party=p, host=hosts[p][0], port=int(ports[p]), peer_url=urls[1 - p], state_dir=root / f"state{p}",
                     peer_secret=peer, admin_secret=admin[p], user_secret=secrets.token_bytes(32),
                     tls_ca=pki.ca, tls_cert=pki.cert(p), tls_key=pki.key(p), **settings)
        for p in (0, 1)
    ]
    for p in (0, 1):
        write_private(dep.config_path(p), json.dumps(config_document(cfgs[p]), indent=2, allow_nan=False).encode())
    write_private(root / _OPERATOR, json.dumps(
        {"format": 1, "urls": urls, "admin": [a.hex() for a in admin], "ca": str(pki.ca)}, indent=2,
        allow_nan=False).encode())
    return dep


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
