"""Issue 34: a deployment verifies bounded payloads by default wherever the bound applies (the secemb
protocol with verified uploads, the 32-bit ring, no central DP); elsewhere they stay off and say why; an
explicit ``bound = true`` that cannot apply, or a ``users_per_round`` without a bound, is refused at load
(``secemb serve`` exits 2 with one line); an explicit ``bound = false`` turns them off, as a warning.

The expected option tables are written by hand from the rule in docs/deployment.md ("Bounded payloads"):
``users_per_round`` defaults to 100 (``secemb train``'s users per round), or ``num_users`` when fewer."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cli"))
from cli_helpers import assert_usage_error, run_cli  # type: ignore[import-not-found]  # noqa: E402

from secemb.errors import InvalidParameters  # noqa: E402
from secemb.protocols.factory import make_protocol  # noqa: E402
from secemb.protocols.secemb import SecEmbProtocol  # noqa: E402
from secemb.server.config import ServerConfig, config_document, load_config  # noqa: E402
from secemb.server.errors import Conflict  # noqa: E402
from secemb.server.node import LeaderNode  # noqa: E402
from secemb.sim.local import InProcessServers  # noqa: E402

_BASE: dict[str, Any] = dict(party=0, peer_url="http://127.0.0.1:1", peer_secret="11" * 32, admin_secret="22" * 32,
                             user_secret="33" * 32, num_items=50, num_users=943, insecure_http=True)
#: a central-DP configuration's [privacy] (any positive pair)
_DP = {"dp_sigma": 1000.0, "dp_clip": 0.5}


def _cfg(tmp_path: Path, **kw: Any) -> ServerConfig:
    return ServerConfig(state_dir=tmp_path, **(_BASE | kw))


# ------------------------------------------------------------------------------ where the bound applies


@pytest.mark.parametrize(("given", "num_users", "resolved"), [
    ({}, 943, {"bound": True, "users_per_round": 100}),
    ({}, 100, {"bound": True, "users_per_round": 100}),
    ({}, 30, {"bound": True, "users_per_round": 30}),  # no round can have more than num_users
    ({"bound": True}, 943, {"bound": True, "users_per_round": 100}),
    ({"users_per_round": 250}, 943, {"bound": True, "users_per_round": 250}),
    ({"bound": True, "users_per_round": 7}, 943, {"bound": True, "users_per_round": 7}),
    ({"verify": True}, 943, {"verify": True, "bound": True, "users_per_round": 100}),
])
def test_the_bound_is_on_by_default_where_it_applies(tmp_path: Path, given: dict, num_users: int,
                                                     resolved: dict) -> None:
    cfg = _cfg(tmp_path, protocol_options=given, num_users=num_users)
    assert cfg.protocol_options == resolved
    proto = cfg.make_protocol()
    assert isinstance(proto, SecEmbProtocol)
    assert (proto.bound, proto.users_per_round) == (True, resolved["users_per_round"])
    assert cfg.protocol_description()["options"] == resolved  # what the round document announces to devices
    bounds = cfg.payload_bounds()
    assert (bounds["verified"], bounds["users_per_round"], bounds["turned_off"]) == \
        (True, resolved["users_per_round"], False)
    assert f"rounds of at most {resolved['users_per_round']} users" in bounds["detail"]


@pytest.mark.parametrize("layout", ["cuckoo", "full"])
@pytest.mark.parametrize("relay", [True, False])
def test_both_layouts_relay_or_not_default_to_the_bound(tmp_path: Path, layout: str, relay: bool) -> None:
    proto = _cfg(tmp_path, layout=layout, relay=relay).make_protocol()
    assert isinstance(proto, SecEmbProtocol) and proto.bound


def test_the_resolved_default_is_written_and_reloads_to_the_same_fingerprint(tmp_path: Path) -> None:
    """``secemb admin init`` writes the configuration through :func:`config_document`: the default is
    written out (an operator reads ``bound = true`` in the file), and reading the file gives the same
    settings -- the two servers' fingerprints agree."""
    cfg = _cfg(tmp_path)
    doc = config_document(cfg)
    assert doc["protocol"]["options"] == {"bound": True, "users_per_round": 100}
    path = tmp_path / "server0.json"
    path.write_text(json.dumps(doc))
    assert load_config(path).fingerprint() == cfg.fingerprint()


