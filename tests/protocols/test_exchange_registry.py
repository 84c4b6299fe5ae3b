"""One-server protocols in the registry (secemb.protocols.exchange): registered with their shape,
built by get_protocol with their run, dispatched on by `secemb train` / `secemb demo`, listed in the
CLI's help; the example plug-in's one-server protocol (examples/protocol_plugin/secemb_itemmean.py)
trains through `secemb train --protocol itemmean` and `secemb demo --network` to the same model."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from secemb.cli import app
from secemb.errors import InvalidParameters
from secemb.protocols import (
    available_protocols,
    exchange_class,
    get_protocol,
    protocol_class,
    protocol_servers,
    register_protocol,
    unregister_protocol,
)
from secemb.protocols.exchange import ExchangeRun
from secemb.protocols.plaintext import PlaintextProtocol
from secemb.protocols.sfsl.protocol import SFSLProtocol

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "protocol_plugin" / "secemb_itemmean.py"


@pytest.fixture
def itemmean():
    """The example plug-in's module imported as an installed plug-in would be (it registers itself)."""
    spec = importlib.util.spec_from_file_location("secemb_itemmean", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["secemb_itemmean"] = module
    spec.loader.exec_module(module)
    yield module
    unregister_protocol("itemmean")
    sys.modules.pop("secemb_itemmean", None)


def test_the_shape_is_registered_and_dispatched_on_without_importing():
    assert protocol_servers("sfsl") == 1 and protocol_servers("secemb") == 2
    assert "sfsl" in available_protocols(1) and "sfsl" not in available_protocols(2)
    assert exchange_class("sfsl") is SFSLProtocol
    with pytest.raises(InvalidParameters, match="has one server"):
        get_protocol("sfsl")
    with pytest.raises(InvalidParameters, match="has one server"):
        protocol_class("sfsl")
    with pytest.raises(InvalidParameters, match="has two servers"):
        exchange_class("plaintext")
    with pytest.raises(InvalidParameters, match="unknown protocol"):
        protocol_servers("no-such")


def test_get_protocol_builds_a_one_server_protocol_and_checks_options():
    run = ExchangeRun("taobao-mini", users_per_round=5)
    proto = get_protocol("sfsl", run=run, sfsl_preset="cpp1", lr=0.5)
    assert isinstance(proto, SFSLProtocol) and proto.sfsl_preset == "CPP1" and proto.lr == 0.5
    assert proto.spec() == {"sfsl_preset": "CPP1", "model": "din", "metrics": "auc", "lr": 0.5, "dim": 18, "batch": 2,
                            "min_row_holders": 2}
    with pytest.raises(InvalidParameters, match="has no option 'layout'"):
        get_protocol("sfsl", run=run, layout="full")
    with pytest.raises(InvalidParameters, match="CPP9"):
        get_protocol("sfsl", run=run, sfsl_preset="CPP9")
    with pytest.raises(InvalidParameters, match="users_per_round"):
        ExchangeRun("taobao-mini", users_per_round=0)
    # the shape is read from the registry: a run is what a one-server protocol is built with, never a two-server one
    with pytest.raises(InvalidParameters, match="'plaintext' has two servers: it takes no run"):
        get_protocol("plaintext", run=run)
    with pytest.raises(InvalidParameters, match="'secea' has one server: build it with its run"):
        get_protocol("secea", secea_items=4)
    with pytest.raises(InvalidParameters, match=r"'sfsl' has one server: build it with its run, .*got run=dict$"):
        get_protocol("sfsl", run={"dataset": "taobao-mini"})  # AttributeError (run.dataset) before


def test_register_checks_the_shape():
    with pytest.raises(InvalidParameters, match="ExchangeProtocol subclass"):
        register_protocol("wrong-shape", PlaintextProtocol, wire_id=230, servers=1)
    with pytest.raises(InvalidParameters, match="Protocol subclass"):
        register_protocol("wrong-shape", SFSLProtocol, wire_id=230)
    with pytest.raises(InvalidParameters, match="servers"):
        register_protocol("wrong-shape", SFSLProtocol, wire_id=230, servers=3)
    assert "wrong-shape" not in available_protocols()


def test_protocol_help_comes_from_the_registry(itemmean):
    for cmd in ("train", "demo"):
        out = " ".join(CliRunner().invoke(app, [cmd, "--help"]).output.split())
        one = out[out.index("One server"):]
        assert "sfsl" in one and "itemmean" in one and "secea" in one, out


def test_a_plugin_one_server_protocol_trains_through_secemb_train(itemmean, tmp_path):
    out = tmp_path / "r.json"
    res = CliRunner().invoke(app, ["train", "--protocol", "itemmean", "--dataset", "synthetic", "--epochs", "2",
                                   "--users-per-round", "50", "--lr", "1", "--quiet", "--json-out", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["config"]["protocol"] == "itemmean" and doc["config"]["servers"] == 1
    rmse = [e["test_metrics"]["rmse"] for e in doc["epochs"]]
    assert len(rmse) == 2 and rmse[1] < rmse[0]
    # a device's upload is 16 bytes per item (the residual sums and counts), its download 8 per item
    from secemb.data import load_dataset

    m = load_dataset("synthetic", seed=0).num_items
    assert doc["comm"]["upload_bytes_per_user_round"] == 16 * m
    assert doc["comm"]["download_bytes_per_user_round"] == 8 * m
    # options it does not take are refused, exit 2
    bad = CliRunner().invoke(app, ["train", "--protocol", "itemmean", "--dim", "4"])
    assert bad.exit_code == 2 and "does not take --dim" in bad.output


def test_plugin_network_run_is_its_in_process_run(itemmean, tmp_path):
    shas = []
    for i, cmd in enumerate((["train"], ["demo", "--network"])):
        out = tmp_path / f"r{i}.json"
        res = CliRunner().invoke(app, [*cmd, "--protocol", "itemmean", "--dataset", "synthetic", "--epochs", "1",
                                       "--users-per-round", "100", "--quiet", "--json-out", str(out)])
        assert res.exit_code == 0, res.output
        shas.append(json.loads(out.read_text())["model_sha256"])
    assert shas[0] == shas[1]


def test_plugin_node_refuses_bad_messages_and_changes_nothing(itemmean):
    from secemb.errors import InvalidMessage, ProtocolError

    node = itemmean.ItemMeanNode(4, 1.0)
    node.open_round(1, [0, 1])
    with pytest.raises(InvalidMessage):
        node.receive(1, "itemmean-model", 0, b"x")
    with pytest.raises(ProtocolError):
        node.receive(1, "itemmean-upload", 0, b"")
    node.receive(1, "itemmean-model", 0, b"")
    node.close(1, "itemmean-model")
    with pytest.raises(InvalidMessage):
        node.receive(1, "itemmean-upload", 0, np.full(8, np.nan).tobytes())
    assert np.array_equal(node.means, np.zeros(4))
