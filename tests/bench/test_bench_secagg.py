"""secemb bench secagg: a smoke run whose byte counts match the documented message layouts."""

from __future__ import annotations

from typer.testing import CliRunner

from secemb.bench import secagg
from secemb.cli import app


def test_psu_bytes_match_the_message_layouts():
    n, domain = 7, 300
    row = secagg.psu_costs(n, domain, 10, dropout=0.3)  # 2 clients drop after ShareKeys
    t, live, dropped = row["threshold"], n - 2, 2
    assert t == 4
    header = 32  # the framing header (docs/wire-format.md)
    upload = ((header + 64)  # advertise: two X25519 public keys
              + (header + 4 + (n - 1) * (4 + 8 + 2 * 33 + 16))  # shares: id + AES-GCM(ids, 2 shares) + tag
              + (header + 4 * domain)  # masked Bloom vector
              + (header + 4 + dropped * (4 + 33) + 4 + live * (4 + 33)))  # unmask
    assert row["client_upload_bytes"] == upload
    union = header + 4 + 4 * row["union"]
    download = ((header + 4 + n * (4 + 64))  # keys of all n
                + (header + 4 + (n - 1) * (4 + 8 + 2 * 33 + 16))  # relayed shares from the other n - 1
                + (header + 4 + 4 * live)  # survivors
                + union)
    assert row["client_download_bytes"] == download
    assert row["union"] <= live * 10


def test_cli_quick(tmp_path):
    out = tmp_path / "s.json"
    res = CliRunner().invoke(app, ["bench", "secagg", "--quick", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert out.is_file()
    bad = CliRunner().invoke(app, ["bench", "secagg", "--ns", "x", "--out", str(out)])
    assert bad.exit_code == 2
