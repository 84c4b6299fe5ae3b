"""A one-server protocol's deployment files (``secemb admin init --protocol P`` for a P registered
with ``servers=1``; docs/deployment.md, "One server").

The directory (0700)::

    tls/                  the server's private CA and certificate (:func:`~secemb.server.tls.init_pki`)
    exchange.json         the server's configuration (0600): the protocol, its run and options, the
                          listen address, the TLS files, the admin and device-key secrets, and the
                          roster's PUBLIC pin (``roster_pin``: deployment id, public key), with which
                          the server checks each signed message at receipt
    roster.json           the OPERATOR's roster (0600): the deployment id and the Ed25519 key that
                          certifies each device's identity (:mod:`secemb.secagg.identity`).  The
                          server never reads it; keep it off the server's machine once the
                          devices are added (``add-devices --roster PATH`` reads it from there)
    devices/device-U.json device U's credentials (``add-devices``; 0600): the server's URL and CA,
                          the device's own key, its identity (signing key, certificate, the
                          roster's public key), the protocol, its run and options
    state/                the server's durable state (0700; ``secemb serve`` writes it): a
                          checkpoint after each committed round and the round journal
                          (:mod:`secemb.server.exchange_state`)

There is one operator and one server.  The server is not trusted with the devices' inputs: a
protocol whose devices sign (SFSL's secure aggregations, docs/secagg.md "Active server") relies
on the roster key staying with the operator -- a server holding it could certify identities of its
own and play any device to the others.  The server holds the roster's public key only: with it
the node (a :class:`~secemb.protocols.exchange.RosterPinnedNode`) refuses a device's signed
message that the device's peers would refuse, so one device cannot fail the others' round under
the server's name; a configuration without the pin (written before session 22) is refused by
:func:`serve_exchange` for such a protocol, with what to do.  A device's
credentials hold its own key only (``user_key(user_secret, U)``): they let it sign as device U
and nothing else.  A restart of the server goes on from its last committed round (the model,
the round ids, the protocol's set-up: :mod:`secemb.server.exchange_state`).
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Callable, Iterable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from secemb.errors import InvalidParameters, check_float, check_int
from secemb.protocols import get_protocol
from secemb.protocols.exchange import ExchangeProtocol, ExchangeRun, RosterPinnedNode
from secemb.secagg.identity import Identity, Roster, RosterPin
from secemb.server.exchange_state import ExchangeState, fingerprint
from secemb.server.persist import hold_state_dir
from secemb.server.auth import Verifier
from secemb.server.config import ServerConfig
from secemb.server.tls import TlsFiles, client_context, init_pki, server_context_kwargs, write_private
from secemb.transport.network import ANSWER_FLOOR_BYTES, ApiClient
from secemb.transport.signing import parse_secret, user_key

__all__ = ["ExchangeCredentials", "ExchangeDeployment", "exchange_config_path", "init_exchange", "load_roster",
           "serve_exchange"]

_FORMAT = "secemb-exchange-deployment/1"
_CREDENTIALS = "secemb-exchange-device/1"
_ROSTER = "secemb-roster/1"
_CONFIG = "exchange.json"
#: the operator's roster file in a deployment's directory (never read by the server)
ROSTER_FILE = "roster.json"


def load_roster(path: str | os.PathLike) -> Roster:
    """The operator's roster written by :func:`init_exchange`.

    Raises
    ------
    InvalidParameters: unreadable, not a roster file, or malformed.
    """
    p = Path(path)
    doc = _read(p, _ROSTER, "roster")
    try:
        return Roster(bytes.fromhex(doc["deployment"]), bytes.fromhex(doc["private"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidParameters(f"{p}: not a roster ({exc})") from None


def exchange_config_path(path: str | os.PathLike) -> Path | None:
    """The one-server configuration file ``path`` names (the file itself or its directory);
    ``None`` if ``path`` is neither (e.g. a two-server configuration)."""
    p = Path(path)
    for candidate in (p, p / _CONFIG):
        if candidate.is_file() and candidate.name == _CONFIG:
            return candidate
    return None


def _read(path: Path, fmt: str, what: str) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InvalidParameters(f"{path}: cannot read {what} ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != fmt:
        raise InvalidParameters(f"{path}: not {what} (format {fmt!r} expected)")
    return doc


def _field(doc: dict[str, Any], name: str, kind: type, path: Path) -> Any:
    value = doc.get(name)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise InvalidParameters(f"{path}: field {name!r} must be a {kind.__name__}, got {value!r}")
    return value


def _secret(doc: dict[str, Any], name: str, path: Path) -> bytes:
    return parse_secret(f"{path}: field {name!r}", doc.get(name))


def _protocol(doc: dict[str, Any], path: Path, data_dir: Path | None) -> ExchangeProtocol:
    """The protocol a configuration or credentials document names (built, so its options are checked)."""
    run, options = _field(doc, "run", dict, path), _field(doc, "options", dict, path)
    try:
        return get_protocol(_field(doc, "protocol", str, path), run=ExchangeRun(**run, data_dir=data_dir), **options)
    except TypeError as exc:  # a run field that is not ExchangeRun's
        raise InvalidParameters(f"{path}: bad run {run!r} ({exc})") from None


@dataclass(frozen=True)
class ExchangeDeployment:
    """A one-server deployment directory, loaded (:meth:`load`) and checked."""

    root: Path
    doc: dict[str, Any] = field(repr=False)  # holds the admin and user secrets

    @classmethod
    def load(cls, path: str | os.PathLike) -> ExchangeDeployment:
        """The deployment whose ``exchange.json`` is ``path`` or lies in it.

        Raises
        ------
        InvalidParameters: no such file, or a malformed one (the message names the field).
        """
        config = exchange_config_path(path)
        if config is None:
            raise InvalidParameters(f"{path}: no one-server configuration ({_CONFIG}) there")
        doc = _read(config, _FORMAT, "a one-server configuration")
        for name, kind in (("protocol", str), ("host", str), ("port", int), ("stage_deadline_s", float)):
            _field(doc, name, kind, config)
        for name in ("admin_secret", "user_secret"):
            _secret(doc, name, config)
        dep = cls(config.parent, doc)
        _ = dep.pin  # checked now: a malformed pin is a bad file
        return dep

    @property
    def config_path(self) -> Path:
        return self.root / _CONFIG

    @property
    def state_dir(self) -> Path:
        """Where ``secemb serve`` keeps the server's durable state."""
        return self.root / "state"

    @property
    def url(self) -> str:
        return f"https://{self.doc['host']}:{self.doc['port']}"

    @property
    def tls(self) -> TlsFiles:
        return TlsFiles(self.root / "tls")

    @property
    def admin_secret(self) -> bytes:
        return _secret(self.doc, "admin_secret", self.config_path)

    @property
    def user_secret(self) -> bytes:
        return _secret(self.doc, "user_secret", self.config_path)

    @property
    def pin(self) -> RosterPin | None:
        """The roster's public pin the server checks signed messages under (``None``: a
        configuration written before session 22 has none).

        Raises
        ------
        InvalidParameters: a malformed ``roster_pin`` field.
        """
        raw = self.doc.get("roster_pin")
        if raw is None:
            return None
        try:
            return RosterPin(bytes.fromhex(raw["deployment"]), bytes.fromhex(raw["public"]))
        except (KeyError, TypeError, ValueError) as exc:  # InvalidParameters is a ValueError
            raise InvalidParameters(f"{self.config_path}: field 'roster_pin': {exc}") from None

    def protocol(self, data_dir: Path | None = None) -> ExchangeProtocol:
        """The deployment's protocol (its data read from ``data_dir`` where it needs files)."""
        return _protocol(self.doc, self.config_path, data_dir)

    def admin(self, *, timeout: float = 60.0) -> ApiClient:
        """The operator's signed client (TLS pinned to the deployment's CA; answers of at most
        :data:`~secemb.transport.network.ANSWER_FLOOR_BYTES` read)."""
        return ApiClient(self.url, "admin", self.admin_secret, tls=client_context(self.tls.ca), timeout=timeout,
                         max_answer_bytes=ANSWER_FLOOR_BYTES)

    def add_devices(self, users: Iterable[int], out: Path | None = None, roster: Path | None = None) -> list[Path]:
        """Write each device's credentials to ``out`` (default ``root/devices``; 0700, files 0600),
        each with a fresh identity certified by the operator's ``roster`` file (default
        ``root/roster.json``).

        Raises
        ------
        InvalidParameters: the roster file unreadable or malformed, or not the roster whose pin
            ``exchange.json`` holds (the server would refuse every signed message of its devices);
            a user id off ``[0, 2^64)``; or a device's file in ``out`` exists and is not
            credentials without an identity (issuing another identity would not revoke the one
            there: nothing revokes a certificate of the roster); nothing written.
        """
        path = self.root / ROSTER_FILE if roster is None else Path(roster)
        ros = load_roster(path)
        if self.pin is not None and ros.pin != self.pin:
            raise InvalidParameters(f"{path} is not this deployment's roster (not the pin of {self.config_path}): "
                                    "give the roster.json that 'secemb admin init' wrote for it")
        out = self.root / "devices" if out is None else Path(out)
        users = [check_int("user", u, low=0, high=2**64 - 1) for u in users]  # all checked before any is written
        for u in users:
            if _issued(target := out / f"device-{u}.json"):
                raise InvalidParameters(
                    f"{target} already holds device {u}'s credentials: issuing another identity does not revoke "
                    "the one there (its certificate stays valid for the server and every peer as long as the "
                    "deployment; a device whose credentials leaked needs a new deployment); nothing written "
                    "(remove the file first to issue a copy anyway)")
        out.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(out, 0o700)
        written = []
        for u in users:
            ident = ros.enroll(u)
            doc = {"format": _CREDENTIALS, "user": u, "url": self.url, "ca": str(self.tls.ca.resolve()),
                   "key": user_key(self.user_secret, u).hex(), "protocol": self.doc["protocol"],
                   "run": self.doc["run"], "options": self.doc["options"],
                   "identity": {"private": ident.private.hex(), "certificate": ident.certificate.to_bytes().hex(),
                                "deployment": ros.deployment.hex(), "roster": ros.public.hex()}}
            path = out / f"device-{u}.json"
            write_private(path, json.dumps(doc, indent=2, allow_nan=False).encode())
            written.append(path)
        return written