def test_a_toml_file_without_options_verifies_bounds(tmp_path: Path) -> None:
    path = tmp_path / "server0.toml"
    path.write_text(f'[server]\nparty = 0\npeer_url = "http://127.0.0.1:1"\nstate_dir = "{tmp_path}"\n'
                    'insecure_http = true\n[secrets]\npeer = "' + "11" * 32 + '"\nadmin = "' + "22" * 32 +
                    '"\nusers = "' + "33" * 32 + '"\n[model]\nnum_items = 50\nnum_users = 943\n')
    assert load_config(path).payload_bounds()["verified"] is True


def test_the_default_and_an_explicit_off_have_different_fingerprints(tmp_path: Path) -> None:
    """Two servers configured one with the default and one with ``bound = false`` cannot pair or serve
    together (server 1 checks the fingerprint)."""
    assert _cfg(tmp_path).fingerprint() != _cfg(tmp_path, protocol_options={"bound": False}).fingerprint()


# -------------------------------------------------------------------- where it does not apply: off, and why


@pytest.mark.parametrize(("kw", "why"), [
    (_DP, "central DP ([privacy] sigma)"),
    ({"ring_bits": 64}, "the 64-bit ring ([training] ring_bits)"),
    ({"protocol_options": {"verify": False}}, "verified uploads are off ([protocol.options] verify = false)"),
    ({"protocol": "plaintext", "layout": "full", "relay": False}, "protocol 'plaintext' has no bounded payloads"),
    ({"protocol": "secfedrec", "layout": "full", "relay": False}, "protocol 'secfedrec' has no bounded payloads"),
])
def test_where_the_bound_cannot_apply_it_stays_off_and_says_why(tmp_path: Path, kw: dict, why: str) -> None:
    cfg = _cfg(tmp_path, **kw)
    assert "bound" not in cfg.protocol_options and "users_per_round" not in cfg.protocol_options
    assert getattr(cfg.make_protocol(), "bound", False) is False
    bounds = cfg.payload_bounds()
    assert bounds == {"verified": False, "users_per_round": None, "turned_off": False,
                      "detail": bounds["detail"]}
    assert bounds["detail"].startswith("payload bounds off: ") and why in bounds["detail"]


def test_off_where_it_cannot_apply_keeps_the_old_fingerprint(tmp_path: Path) -> None:
    """A configuration the bound does not apply to is the configuration it was before the default (same
    options, same fingerprint): its state directory still serves."""
    cfg = _cfg(tmp_path, ring_bits=64)
    assert cfg.protocol_options == {}
    assert cfg.fingerprint() == cfg.replace(protocol_options={}).fingerprint()


def test_an_explicit_off_turns_the_bound_off_as_a_warning(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, protocol_options={"bound": False})
    proto = cfg.make_protocol()
    assert cfg.protocol_options == {"bound": False} and isinstance(proto, SecEmbProtocol) and proto.bound is False
    bounds = cfg.payload_bounds()
    assert (bounds["verified"], bounds["users_per_round"], bounds["turned_off"]) == (False, None, True)
    assert "bound = false" in bounds["detail"] and "corrupt" in bounds["detail"]


@pytest.mark.parametrize("kw", [_DP, {"ring_bits": 64}, {"protocol_options": {"verify": False}}])
def test_an_explicit_off_where_it_cannot_apply_says_why_not_a_warning(tmp_path: Path, kw: dict) -> None:
    """(A simulation states ``bound = false`` for every run without ``--bound``, DP runs included.)"""
    options = {"bound": False, **kw.get("protocol_options", {})}
    bounds = _cfg(tmp_path, **(kw | {"protocol_options": options})).payload_bounds()
    assert (bounds["verified"], bounds["turned_off"]) == (False, False)


# ----------------------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(("kw", "why"), [
    (_DP, "central DP"),
    ({"ring_bits": 64}, "64-bit ring"),
    ({"protocol_options": {"verify": False}}, "verified uploads are off"),
    ({"protocol": "plaintext", "layout": "full", "relay": False}, "protocol 'plaintext' has no bounded payloads"),
])
@pytest.mark.parametrize("extra", [{"bound": True}, {"users_per_round": 20}, {"bound": True, "users_per_round": 20}])
def test_a_bound_where_it_cannot_apply_is_refused(tmp_path: Path, kw: dict, why: str, extra: dict) -> None:
    options = kw.get("protocol_options", {}) | extra
    with pytest.raises(InvalidParameters, match="cannot apply|payload bounds are off here") as caught:
        _cfg(tmp_path, **(kw | {"protocol_options": options}))
    assert why in str(caught.value) and "[protocol.options]" in str(caught.value)


