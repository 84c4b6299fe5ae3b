"""``secemb bench robust`` (session 40): the digest comparison (``secemb.server.verify.rejected``)
is timed once a round, as the close calls it (``secemb.server.close``).  Until session 40 the
bench called it once for every device of the round while filtering the included devices, so a
round of ``n`` devices charged the check ``n`` comparisons of ``n`` digests each (about 1 ms a
round at 100 devices on the development VM, against 0.07 ms at 20)."""

from __future__ import annotations

from typing import Any

import pytest

from secemb.bench import robust


def test_the_digest_comparison_runs_once_a_checked_round(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = robust.rejected

    def counting(mine: dict[int, bytes], theirs: dict[int, bytes]) -> Any:
        calls.append(len(mine))
        return real(mine, theirs)

    counting.__name__ = "rejected"  # the role's name in the bench's records
    monkeypatch.setattr(robust, "rejected", counting)
    users, repeats = 5, 2
    (line,) = robust.measure(users, repeats, size="ml100k", layouts=("cuckoo",), bound=True, roles=True)
    # checked and bounded rounds compare digests, unchecked ones do not: one call a round of the
    # two checked kinds (a warm-up round of each, then ``repeats``), each over every device's digest
    assert calls == [users] * (2 * (repeats + 1))
    assert "rejected" in line["checked"]["roles"] and "rejected" in line["bounded"]["roles"]
