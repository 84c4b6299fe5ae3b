"""What a device does with server 0's 2xx answers to GREC inference that are not what the API
promises (server 0 is a trust boundary for a device): every field of ``GET /v1/inference``'s
description deleted or replaced by another type or an out-of-range value (the mutations of
``test_round_document_mutations``) is accepted or refused with a
:class:`~secemb.errors.SecembError` by :func:`infer_remote` -- never a ``TypeError`` (a
hyperparameter the model does not take) or ``OverflowError`` (an item id beyond int64); a reply
with non-finite scores or a model version that is not an integer is an
:class:`InvalidMessage`; and ``secemb infer --credentials`` exits 1 naming server 0 for each,
without a traceback (was a ``KeyError`` for a description without ``num_candidates``, a
``ValueError`` for the version header, exit 2 "bad usage" for the rest)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import numpy as np
import pytest
from test_round_document_mutations import _DELETE, BAD, _mutated, _paths
from typer.testing import CliRunner

from secemb.cli import app
from secemb.transport.credentials import DeviceCredentials
from secemb.client.inference import infer_remote
from secemb.errors import InvalidMessage, SecembError
from secemb.inference import GaussianLDP
from secemb.inference.service import encode_reply
from secemb.randomness import CtrDrbg
from secemb.transport.http import HttpServerLink
from secemb.transport.network import ApiClient

ITEMS, DIM = 40, 4
MECH = GaussianLDP(1.0, 1e-4, 1.0)
#: a description a device accepts (mf: p_u and b_u, DIM + 1 private parameters)
INFO = {"model": {"name": "mf", "hparams": {"dim": DIM}}, "model_version": 2, "model_sha256": "a" * 64, "rows": 1,
        "dim": DIM, "num_items": ITEMS, "candidates": None, "num_candidates": ITEMS}
PARAMS = np.array([0.3, -0.2, 0.5, 0.1, 0.07])


class _Server:
    """A link whose description is ``info`` and whose reply scores every announced candidate 0
    (or the ``num_items`` when the description does not say how many)."""

    def __init__(self, info: Any) -> None:
        self.info = info

    def inference_info(self) -> Any:
        return copy.deepcopy(self.info)

    def inference(self, body: bytes) -> tuple[bytes, int]:
        n = self.info.get("num_candidates", ITEMS)
        return encode_reply(np.zeros(n if isinstance(n, int) and 0 < n < 1000 else ITEMS)), 2


def _mutations() -> Iterator[tuple[str, Any]]:
    for path in _paths(INFO):
        for value in [*BAD, _DELETE]:
            yield f"{'.'.join(path)} {'deleted' if value is _DELETE else repr(value)}", _mutated(INFO, path, value)


def test_every_mutated_description_field_is_accepted_or_refused_cleanly() -> None:
    escaped = []
    for case, doc in [*_mutations(), *(("top level " + repr(top), top) for top in ([], "x", None, 3))]:
        try:
            infer_remote(_Server(doc), PARAMS, MECH, None, _rng=CtrDrbg(1))
        except SecembError:
            pass
        except Exception as exc:  # noqa: BLE001 -- what the test looks for
            escaped.append((case, repr(exc)))
    assert not escaped, escaped[:10]


#: descriptions the device must refuse (each was accepted, or escaped another exception, before)
REFUSED = {
    "no num_candidates": {k: v for k, v in INFO.items() if k != "num_candidates"},
    "a hyperparameter mf does not take": {**INFO, "model": {"name": "mf", "hparams": {"dim": DIM, "bogus": 1}}},
    "a model this device does not have": {**INFO, "model": {"name": "no-such-model", "hparams": {}}},
    "a candidate beyond int64": {**INFO, "candidates": [1, 2**70], "num_candidates": 2},
    "num_candidates a string": {**INFO, "num_candidates": str(ITEMS)},
    "more items than a device scores (2^40: a MemoryError before)": {**INFO, "num_items": 2**40,
                                                                      "num_candidates": 2**40},
    "a denoiser whose rating range is no pair": {**INFO, "model": {"name": "grec-denoiser", "hparams": {
        "rows": 1, "dim": DIM, "frozen": DIM + 1, "rating_range": "x"}}},
}


@pytest.mark.parametrize("case", REFUSED)
def test_a_malformed_description_is_an_invalid_message(case) -> None:
    with pytest.raises(InvalidMessage):
        infer_remote(_Server(REFUSED[case]), PARAMS, MECH, None, _rng=CtrDrbg(1))


def test_a_reply_with_non_finite_scores_is_an_invalid_message() -> None:
    class NaNs(_Server):
        def inference(self, body: bytes) -> tuple[bytes, int]:
            return encode_reply(np.array([0.5, np.nan, *np.zeros(ITEMS - 2)])), 2

    assert infer_remote(_Server(INFO), PARAMS, MECH, np.array([1]), _rng=CtrDrbg(1)).scores.size == 1
    with pytest.raises(InvalidMessage, match="non-finite"):
        infer_remote(NaNs(INFO), PARAMS, MECH, np.array([1]), _rng=CtrDrbg(1))


#: server 0's URL in the tests below
URL = "https://127.0.0.1:9"


def _answering(description: bytes, reply: bytes, version: str) -> Callable[..., httpx.Response]:
    """What :meth:`ApiClient.request` does instead: ``GET /v1/inference`` answers
    ``description``, ``POST`` answers ``reply`` with the model version header ``version``."""
    def request(self: ApiClient, method: str, path: str, **kwargs: Any) -> httpx.Response:
        assert path == "/v1/inference", path
        if method == "GET":
            return httpx.Response(200, content=description, headers={"content-type": "application/json"})
        return httpx.Response(200, content=reply, headers={"X-Secemb-Model-Version": version})

    return request


def test_a_model_version_that_is_not_an_integer_is_an_invalid_message(monkeypatch) -> None:
    link = HttpServerLink(0, 3, URL, b"k" * 32)
    monkeypatch.setattr(ApiClient, "request", _answering(b"{}", b"GRS1", "v2"))
    with pytest.raises(InvalidMessage, match="model version 'v2'"):
        link.inference(b"GRQ1")
    monkeypatch.setattr(ApiClient, "request", _answering(b"{}", b"GRS1", "7"))
    assert link.inference(b"GRQ1") == (b"GRS1", 7)


GOOD_REPLY = encode_reply(np.zeros(ITEMS))
#: (server 0's description, reply, model version header) that secemb infer must exit 1 on
ANSWERS = {
    "no num_candidates": (json.dumps(REFUSED["no num_candidates"]).encode(), GOOD_REPLY, "2"),
    "a hyperparameter mf does not take": (json.dumps(REFUSED["a hyperparameter mf does not take"]).encode(),
                                          GOOD_REPLY, "2"),
    "a description that is a list": (b"[]", GOOD_REPLY, "2"),
    "a description that is not JSON": (b"<html>maintenance</html>", GOOD_REPLY, "2"),
    "a truncated reply": (json.dumps(INFO).encode(), GOOD_REPLY[:-3], "2"),
    "a model version that is not an integer": (json.dumps(INFO).encode(), GOOD_REPLY, "two"),
}


def _infer(monkeypatch, tmp_path, answer: tuple[bytes, bytes, str]) -> Any:
    """``secemb infer --credentials --state-file --json`` of user 3 with server 0 answering ``answer``."""
    monkeypatch.setattr(ApiClient, "request", _answering(*answer))
    creds = DeviceCredentials(3, (URL, URL), (b"k" * 32, b"l" * 32)).save(tmp_path / "dev3.json")
    np.savez(tmp_path / "dev3.npz", params=PARAMS)
    return CliRunner().invoke(app, ["infer", "--credentials", str(creds), "--state-file", str(tmp_path / "dev3.npz"),
                                    "--json", "--items", "1,2"])


@pytest.mark.parametrize("case", ANSWERS)
def test_secemb_infer_exits_1_naming_server_0_on_a_malformed_answer(monkeypatch, tmp_path, case) -> None:
    res = _infer(monkeypatch, tmp_path, ANSWERS[case])
    assert res.exit_code == 1, (case, res.output, res.exception)
    assert res.exception is None or isinstance(res.exception, SystemExit), (case, repr(res.exception))
    assert f"server 0 ({URL})" in res.output, (case, res.output)


def test_secemb_infer_reads_a_well_formed_answer(monkeypatch, tmp_path) -> None:
    res = _infer(monkeypatch, tmp_path, (json.dumps(INFO).encode(), GOOD_REPLY, "2"))
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["items"] == [1, 2] and doc["model_version"] == 2 and doc["num_candidates"] == ITEMS
