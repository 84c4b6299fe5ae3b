"""A deployment's files: each server's operator creates and keeps its own half, and nothing in
one half lets its holder act as a device, the operator or the CA at the other server.

Server ``P``'s operator runs ``secemb admin init --party P`` (:func:`init_half`), then hands
its ``public.json`` to the other operator and runs ``secemb admin pair`` with the one it
receives (:func:`pair`).  A half's directory (0700)::

    tls/                  P's own private CA and server P's certificate (:func:`~secemb.server.tls.init_pki`)
    half.json             server P's configuration without the peer's fields: its own secrets (0600)
    exchange.key          P's X25519 key for agreeing on the peer secret (0600)
    public.json           what the other operator receives (public: no secret in it)
    operator.json         server P's URL, its admin secret and its CA path (0600): the operator's
    peer-ca.pem           the other server's CA certificate, from its public.json (``pair``)
    serverP.json          server P's whole configuration (``pair``; 0600)
    devices/device-U.serverP.json   the halves of device credentials (``add-devices``; 0600)
    state/                server P's state directory

What crosses between the operators is public material only, checked for integrity (each
reads out the SHA-256 of its ``public.json``, the other compares): the server's URL, its CA
certificate (the peer's trust anchor), an X25519 public key, and the SHA-256 of the settings
both servers must share.  The peer secret that signs the servers' calls to each other is
agreed from the two X25519 keys (:func:`peer_secret`): no secret travels, and a copy of the
public files lets no one else compute it.  Each server's own secrets -- its admin secret,
its device-key secret, its TLS key, its CA key -- never leave its half, so server ``P``'s
operator can issue device keys, operator calls and certificates for server ``P`` only.

A device receives one half of its credentials from each operator
(:class:`~secemb.transport.credentials.DeviceHalf`) and merges them
(:func:`~secemb.transport.credentials.merge_halves`, ``secemb credentials merge``).

:func:`init_deployment` is the one-command **test setup** (``secemb admin init`` without
``--party``, :class:`~secemb.sim.cluster.LocalCluster`, ``secemb demo --network``): one
person creates both halves, in ``root/server0`` and ``root/server1``, pairs them, and marks
the directory with ``TEST-SETUP.txt``; its ``add-devices`` writes whole credentials files
into ``root/devices``.  Whoever holds such a directory holds both servers: never deploy one.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from secemb.transport.credentials import DeviceCredentials, DeviceHalf, merge_halves
from secemb.errors import InvalidParameters, check_int
from secemb.server.config import ServerConfig, config_document, load_config
from secemb.server.tls import TlsFiles, client_context, init_pki, write_private
from secemb.transport.network import ANSWER_FLOOR_BYTES, ApiClient
from secemb.transport.signing import parse_secret, user_key

__all__ = ["Deployment", "init_deployment", "init_half", "pair", "peer_secret"]

_OPERATOR, _HALF, _PUBLIC, _EXCHANGE, _PEER_CA = "operator.json", "half.json", "public.json", "exchange.key", \
    "peer-ca.pem"
_TEST_SETUP = "TEST-SETUP.txt"
_FORMAT = 2
_PUBLIC_KIND = "secemb-server-public"
#: HKDF ``info`` prefix of the peer secret (followed by server 0's and server 1's X25519 public keys)
_PEER_INFO = b"secemb peer secret v1"
#: stands in for the peer's fields while a half's settings are validated before pairing (never written)
_PENDING = {"peer_url": "https://127.0.0.1:1", "peer_secret": b"\0" * 32}


def _check_party(party: int) -> int:
    if isinstance(party, bool) or party not in (0, 1):
        raise InvalidParameters(f"party must be 0 or 1, got {party!r}")
    return party


@dataclass(frozen=True)
class Deployment:
    """The files of a deployment under ``root``: one operator's half (see the module
    docstring), or the test setup's two halves (``root/server0``, ``root/server1``).

    Every method about server ``P`` needs ``P``'s half in ``root`` and raises
    ``InvalidParameters`` (naming whose half it is) otherwise.
    """

    root: Path

    @property
    def is_test_setup(self) -> bool:
        """Whether ``root`` is the one-person test setup (both halves)."""
        return (self.root / _TEST_SETUP).is_file()

    @property
    def parties(self) -> tuple[int, ...]:
        """The servers whose halves ``root`` holds: ``(P,)`` for an operator's, ``(0, 1)`` for
        the test setup."""
        if self.is_test_setup:
            return (0, 1)
        return (_check_party(self._operator_doc(self.root)["party"]),)

    def half_root(self, party: int) -> Path:
        """The directory of server ``party``'s half."""
        _check_party(party)
        if self.is_test_setup:
            return self.root / f"server{party}"
        held = self.parties[0]
        if held != party:
            raise InvalidParameters(f"{self.root} holds server {held}'s half only: server {party}'s operator runs "
                                    f"this for server {party} (docs/deployment.md, 'Two operators, two halves')")
        return self.root

    @staticmethod
    def _operator_doc(half: Path) -> dict[str, Any]:
        try:
            doc = json.loads((half / _OPERATOR).read_text())
        except (OSError, ValueError) as exc:
            raise InvalidParameters(f"{half}: not a deployment directory ({_OPERATOR}: {exc})") from None
        if not isinstance(doc, dict) or doc.get("format") != _FORMAT:
            raise InvalidParameters(f"{half}: not a format-{_FORMAT} deployment (an older directory holds both "
                                    f"servers' secrets: create each server's half anew with 'secemb admin init "
                                    f"--party P')")
        return doc

    def _operator(self, party: int) -> dict[str, Any]:
        return self._operator_doc(self.half_root(party))

    def pki(self, party: int) -> TlsFiles:
        """Server ``party``'s own CA and certificate."""
        return TlsFiles(self.half_root(party) / "tls")

    def peer_ca(self, party: int) -> Path:
        """The other server's CA certificate as server ``party``'s half received it (``pair``)."""
        return self.half_root(party) / _PEER_CA

    def public_path(self, party: int) -> Path:
        """Server ``party``'s public file, for the other operator."""
        return self.half_root(party) / _PUBLIC

    def config_path(self, party: int) -> Path:
        return self.half_root(party) / f"server{party}.json"

    def config(self, party: int) -> ServerConfig:
        """Server ``party``'s configuration (raises ``InvalidParameters`` if unreadable or the
        half is not paired yet)."""
        path = self.config_path(party)
        if not path.exists() and (self.half_root(party) / _HALF).exists():
            raise InvalidParameters(f"{self.half_root(party)}: not paired yet: run 'secemb admin pair' with the "
                                    f"other operator's {_PUBLIC}")
        return load_config(path)

    def url(self, party: int) -> str:
        return str(self._operator(party)["url"])

    def admin(self, party: int, *, timeout: float = 60.0) -> ApiClient:
        """The operator's signed client for server ``party`` (its own admin secret, its own CA pinned;
        answers of at most :data:`~secemb.transport.network.ANSWER_FLOOR_BYTES` read)."""
        op = self._operator(party)
        key = parse_secret(f"{self.half_root(party) / _OPERATOR}: admin", op.get("admin"))
        return ApiClient(op["url"], "admin", key, timeout=timeout, max_answer_bytes=ANSWER_FLOOR_BYTES,
                         tls=client_context(Path(op["ca"])))

    def peer(self, *, timeout: float = 60.0) -> ApiClient:
        """Server 0's signed client for server 1, from server 0's half: signed with the peer secret
        as ``server0``, server 1's CA pinned and server 0's certificate presented (mutual TLS), as
        server 0 itself calls it (``secemb admin export-model`` and ``save-denoiser`` read server
        1's ``/v1/peer/status`` with it); answers of at most
        :data:`~secemb.transport.network.ANSWER_FLOOR_BYTES` read."""
        cfg = self.config(0)
        return ApiClient(cfg.peer_url, "server0", cfg.peer_secret, timeout=timeout,
                         max_answer_bytes=ANSWER_FLOOR_BYTES, tls=cfg.peer_tls())

    def issue(self, party: int, users: Iterable[int]) -> list[DeviceHalf]:
        """Server ``party``'s half of each device's credentials: its URL, its CA, the device's
        key derived from server ``party``'s device-key secret (the configuration is read once).

        Raises
        ------
        InvalidParameters
            Not ``party``'s half, not paired yet, or a user out of ``[0, num_users)``.
        """
        cfg, op = self.config(party), self._operator(party)
        model = {"name": cfg.model, "hparams": dict(cfg.model_hparams)}
        out = []
        for user in users:
            user = check_int("user", user, low=0, high=cfg.num_users - 1)
            out.append(DeviceHalf(party, user, str(op["url"]), user_key(cfg.user_secret, user), Path(op["ca"]), model,
                                  cfg.ring_bits))
        return out

    def devices(self, users: Iterable[int]) -> list[DeviceCredentials]:
        """Each device's whole credentials, merged from both halves: the test setup only."""
        if not self.is_test_setup:
            raise InvalidParameters(f"{self.root} holds one server's half: a device merges its two halves itself "
                                    "('secemb credentials merge')")
        users = list(users)
        return [merge_halves(a, b) for a, b in zip(self.issue(0, users), self.issue(1, users), strict=True)]

    def add_devices(self, users: Iterable[int], out: Path | None = None) -> list[Path]:
        """Write each device's half of this operator's server (``device-U.serverP.json``), or
        in the test setup each device's whole credentials (``device-U.json``), 0600, into
        ``out`` (default ``root/devices``, 0700); all checked before any file is written."""
        users = list(users)
        docs: list[tuple[str, DeviceHalf | DeviceCredentials]]
        if self.is_test_setup:
            docs = [(f"device-{c.user}.json", c) for c in self.devices(users)]
        else:
            docs = [(f"device-{h.user}.server{h.party}.json", h) for h in self.issue(self.parties[0], users)]
        out = Path(out) if out is not None else self.root / "devices"
        out.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(out, 0o700)
        return [c.save(out / name) for name, c in docs]


