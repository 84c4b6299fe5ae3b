"""Every GPU kernel compiles ahead of time for an H100 (CUDA sm_90) without a GPU: Triton's
compiler (to PTX and, through the ptxas Triton ships, a cubin) catches what its CPU interpreter
does not check (types of loop-carried values, constexpr branches, pointer arithmetic).  Also: every
integer argument of every kernel is unspecialised (so no size compiles a new variant), and
:func:`secemb.fss.gpu.warmup.compile_log` records each compilation and each disk-cache hit.  A few
seconds of CPU since the AES rounds are a loop (unrolled they took about 40 s here: docs/gpu.md)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                                reason="needs Triton: pip install 'secemb[gpu]'")

_SCRIPT = r'''
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from secemb.fss.gpu import _triton as k
from secemb.fss.gpu.warmup import compile_log

VARIANTS = [
    (k.mmo_kernel, {"src_ptr": "*i64", "dst_ptr": "*i64", "n": "i32", "rk_ptr": "*i32", "tab_ptr": "*i32",
                    "BLOCK": "constexpr"}, {"BLOCK": 256}),
    (k.level_kernel, {"x_ptr": "*i64", "out_ptr": "*i64", "cw_ptr": "*i64", "parents": "i32", "need": "i32",
                      "level": "i32", "depth": "i32", "total": "i32", "rkl_ptr": "*i32", "rkr_ptr": "*i32",
                      "tab_ptr": "*i32", "BLOCK": "constexpr"}, {"BLOCK": 256}),
    (k.sketch_kernel, {"leaf_ptr": "*i64", "rk_ptr": "*i32", "r_ptr": "*i64", "r2_ptr": "*i64", "out_ptr": "*i64",
                       "key0": "i32", "stride": "i32", "per_user": "i32", "span": "i32", "tab_ptr": "*i32",
                       "BLOCK": "constexpr"}, {"BLOCK": 256}),
]
for r64 in (False, True):
    ring = "*i64" if r64 else "*i32"
    VARIANTS += [
        (k.retrieval_kernel, {"leaf_ptr": "*i64", "cw_ptr": ring, "e_ptr": ring, "t_ptr": "*u8", "m": "i32",
                              "stride": "i32", "total": "i32", "party": "i32", "rk_ptr": "*i32", "tab_ptr": "*i32",
                              "RING64": "constexpr", "BLOCK": "constexpr"}, {"RING64": r64, "BLOCK": 256}),
        (k.convert_sum_kernel, {"leaf_ptr": "*i64", "acc_ptr": ring, "users": "i32", "groups": "i32", "m": "i32",
                                "stride": "i32", "width": "i32", "rk_ptr": "*i32", "tab_ptr": "*i32",
                                "RING64": "constexpr", "BLOCK": "constexpr"}, {"RING64": r64, "BLOCK": 256}),
        (k.ring_matmul_kernel, {"e_ptr": ring, "tab_ptr": ring, "out_ptr": ring, "users": "i32", "groups": "i32",
                                "m": "i32", "d": "i32", "m_split": "i32", "RING64": "constexpr",
                                "BU": "constexpr", "BD": "constexpr", "BM": "constexpr"},
         {"RING64": r64, "BU": 16, "BD": 16, "BM": 16}),
    ]

def compile_all():
    for fn, signature, constexprs in VARIANTS:
        out = triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constexprs),
                             target=GPUTarget("cuda", 90, 32))
        assert out.asm["cubin"] and out.asm["ptx"], fn

for fn, signature, _ in VARIANTS:
    ints = {name for name, ty in signature.items() if ty == "i32"}
    unspecialised = {p.name for p in fn.params if p.do_not_specialize}
    assert unspecialised == ints, (fn.__name__, sorted(ints ^ unspecialised))
names = [fn.__name__ for fn, _, _ in VARIANTS]
with compile_log() as first:  # a fresh cache directory: every variant compiles
    compile_all()
assert [c.kernel for c in first] == names and not any(c.cache_hit for c in first), first
with compile_log() as again:  # now all of them come from the disk cache
    compile_all()
assert [c.kernel for c in again] == names and all(c.cache_hit for c in again), again
for c in first:
    print(f"{c.kernel} {c.seconds:.2f} s")
print("compiled")
'''


def test_every_kernel_compiles_for_sm90_without_a_gpu(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # the compiler, not the interpreter
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    env["TRITON_CACHE_DIR"] = str(tmp_path)
    res = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip().endswith("compiled")