def test_users_per_round_with_bound_false_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidParameters, match="users_per_round .* off here: bound = false"):
        _cfg(tmp_path, protocol_options={"bound": False, "users_per_round": 20})


@pytest.mark.parametrize("value", ["yes", 1, 0, None, "true"])
def test_a_bound_that_is_not_a_bool_is_refused(tmp_path: Path, value: object) -> None:
    with pytest.raises(InvalidParameters, match=r"bound must be true or false, got"):
        _cfg(tmp_path, protocol_options={"bound": value})


@pytest.mark.parametrize("users", [0, -3, 2**30])
def test_a_users_per_round_without_room_in_the_ring_is_refused(tmp_path: Path, users: int) -> None:
    """``n`` must leave ``t >= 2`` bits: 2^30 users of the 32-bit ring leave t = 0."""
    with pytest.raises(InvalidParameters, match="users"):
        _cfg(tmp_path, protocol_options={"users_per_round": users})


def _serve(tmp_path: Path, options: str, extra: str = "") -> Any:  # noqa: ANN401 - click's Result
    path = tmp_path / "server0.toml"
    path.write_text(f'[server]\nparty = 0\npeer_url = "http://127.0.0.1:1"\nstate_dir = "{tmp_path / "s"}"\n'
                    '[secrets]\npeer = "' + "11" * 32 + '"\nadmin = "' + "22" * 32 + '"\nusers = "' + "33" * 32 +
                    f'"\n[model]\nnum_items = 50\nnum_users = 943\n{extra}[protocol.options]\n{options}\n')
    return run_cli("serve", "--config", str(path), "--insecure-http")


@pytest.mark.parametrize(("options", "extra", "why"), [
    ("bound = true", "[training]\nring_bits = 64\n", "64-bit ring"),
    ("bound = true", "[privacy]\nsigma = 1000.0\nclip = 0.5\n", "central DP"),
    ("bound = true\nverify = false", "", "verified uploads are off"),
    ("users_per_round = 20\nbound = false", "", "bound = false"),
    ('bound = "yes"', "", "bound must be true or false"),
])
def test_secemb_serve_refuses_an_impossible_bound_with_one_line(tmp_path: Path, options: str, extra: str,
                                                                why: str) -> None:
    assert_usage_error(_serve(tmp_path, options, extra), why)
    assert not (tmp_path / "s").exists()  # refused before any state


# -------------------------------------------------------------------------- the leader's round size


def test_server_0_refuses_a_round_larger_than_the_default_and_says_how_to_raise_it() -> None:
    """943 devices, the default ``users_per_round`` 100: a round of 101 is refused, naming the option to
    raise; a round of 100 passes the bound (and stops at the next check: m' is not known yet)."""
    settings = {"num_items": 50, "num_users": 943, "protocol": "secemb", "layout": "cuckoo", "relay": True,
                "min_users": 2}
    cfg = ServerConfig(party=0, peer_url="http://127.0.0.1:1", state_dir=Path("in-process"),
                       peer_secret=b"p" * 32, admin_secret=b"a" * 32, user_secret=b"u" * 32, **settings)
    servers = InProcessServers(settings, cfg.make_protocol(), cfg.make_model())
    try:
        leader = servers.nodes[0]
        assert isinstance(leader, LeaderNode)
        with pytest.raises(InvalidParameters, match=r"at most users_per_round=100 users; this round would have "
                                                    r"101: .*raise \[protocol.options\] users_per_round"):
            leader.open_round(n_p=101)
        with pytest.raises(Conflict, match="m' is not known"):
            leader.open_round(n_p=100)
        assert leader.status()["payload_bounds"]["users_per_round"] == 100
    finally:
        servers.stop()


# ------------------------------------------------------------------------------ secemb admin init


def _init(out: Path, *args: str, party: int | None = None) -> Any:  # noqa: ANN401 - click's Result
    hosts = ["--host0", "127.0.0.1", "--host1", "127.0.0.1"] if party is None else [f"--host{party}", "127.0.0.1"]
    return run_cli("admin", "init", "--out", str(out), *hosts, *([] if party is None else ["--party", str(party)]),
                   *args)


@pytest.mark.parametrize(("args", "options"), [
    ([], {"bound": True, "users_per_round": 100}),
    (["--users-per-round", "250"], {"bound": True, "users_per_round": 250}),
    (["--bound"], {"bound": True, "users_per_round": 100}),
    (["--no-bound"], {"bound": False}),
])
def test_admin_init_writes_the_bound_it_is_given_or_the_default(tmp_path: Path, args: list[str],
                                                                options: dict) -> None:
    res = _init(tmp_path / "dep", "--num-items", "50", "--num-users", "943", *args)
    assert res.exit_code == 0, res.output
    for p in (0, 1):
        doc = json.loads((tmp_path / "dep" / f"server{p}" / f"server{p}.json").read_text())
        assert doc["protocol"]["options"] == options