def peer_secret(own_key: bytes, peer_public: bytes, party: int) -> bytes:
    """The 32-byte secret that signs the two servers' calls to each other, as server ``party``
    computes it from its X25519 private key ``own_key`` and the peer's public key: HKDF-SHA256
    of the X25519 shared secret, ``info`` = ``_PEER_INFO`` || server 0's public key || server
    1's.  Both servers compute the same bytes; anyone without one of the private keys cannot.

    Raises
    ------
    InvalidParameters
        A key is not 32 bytes or the peer's is a low-order point (no shared secret).
    """
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    _check_party(party)
    try:
        own = X25519PrivateKey.from_private_bytes(own_key)
        shared = own.exchange(X25519PublicKey.from_public_bytes(peer_public))
    except ValueError as exc:
        raise InvalidParameters(f"the peer's exchange key is unusable: {exc}") from None
    mine = own.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    pubs = (mine, peer_public) if party == 0 else (peer_public, mine)
    return HKDF(hashes.SHA256(), 32, salt=None, info=_PEER_INFO + pubs[0] + pubs[1]).derive(shared)


def _url(host: str, port: int) -> str:
    return f"https://{f'[{host}]' if ':' in host else host}:{port}"


def init_half(root: str | os.PathLike, party: int, hosts: Sequence[str], *, port: int = 8700,
              **settings: Any) -> Deployment:
    """Create server ``party``'s half in ``root``: its own CA and certificate (for ``hosts``;
    it listens on ``hosts[0]:port``), fresh admin and device-key secrets, an X25519 exchange
    key, its configuration without the peer's fields, its operator's file and the public file
    for the other operator.  ``settings``: the remaining
    :class:`~secemb.server.config.ServerConfig` fields (model, protocol, training, rounds;
    ``num_items`` and ``num_users`` at least), which both operators must give alike.

    Raises
    ------
    InvalidParameters
        ``root`` already holds a half (nothing is replaced), or a setting is invalid (checked
        before any file is written).
    """
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

    _check_party(party)
    root = Path(root).absolute()
    if isinstance(hosts, str) or not hosts:
        raise InvalidParameters(f"hosts: give server {party} at least one host, got {hosts!r}")
    if any((root / name).exists() for name in (_OPERATOR, _HALF, _TEST_SETUP, "tls")):
        raise InvalidParameters(f"{root} already holds a deployment: refusing to replace it (use a fresh directory)")
    pki, admin = TlsFiles(root / "tls"), secrets.token_bytes(32)
    cfg = ServerConfig(party=party, host=hosts[0], port=int(port), state_dir=root / "state", admin_secret=admin,
                       user_secret=secrets.token_bytes(32), tls_cert=pki.cert(party), tls_key=pki.key(party),
                       **_PENDING, **settings)
    doc = config_document(cfg)
    del doc["server"]["peer_url"], doc["secrets"]["peer"]
    exchange = X25519PrivateKey.generate()
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(root, 0o700)
    init_pki(pki.root, party, hosts)
    write_private(root / _EXCHANGE, exchange.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption()).hex()
                  .encode())
    write_private(root / _HALF, json.dumps(doc, indent=2, allow_nan=False).encode())
    url = _url(hosts[0], int(port))
    write_private(root / _OPERATOR, json.dumps({"format": _FORMAT, "party": party, "url": url, "admin": admin.hex(),
                                                "ca": str(pki.ca)}, indent=2, allow_nan=False).encode())
    public = {"format": _FORMAT, "kind": _PUBLIC_KIND, "party": party, "url": url, "ca": pki.ca.read_text(),
              "exchange_key": exchange.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex(),
              "settings_sha256": cfg.fingerprint()}
    (root / _PUBLIC).write_text(json.dumps(public, indent=2, allow_nan=False) + "\n")
    return Deployment(root)