def _issued(path: Path) -> bool:
    """Whether ``path`` exists and is not one-server credentials without an identity (those
    written before session 22, which ``add-devices`` issues again)."""
    if not path.exists():
        return False
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return True
    return not (isinstance(doc, dict) and doc.get("format") == _CREDENTIALS and doc.get("identity") is None)


@dataclass(frozen=True)
class ExchangeCredentials:
    """Device ``user``'s credentials for a one-server deployment (:meth:`ExchangeDeployment.add_devices`)."""

    path: Path
    doc: dict[str, Any] = field(repr=False)  # holds the device's key

    @staticmethod
    def sniff(path: str | os.PathLike) -> bool:
        """Whether ``path`` is a file of this format (not whether it is valid: :meth:`load` says)."""
        try:
            doc = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            return False
        return isinstance(doc, dict) and doc.get("format") == _CREDENTIALS

    @classmethod
    def load(cls, path: str | os.PathLike) -> ExchangeCredentials:
        """Read and check ``path``.

        Raises
        ------
        InvalidParameters: not such a file, or a malformed one.
        """
        p = Path(path)
        doc = _read(p, _CREDENTIALS, "one-server device credentials")
        for name, kind in (("user", int), ("url", str), ("ca", str), ("protocol", str)):
            _field(doc, name, kind, p)
        _secret(doc, "key", p)
        creds = cls(p, doc)
        _ = creds.identity  # checked now: a bad identity is a bad file
        return creds

    @property
    def user(self) -> int:
        return int(self.doc["user"])

    @property
    def url(self) -> str:
        return str(self.doc["url"])

    @property
    def ca(self) -> Path:
        return Path(self.doc["ca"])

    @property
    def key(self) -> bytes:
        return _secret(self.doc, "key", self.path)

    @property
    def identity(self) -> Identity | None:
        """The device's certified identity (``None``: credentials written before identities).

        Raises
        ------
        InvalidParameters: a malformed identity, or one whose certificate is not the pinned
            roster's for this device (the file was altered or mixed up).
        """
        ident = self.doc.get("identity")
        if ident is None:
            return None
        try:
            pin = RosterPin(bytes.fromhex(ident["deployment"]), bytes.fromhex(ident["roster"]))
            cert = pin.certificate(bytes.fromhex(ident["certificate"]), self.user)
            return Identity(bytes.fromhex(ident["private"]), cert, pin)
        except (KeyError, TypeError, ValueError) as exc:  # InvalidMessage, InvalidParameters are ValueErrors
            raise InvalidParameters(f"{self.path}: field 'identity': {exc}") from None

    def protocol(self, data_dir: Path | None = None) -> ExchangeProtocol:
        """The deployment's protocol, as the device builds it."""
        return _protocol(self.doc, self.path, data_dir)


