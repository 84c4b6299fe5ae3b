"""The protocol registry: wire ids registered with each protocol (unique, checked), lazy
imports, and options checked against each protocol's declared capabilities."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from secemb.errors import InvalidMessage, InvalidParameters, ProtocolError
from secemb.protocols import (
    PROTOCOLS,
    Capabilities,
    Protocol,
    available_protocols,
    get_protocol,
    protocol_class,
    register_protocol,
    unregister_protocol,
)
from secemb.protocols.base import LAYOUT_OPTIONS
from secemb.protocols.plaintext import PlaintextProtocol
from secemb.protocols.wire import frame, open_message

BUILTIN = ["colr", "dp-fedrec", "fedmf-topk", "grec", "kvsagg", "plaintext", "quant8", "secemb", "secemb-init",
           "secemb-rowenc", "secfedrec", "svd", "ternary"]
#: the built-in one-server protocols (secemb.protocols.exchange)
BUILTIN_ONE_SERVER = ["secea", "sfsl"]


@pytest.fixture
def scratch():
    """Names registered by a test, unregistered after it."""
    names: list[str] = []
    yield names
    for n in names:
        if n in PROTOCOLS:
            unregister_protocol(n)


def test_builtin_protocols_have_distinct_wire_ids():
    assert available_protocols(2) == BUILTIN and available_protocols(1) == BUILTIN_ONE_SERVER
    assert available_protocols() == sorted(BUILTIN + BUILTIN_ONE_SERVER)
    ids = [PROTOCOLS[n].wire_id for n in BUILTIN + BUILTIN_ONE_SERVER]
    assert len(set(ids)) == len(ids) and 0 not in ids


def test_dead_wire_ids_are_gone():
    # secaggmask, topksecagg, he-ckks build unframed messages (sparse_secagg): no ids
    for name in ("secaggmask", "topksecagg", "he-ckks"):
        assert name not in PROTOCOLS
        with pytest.raises(InvalidParameters, match="unknown protocol"):
            frame(name, "upload", 0, 0)


def test_unknown_and_unavailable_protocols(scratch):
    with pytest.raises(InvalidParameters, match="available"):
        get_protocol("nope")
    register_protocol("ghost", "secemb.protocols.ghost_module_that_does_not_exist:Ghost", wire_id=200)
    scratch.append("ghost")
    with pytest.raises(InvalidParameters, match="not available"):
        get_protocol("ghost")
    register_protocol("ghost2", "secemb.protocols.plaintext:NoSuchClass", wire_id=201)
    scratch.append("ghost2")
    with pytest.raises(InvalidParameters, match="has no Protocol class NoSuchClass"):
        get_protocol("ghost2")


def test_register_a_class_and_frame_under_its_wire_id(scratch):
    register_protocol("plain2", PlaintextProtocol, wire_id=202)
    scratch.append("plain2")
    assert isinstance(get_protocol("plain2", layout="cuckoo"), PlaintextProtocol)
    msg = frame("plain2", "upload", 0, 7, b"xy")
    assert msg[5] == 202 and len(msg) == 32 + 2  # the 32-byte header (docs/wire-format.md)
    assert bytes(open_message(msg, "plain2", "upload", 0, 7, 2)) == b"xy"
    with pytest.raises(InvalidMessage, match="protocol id 202, expected 1"):
        open_message(msg, "plaintext", "upload", 0, 7, 2)
    unregister_protocol("plain2")
    register_protocol("plain3", PlaintextProtocol, wire_id=202)  # the id is free again
    scratch.append("plain3")


def test_duplicate_name_raises_naming_both(scratch):
    with pytest.raises(InvalidParameters, match=r"'secemb' is already registered \(wire id 2\).*wire id 203"):
        register_protocol("secemb", PlaintextProtocol, wire_id=203)
    assert PROTOCOLS["secemb"].wire_id == 2


def test_duplicate_wire_id_raises_naming_both(scratch):
    with pytest.raises(InvalidParameters, match="wire id 16 of protocol 'mine' is already registered to protocol 'secfedrec'"):
        register_protocol("mine", PlaintextProtocol, wire_id=16)
    assert "mine" not in PROTOCOLS


@pytest.mark.parametrize("bad", [0, 256, -1, True, "3", None])
def test_wire_id_must_be_in_1_255(bad):
    # 0 is the round's own messages (model sync, dense vector, counts), never a protocol's
    with pytest.raises(InvalidParameters, match="wire_id"):
        register_protocol("bad-id", PlaintextProtocol, wire_id=bad)
    assert "bad-id" not in PROTOCOLS


@pytest.mark.parametrize("factory", ["no-colon", "a:b:c", lambda **opts: PlaintextProtocol(), PlaintextProtocol()])
def test_factory_must_be_a_protocol_class_or_lazy_string(factory):
    with pytest.raises(InvalidParameters, match="factory"):
        register_protocol("bad-factory", factory, wire_id=210)
    assert "bad-factory" not in PROTOCOLS


def test_unregister_unknown_raises():
    with pytest.raises(InvalidParameters, match="unknown protocol 'nope'"):
        unregister_protocol("nope")


def test_registry_is_read_only():
    with pytest.raises(TypeError):
        PROTOCOLS["x"] = PROTOCOLS["secemb"]  # type: ignore[index]


# ---------------------------------------------------------------- capabilities (issue 11, defect 3)


def test_secemb_init_with_cuckoo_layout_raises_naming_the_allowed_layouts():
    # regression: get_protocol('secemb-init', layout='cuckoo') silently ran the full layout
    with pytest.raises(InvalidParameters, match=r"'secemb-init' does not support layout='cuckoo'; allowed: \['full'\]"):
        get_protocol("secemb-init", layout="cuckoo")
    with pytest.raises(InvalidParameters, match="layout='cuckoo'"):
        get_protocol("secemb-rowenc", layout="cuckoo")


def test_secfedrec_with_relay_and_a_typo_option_raises():
    # regression: get_protocol('secfedrec', relay=True, typo_option=3) succeeded
    with pytest.raises(InvalidParameters, match=r"'secfedrec' has no option 'typo_option'; allowed: \["):
        get_protocol("secfedrec", relay=True, typo_option=3)
    with pytest.raises(InvalidParameters, match=r"'secfedrec' does not support relay=True; allowed: relay=False"):
        get_protocol("secfedrec", relay=True)


def test_secemb_with_a_typo_option_raises_invalid_parameters_not_type_error():
    # regression: get_protocol('secemb', typo_option=3) raised a bare TypeError
    with pytest.raises(InvalidParameters, match="'secemb' has no option 'typo_option'") as info:
        get_protocol("secemb", typo_option=3)
    assert "'backend'" in str(info.value) and "'layout'" in str(info.value)


@pytest.mark.parametrize("name", BUILTIN)
def test_relay_is_refused_unless_declared(name):
    caps = protocol_class(name).capabilities
    if caps.relay:
        assert get_protocol(name, relay=True).relay is True
    else:
        with pytest.raises(InvalidParameters, match="relay=True"):
            get_protocol(name, relay=True)
        assert get_protocol(name, relay=False).relay is False


@pytest.mark.parametrize("name", BUILTIN)
def test_declared_layouts_are_the_ones_that_build(name):
    caps = protocol_class(name).capabilities
    for layout in ("full", "cuckoo"):
        if layout in caps.layouts:
            assert get_protocol(name, layout=layout).layout == layout
        else:
            with pytest.raises(InvalidParameters, match=f"layout={layout!r}"):
                get_protocol(name, layout=layout)
    with pytest.raises(InvalidParameters, match="layout='diagonal'"):
        get_protocol(name, layout="diagonal")


@pytest.mark.parametrize("name", BUILTIN)
def test_declared_options_are_exactly_the_factory_keywords(name):
    cls = protocol_class(name)
    params = inspect.signature(cls.__init__).parameters
    assert not any(p.kind is p.VAR_KEYWORD for p in params.values()), "a **kwargs factory would swallow typos"
    assert [p for p in params if p != "self"] == list(cls.capabilities.allowed_options())


@pytest.mark.parametrize("name", BUILTIN)
def test_bad_layout_parameters_raise(name):
    with pytest.raises(InvalidParameters, match="expansion"):
        get_protocol(name, expansion=0.5)
    with pytest.raises(InvalidParameters, match="layout_seed"):
        get_protocol(name, layout_seed=-1)


def test_networked_declarations():
    networked = [n for n in BUILTIN if protocol_class(n).capabilities.networked]
    assert networked == ["colr", "dp-fedrec", "grec", "kvsagg", "plaintext", "secemb", "secemb-init", "secemb-rowenc",
                         "secfedrec", "svd"]


def test_capabilities_validate_themselves():
    with pytest.raises(InvalidParameters, match="layouts"):
        Capabilities(layouts=("full", "diagonal"))
    with pytest.raises(InvalidParameters, match="layouts"):
        Capabilities(layouts=())
    with pytest.raises(InvalidParameters, match=r"\['relay'\] are layout options"):
        Capabilities(options=("relay",))
    assert Capabilities(options=("x",)).allowed_options() == LAYOUT_OPTIONS + ("x",)


def test_direct_construction_checks_capabilities_too():
    from secemb.protocols.ablations import SecEmbInitProtocol

    with pytest.raises(InvalidParameters, match="layout='cuckoo'"):
        SecEmbInitProtocol(layout="cuckoo")
    assert isinstance(SecEmbInitProtocol(server_eval=False), Protocol)
    assert np.isclose(get_protocol("secemb", layout="cuckoo", expansion=2).expansion, 2.0)


@pytest.mark.parametrize("name", ["plaintext", "secemb", "secfedrec", "secemb-init", "grec", "svd"])
def test_every_server_role_checks_its_party_and_refuses_a_round_that_does_not_follow(name):
    # one server-role base (issue 11): the party check and increasing round ids for every role
    proto = get_protocol(name, layout="full")
    with pytest.raises(InvalidParameters, match="party must be 0 or 1"):
        proto.make_server(2)
    server = proto.make_server(1)
    with pytest.raises(ProtocolError, match="no round in progress"):
        server.aggregate_share()
    rc = proto.round_config(3, 20, 5, 2, 4)
    table = np.zeros((20, 5), np.uint32)
    server.begin_round(rc, table)
    for stale in (3, 2):
        with pytest.raises(ProtocolError, match=f"round {stale} does not follow round 3"):
            server.begin_round(proto.round_config(stale, 20, 5, 2, 4), table)
    server.begin_round(proto.round_config(4, 20, 5, 2, 4), table)
