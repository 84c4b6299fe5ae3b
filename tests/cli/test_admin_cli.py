"""``secemb admin init`` without ``--party`` (the one-person test setup): each server's own
private CA and certificate, keys 0600, the [tls] sections printed (each server's ca: the
other's); an existing CA is never replaced (exit 2).  The two operators' own flow:
tests/server/test_operator_split.py."""

from __future__ import annotations

import stat

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from typer.testing import CliRunner

from secemb.cli import app
from secemb.transport.credentials import DeviceCredentials
from secemb.server.config import load_config
from secemb.transport.signing import user_key

runner = CliRunner()


def test_admin_init_writes_a_ca_and_server_certificates_it_signed(tmp_path):
    out = tmp_path / "pki"
    res = runner.invoke(app, ["admin", "init", "--out", str(out), "--host0", "127.0.0.1", "--host0", "s0.example",
                              "--host1", "localhost"])
    assert res.exit_code == 0, res.output
    assert f'cert = "{out / "server1" / "server1.pem"}"' in res.output and "[tls]" in res.output
    assert f'ca = "{out / "server1" / "ca.pem"}"\ncert = "{out / "server0" / "server0.pem"}"' in res.output
    cas = [x509.load_pem_x509_certificate((out / f"server{p}" / "ca.pem").read_bytes()) for p in (0, 1)]
    assert cas[0].subject != cas[1].subject
    for party, names in ((0, {"127.0.0.1", "s0.example"}), (1, {"localhost"})):
        half = out / f"server{party}"
        assert stat.S_IMODE(half.stat().st_mode) == 0o700
        assert stat.S_IMODE((half / f"server{party}-key.pem").stat().st_mode) == 0o600
        cert = x509.load_pem_x509_certificate((half / f"server{party}.pem").read_bytes())
        ca = cas[party]
        assert cert.issuer == ca.subject and cert.issuer != cas[1 - party].subject
        ca.public_key().verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(cert.signature_hash_algorithm))
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert {str(v) for v in sans.get_values_for_type(x509.DNSName)} | {
            str(v) for v in sans.get_values_for_type(x509.IPAddress)} == names
    before = (out / "server0" / "ca.pem").read_bytes()
    again = runner.invoke(app, ["admin", "init", "--out", str(out), "--host0", "a", "--host1", "b"])
    assert again.exit_code == 2 and "refusing to replace a CA" in again.output
    assert (out / "server0" / "ca.pem").read_bytes() == before


def test_admin_init_writes_a_whole_deployment_and_devices_get_their_own_keys_only(tmp_path):
    out = tmp_path / "dep"
    res = runner.invoke(app, ["admin", "init", "--out", str(out), "--host0", "127.0.0.1", "--host1", "127.0.0.1",
                              "--num-items", "50", "--num-users", "20", "--port0", "9100", "--port1", "9101"])
    assert res.exit_code == 0, res.output
    assert "https://127.0.0.1:9100" in res.output and "https://127.0.0.1:9101" in res.output
    assert "TEST SETUP" in res.output and (out / "TEST-SETUP.txt").is_file()
    for name in ("server0/server0.json", "server1/server1.json", "server0/operator.json", "server1/operator.json"):
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o600, name
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    cfgs = [load_config(out / f"server{p}" / f"server{p}.json") for p in (0, 1)]
    assert cfgs[0].peer_secret == cfgs[1].peer_secret
    assert cfgs[0].admin_secret != cfgs[1].admin_secret and cfgs[0].user_secret != cfgs[1].user_secret
    assert (cfgs[0].peer_url, cfgs[1].peer_url) == ("https://127.0.0.1:9101", "https://127.0.0.1:9100")
    assert not cfgs[0].insecure_http and cfgs[0].tls_ca == out / "server0" / "peer-ca.pem"
    assert cfgs[0].tls_ca.read_bytes() == (out / "server1" / "tls" / "ca.pem").read_bytes()

    res = runner.invoke(app, ["admin", "add-devices", "--deployment", str(out), "--users", "3-4,7"])
    assert res.exit_code == 0, res.output
    files = sorted((out / "devices").iterdir())
    assert [f.name for f in files] == ["device-3.json", "device-4.json", "device-7.json"]
    creds = DeviceCredentials.load(out / "devices" / "device-7.json")
    assert creds.user == 7 and creds.keys == (user_key(cfgs[0].user_secret, 7), user_key(cfgs[1].user_secret, 7))
    text = (out / "devices" / "device-7.json").read_text()
    for cfg in cfgs:  # no master secret in a device's file
        for secret in (cfg.peer_secret, cfg.admin_secret, cfg.user_secret):
            assert secret.hex() not in text
    assert stat.S_IMODE((out / "devices" / "device-7.json").stat().st_mode) == 0o600

    again = runner.invoke(app, ["admin", "init", "--out", str(out), "--host0", "a", "--host1", "b",
                                "--num-items", "5", "--num-users", "5"])
    assert again.exit_code == 2 and "refusing to replace" in again.output
    for bad in (["--users", "9-3"], ["--users", "x"], ["--users", "25"]):
        res = runner.invoke(app, ["admin", "add-devices", "--deployment", str(out), *bad])
        assert res.exit_code == 2, (bad, res.output)
    res = runner.invoke(app, ["admin", "status", "--deployment", str(tmp_path / "nothing")])
    assert res.exit_code == 2 and "not a deployment directory" in res.output
    res = runner.invoke(app, ["admin", "status", "--deployment", str(out)])  # nothing listens on 9100
    assert res.exit_code == 1, res.output
