"""One secret parser (secemb.transport.signing.parse_secret, issue 36 "one of each"): a server's
configuration (ServerConfig: file, environment or Python), a one-server deployment's
exchange.json, a two-server operator file and a device's credentials file read their secrets by
the same rule -- bytes or hex digits only, at least 32 bytes -- and refuse anything else without
echoing it (the client's SECEMB_DEVICE_KEY0/1: tests/cli/test_user_errors.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from secemb.errors import InvalidParameters
from secemb.server.config import ServerConfig
from secemb.server.deploy import init_half
from secemb.server.exchange_deploy import ExchangeDeployment
from secemb.transport.credentials import DeviceHalf
from secemb.transport.signing import SECRET_BYTES, parse_secret

GOOD = "a1" * 32
#: (value, what the refusal says): each breaks the rule in one way
BAD: list[tuple[Any, str]] = [
    ("a1" * 31, "must be >= 32 bytes"),  # 31 bytes
    ("a1" * 16, "must be >= 32 bytes"),  # 16 bytes: the old server rule's floor
    ("a1" * 32 + "a", "must be hex"),  # an odd number of digits
    ("a1 " * 32, "must be hex"),  # spaces (bytes.fromhex took them)
    ("0x" + "a1" * 32, "must be hex"),
    ("g1" * 32, "must be hex"),
    (b"k" * 31, "must be >= 32 bytes"),
    (32, "must be a hex string, got int"),
    (None, "must be a hex string, got NoneType"),
]
#: those a JSON file can hold
JSON_BAD = [(value, says) for value, says in BAD if not isinstance(value, bytes)]


def test_the_rule_is_32_bytes_of_hex_or_bytes() -> None:
    assert SECRET_BYTES == 32
    assert parse_secret("s", GOOD) == bytes([0xA1]) * 32
    assert parse_secret("s", GOOD.upper()) == bytes([0xA1]) * 32
    assert parse_secret("s", "00" * 48) == bytes(48)  # longer keys are fine
    assert parse_secret("s", b"k" * 32) == b"k" * 32


@pytest.mark.parametrize(("value", "says"), BAD)
def test_anything_else_is_refused_without_echoing_it(value: Any, says: str) -> None:
    with pytest.raises(InvalidParameters, match=f"^the secret {says}") as info:
        parse_secret("the secret", value)
    if isinstance(value, str) and value:
        assert value not in str(info.value) and "a1a1" not in str(info.value)


_CFG = dict(party=0, peer_url="http://127.0.0.1:1", num_items=50, num_users=20, insecure_http=True)


@pytest.mark.parametrize("field", ["peer_secret", "admin_secret", "user_secret"])
@pytest.mark.parametrize(("value", "says"), BAD)
def test_server_config_refuses_a_bad_secret(tmp_path: Path, field: str, value: Any, says: str) -> None:
    secrets = {"peer_secret": GOOD, "admin_secret": GOOD, "user_secret": GOOD}
    assert ServerConfig(state_dir=tmp_path, **secrets, **_CFG).admin_secret == bytes([0xA1]) * 32
    with pytest.raises(InvalidParameters, match=f"secret {field} {says}"):
        ServerConfig(state_dir=tmp_path, **(secrets | {field: value}), **_CFG)


def _exchange_json(root: Path, **secrets: Any) -> Path:
    doc = {"format": "secemb-exchange-deployment/1", "protocol": "sfsl", "host": "127.0.0.1", "port": 8800,
           "stage_deadline_s": 60.0, "admin_secret": GOOD, "user_secret": GOOD} | secrets
    (root / "exchange.json").write_text(json.dumps(doc))
    return root


@pytest.mark.parametrize("field", ["admin_secret", "user_secret"])
@pytest.mark.parametrize(("value", "says"), JSON_BAD)
def test_a_one_server_deployment_refuses_a_bad_secret(tmp_path: Path, field: str, value: Any, says: str) -> None:
    assert ExchangeDeployment.load(_exchange_json(tmp_path)).user_secret == bytes([0xA1]) * 32
    with pytest.raises(InvalidParameters, match=f"exchange.json: field '{field}' {says}"):
        ExchangeDeployment.load(_exchange_json(tmp_path, **{field: value}))


@pytest.mark.parametrize(("value", "says"), JSON_BAD)
def test_device_credentials_refuse_a_bad_key(tmp_path: Path, value: Any, says: str) -> None:
    path = DeviceHalf(0, 3, "https://127.0.0.1:1", bytes([0xA1]) * 32, None, None).save(tmp_path / "half.json")
    assert DeviceHalf.load(path).key == bytes([0xA1]) * 32
    doc = json.loads(path.read_text())
    path.write_text(json.dumps(doc | {"key": value}))
    with pytest.raises(InvalidParameters, match=f"credentials .*half.json: key {says}"):
        DeviceHalf.load(path)


@pytest.mark.parametrize(("value", "says"), JSON_BAD)
def test_a_two_server_operator_file_refuses_a_bad_admin_secret(tmp_path: Path, value: Any, says: str) -> None:
    dep = init_half(tmp_path / "op0", 0, ["127.0.0.1"], num_items=20, num_users=5, model="mf")
    dep.admin(0).close()  # the admin secret init_half wrote is one
    operator = tmp_path / "op0" / "operator.json"
    operator.write_text(json.dumps(json.loads(operator.read_text()) | {"admin": value}))
    with pytest.raises(InvalidParameters, match=f"operator.json: admin {says}"):
        dep.admin(0)


def test_objects_that_hold_secrets_keep_them_out_of_their_repr() -> None:
    """A device's halves and credentials and a one-server deployment's files are dataclasses: their
    repr (a traceback's locals, a log line, a test's failure report) printed the keys and the
    deployment's admin and user secrets; now it names the rest only."""
    from secemb.server.exchange_deploy import ExchangeCredentials
    from secemb.transport.credentials import DeviceCredentials

    key0, key1 = bytes.fromhex(GOOD), bytes(range(32))
    objects = [DeviceHalf(0, 3, "https://s0.invalid", key0, None),
               DeviceCredentials(3, ("https://s0.invalid", "https://s1.invalid"), (key0, key1)),
               ExchangeDeployment(Path("dep"), {"admin_secret": GOOD, "user_secret": key1.hex()}),
               ExchangeCredentials(Path("dev.json"), {"user": 3, "key": GOOD})]
    for obj in objects:
        text = repr(obj)
        assert GOOD not in text and key1.hex() not in text and repr(key0) not in text and repr(key1) not in text
        assert type(obj).__name__ in text
    assert "user=3" in repr(objects[0]) and "https://s1.invalid" in repr(objects[1])
