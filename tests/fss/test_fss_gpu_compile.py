"""Every GPU kernel compiles ahead of time for an H100 (CUDA sm_90) without a GPU: Triton's
compiler (to PTX and, through the ptxas Triton ships, a cubin) catches what its CPU interpreter
does not check (types of loop-carried values, constexpr branches, pointer arithmetic).  Slow
(about a minute of CPU: the AES rounds are unrolled), so marked slow; run with ``-m slow``."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs Triton: pip install 'secemb[gpu]'"),
]

_SCRIPT = r'''
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from secemb.fss.gpu import _triton as k

def sig(names, types):
    return dict(zip(names, types))

def compile_(fn, signature, constexprs):
    out = triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constexprs),
                         target=GPUTarget("cuda", 90, 32))
    assert out.asm["cubin"] and out.asm["ptx"], fn
    print(fn.__name__, constexprs)

compile_(k.mmo_kernel, {"src_ptr": "*i64", "dst_ptr": "*i64", "n": "i32", "rk_ptr": "*i32", "tab_ptr": "*i32",
                        "BLOCK": "constexpr"}, {"BLOCK": 256})
compile_(k.level_kernel, {"x_ptr": "*i64", "out_ptr": "*i64", "cw_ptr": "*i64", "parents": "i32", "need": "i32",
                          "level": "i32", "depth": "i32", "total": "i32", "rkl_ptr": "*i32", "rkr_ptr": "*i32",
                          "tab_ptr": "*i32", "BLOCK": "constexpr"}, {"BLOCK": 256})
for r64 in (False, True):
    ring = "*i64" if r64 else "*i32"
    compile_(k.retrieval_kernel, {"leaf_ptr": "*i64", "cw_ptr": ring, "e_ptr": ring, "t_ptr": "*u8", "m": "i32",
                                  "total": "i32", "party": "i32", "rk_ptr": "*i32", "tab_ptr": "*i32",
                                  "RING64": "constexpr", "BLOCK": "constexpr"}, {"RING64": r64, "BLOCK": 256})
    compile_(k.convert_sum_kernel, {"leaf_ptr": "*i64", "acc_ptr": ring, "users": "i32", "groups": "i32", "m": "i32",
                                    "width": "i32", "rk_ptr": "*i32", "tab_ptr": "*i32", "RING64": "constexpr",
                                    "BLOCK": "constexpr"}, {"RING64": r64, "BLOCK": 256})
    compile_(k.ring_matmul_kernel, {"e_ptr": ring, "tab_ptr": ring, "out_ptr": ring, "users": "i32", "groups": "i32",
                                    "m": "i32", "d": "i32", "m_split": "i32", "RING64": "constexpr",
                                    "BU": "constexpr", "BD": "constexpr", "BM": "constexpr"},
             {"RING64": r64, "BU": 16, "BD": 16, "BM": 16})
print("compiled")
'''


def test_every_kernel_compiles_for_sm90_without_a_gpu() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # the compiler, not the interpreter
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    res = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env, timeout=1800)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip().endswith("compiled")
