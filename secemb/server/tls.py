"""TLS for the deployment: each server's own certificate authority and certificate, the
client contexts that pin them, and the server-side hook that hands the app the verified client
certificate of a connection (mutual TLS between the servers).

Each server's operator creates its own CA, which issues only that server's certificate
(:func:`init_pki`; ``secemb admin init --party P``), in one directory::

    ca.pem            the operator's CA certificate (public: the other operator's server and every
                      device pin it, for this server only)
    ca-key.pem        its key (0600; needed only to issue certificates, keep it offline)
    serverP.pem       server P's certificate: serverAuth for its own endpoints, and for server 0
    serverP-key.pem     also clientAuth (presented to server 1 on every peer call: mutual TLS); key 0600

Neither operator can issue a certificate the other server's clients accept: a device verifies
server ``P`` against server ``P``'s CA only, and each server verifies its peer against the
peer's CA only (its configuration's ``[tls] ca`` is the *peer's* ``ca.pem``).

Certificates carry the server's host names and addresses as subject alternative names; keys
are ECDSA P-256, signatures SHA-256, all from the ``cryptography`` package's x509 builder.
Server 1 asks every connection for a client certificate (optional, since devices have none)
and serves its ``/v1/peer/*`` endpoints only over a connection whose certificate server 0's CA
issued to ``server0`` (:data:`PEER_CN_SCOPE_KEY`).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from secemb.errors import InvalidParameters

__all__ = ["PEER_CN_SCOPE_KEY", "TlsFiles", "client_context", "init_pki", "server_context_kwargs",
           "write_private"]

#: the ASGI scope key under which the server puts the verified client certificate's common
#: name (``None``: no certificate)
PEER_CN_SCOPE_KEY = "secemb.client_cert_cn"
_VALID_DAYS = 825


@dataclass(frozen=True)
class TlsFiles:
    """The files of one PKI directory (:func:`init_pki`)."""

    root: Path

    @property
    def ca(self) -> Path:
        return self.root / "ca.pem"

    def cert(self, party: int) -> Path:
        return self.root / f"server{party}.pem"

    def key(self, party: int) -> Path:
        return self.root / f"server{party}-key.pem"


def write_private(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` readable by its owner only (0600 from the first byte)."""
    path = Path(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, data)
    finally:
        os.close(fd)


def _name(common_name: str) -> Any:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "secemb deployment"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _sans(hosts: Sequence[str]) -> list[Any]:
    from cryptography import x509

    out: list[Any] = []
    for h in hosts:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            out.append(x509.DNSName(h))
    return out


def init_pki(directory: str | os.PathLike, party: int, hosts: Sequence[str]) -> TlsFiles:
    """Create a private CA and server ``party``'s certificate, issued by it, in ``directory``
    (created, 0700; keys 0600).

    Parameters
    ----------
    party: 0 or 1; server 0's certificate is also valid for client authentication (mutual TLS
        on its calls to server 1).
    hosts: the host names and IP addresses the certificate is valid for.

    Raises
    ------
    InvalidParameters: ``directory`` already holds a CA (nothing is overwritten), ``party`` is
        not 0 or 1, or no host is given.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID

    files = TlsFiles(Path(directory))
    if party not in (0, 1):
        raise InvalidParameters(f"party must be 0 or 1, got {party!r}")
    if isinstance(hosts, str) or not hosts:
        raise InvalidParameters(f"hosts: give server {party} at least one host, got {hosts!r}")
    if files.ca.exists():
        raise InvalidParameters(f"{files.ca} exists: refusing to replace a CA (use a fresh directory)")
    files.root.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(files.root, 0o700)
    now = datetime.datetime.now(datetime.UTC)
    not_before, not_after = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=_VALID_DAYS)

    def pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(f"secemb server{party} CA")
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(not_before).not_valid_after(not_after)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                       crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    write_private(files.root / "ca-key.pem", pem_key(ca_key))
    files.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    key = ec.generate_private_key(ec.SECP256R1())
    usages = [ExtendedKeyUsageOID.SERVER_AUTH] + ([ExtendedKeyUsageOID.CLIENT_AUTH] if party == 0 else [])
    cert = (x509.CertificateBuilder().subject_name(_name(f"server{party}")).issuer_name(ca_name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(not_before).not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName(_sans(hosts)), critical=False)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .sign(ca_key, hashes.SHA256()))
    write_private(files.key(party), pem_key(key))
    files.cert(party).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return files


def client_context(ca_file: str | os.PathLike, cert_file: str | os.PathLike | None = None,
                   key_file: str | os.PathLike | None = None) -> ssl.SSLContext:
    """A client context that trusts only the CA in ``ca_file`` (host names checked) and, with
    ``cert_file``/``key_file``, presents that certificate (server 0 calling server 1).

    Raises
    ------
    InvalidParameters: a file is missing or not a certificate/key.
    """
    try:
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca_file))
        if cert_file is not None:
            ctx.load_cert_chain(str(cert_file), str(key_file) if key_file is not None else None)
    except (OSError, ssl.SSLError) as exc:
        raise InvalidParameters(f"TLS files {ca_file}, {cert_file}: {exc}") from None
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


def server_context_kwargs(ca_file: str | os.PathLike, cert_file: str | os.PathLike,
                          key_file: str | os.PathLike) -> dict[str, Any]:
    """uvicorn's TLS settings for a server: its certificate, and an optional client
    certificate checked against the CA (devices present none; server 0 presents its own)."""
    return {"ssl_certfile": str(cert_file), "ssl_keyfile": str(key_file), "ssl_ca_certs": str(ca_file),
            "ssl_cert_reqs": ssl.CERT_OPTIONAL}


def client_cert_cn(peercert: dict[str, Any] | None) -> str | None:
    """The common name of a verified client certificate (``ssl.SSLSocket.getpeercert()``
    form), ``None`` without one."""
    if not peercert:
        return None
    for rdn in peercert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None
