"""Issue 33, "One operator holds both servers' secrets": each server's operator creates and keeps
its own half (secemb.server.deploy), a device enrols with each server separately and merges
its two halves (secemb.transport.credentials).

The red team's attack: whoever ran ``secemb admin init`` held both servers' device-key
secrets, forged devices at both servers, and those devices (uploading zeros) passed the floor
beside one victim.  The property tested here: nothing in one operator's half -- every byte of
every file in its directory, and every device key derivable from any secret in it -- signs a
request the other server accepts as a device or as its operator, and no certificate that
operator's CA issues is trusted for the other server.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from secemb.cli import app
from secemb.transport.credentials import DeviceCredentials, DeviceHalf, merge_halves
from secemb.errors import InvalidParameters
from secemb.server.auth import AuthError, Verifier
from secemb.server.deploy import Deployment, init_half, pair
from secemb.server.tls import client_context
from secemb.transport.signing import sign_headers, user_key

runner = CliRunner()
SETTINGS: dict[str, Any] = {"num_items": 20, "num_users": 5, "model": "mf"}
USERS = range(5)


def _two_operators(tmp_path: Path, **settings1: Any) -> tuple[Deployment, Deployment]:
    """Two halves created apart (``op0``, ``op1``), as two operators would, and paired through
    their public files only."""
    halves = (init_half(tmp_path / "op0", 0, ["127.0.0.1"], port=9100, **SETTINGS),
              init_half(tmp_path / "op1", 1, ["127.0.0.1"], port=9101, **(SETTINGS | settings1)))
    for p in (0, 1):
        pair(halves[p].root, halves[1 - p].public_path(1 - p))
    return halves


def _everything_in(half: Deployment) -> tuple[bytes, list[bytes]]:
    """All bytes of all files under ``half``'s directory, and every hex token of >= 16 bytes
    in them (every secret the half holds, whatever file holds it)."""
    blob = b"\n".join(p.read_bytes() for p in sorted(half.root.rglob("*")) if p.is_file())
    tokens = {bytes.fromhex(t.decode()) for t in re.findall(rb"[0-9a-f]{32,}", blob) if len(t) % 2 == 0}
    return blob, sorted(tokens)


def _accepted(verifier: Verifier, key_id: str, key: bytes) -> bool:
    headers = sign_headers(key_id, key, "GET", "/v1/round")
    try:
        verifier.verify(headers, "GET", "/v1/round", "", b"")
    except AuthError:
        return False
    return True


def test_one_operator_cannot_forge_devices_at_both_servers(tmp_path):
    halves = _two_operators(tmp_path)
    cfgs = [h.config(p) for p, h in enumerate(halves)]
    for p in (0, 1):
        q = 1 - p
        blob, tokens = _everything_in(halves[p])
        # none of the other server's own secrets is anywhere in this half
        other_secrets = [cfgs[q].user_secret.hex(), cfgs[q].admin_secret.hex(),
                         (halves[q].root / "exchange.key").read_text().strip()]
        other_keys = [halves[q].pki(q).key(q).read_bytes(), (halves[q].pki(q).root / "ca-key.pem").read_bytes()]
        for secret in other_secrets:
            assert secret.encode() not in blob
        for pem in other_keys:
            assert pem not in blob
        # every key this operator can sign with, or derive a device key from, is refused by the other server
        candidates = tokens + [user_key(t, u) for t in tokens for u in USERS]
        other = Verifier(q, cfgs[q].peer_secret, cfgs[q].admin_secret, cfgs[q].user_secret, cfgs[q].num_users)
        own = Verifier(p, cfgs[p].peer_secret, cfgs[p].admin_secret, cfgs[p].user_secret, cfgs[p].num_users)
        for u in USERS:
            assert not any(_accepted(other, f"user:{u}", k) for k in candidates), (p, u)
            assert any(_accepted(own, f"user:{u}", k) for k in candidates), (p, u)  # the search is not vacuous
        assert not any(_accepted(other, "admin", k) for k in candidates)
        # the device's half issued by the other operator is what that server accepts
        [half] = halves[q].issue(q, [3])
        assert _accepted(other, "user:3", half.key) and not _accepted(own, "user:3", half.key)
        # each server trusts only the other operator's CA for its peer, and its configuration says so
        assert cfgs[p].tls_ca == halves[p].peer_ca(p)
        assert halves[p].peer_ca(p).read_bytes() == halves[q].pki(q).ca.read_bytes()
    # the peer secret both compute from the public files alone is the same, and in neither public file
    assert cfgs[0].peer_secret == cfgs[1].peer_secret
    for h, p in zip(halves, (0, 1), strict=True):
        assert cfgs[0].peer_secret.hex().encode() not in h.public_path(p).read_bytes()


def test_one_operator_cannot_forge_devices_at_both_servers_end_to_end(tmp_path):
    """Against a LocalCluster (both halves, each its own CA): a device enrols with each server
    through that server's operator's half and merges the halves; what server 0's operator can
    make from its half is refused at server 1, and its CA is not trusted for server 1."""
    from secemb.sim.cluster import LocalCluster

    with LocalCluster(tmp_path / "c", min_users=2, **SETTINGS) as cluster:
        cluster.start()
        halves = [tmp_path / "c" / f"server{p}" for p in (0, 1)]
        for p in (0, 1):  # each operator issues its own half, from its own directory only
            res = runner.invoke(app, ["admin", "add-devices", "--deployment", str(halves[p]), "--users", "3",
                                      "--out", str(tmp_path / f"from{p}")])
            assert res.exit_code == 0, res.output
        files = [tmp_path / f"from{p}" / f"device-3.server{p}.json" for p in (0, 1)]
        res = runner.invoke(app, ["credentials", "merge", str(files[1]), str(files[0]), "--out",
                                  str(tmp_path / "device-3.json")])
        assert res.exit_code == 0, res.output
        creds = DeviceCredentials.load(tmp_path / "device-3.json")
        assert creds.user == 3 and creds.urls == (cluster.url(0), cluster.url(1))
        assert creds.cas == (cluster.pki[0].ca, cluster.pki[1].ca)

        def status(party: int, key: bytes, ca: Path, key_id: str = "user:3") -> int:
            headers = sign_headers(key_id, key, "GET", "/v1/round")
            return httpx.get(cluster.url(party) + "/v1/round", headers=headers, verify=client_context(ca),
                             trust_env=False, timeout=30).status_code

        for p in (0, 1):  # the merged credentials work at both servers, each pinned to its own CA
            assert status(p, creds.keys[p], creds.cas[p]) not in (401, 403)
        # server 0's operator's tries at server 1: its half's key, a key from its device-key secret, its admin secret
        cfg0 = Deployment(halves[0]).config(0)
        for forged in (creds.keys[0], user_key(cfg0.user_secret, 3), cfg0.admin_secret):
            assert status(1, forged, creds.cas[1]) == 401
        assert status(1, cfg0.admin_secret, creds.cas[1], "admin") == 401
        # and server 0's CA does not vouch for server 1 (nor server 1's for server 0)
        for p in (0, 1):
            with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                status(p, creds.keys[p], creds.cas[1 - p])


def test_two_operators_set_up_their_halves_separately_through_the_cli(tmp_path):
    ops = [tmp_path / "op0", tmp_path / "op1"]
    for p in (0, 1):
        res = runner.invoke(app, ["admin", "init", "--party", str(p), "--out", str(ops[p]), f"--host{p}", "127.0.0.1",
                                  "--num-items", "20", "--num-users", "5", f"--port{p}", str(9100 + p)])
        assert res.exit_code == 0, res.output
        assert "SHA-256" in res.output and "secemb admin pair" in res.output
        assert not (ops[p] / f"server{1 - p}.json").exists() and not (ops[p] / f"server{p}.json").exists()
        for name in ("half.json", "operator.json", "exchange.key", "tls/ca-key.pem", f"tls/server{p}-key.pem"):
            assert (ops[p] / name).stat().st_mode & 0o077 == 0, name
    # a half not yet paired serves nothing and issues nothing
    res = runner.invoke(app, ["admin", "add-devices", "--deployment", str(ops[0]), "--users", "1"])
    assert res.exit_code == 2 and "not paired yet" in res.output
    # an operator may not pair with its own public file, nor act for the other server
    res = runner.invoke(app, ["admin", "pair", "--deployment", str(ops[0]), "--peer", str(ops[0] / "public.json")])
    assert res.exit_code == 2 and "pairs with server 1's" in res.output
    for p in (0, 1):
        res = runner.invoke(app, ["admin", "pair", "--deployment", str(ops[p]), "--peer",
                                  str(ops[1 - p] / "public.json")])
        assert res.exit_code == 0, res.output
        assert json.loads(res.output)["config"] == str(ops[p] / f"server{p}.json")
    with pytest.raises(InvalidParameters, match="holds server 0's half only"):
        Deployment(ops[0]).admin(1)
    res = runner.invoke(app, ["admin", "add-devices", "--deployment", str(ops[1]), "--users", "2"])
    assert res.exit_code == 0, res.output
    [written] = json.loads(res.output)["written"]
    half = DeviceHalf.load(written)
    assert (half.party, half.user, half.url) == (1, 2, "https://127.0.0.1:9101")
    with pytest.raises(InvalidParameters, match="one server's half only"):
        DeviceCredentials.load(written)
    # two halves of one server do not make credentials
    res = runner.invoke(app, ["credentials", "merge", written, written, "--out", str(tmp_path / "x.json")])
    assert res.exit_code == 2 and "one half of each server" in res.output
    assert not (tmp_path / "x.json").exists()


def test_halves_whose_shared_settings_differ_are_not_paired(tmp_path):
    a = init_half(tmp_path / "op0", 0, ["127.0.0.1"], **SETTINGS)
    b = init_half(tmp_path / "op1", 1, ["127.0.0.1"], **(SETTINGS | {"num_items": 21}))
    with pytest.raises(InvalidParameters, match="shared settings differ"):
        pair(a.root, b.public_path(1))
    assert not a.config_path(0).exists() and not a.peer_ca(0).exists()


def test_merge_refuses_halves_of_two_users_or_two_models(tmp_path):
    k = b"k" * 32
    h0 = DeviceHalf(0, 3, "https://a:1", k, None, {"name": "mf", "hparams": {}})
    with pytest.raises(InvalidParameters, match="disagree on user"):
        merge_halves(h0, DeviceHalf(1, 4, "https://b:2", k, None, {"name": "mf", "hparams": {}}))
    with pytest.raises(InvalidParameters, match="disagree on model"):
        merge_halves(h0, DeviceHalf(1, 3, "https://b:2", k, None, {"name": "ncf", "hparams": {}}))
    merged = merge_halves(DeviceHalf(1, 3, "https://b:2", b"l" * 32, Path("/ca1"), h0.model), h0)
    assert merged.urls == ("https://a:1", "https://b:2") and merged.keys == (k, b"l" * 32)
    assert merged.cas == (None, Path("/ca1"))

