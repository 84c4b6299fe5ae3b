"""``secemb bench overhead`` (issue 37, goal 1): what the secure path costs beyond its cryptography.

One run measures, on this machine, two ratios:

Per epoch (in this process)
    The same experiment (``secemb train``'s defaults: SecEmb with the cuckoo layout and relay,
    the serial backend) trained once with ``protocol="plaintext"`` and once with ``"secemb"``;
    each epoch's CPU time on the process CPU clock (``time.process_time`` between the ends of
    consecutive epochs, the first from the start of training), and, in both runs, the DPF
    kernels' own CPU time: the thread CPU clock (``time.thread_time``) accumulated around
    every call of the kernels' Python entry points (:func:`kernel_clock`; no profiler).
    ``beyond = secure - plaintext`` CPU of the same epoch and ``ratio = beyond / kernels``
    (goal: at most 1.25).  Epoch 1 pays the first kernel calls; the figure is that of the last
    epoch (``epochs >= 2``).  ``--repeat N`` trains N alternating pairs (plaintext, secure) and
    gives the median of their ratios and its range: one pair's figure moves with the machine's
    speed between the two runs.  Beside it, informative and not the goal, the secure path's other
    cryptography measured the same way (below), ``beyond / (kernels + other cryptography)`` and
    the glue, ``beyond - kernels - other cryptography`` (``glue_s``: what batching can remove).
Whole process
    CPU time (user + system, of the child process) of ``python -m secemb train --dataset D
    --epochs E`` against the same with ``--protocol plaintext`` (goal: at most 1.5), and both
    runs' ``model_sha256``, which must agree (the secure path computes the plaintext model bit
    for bit).

The kernels' entry points are the compiled kernels of :mod:`secemb.fss._numba_kernels` and
:mod:`secemb.fss._sketch_kernels` (the sketch check) that Python calls (callers import them at
call time, so a timing wrapper installed as the module's attribute sees every call) except the
cuckoo layout's assignment, which is no cryptography; with the numpy reference
(``SECEMB_FSS_KERNELS=numpy``) the AES of the DPF's PRGs
(:meth:`~secemb.fss.prg.FixedKeyAES.encrypt_into` under the ``tree/`` and ``convert/`` keys).
CPU times do not depend on other processes' load as wall times do, but they are not free of it
(shared caches, frequency): compare only figures of one run.

Beside them, informative, each run's Python garbage collection per epoch (thread CPU between the
collector's start and stop callbacks, all generations, :func:`gc_clock`): a full collection walks
the whole heap (tens of ms after numba's imports) and falls in whichever epoch the allocation
counts reach its threshold, so one epoch of either run may carry one and the other not.

The other cryptography (:data:`OTHER_CRYPTO`, by category) is timed around the project's functions
that do nothing but it -- the relay's upload MAC (GMAC), the key / forwarded-part / verified-upload
SHA-256 digests, the row tags (SHA-NI kernel or hashlib), the sketch check's seeds (HMAC-SHA256) and
binding, the sketch check's expansion, device inputs and proof (prover, server 1's proof shares, verifier
messages and decision), OS randomness
(:func:`secemb.randomness.system_rng`) -- each replaced in every loaded ``secemb`` module that
holds it (``from ... import`` binds it there), never :mod:`hashlib` or :mod:`os` themselves.  A
call made inside another timed one is not counted again.  Not counted: hashes written inline in
larger functions (a device's check of the round's dense vector, the round document's digest),
tag and digest comparisons, and randomness read through a default argument bound at import (SFSL, SecEA).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from secemb.bench.child import run_child
from secemb.bench.machine import machine_info

__all__ = ["GOAL_EPOCH", "GOAL_PROCESS", "OTHER_CRYPTO", "KernelClock", "gc_clock", "kernel_clock", "run", "table_rows"]

#: issue 37's goals: secure CPU beyond plaintext per epoch / kernel CPU, and whole-process CPU ratio
GOAL_EPOCH = 1.25
GOAL_PROCESS = 1.5
#: compiled kernels that are not the DPF's (the cuckoo layout's assignment; a device's unmasking
#: and check of its answers, glue compiled)
_NOT_DPF = frozenset({"cuckoo_assign", "unmask_slots"})
_DPF_AES_PREFIXES = ("tree/", "convert/")
#: the secure path's cryptography that is no DPF kernel: category -> the (module, attribute) of the
#: project functions that do nothing but it ("Class.method" for a method)
OTHER_CRYPTO: dict[str, tuple[tuple[str, str], ...]] = {
    "upload mac": (("secemb.protocols.secemb.relay", "upload_mac"), ("secemb.protocols.secemb.relay", "upload_macs")),
    "sha256 digests": (("secemb.protocols.secemb.checks", "key_digests"), ("secemb.protocols.secemb.relay", "_digests"),
                       ("secemb.protocols.secemb.server", "SecEmbServer.upload_digests")),
    "row tags": (("secemb.fss.hashing", "sha256_many"),),
    "sketch seeds": tuple(("secemb.protocols.secemb.checks", f) for f in (
        "round_secret", "sketch_seeds", "sketch_halves", "sketch_half_rows", "query_seeds", "query_seed_rows",
        "binding", "bindings", "binding_rows")),
    "sketch proof": (*(("secemb.fss.sketch", f) for f in ("expand", "device_inputs", "device_inputs_many")),
                     *(("secemb.fss.sketchproof", f) for f in ("prove", "prove_many", "server1_shares",
                                                                "verifier_messages", "verify"))),
    "os randomness": (("secemb.randomness", "system_rng"),),
}


@dataclass
class KernelClock:
    """Thread CPU seconds spent inside the kernels' entry points, and their calls, per entry
    point; and apart, those of the other cryptography, per category of :data:`OTHER_CRYPTO`
    (updated from any thread)."""

    seconds: dict[str, float] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    other_seconds: dict[str, float] = field(default_factory=dict)
    other_calls: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _inside: threading.local = field(default_factory=threading.local, repr=False)

    @property
    def total_s(self) -> float:
        """All entry points' thread CPU seconds (the DPF kernels; no other cryptography)."""
        return sum(self.seconds.values())

    @property
    def other_s(self) -> float:
        """The other cryptography's thread CPU seconds, all categories."""
        return sum(self.other_seconds.values())

    def timed_other(self, category: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` counting its thread CPU time under the other cryptography's ``category``,
        except when called inside another function this clock times so (counted there)."""

        def call(*args: Any, **kwargs: Any) -> Any:
            if getattr(self._inside, "active", False):
                return fn(*args, **kwargs)
            self._inside.active = True
            t0 = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                elapsed = time.thread_time() - t0
                self._inside.active = False
                with self._lock:
                    self.other_seconds[category] = self.other_seconds.get(category, 0.0) + elapsed
                    self.other_calls[category] = self.other_calls.get(category, 0) + 1

        return call

    def add(self, name: str, seconds: float) -> None:
        """Count one call of ``name`` that took ``seconds`` of its thread's CPU."""
        with self._lock:
            self.seconds[name] = self.seconds.get(name, 0.0) + seconds
            self.calls[name] = self.calls.get(name, 0) + 1

    def timed(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` counting its thread CPU time under ``name``."""

        def call(*args: Any, **kwargs: Any) -> Any:
            t0 = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.add(name, time.thread_time() - t0)

        return call


def _entry_points() -> dict[str, tuple[Any, Any]]:
    """The compiled DPF kernels Python calls, by name: their module and dispatcher -- the public
    numba dispatchers of :mod:`secemb.fss._numba_kernels` and :mod:`secemb.fss._sketch_kernels` that
    no kernel of any kernel module calls by name (a kernel compiled while a wrapper stood in its
    callee's place would not compile: the sketch proof's and the device's kernel modules import
    ``_sketch_kernels``' field helpers, so they are imported here, before any wrapper, and their
    calls counted), less :data:`_NOT_DPF`."""
    from secemb.fss import (_numba_kernels, _rangeproof_kernels, _sketch_device_kernels, _sketch_kernels,
                            _sketchproof_kernels)

    def dispatchers(module: Any) -> dict[str, Any]:
        return {k: v for k, v in vars(module).items() if hasattr(v, "py_func")}

    called = {n for module in (_numba_kernels, _sketch_kernels, _rangeproof_kernels, _sketch_device_kernels,
                               _sketchproof_kernels)
              for v in dispatchers(module).values() for n in v.py_func.__code__.co_names}
    return {k: (module, v) for module in (_numba_kernels, _sketch_kernels) for k, v in dispatchers(module).items()
            if not k.startswith("_") and k not in _NOT_DPF and k not in called}


@contextlib.contextmanager
def _other_crypto_timed(clock: KernelClock) -> Iterator[None]:
    """Within the block, :data:`OTHER_CRYPTO`'s functions count into ``clock``: each replaced by
    a timing wrapper wherever a loaded ``secemb`` module holds it, a method on its class; after
    it, every wrapper found in a ``secemb`` module (one imported within the block included) or
    on the class is the original again."""
    from secemb import randomness
    from secemb.fss import hashing, sketch, sketchproof
    from secemb.protocols.secemb import checks, relay, server

    # OTHER_CRYPTO's modules
    modules = {m.__name__: m for m in (randomness, hashing, sketch, sketchproof, checks, relay, server)}
    swaps: list[tuple[Any, str, Any, Any]] = []  # (class, method name, original, wrapper)
    install: dict[int, Any] = {}  # id(original function) -> its wrapper
    restore: dict[int, Any] = {}  # id(wrapper) -> the original function
    for category, places in OTHER_CRYPTO.items():
        for module_name, attr in places:
            owner: Any = modules[module_name]
            *classes, name = attr.split(".")
            for cls in classes:
                owner = getattr(owner, cls)
            original = vars(owner)[name]
            wrapper = clock.timed_other(category, original)
            if classes:
                swaps.append((owner, name, original, wrapper))
            else:
                install[id(original)], restore[id(wrapper)] = wrapper, original

    def replace(table: dict[int, Any]) -> None:
        """Every attribute of a loaded ``secemb`` module that is a key's object becomes its value."""
        for module in [m for n, m in list(sys.modules.items()) if n.split(".")[0] == "secemb" and m is not None]:
            for key, value in list(vars(module).items()):
                if id(value) in table:
                    setattr(module, key, table[id(value)])

    replace(install)
    for owner, name, _, wrapper in swaps:
        setattr(owner, name, wrapper)
    try:
        yield
    finally:
        for owner, name, original, _ in swaps:
            setattr(owner, name, original)
        replace(restore)


@contextlib.contextmanager
def kernel_clock() -> Iterator[KernelClock]:
    """Within the block, every call of the DPF kernels' entry points (module docstring) adds
    its thread CPU time to the yielded :class:`KernelClock`, and every call of the other
    cryptography's functions (:data:`OTHER_CRYPTO`) to its other-cryptography seconds; the
    originals are restored after."""
    from secemb.fss import kernels
    from secemb.fss.prg import FixedKeyAES

    clock = KernelClock()
    originals = _entry_points() if kernels.compiled() else {}
    encrypt = FixedKeyAES.encrypt_into

    def encrypt_into(self: FixedKeyAES, src: Any, dst: Any) -> Any:
        if not self.name.startswith(_DPF_AES_PREFIXES):
            return encrypt(self, src, dst)
        t0 = time.thread_time()
        try:
            return encrypt(self, src, dst)
        finally:
            clock.add("aes " + self.name.split("/", 1)[0], time.thread_time() - t0)

    for name, (module, fn) in originals.items():
        setattr(module, name, clock.timed(name, fn))
    FixedKeyAES.encrypt_into = encrypt_into  # type: ignore[method-assign]
    try:
        with _other_crypto_timed(clock):
            yield clock
    finally:
        FixedKeyAES.encrypt_into = encrypt  # type: ignore[method-assign]
        for name, (module, fn) in originals.items():
            setattr(module, name, fn)


@contextlib.contextmanager
def gc_clock() -> Iterator[list[float]]:
    """Within the block, the thread CPU seconds of every garbage collection (any generation,
    any thread) are added to the yielded one-element list; the callback is removed after."""
    total = [0.0]
    started = threading.local()

    def callback(phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            started.at = time.thread_time()
        elif hasattr(started, "at"):
            total[0] += time.thread_time() - started.at

    gc.callbacks.append(callback)
    try:
        yield total
    finally:
        gc.callbacks.remove(callback)


def _epochs_in_process(protocol: str, dataset: str, epochs: int, data_dir: str | None) -> dict[str, Any]:
    """Train ``protocol`` in this process; per epoch its process CPU, kernel and garbage
    collection seconds."""
    from secemb.training import Experiment, run_experiment

    marks: list[float] = []
    kernel_marks: list[float] = []
    other_marks: list[dict[str, float]] = []
    gc_marks: list[float] = []
    with kernel_clock() as clock, gc_clock() as collected:

        def mark(*_: Any) -> None:
            marks.append(time.process_time())
            kernel_marks.append(clock.total_s)
            other_marks.append(dict(clock.other_seconds))
            gc_marks.append(collected[0])

        result = run_experiment(Experiment(dataset=dataset, data_dir=data_dir, protocol=protocol, epochs=epochs),
                                on_start=mark, on_epoch=mark)
    cpu = [b - a for a, b in pairwise(marks)]
    kernel = [b - a for a, b in pairwise(kernel_marks)]
    other = [{c: b[c] - a.get(c, 0.0) for c in b} for a, b in pairwise(other_marks)]
    return {"protocol": protocol, "epoch_cpu_s": cpu, "epoch_kernel_s": kernel, "model_sha256": result.model_sha256,
            "epoch_gc_s": [b - a for a, b in pairwise(gc_marks)],
            "kernel_calls": dict(clock.calls), "kernel_s": dict(clock.seconds),
            "epoch_other_crypto_s": [sum(o.values()) for o in other], "epoch_other_crypto_by_category_s": other,
            "other_crypto_calls": dict(clock.other_calls), "other_crypto_s": dict(clock.other_seconds)}


def _process_cpu(args: list[str]) -> tuple[float, str]:
    """CPU seconds (user + system) of ``python -m secemb train ARGS`` in a child process, and
    the model_sha256 of its JSON result.

    Raises
    ------
    SecembError: the child failed (its last line of stderr in the message).
    """
    from secemb.errors import SecembError

    with tempfile.TemporaryDirectory(prefix="secemb-overhead-") as tmp:
        out = Path(tmp) / "result.json"
        done = run_child([sys.executable, "-m", "secemb", "train", *args, "--json-out", str(out)], keep_stdout=False)
        if done.returncode:
            last = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise SecembError(f"secemb train {' '.join(args)} exited {done.returncode}: {last}")
        sha = json.loads(out.read_text(encoding="utf-8"))["model_sha256"]
    return done.cpu_s, str(sha)


def _epoch_pair(dataset: str, epochs: int, data_dir: str | None, say: Callable[[str], None]) -> dict[str, Any]:
    """One plaintext run, then one secure run, in this process: the per-epoch figures of their last
    epoch (:func:`run`'s ``"epoch"``)."""
    say("per epoch: plaintext")
    plain = _epochs_in_process("plaintext", dataset, epochs, data_dir)
    say("per epoch: secure")
    secure = _epochs_in_process("secemb", dataset, epochs, data_dir)
    beyond = secure["epoch_cpu_s"][-1] - plain["epoch_cpu_s"][-1]
    kernel_s = secure["epoch_kernel_s"][-1]
    crypto_s = kernel_s + secure["epoch_other_crypto_s"][-1]
    return {"plaintext": plain, "secure": secure, "epoch": epochs, "plaintext_cpu_s": plain["epoch_cpu_s"][-1],
            "secure_cpu_s": secure["epoch_cpu_s"][-1], "beyond_s": beyond, "kernel_s": kernel_s,
            "ratio": beyond / kernel_s if kernel_s > 0 else None, "goal": GOAL_EPOCH,
            "other_crypto_s": secure["epoch_other_crypto_s"][-1],
            "other_crypto_by_category_s": secure["epoch_other_crypto_by_category_s"][-1],
            "ratio_with_other_crypto": beyond / crypto_s if crypto_s > 0 else None,
            "glue_s": beyond - crypto_s,
            "gc_s": {"plaintext": plain["epoch_gc_s"][-1], "secure": secure["epoch_gc_s"][-1]},
            "same_model": plain["model_sha256"] == secure["model_sha256"]}


_PAIR_KEYS = ("plaintext_cpu_s", "secure_cpu_s", "beyond_s", "kernel_s", "ratio", "other_crypto_s", "glue_s",
              "same_model")


def run(dataset: str = "ml-100k", epochs: int = 2, *, data_dir: str | None = None, process: bool = True,
        repeat: int = 1, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Measure both ratios (module docstring) in one run; a JSON-ready dict.

    ``epochs >= 2`` (the per-epoch figure is the last epoch's, past the first kernel calls);
    ``repeat`` alternating pairs of in-process runs (plaintext, then secure): ``"epoch"`` is the
    first pair's, ``"epoch_pairs"`` every pair's figures (``plaintext_cpu_s``, ``secure_cpu_s``,
    ``beyond_s``, ``kernel_s``, ``ratio``, ``other_crypto_s``, ``glue_s``, ``same_model``) and
    ``"epoch_ratio_median"`` the median of their ratios (``"epoch_glue_median_s"``, informative, of
    their glue): one epoch's CPU moves with the machine's speed between runs (0.84-1.21 s of
    plaintext CPU in eight idle runs of session 33), so a figure to compare with the goal is a
    median of several pairs with its range.  ``process=False`` skips the two child processes (run
    after the in-process runs, which check the dataset and options).  ``progress`` is told each step.

    Raises
    ------
    InvalidParameters: ``epochs < 2``, ``repeat < 1``, or what :func:`~secemb.training.run_experiment` raises.
    SecembError: a child ``secemb train`` failed.
    """
    from secemb.errors import InvalidParameters
    from secemb.fss import kernels

    if epochs < 2:
        raise InvalidParameters(f"epochs must be >= 2 (the first pays the first kernel calls), got {epochs}")
    if repeat < 1:
        raise InvalidParameters(f"repeat must be >= 1 (pairs of runs), got {repeat}")
    say = progress or (lambda _: None)
    load_before = os.getloadavg()
    out: dict[str, Any] = {"machine": machine_info(), "kernels": kernels.BACKEND, "dataset": dataset,
                           "epochs": epochs}
    pairs = []
    for i in range(repeat):

        def step(what: str, i: int = i) -> None:
            say(what if repeat == 1 else f"pair {i + 1} of {repeat}, {what}")

        pair = _epoch_pair(dataset, epochs, data_dir, step)
        out.setdefault("epoch", pair)
        pairs.append({k: pair[k] for k in _PAIR_KEYS})
    out["epoch_pairs"] = pairs
    ratios = [p["ratio"] for p in pairs if p["ratio"] is not None]
    out["epoch_ratio_median"] = statistics.median(ratios) if ratios else None
    out["epoch_glue_median_s"] = statistics.median(p["glue_s"] for p in pairs)
    if process:
        args = ["--dataset", dataset, "--epochs", str(epochs)] + (["--data-dir", data_dir] if data_dir else [])
        say("whole process: plaintext")
        plain_s, plain_sha = _process_cpu([*args, "--protocol", "plaintext"])
        say("whole process: secure")
        secure_s, secure_sha = _process_cpu(args)
        out["process"] = {"plaintext_cpu_s": plain_s, "secure_cpu_s": secure_s, "ratio": secure_s / plain_s,
                          "goal": GOAL_PROCESS, "same_model": plain_sha == secure_sha, "model_sha256": secure_sha}
    out["loadavg"] = {"before": list(load_before), "after": list(os.getloadavg())}
    return out


def table_rows(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(measure, value, goal) rows of a :func:`run` result."""
    e = result["epoch"]
    rows = [
        (f"epoch {e['epoch']}: plaintext CPU s", f"{e['plaintext_cpu_s']:.3f}", ""),
        (f"epoch {e['epoch']}: secure CPU s", f"{e['secure_cpu_s']:.3f}", ""),
        ("  beyond plaintext s", f"{e['beyond_s']:.3f}", ""),
        ("  DPF kernels s (thread CPU)", f"{e['kernel_s']:.3f}", ""),
        ("beyond / kernels", "n/a" if e["ratio"] is None else f"{e['ratio']:.2f}x", f"<= {e['goal']}x"),
        ("  other cryptography s (thread CPU)", f"{e['other_crypto_s']:.3f}", ""),
        ("beyond / (kernels + other crypto), informative",
         "n/a" if e["ratio_with_other_crypto"] is None else f"{e['ratio_with_other_crypto']:.2f}x", "not a goal"),
        ("  glue s: beyond - kernels - other crypto, informative", f"{e['glue_s']:.3f}", "not a goal"),
        ("  Python GC s in the epoch, plaintext / secure (thread CPU)",
         f"{e['gc_s']['plaintext']:.3f} / {e['gc_s']['secure']:.3f}", "informative"),
        ("same model as plaintext (in process)", str(e["same_model"]), "True"),
    ]
    pairs = result.get("epoch_pairs", [])
    if len(pairs) > 1:
        ratios = sorted(p["ratio"] for p in pairs if p["ratio"] is not None)
        rows += [
            (f"beyond / kernels, median of {len(pairs)} alternating pairs",
             "n/a" if result["epoch_ratio_median"] is None else
             f"{result['epoch_ratio_median']:.2f}x ({ratios[0]:.2f}-{ratios[-1]:.2f})", f"<= {e['goal']}x"),
            (f"glue s, median of {len(pairs)} pairs, informative", f"{result['epoch_glue_median_s']:.3f}",
             "not a goal"),
            ("same model in every pair", str(all(p["same_model"] for p in pairs)), "True"),
        ]
    p = result.get("process")
    if p is not None:
        rows += [
            (f"whole train --epochs {result['epochs']}: plaintext CPU s", f"{p['plaintext_cpu_s']:.2f}", ""),
            (f"whole train --epochs {result['epochs']}: secure CPU s", f"{p['secure_cpu_s']:.2f}", ""),
            ("secure / plaintext", f"{p['ratio']:.2f}x", f"<= {p['goal']}x"),
            ("same model_sha256", str(p["same_model"]), "True"),
        ]
    return rows
