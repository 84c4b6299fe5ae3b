"""The compiled kernels generated for other CPUs than this one (session 33, helper Z).

numba compiles for ``NUMBA_CPU_NAME`` / ``NUMBA_CPU_FEATURES`` where they are set, and
:func:`secemb.fss.kernels.host_cpu_features` reports that target's features, so the kernels pick
the code that target can run: a process started with a profile below runs the kernels as a CPU
with only those features would (this CPU has them all; it runs the code LLVM generated for the
profile, no AVX-512 instruction where the profile has none).  A profile lists the features its
CPU has by LLVM's names; the feature string says ``+`` for those and ``-`` for every other
feature this CPU's LLVM knows, so that nothing of this CPU's leaks into the target.

* ``znver3``: AES-NI, VAES, AVX2 and SHA-NI, no AVX-512 (no IFMA) and no AMX (AMD Zen 3): the
  256-bit masked payload sums (``SUM_BITS`` 256), two blocks a vector, the sketch's scalar loop,
  the projections' row kernels with AVX2's signs (two rows a pass), the SHA-NI kernel.
* ``haswell``: AES-NI and AVX2, no VAES and no SHA-NI: one block a vector, hashlib's SHA-256.
* ``skylake-avx512``: AVX-512 without VAES, IFMA or AMX: 512-bit sums with 128-bit AES.
* ``x86-64-v3``: AVX2 without AES-NI: the numpy reference (:func:`kernels.available` is false).

Run any test file under a profile: ``eval "$(python tests/fss/test_cpu_profiles.py znver3)"``
then ``python -m pytest tests/fss ...`` in that shell (numba's cache keys each kernel's code by
the CPU name and feature string: each profile compiles once, next to the others).  Here
:func:`test_avx2_kernels_equal_the_reference` runs the hot kernels under ``znver3`` in a fresh
process against the numpy reference, bit for bit, in the same process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from secemb.fss import kernels

_V3 = ("64bit cmov cx8 cx16 fxsr mmx sse sse2 sse3 ssse3 sse4.1 sse4.2 popcnt sahf crc32 avx avx2 bmi bmi2 f16c "
       "fma lzcnt movbe xsave").split()
#: CPU model -> the features (LLVM's names) a CPU of that profile has
PROFILES: dict[str, list[str]] = {
    "znver3": _V3 + ("aes pclmul vaes vpclmulqdq sha adx rdseed rdrnd fsgsbase clflushopt clwb xsavec xsaveopt "
                     "xsaves rdpid prfchw").split(),
    "haswell": _V3 + "aes pclmul fsgsbase rdrnd invpcid xsaveopt".split(),
    "skylake-avx512": _V3 + ("aes pclmul adx rdseed rdrnd fsgsbase clflushopt clwb xsavec xsaveopt xsaves prfchw "
                             "invpcid avx512f avx512cd avx512bw avx512dq avx512vl").split(),
    "x86-64-v3": _V3,
}


def _host() -> dict[str, bool]:
    import llvmlite.binding as llb

    return dict(llb.get_host_cpu_features())


def profile_env(name: str) -> dict[str, str] | None:
    """numba's environment for the profile ``name``, or ``None`` where this CPU lacks one of its
    features (it could not run that code)."""
    host = _host()
    have = set(PROFILES[name])
    if not have <= {f for f, on in host.items() if on}:
        return None
    flat = ",".join(("+" if f in have else "-") + f for f in sorted(host))
    return {"NUMBA_CPU_NAME": name, "NUMBA_CPU_FEATURES": flat}


def _run(name: str, script: str, *args: str, timeout: float) -> dict:
    """The JSON that ``script`` prints last, run with ``args`` in a fresh process under the profile ``name``
    (skipped where this CPU lacks one of its features, or numba is missing)."""
    env = profile_env(name)
    if env is None or not kernels.available():
        pytest.skip(f"this CPU lacks a feature of the {name} profile, or numba is missing")
    done = subprocess.run([sys.executable, "-c", script, *args],
                          env={**os.environ, "SECEMB_FSS_KERNELS": "numba", **env},
                          capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(("flat", "on"), [
    ("+aes,+avx,+avx2,+vaes,-avx512f,+avx512vl", {"aes", "avx", "avx2", "vaes"}),  # vl without avx512f: none
    ("+vaes,+aes,+avx2", {"aes"}),  # avx2 without avx (LLVM would add it): neither avx2 nor vaes
    ("+aes,-aes,+avx", {"avx"}),  # named both ways: off
    ("+amx-int8,+sha", {"sha"}),  # amx-int8 without amx-tile
    ("", set()),  # numba's "generic": nothing
    (" +aes , +sha,bogus,+", {"aes", "sha"}),
])
def test_a_feature_string_enables_what_it_names_with_its_requirements(flat: str, on: set[str]) -> None:
    got = kernels._named_features(flat)
    assert {f for f, v in got.items() if v} == on


def test_by_default_the_features_are_this_cpus() -> None:
    """Without ``NUMBA_CPU_FEATURES`` (and with numba's AVX on): LLVM's host features, every one of them."""
    from numba.core import config

    if config.CPU_FEATURES is not None or not config.ENABLE_AVX:
        pytest.skip("this process runs under a CPU profile")
    assert kernels.host_cpu_features() == _host()


_FEATURES = """
import json, sys
from secemb.fss import kernels
f = kernels.host_cpu_features()
print(json.dumps({"on": sorted(k for k, v in f.items() if v), "backend": kernels.BACKEND,
                  "numba": "numba" in sys.modules and "secemb.fss._aesni" in sys.modules}))
"""


def test_without_aes_ni_the_reference_runs() -> None:
    """``x86-64-v3`` (AVX2, no AES-NI): the features are the profile's, the backend the numpy reference, and
    no kernel module is imported."""
    got = _run("x86-64-v3", _FEATURES, timeout=120)
    assert got == {"on": sorted(PROFILES["x86-64-v3"]), "backend": "numpy", "numba": False}


#: run in a fresh process under a profile with the sections to run as arguments ("core", "more"): prints the
#: paths the kernels took, what the machine code holds, and for each comparison whether the compiled results
#: equal the numpy reference's (or hashlib's) bit for bit
_KERNELS = r"""
import hashlib, json, os, re, sys
import numpy as np
from numba import njit
from secemb import fss
from secemb.fss import kernels, _aesni, _sketch_kernels, _projection_kernels
from secemb.fss.convert import convert_accumulate
from secemb.fss.fused import AGGREGATION_TAG, RETRIEVAL_TAG, retrieve_and_prepare_buckets
from secemb.fss.hashing import sha256_many, shake128_many
from secemb.fss.projections import project_each
from secemb.fss.sketch import SketchCheck, device_inputs_many, expand
from secemb.fss.tree import padded_leaves
from secemb.randomness import CtrDrbg

f = kernels.host_cpu_features()
facts = {"on": sorted(k for k in ("aes", "vaes", "avx2", "sha", "avx512f", "avx512ifma", "amx-tile") if f.get(k)),
         "backend": kernels.BACKEND, "lanes": _aesni.LANES, "sum_bits": _aesni.SUM_BITS, "ifma": _aesni.IFMA,
         "scalar_sketch": _sketch_kernels.sketch_accumulate is _sketch_kernels.sketch_accumulate_scalar,
         "tiles": _projection_kernels.tiles(), "dots": _projection_kernels.DOTS,
         "sign_rows": _projection_kernels.SIGN_ROWS,
         "sha": kernels.sha_compiled()}

# LLVM's machine code here, compiled now (not loaded from a cache): four keys' sums of 2 vectors (SUM_BITS) and
# the MMO of 16 blocks
sum4, mmo = _aesni.sum_keys4, _aesni.mmo_blocks
@njit
def key_sums(vals, acc, rows, keys):
    sum4(np.int64(vals.ctypes.data), np.int64(vals.strides[0]), np.int64(acc.ctypes.data), np.int64(acc.strides[0]),
         np.int64(rows.ctypes.data), np.int64(keys.ctypes.data), 3, 4, 2, 5, 0, vals[0, 0])
@njit
def blocks(rk, src, dst):
    mmo(rk.ctypes.data, src.ctypes.data, dst.ctypes.data)
vals = np.zeros((12, 32), np.uint32)
key_sums(vals, np.zeros((1, 32), np.uint32), np.zeros(12, np.int64), np.array([vals.ctypes.data] * 4, np.int64))
blocks(_aesni.round_keys("x")[0], np.zeros((16, 2), np.uint64), np.zeros((16, 2), np.uint64))
asm = "".join(next(iter(fn.inspect_asm().values())) for fn in (key_sums, blocks))
facts["asm"] = {"widest": next(r for r in ("zmm", "ymm", "xmm") if r in asm), "aes": "aesenc" in asm,
                "aes256": re.search(r"vaesenc\s.*ymm", asm) is not None}

gen = np.random.default_rng(33)
same = {}

def both(name, fn):
    out = []
    for backend in ("numpy", "numba"):
        kernels.BACKEND = backend
        got = fn()
        out.append([np.asarray(x) for x in (got if isinstance(got, tuple) else (got,))])
    kernels.BACKEND = "numba"
    same[name] = all(a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
                     for a, b in zip(*out, strict=True))

def walks(ring, width, sketch):
    # the bounded round's walk of both parties: retrieval, aggregation and payload sums (and the sketch check)
    sizes, big_m, users = np.array([20, 13, 1, 7]), 20, 3
    alphas = gen.integers(0, sizes, (users, len(sizes))).reshape(-1)
    p0, p1, state = fss.gen_path(alphas, big_m, _rng=CtrDrbg(width))
    cw = fss.convert_gen(state, np.ones((len(alphas), 1), ring), ring_bits=8 * ring().itemsize, tag=RETRIEVAL_TAG)
    tables = gen.integers(0, np.iinfo(ring).max, (len(sizes), big_m, 2), dtype=ring, endpoint=True)
    seeds = [os.urandom(16) for _ in range(users)]
    mp = padded_leaves(p0.params)
    for party, path in ((0, p0), (1, p1)):
        def walk():
            check = SketchCheck(expand(seeds, mp), len(sizes)) if sketch else None
            *got, sums = retrieve_and_prepare_buckets(path, party, cw, tables, width, sizes=sizes, check=check,
                                                      payload_sums=True)
            return (*got, sums.key_conv, sums.t_count) + ((check.values,) if sketch else ())
        both(f"walk {ring.__name__} party {party}" + (" sketch" if sketch else ""), walk)
    if sketch:
        both(f"device sketches {ring.__name__}", lambda: device_inputs_many(
            seeds, mp, alphas.reshape(users, -1), state.leaf0.reshape(users, -1, 2), state.leaf1.reshape(users, -1, 2)))

def sums(ring, widths):
    # convert_accumulate's both sums for each count of vectors and lanes of the last (keys cut by the words)
    for width in widths:
        words = gen.integers(0, 2**64, (700, 2), dtype=np.uint64)
        live = gen.random(96) < 0.8
        def run():
            acc = np.zeros((96, width), ring)
            key_acc, key_t = np.full((1, 40, width), 7, ring), np.zeros((1, 40), np.int64)
            convert_accumulate(words, AGGREGATION_TAG, acc, 5, live, key_acc=key_acc, period=24, key_t=key_t,
                               fresh=True)
            return acc, key_acc, key_t
        both(f"sums {ring.__name__} w={width}", run)

def projections(ring):
    x = gen.integers(0, np.iinfo(ring).max, (5, 203), dtype=ring, endpoint=True)
    seeds = [os.urandom(16) for _ in range(5)]
    both(f"projections {ring.__name__}", lambda: project_each(seeds, x, 40))

rows = gen.integers(0, 256, (11, 87), dtype=np.uint8)
if "core" in sys.argv[1:]:
    walks(np.uint32, 33, False)
    sums(np.uint32, (1, 7, 8, 9, 15, 16, 17, 24, 65))
    projections(np.uint32)
    same["sha256"] = sha256_many(b"pre", rows).tolist() == [list(hashlib.sha256(b"pre" + r.tobytes()).digest())
                                                             for r in rows]
if "more" in sys.argv[1:]:
    walks(np.uint32, 17, True)
    walks(np.uint64, 9, True)
    sums(np.uint64, (1, 3, 4, 5, 8, 9, 33))
    projections(np.uint64)
    same["shake128"] = shake128_many(b"p", rows, 300).tolist() == [
        list(hashlib.shake_128(b"p" + r.tobytes()).digest(300)) for r in rows]
facts["same"] = same
print(json.dumps(facts))
"""

#: the paths each profile's kernels take and what their machine code holds
_PATHS = {
    "znver3": {"on": ["aes", "avx2", "sha", "vaes"], "backend": "numba", "lanes": 2, "sum_bits": 256, "ifma": False,
               "scalar_sketch": True, "tiles": False, "dots": False, "sign_rows": 2, "sha": True,
               "asm": {"widest": "ymm", "aes": True, "aes256": True}},
    "haswell": {"on": ["aes", "avx2"], "backend": "numba", "lanes": 1, "sum_bits": 256, "ifma": False,
                "scalar_sketch": True, "tiles": False, "dots": False, "sign_rows": 2, "sha": False,
                "asm": {"widest": "ymm", "aes": True, "aes256": False}},
    "skylake-avx512": {"on": ["aes", "avx2", "avx512f"], "backend": "numba", "lanes": 1, "sum_bits": 512,
                       "ifma": False, "scalar_sketch": True, "tiles": False, "dots": False, "sign_rows": 4,
                       "sha": False,
                       "asm": {"widest": "zmm", "aes": True, "aes256": False}},
}
#: the comparisons of each section
_CORE = 2 + 9 + 1 + 1
_MORE = 2 + 1 + 2 + 1 + 7 + 1 + 1


def _kernels_under(name: str, sections: list[str]) -> None:
    got = _run(name, _KERNELS, *sections, timeout=600)
    same = got.pop("same")
    assert got == _PATHS[name]
    assert len(same) == ("core" in sections) * _CORE + ("more" in sections) * _MORE
    assert [k for k, v in same.items() if not v] == []


def test_avx2_kernels_equal_the_reference() -> None:
    """Under ``znver3`` (VAES and AVX2, no AVX-512, IFMA or AMX) in a fresh process: the kernels take that CPU's
    paths (two AES blocks a vector, 256-bit masked sums, the sketch's scalar loop, the projections' row kernels
    with two sign rows a pass, SHA-NI), LLVM's code has VAES on 256-bit vectors and no 512-bit register, and the
    compiled results equal the numpy reference's bit for bit: the bounded round's walk of both parties in uint32
    (answers, aggregation bits and sums, payload sums and counts), ``convert_accumulate``'s both sums at every
    count of vectors and lanes of the last (1 to 65 words: ``sum_keys1`` and ``sum_keys4``), the projections; and
    the SHA-256 batches equal hashlib's.  About 20 s of CPU where this profile's numba cache is cold."""
    _kernels_under("znver3", ["core"])


@pytest.mark.slow
@pytest.mark.parametrize(("name", "sections"), [
    ("znver3", ["more"]), ("haswell", ["core", "more"]), ("skylake-avx512", ["core", "more"])])
def test_other_cpus_kernels_equal_the_reference(name: str, sections: list[str]) -> None:
    """As :func:`test_avx2_kernels_equal_the_reference`, and the rest ("more": the walk with the sketch check,
    in uint32 and uint64, the devices' sketches, the uint64 sums and projections, SHAKE-128 batches against
    hashlib), under ``znver3``, ``haswell`` (AES-NI without VAES: one block a vector; hashlib's SHA-256) and
    ``skylake-avx512`` (512-bit sums with 128-bit AES, no IFMA).  About a minute of CPU each where the
    profile's numba cache is cold."""
    _kernels_under(name, sections)


if __name__ == "__main__":  # for a shell: eval "$(python tests/fss/test_cpu_profiles.py haswell)"
    env = profile_env(sys.argv[1])
    if env is None:
        sys.exit(f"this CPU lacks a feature of {sys.argv[1]}")
    print("export " + " ".join(f"{k}={v}" for k, v in env.items()))
