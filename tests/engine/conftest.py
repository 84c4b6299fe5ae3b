"""The example protocol plug-in (examples/protocol_plugin), installed for a test the way pip
installs it: its module and a ``.dist-info`` with the ``secemb.protocols`` entry point on the
path of this process and of the server processes it starts."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from secemb.protocols import available_protocols, load_plugins, unregister_protocol

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "protocol_plugin" / "secemb_fulldownload.py"


@pytest.fixture
def fulldownload_plugin(tmp_path, monkeypatch):
    site = tmp_path / "site"
    dist = site / "secemb_fulldownload-0.1.0.dist-info"
    dist.mkdir(parents=True)
    shutil.copy(EXAMPLE, site / EXAMPLE.name)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: secemb-fulldownload\nVersion: 0.1.0\n")
    (dist / "entry_points.txt").write_text("[secemb.protocols]\nfulldownload = secemb_fulldownload\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    monkeypatch.syspath_prepend(str(site))
    assert "fulldownload" not in available_protocols()
    load_plugins()
    assert "fulldownload" in available_protocols()
    yield "fulldownload"
    unregister_protocol("fulldownload")
    sys.modules.pop("secemb_fulldownload", None)
