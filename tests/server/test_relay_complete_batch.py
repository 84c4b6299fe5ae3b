"""Issue 37: server 0 with relay completes a batch's relayed retrievals -- server 1's masked
answers added to its own shares, the replies framed -- in one role call
(``complete_retrieval_many``), not one call per device."""

from __future__ import annotations

from typing import Any

import pytest


def test_secemb_train_with_relay_completes_each_batch_s_retrievals_in_one_role_call(monkeypatch: pytest.MonkeyPatch,
                                                                                   tmp_path: Any) -> None:
    from typer.testing import CliRunner

    from secemb.cli import app
    from secemb.protocols.secemb.relay import SecEmbRelayServer

    sizes: list[int] = []
    original = SecEmbRelayServer.complete_retrieval_many

    def recording(self: SecEmbRelayServer, answers: list[tuple[int, bytes]]) -> list[Any]:
        sizes.append(len(answers))
        return original(self, answers)

    monkeypatch.setattr(SecEmbRelayServer, "complete_retrieval_many", recording)
    out = tmp_path / "r.json"
    res = CliRunner().invoke(app, ["train", "--dataset", "synthetic-mini", "--dim", "8", "--users-per-round", "40",
                                   "--epochs", "1", "--seed", "1", "--quiet", "--relay", "--json-out", str(out)])
    assert res.exit_code == 0, res.output
    assert sizes and max(sizes) > 1, sizes  # one call a device would give only 1s
    assert len(sizes) * 10 <= sum(sizes), sizes  # batches, not a few stragglers
