"""``secemb bench noise``: the discrete-Gaussian samplers' rate (samples per second).

A DP-FedRec device noises every coordinate of its full-size upload (5,976,705 on the Yelp
stand-in, 248,513 on the ML-1M stand-in), so the sampler's rate bounds how many devices a
Figure 7 run can simulate.  :func:`run` times :func:`secemb.privacy.noise.discrete_gaussian`
(the CDT sampler below its table cap), the rejection sampler it falls back to above the cap
(:func:`secemb.privacy.noise._rejection`, forced here at the same ``sigma``), and the OS
randomness the CDT draws (``4 n`` bytes a call: the floor under any sampler fed by
``os.urandom``), each ``repeats`` times, interleaved; the table is built before timing (it is
cached across a run's devices).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import Any

from secemb.errors import InvalidParameters

__all__ = ["run", "time_calls"]


def time_calls(samplers: dict[str, Callable[[], object]], repeats: int) -> dict[str, list[float]]:
    """Seconds of each of ``repeats`` calls of every sampler, the samplers interleaved (so a
    change in the machine's load falls on all of them alike), after one untimed call each."""
    for fn in samplers.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in samplers}
    for _ in range(repeats):
        for name, fn in samplers.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return times


def run(sigma: float = 44_487.0, n: int = 5_976_705, repeats: int = 7, *, rejection: bool = True) -> dict[str, Any]:
    """Median and fastest seconds per call of ``n`` samples at ``sigma`` (ring units), and the
    median rate in samples per second, per sampler (``cdt``, ``rejection`` unless
    ``rejection`` is false, ``os_randomness``).

    Raises
    ------
    InvalidParameters: ``n`` or ``repeats`` below 1, or ``sigma`` out of the CDT's range.
    """
    from secemb.privacy import cdt
    from secemb.privacy.noise import TAIL_SIGMAS, _rejection, discrete_gaussian
    from secemb.randomness import system_rng

    if n < 1 or repeats < 1:
        raise InvalidParameters(f"n and repeats must be >= 1, got {n}, {repeats}")
    bound = math.floor(TAIL_SIGMAS * sigma)
    if not (sigma > 0 and bound < cdt.MAX_ENTRIES):
        raise InvalidParameters(f"sigma must be in (0, {cdt.MAX_ENTRIES / TAIL_SIGMAS:.0f}) for the CDT, got {sigma}")
    samplers: dict[str, Callable[[], object]] = {"cdt": lambda: discrete_gaussian(sigma, n)}
    if rejection:
        samplers["rejection"] = lambda: _rejection(sigma, n, TAIL_SIGMAS * sigma, system_rng)
    samplers["os_randomness"] = lambda: system_rng(4 * n)
    t = time.perf_counter()
    cdt.cdt_table(float(sigma), bound)
    table_s = time.perf_counter() - t
    times = time_calls(samplers, repeats)
    return {
        "sigma": sigma, "n": n, "repeats": repeats, "table_build_s": table_s,
        "samplers": {name: {"median_s": statistics.median(v), "min_s": min(v),
                            "samples_per_s": n / statistics.median(v)} for name, v in times.items()},
    }
