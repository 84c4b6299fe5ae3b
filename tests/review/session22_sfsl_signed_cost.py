"""Session 22 (helper A): what SFSL's signed secure aggregations cost (docs/results.md, "Signed
rounds"): one in-process SFSL round (``train_sfsl``, taobao-small click data, ``n`` devices, CPP2,
seed 0) whose two secure aggregations are replayed through :func:`secemb.secagg.run_round`
unsigned and signed with the same rows and inputs; mean bytes per device (``len()`` of the
messages; the secure sum's candidate rows are the PSU union's goods and their categories, helper G).
Not a test: ``python tests/review/session22_sfsl_signed_cost.py N [SHAPE]``."""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import Any

import numpy as np

import secemb.protocols.sfsl.round as sfsl_round_module
import secemb.secagg.psu as psu_module
from secemb.data.ctr import TaobaoShaped, split_clicks
from secemb.protocols.sfsl.simulate import SFSLRun, train_sfsl
from secemb.secagg import run_round


def main(n: int, shape: str) -> None:
    world = TaobaoShaped(shape, seed=1)
    train, test = split_clicks(world.clients(np.arange(world.shape.users)))
    calls: list[tuple[Any, dict[int, np.ndarray], Any]] = []

    def spy(config: Any, inputs: Any, **kw: Any) -> Any:
        calls.append((config, dict(inputs), kw.get("rows")))
        return run_round(config, inputs, **kw)

    sfsl_round_module.run_round = spy
    psu_module.run_round = spy
    train_sfsl(train, test, SFSLRun(preset="CPP2", clients_per_round=n, rounds=1, dim=18, seed=0, eval_every=1))
    for config, inputs, rows in calls:
        out = {}
        for signed in (False, True):
            tr = run_round(replace(config, signed=signed), inputs, rows=rows)
            out[signed] = (np.mean(list(tr.upload_bytes.values())), np.mean(list(tr.download_bytes.values())))
        k = np.mean([r.size for r in rows.values()]) if rows else config.length
        cand = f"candidates={config.candidate_rows.size}" if config.sparse else f"length={config.length}"
        print(f"{'sum' if config.sparse else 'psu'} n={n} rows/device={k:.0f} {cand}: "
              f"unsigned up {out[False][0]:.0f} down {out[False][1]:.0f}; "
              f"signed up {out[True][0]:.0f} down {out[True][1]:.0f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20, sys.argv[2] if len(sys.argv) > 2 else "taobao-small")
