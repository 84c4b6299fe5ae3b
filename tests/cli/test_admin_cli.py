"""``secemb admin init``: the deployment's private CA and both servers' certificates, keys
0600, the [tls] sections printed; an existing CA is never replaced (exit 2)."""

from __future__ import annotations

import stat

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from typer.testing import CliRunner

from secemb.cli import app

runner = CliRunner()


def test_admin_init_writes_a_ca_and_server_certificates_it_signed(tmp_path):
    out = tmp_path / "pki"
    res = runner.invoke(app, ["admin", "init", "--out", str(out), "--host0", "127.0.0.1", "--host0", "s0.example",
                              "--host1", "localhost"])
    assert res.exit_code == 0, res.output
    assert f'cert = "{out / "server1.pem"}"' in res.output and "[tls]" in res.output
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    ca = x509.load_pem_x509_certificate((out / "ca.pem").read_bytes())
    for party, names in ((0, {"127.0.0.1", "s0.example"}), (1, {"localhost"})):
        assert stat.S_IMODE((out / f"server{party}-key.pem").stat().st_mode) == 0o600
        cert = x509.load_pem_x509_certificate((out / f"server{party}.pem").read_bytes())
        assert cert.issuer == ca.subject
        ca.public_key().verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(cert.signature_hash_algorithm))
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert {str(v) for v in sans.get_values_for_type(x509.DNSName)} | {
            str(v) for v in sans.get_values_for_type(x509.IPAddress)} == names
    before = (out / "ca.pem").read_bytes()
    again = runner.invoke(app, ["admin", "init", "--out", str(out), "--host0", "a", "--host1", "b"])
    assert again.exit_code == 2 and "refusing to replace a CA" in again.output
    assert (out / "ca.pem").read_bytes() == before
