"""A server builds a feature model (FM, DeepFM) from the operator's public item-features file."""

import json

import numpy as np
import pytest

from secemb.data.features import load_item_features, save_item_features, synthetic_features
from secemb.errors import InvalidParameters
from secemb.models import get_model
from secemb.server.config import ServerConfig, config_document, load_config

_KEYS = dict(party=0, peer_url="http://127.0.0.1:1", peer_secret="11" * 32, admin_secret="22" * 32,
             user_secret="33" * 32)


def _cfg(tmp_path, **kw):
    return ServerConfig(state_dir=tmp_path, **(_KEYS | kw))


def test_item_features_file_keeps_the_public_part_only(tmp_path):
    feats = synthetic_features("ml-100k", 6, 15, seed=2)
    loaded = load_item_features(save_item_features(tmp_path / "f.npz", feats))
    assert np.array_equal(loaded.item, feats.item) and loaded.item.dtype == np.uint8
    assert loaded.user.shape == (0, 84)  # l_x known, no user's values
    assert loaded.item_names == feats.item_names and loaded.user_names == feats.user_names
    with np.load(tmp_path / "f.npz") as z:
        assert "user" not in z.files


def test_server_builds_fm_with_the_clients_table_and_dense_layout(tmp_path):
    feats = synthetic_features("ml-100k", 6, 15, seed=2)
    client = get_model("fm", dim=4, reg=0.1, features=feats)
    path = save_item_features(tmp_path / "f.npz", feats)
    cfg = _cfg(tmp_path, num_items=15, num_users=6, model="fm", model_hparams=client.spec(), item_features=str(path))
    server = cfg.make_model()
    assert server.hparams() == client.hparams() and server.dense_size == client.dense_size
    a, b = client.init_public(15, np.random.default_rng(0)), server.init_public(15, np.random.default_rng(0))
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    # the config file carries the path and reads back equal
    (tmp_path / "c.json").write_text(json.dumps(config_document(cfg)))
    assert load_config(tmp_path / "c.json") == cfg
    assert "item_features_sha256" in cfg.shared_doc()


def test_server_config_refuses_bad_item_features(tmp_path):
    feats = synthetic_features("ml-100k", 6, 15, seed=2)
    path = save_item_features(tmp_path / "f.npz", feats)
    with pytest.raises(InvalidParameters, match="cover 15 items, num_items is 16"):
        _cfg(tmp_path, num_items=16, num_users=6, model="fm", item_features=path)
    with pytest.raises(InvalidParameters, match="cannot read item features"):
        _cfg(tmp_path, num_items=15, num_users=6, model="fm", item_features=tmp_path / "missing.npz")
    np.savez(tmp_path / "other.npz", item=feats.item)
    with pytest.raises(InvalidParameters, match="format must be 'secemb-item-features-v1'"):
        _cfg(tmp_path, num_items=15, num_users=6, model="fm", item_features=tmp_path / "other.npz")


def test_servers_with_different_feature_files_disagree(tmp_path):
    a = save_item_features(tmp_path / "a.npz", synthetic_features("ml-100k", 6, 15, seed=2))
    b = save_item_features(tmp_path / "b.npz", synthetic_features("ml-100k", 6, 15, seed=3))
    common = dict(num_items=15, num_users=6, model="fm")
    assert _cfg(tmp_path, item_features=a, **common).fingerprint() != _cfg(tmp_path, item_features=b, **common).fingerprint()