def test_two_operators_giving_the_same_users_per_round_pair(tmp_path: Path) -> None:
    for p in (0, 1):
        res = _init(tmp_path / f"s{p}", "--num-items", "50", "--num-users", "943", "--users-per-round", "250", party=p)
        assert res.exit_code == 0, res.output
    for p in (0, 1):
        res = run_cli("admin", "pair", "--deployment", str(tmp_path / f"s{p}"), "--peer",
                      str(tmp_path / f"s{1 - p}" / "public.json"))
        assert res.exit_code == 0, res.output
        cfg = load_config(tmp_path / f"s{p}" / f"server{p}.json")
        assert cfg.protocol_options == {"bound": True, "users_per_round": 250}


@pytest.mark.parametrize(("args", "why"), [
    (["--num-items", "50", "--num-users", "943", "--no-bound", "--users-per-round", "20"], "bound = false"),
    (["--no-bound"], "go with --num-items"),
    (["--users-per-round", "20"], "go with --num-items"),
    (["--num-items", "50", "--num-users", "943", "--users-per-round", str(2**30)], "users"),
])
def test_admin_init_refuses_a_bound_it_cannot_write(tmp_path: Path, args: list[str], why: str) -> None:
    assert_usage_error(_init(tmp_path / "dep", *args), why)
    assert not (tmp_path / "dep" / "server0" / "server0.json").exists()


def test_admin_init_of_one_server_refuses_the_bound_options(tmp_path: Path) -> None:
    res = run_cli("admin", "init", "--out", str(tmp_path / "one"), "--host0", "127.0.0.1", "--protocol", "sfsl",
                  "--dataset", "taobao-mini", "--no-bound")
    assert_usage_error(res, "--bound/--no-bound is for a two-server deployment")


@pytest.mark.parametrize("value", [[], {}, [1], {"a": 1}, 1, None, "true"])
@pytest.mark.parametrize("name", ["bound", "verify"])
def test_finding_a_round_document_with_a_bound_that_is_no_bool_is_refused_not_a_type_error(name: str,
                                                                                          value: object) -> None:
    """Session 20 (helper D): with bounds on by default every round document announces ``bound``; one
    whose ``options.bound`` was a list made the device's ``RoundSession`` raise ``TypeError: unhashable
    type`` (the round's plan is cached by its flags) instead of a clean refusal
    (tests/client/test_round_document_mutations.py found it)."""
    options = {"bound": True, "users_per_round": 30} | {name: value}
    with pytest.raises(InvalidParameters, match=f"{name} must be a bool"):
        make_protocol({"name": "secemb", "layout": "cuckoo", "relay": True, "expansion": 1.25, "layout_seed": 0,
                       "options": options})


@pytest.mark.parametrize(("options", "extra", "line"), [
    ("", "", "payload bounds verified: every device proves its upload small, for rounds of at most 100 users"),
    ("users_per_round = 250", "", "payload bounds verified: every device proves its upload small, for rounds of "
                                  "at most 250 users"),
    ("bound = false", "", "warning: payload bounds off ([protocol.options] bound = false): a malicious device"),
    ("", "[training]\nring_bits = 64\n", "payload bounds off: the 64-bit ring ([training] ring_bits)"),
    ("", "[privacy]\nsigma = 1000.0\nclip = 0.5\n", "payload bounds off: central DP ([privacy] sigma)"),
    ("verify = false", "", "payload bounds off: verified uploads are off ([protocol.options] verify = false)"),
])
def test_secemb_serve_says_at_start_up_whether_payloads_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  options: str, extra: str, line: str) -> None:
    """One line on stderr before serving (the server itself is replaced by a stub here; the real processes'
    lines: test_bound_default_net.py)."""
    import secemb.server

    served: list[ServerConfig] = []
    monkeypatch.setattr(secemb.server, "serve", lambda cfg, **_: served.append(cfg))
    res = _serve(tmp_path, options, extra)
    assert res.exit_code == 0, res.output
    lines = [x for x in res.stderr.splitlines() if "payload bounds" in x]
    assert len(lines) == 1 and lines[0].startswith(line), lines
    assert len(served) == 1
