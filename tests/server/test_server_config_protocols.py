"""A server process runs only protocols that declare themselves networked, with options their
capabilities allow (issue 11: the config accepted protocols it cannot serve)."""

from __future__ import annotations

import pytest

from secemb.errors import InvalidParameters
from secemb.server.config import ServerConfig
from secemb.server.node import make_node

_BASE = dict(party=0, peer_url="http://127.0.0.1:1", peer_secret="11" * 32, admin_secret="22" * 32,
             user_secret="33" * 32, num_items=50, num_users=20)


def _cfg(tmp_path, **kw) -> ServerConfig:
    return ServerConfig(state_dir=tmp_path, **(_BASE | kw))


@pytest.mark.parametrize("name", ["quant8", "ternary"])
def test_protocols_not_networked_are_refused(tmp_path, name):
    cfg = _cfg(tmp_path, protocol=name, layout="full", relay=False)  # in-process runs build it too
    with pytest.raises(InvalidParameters, match=f"protocol '{name}' does not run in the server deployment"):
        make_node(cfg)
    assert not any(tmp_path.iterdir())  # refused before any state was written


@pytest.mark.parametrize("name", ["secfedrec", "grec", "secemb-init", "secemb-rowenc", "svd", "colr", "plaintext"])
def test_networked_baselines_are_accepted(tmp_path, name):
    assert _cfg(tmp_path, protocol=name, layout="full", relay=False).make_protocol().capabilities.networked


def test_unsupported_options_are_refused(tmp_path):
    with pytest.raises(InvalidParameters, match="does not support relay=True"):
        _cfg(tmp_path, protocol="secfedrec", layout="full", relay=True)
    with pytest.raises(InvalidParameters, match="does not support layout='cuckoo'"):
        _cfg(tmp_path, protocol="secemb-init", layout="cuckoo", relay=False)