def init_exchange(root: str | os.PathLike, protocol: str, run: ExchangeRun, options: dict[str, Any],
                  hosts: Sequence[str], *, port: int = 8700, stage_deadline_s: float = 60.0) -> ExchangeDeployment:
    """Create a one-server deployment of ``protocol`` (``servers=1``) with ``run`` and
    ``options`` in ``root`` (created, 0700): the CA and certificate for ``hosts``, fresh
    secrets, a fresh roster (``roster.json``, the operator's), ``exchange.json`` (with the
    roster's public pin, never its private key).  ``stage_deadline_s``: the server closes a stage this long after
    it opened even if not every device still in has sent (:class:`~secemb.server.exchange_app.StageCloser`).

    Raises
    ------
    InvalidParameters: an unknown or two-server protocol, an option or value it refuses, no
    host, a port outside [1, 65535], a deadline <= 0, or ``root`` already holds a deployment.
    """
    built = get_protocol(protocol, run=run, **options)
    if not built.networked:
        raise InvalidParameters(f"protocol {protocol!r} runs in process only (networked = False): no deployment")
    check_int("port", port, low=1, high=65535)
    check_float("stage_deadline_s", stage_deadline_s, above=0)
    root = Path(root)
    if (root / _CONFIG).exists():
        raise InvalidParameters(f"{root / _CONFIG} exists: refusing to replace a deployment (use a fresh directory)")
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(root, 0o700)
    pki = init_pki(root / "tls", 0, hosts)
    roster = Roster.generate()
    write_private(root / ROSTER_FILE, json.dumps({"format": _ROSTER, "deployment": roster.deployment.hex(),
                                                  "private": roster.private.hex(), "public": roster.public.hex()},
                                                 indent=2).encode())
    doc = {"format": _FORMAT, "protocol": protocol, "run": run.to_dict(), "options": built.spec(),
           "host": hosts[0], "port": port, "stage_deadline_s": float(stage_deadline_s),
           "tls": {"ca": str(pki.ca.resolve()), "cert": str(pki.cert(0).resolve()), "key": str(pki.key(0).resolve())},
           "admin_secret": secrets.token_bytes(32).hex(), "user_secret": secrets.token_bytes(32).hex(),
           "roster_pin": {"deployment": roster.deployment.hex(), "public": roster.public.hex()}}
    write_private(root / _CONFIG, json.dumps(doc, indent=2, allow_nan=False).encode())
    return ExchangeDeployment(root, doc)