def public_sha256(path: str | os.PathLike) -> str:
    """SHA-256 of a public file's bytes (what the operators read out to each other; ``sha256sum``)."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError as exc:
        raise InvalidParameters(f"{path}: {exc}") from None


def _peer_public(path: Path, party: int) -> tuple[str, str, bytes, str]:
    """``(url, ca_pem, exchange_key, settings_sha256)`` of the other server's public file at
    ``path``, as server ``party``'s operator receives it.

    Raises
    ------
    InvalidParameters
        Unreadable, not a public file, not the other server's, or a field malformed.
    """
    from cryptography import x509

    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InvalidParameters(f"--peer {path}: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != _FORMAT or doc.get("kind") != _PUBLIC_KIND:
        raise InvalidParameters(f"--peer {path}: not a server's {_PUBLIC} (from 'secemb admin init --party')")
    if doc.get("party") != 1 - party:
        raise InvalidParameters(f"--peer {path}: server {doc.get('party')!r}'s public file; server {party} pairs "
                                f"with server {1 - party}'s")
    try:
        url, pem, key, sha = doc["url"], doc["ca"], bytes.fromhex(doc["exchange_key"]), doc["settings_sha256"]
        if not (isinstance(url, str) and url.startswith("https://")):
            raise ValueError(f"url must be an https:// URL, got {url!r}")
        if len(key) != 32 or not isinstance(sha, str):
            raise ValueError("exchange_key must be 32 bytes of hex and settings_sha256 a string")
        ca = x509.load_pem_x509_certificate(pem.encode())
        if not ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca:
            raise ValueError("ca is not a CA certificate")
    except (KeyError, TypeError, ValueError, AttributeError, x509.ExtensionNotFound) as exc:
        raise InvalidParameters(f"--peer {path}: {type(exc).__name__}: {exc}") from None
    return url, pem, key, sha


def pair(root: str | os.PathLike, peer_public: str | os.PathLike) -> Path:
    """Complete the half in ``root`` with the other server's public file: keep its CA
    certificate (``peer-ca.pem``, the only CA this server trusts for its peer), agree on the
    peer secret (:func:`peer_secret`) and write this server's whole configuration; return its
    path.

    Raises
    ------
    InvalidParameters
        ``root`` is not one operator's unpaired half, the public file is not the other
        server's, or the two halves' shared settings differ (their SHA-256s in the message);
        nothing is written then.
    """
    dep = Deployment(Path(root).absolute())
    if dep.is_test_setup:
        raise InvalidParameters(f"{root} is the test setup: its halves are paired already")
    party = dep.parties[0]
    if dep.config_path(party).exists():
        raise InvalidParameters(f"{dep.config_path(party)} exists: this half is paired already")
    url, pem, key, sha = _peer_public(Path(peer_public), party)
    try:
        own = bytes.fromhex((dep.root / _EXCHANGE).read_text().strip())
    except (OSError, ValueError) as exc:
        raise InvalidParameters(f"{dep.root / _EXCHANGE}: {exc}") from None
    cfg = load_config(dep.root / _HALF, peer_url=url, peer_secret=peer_secret(own, key, party),
                      tls_ca=dep.peer_ca(party))
    if cfg.fingerprint() != sha:
        raise InvalidParameters(f"the two servers' shared settings differ (this half's SHA-256 {cfg.fingerprint()}, "
                                f"the peer's {sha}): both operators must give the same model, sizes, protocol and "
                                f"training settings")
    dep.peer_ca(party).write_text(pem)
    write_private(dep.config_path(party), json.dumps(config_document(cfg), indent=2, allow_nan=False).encode())
    return dep.config_path(party)


def init_deployment(root: str | os.PathLike, hosts: Sequence[Sequence[str]], *, ports: Sequence[int] = (8700, 8701),
                    **settings: Any) -> Deployment:
    """The **test setup**: both halves in ``root/server0`` and ``root/server1`` (server ``p``
    for ``hosts[p]``, on ``ports[p]``; :func:`init_half`), paired with each other
    (:func:`pair`), ``root`` marked ``TEST-SETUP.txt``.  One person then holds both servers'
    secrets: for local tests and demos only.

    Raises
    ------
    InvalidParameters
        ``root`` already holds a deployment (nothing is replaced), or a setting is invalid.
    """
    root = Path(root).absolute()
    if len(hosts) != 2 or len(ports) != 2:
        raise InvalidParameters(f"give two servers' hosts and ports, got {hosts!r} and {ports!r}")
    if any((root / name).exists() for name in (_TEST_SETUP, _OPERATOR, "server0", "server1")):
        raise InvalidParameters(f"{root} already holds a deployment: refusing to replace it (use a fresh directory)")
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(root, 0o700)
    halves = [init_half(root / f"server{p}", p, hosts[p], port=ports[p], **settings) for p in (0, 1)]
    for p in (0, 1):
        pair(halves[p].root, halves[1 - p].public_path(1 - p))
    (root / _TEST_SETUP).write_text(
        "TEST SETUP: one person created both servers' halves (server0/, server1/), so whoever holds this\n"
        "directory can act as a device, the operator and the CA at both servers. For local tests and demos\n"
        "only; a deployment has two operators, each with its own half (docs/deployment.md,\n"
        "'Two operators, two halves').\n")
    return Deployment(root)