def _pin_of(dep: ExchangeDeployment) -> RosterPin:
    """``dep``'s roster pin, which a node that checks signed messages needs.

    Raises
    ------
    InvalidParameters: none (a configuration written before session 22), with what to do.
    """
    pin = dep.pin
    if pin is None:
        raise InvalidParameters(
            f"{dep.config_path} has no roster pin (a deployment made before session 22): the server checks each "
            f"device's signed messages under it. If {dep.root / ROSTER_FILE} exists, copy its 'deployment' and "
            "'public' into exchange.json as \"roster_pin\": {\"deployment\": ..., \"public\": ...}; otherwise "
            "make a new deployment (secemb admin init --protocol ...) and add its devices")
    return pin


def serve_exchange(dep: ExchangeDeployment, *, host: str | None = None, port: int | None = None,
                   data_dir: Path | None = None, log_level: str = "info",
                   announce: Callable[[str], None] | None = None) -> None:
    """Serve ``dep``'s one server until interrupted: the protocol's server
    (:meth:`~secemb.protocols.exchange.ExchangeProtocol.make_server`) behind
    :func:`~secemb.server.exchange_app.create_exchange_app` over TLS (the deployment's
    certificate) with the two-server app's connection guards and their default settings; the
    server closes the stages itself (``stage_deadline_s``).  ``host``/``port`` override the
    file's.  The server's state is restored from, and kept in, :attr:`ExchangeDeployment.state_dir`
    (:class:`~secemb.server.exchange_state.ExchangeState`).  ``announce`` gets one line (where it
    listens, the state and its last round) once everything is checked, before it listens.  A node
    that checks signed messages (:class:`~secemb.protocols.exchange.RosterPinnedNode`) is given
    the configuration's roster pin before its state is restored.  The server holds the state
    directory while it runs (:func:`~secemb.server.persist.hold_state_dir`, taken once the address
    is bound, before the protocol's data is loaded).

    Raises
    ------
    InvalidParameters: the protocol or its data (before anything listens); a protocol whose node
    checks signed messages and a configuration without a roster pin (before anything listens);
    the port in use.
    secemb.data.DatasetNotFoundError: the dataset's files missing.
    secemb.server.persist.CorruptState: a state that cannot be restored (nothing written but the
    hold's empty lock file, :data:`~secemb.server.persist.LOCK`, made if missing, and what opening
    the journal and the store tidy: a torn last journal record cut off, stale temporary files
    removed);
    secemb.server.persist.StorageError: the disk refused to record a round aborted at the restart;
    or the state directory or its lock file cannot be made, or the lock file is not a private file
    of this process's user (nothing read there).
    secemb.server.persist.StateInUse: another server holds the state directory (nothing read there).
    """
    from secemb.server.exchange_app import create_exchange_app
    from secemb.server.listener import bind, guarded_config, serve_until_stopped

    host = str(dep.doc["host"]) if host is None else host
    port = int(dep.doc["port"]) if port is None else port
    sock = bind(host, port)  # a port in use fails here, before the state directory is taken
    with ExitStack() as held:  # the state directory, for the life of the server
        try:
            held.enter_context(hold_state_dir(dep.state_dir))
            server = dep.protocol(data_dir).make_server()
            if isinstance(server.node, RosterPinnedNode):
                server.node.pin = _pin_of(dep)
            state = ExchangeState(dep.state_dir, fingerprint(dep.doc), server)
            defaults = {n: ServerConfig.model_fields[n].default for n in ("read_timeout_s", "max_connections",
                                                                           "max_body_reads")}
            verifier = Verifier(0, secrets.token_bytes(32), dep.admin_secret, dep.user_secret, server.num_users)
            app = create_exchange_app(server.node, verifier, max_body_bytes=server.max_body_bytes, model=server.model,
                                      read_timeout_s=defaults["read_timeout_s"],
                                      max_body_reads=defaults["max_body_reads"],
                                      stage_deadline_s=float(dep.doc["stage_deadline_s"]), state=state)
            tls = dep.tls
            config = guarded_config(app, host, port, read_timeout_s=defaults["read_timeout_s"],
                                    max_connections=defaults["max_connections"],
                                    tls=server_context_kwargs(tls.ca, tls.cert(0), tls.key(0)), log_level=log_level)
        finally:
            sock.close()
        if announce is not None:
            last = ("no round yet" if state.last is None
                    else f"last round {state.last['round_id']} {state.last['state']}")
            announce(f"secemb server (one server, {dep.doc['protocol']}) on https://{host}:{port} | no peer | "
                     f"state {dep.state_dir} ({last})")
        serve_until_stopped(config)
