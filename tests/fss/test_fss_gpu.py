"""The GPU kernels (``secemb.fss.gpu``) against the CPU path, bit for bit, on small domains.

Without a CUDA device the kernels run under Triton's CPU interpreter (``TRITON_INTERPRET=1``,
set here before the kernels are imported); with one, the same tests run on the GPU.  The
interpreter runs one numpy operation per Triton operation per program, about 0.3 s per AES
over a block of leaves on this machine, so the domains are small.  Skipped where Triton is
not installed (``pip install 'secemb[gpu]'``).
"""

from __future__ import annotations

import importlib.util
import os
import sys

import numpy as np
import pytest
import torch

if importlib.util.find_spec("triton") is None:
    pytest.skip("the GPU kernels need Triton: pip install 'secemb[gpu]'", allow_module_level=True)
if not torch.cuda.is_available():
    # before Triton is imported: its own jit functions (tl.zeros, ...) must be interpreted too
    if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("Triton was imported before TRITON_INTERPRET=1 was set", allow_module_level=True)
    os.environ["TRITON_INTERPRET"] = "1"

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes  # noqa: E402

from secemb import fss  # noqa: E402
from secemb.errors import InvalidParameters  # noqa: E402
from secemb.fss import gpu, tree  # noqa: E402
from secemb.fss.cuckoo import CuckooLayout  # noqa: E402
from secemb.fss.fused import RETRIEVAL_TAG  # noqa: E402
from secemb.fss.gpu import evaluate as gpu_eval  # noqa: E402
from secemb.fss.gpu.tables import SBOX, expand_key  # noqa: E402
from secemb.fss.prg import fixed_key  # noqa: E402
from secemb.protocols.backends import SerialBackend  # noqa: E402
from secemb.fss.tasks import evaluate_task, evaluation_form  # noqa: E402
from secemb.randomness import CtrDrbg  # noqa: E402

DEV = gpu.device()


def _cpu(layout, party: int, keys, table: np.ndarray, width: int):  # noqa: ANN001, ANN202
    """The CPU evaluation of the same keys (what a server with the serial backend computes)."""
    handle = SerialBackend().publish(evaluation_form(table, layout, 8 * table.dtype.itemsize))
    # no point-function check (issue 34): the answers, bits and folded part only
    return evaluate_task(("full" if layout == "full" else "cuckoo", party, keys, handle, width, None, None))[:3]


def _words(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.integers(0, 2**64, (n, 2), dtype=np.uint64)


def test_sbox_and_key_schedule_match_fips197() -> None:
    # FIPS-197 appendix A.1: key 2b7e1516 28aed2a6 abf71588 09cf4f3c, last round key
    # d014f9a8 c9ee2589 e13f0cc8 b6630ca6 (big-endian words; stored little-endian here)
    rk = expand_key(bytes.fromhex("2b7e151628aed2a6abf7158809cf4f3c"))
    assert rk[40:].astype("<u4").tobytes() == bytes.fromhex("d014f9a8c9ee2589e13f0cc8b6630ca6")
    assert (SBOX[0x00], SBOX[0x53], SBOX[0xFF]) == (0x63, 0xED, 0x16)


def test_aes_kernel_matches_openssl() -> None:
    """MMO through the kernel's T-table AES equals ``AES(x) ^ x`` through OpenSSL, for a
    random key (not only the fixed ones) and more words than one program block."""
    rng = np.random.default_rng(1)
    words = _words(rng, 4100)
    name = "test/gpu-aes"
    got = gpu_eval.mmo(torch.from_numpy(words.view(np.int64)).to(DEV), name).cpu().numpy().view(np.uint64)
    enc = Cipher(algorithms.AES(fixed_key(name)), modes.ECB()).encryptor()
    want = np.frombuffer(enc.update(words.tobytes()), np.uint64).reshape(-1, 2) ^ words
    assert np.array_equal(got, want)


@pytest.mark.parametrize(("m", "party"), [(1, 0), (2, 1), (13, 1)])
def test_tree_walk_matches_cpu_leaves(m: int, party: int) -> None:
    """Every leaf word (seed and control bit) of a pruned full-domain walk equals the CPU's."""
    alphas = np.random.default_rng(m).integers(0, m, 3)
    path = fss.gen_path(alphas, m, _rng=CtrDrbg(m))[:2][party]
    got = gpu_eval.expand(path, DEV).cpu().numpy().view(np.uint64)
    assert np.array_equal(got, tree.expand(path))


def _retrieval_keys(alphas: np.ndarray, m: int, ring_bits: int, seed: int) -> tuple[fss.DPFKeys, fss.DPFKeys]:
    p0, p1, state = fss.gen_path(alphas, m, _rng=CtrDrbg(seed))
    dtype = np.uint32 if ring_bits == 32 else np.uint64
    cw = fss.convert_gen(state, np.ones((len(alphas), 1), dtype), ring_bits=ring_bits, tag=RETRIEVAL_TAG)
    params = fss.DPFParams(m, 1, ring_bits)
    return fss.DPFKeys(p0, cw, params), fss.DPFKeys(p1, cw, params)


def _table(rng: np.random.Generator, m: int, d: int, ring_bits: int) -> np.ndarray:
    dtype = np.uint32 if ring_bits == 32 else np.uint64
    return rng.integers(0, 2**ring_bits, (m, d), dtype=np.uint64).astype(dtype)


def _assert_same(got: tuple, want: tuple) -> None:
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert np.array_equal(g, w)


@pytest.mark.parametrize(("ring_bits", "party"), [(32, 0), (64, 1)])
def test_full_layout_evaluation_matches_cpu(ring_bits: int, party: int) -> None:
    """Answers (retrieval inner product), packed control bits and the signed aggregation
    conversion sum of four keys over 21 items, d = 3, w = 5 (ring 32: two conversion blocks
    per leaf, the second one partly used) or w = 3 (ring 64: two blocks)."""
    rng = np.random.default_rng(ring_bits)
    m, width = 21, 5 if ring_bits == 32 else 3
    keys = _retrieval_keys(rng.integers(0, m, 4), m, ring_bits, seed=3)[party]
    table = _table(rng, m, 3, ring_bits)
    got = gpu.DeviceTable(table, "full", DEV).evaluate(party, keys, width)
    want = _cpu("full", party, keys, table, width)
    _assert_same(got, want)


@pytest.mark.parametrize(("ring_bits", "party"), [(64, 0), (32, 1)])
def test_cuckoo_layout_evaluation_matches_cpu(ring_bits: int, party: int) -> None:
    """The bucket form: two users' keys over 3 buckets of a 10-item layout, key ``u B + i``
    reading bucket ``i``; answers, control bits (K, M) and the per-bucket conversion sums."""
    rng = np.random.default_rng(ring_bits + 1)
    layout = CuckooLayout(10, 3, seed=5)
    big_m = layout.bucket_size
    keys = _retrieval_keys(rng.integers(0, big_m, 6), big_m, ring_bits, seed=4)[party]
    table = _table(rng, 10, 2, ring_bits)
    got = gpu.DeviceTable(table, layout, DEV).evaluate(party, keys, 3)
    want = _cpu(layout, party, keys, table, 3)
    _assert_same(got, want)


def test_chunked_evaluation_matches_one_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys split into per-user chunks (a tiny leaf budget) accumulate the CPU's results."""
    rng = np.random.default_rng(9)
    m = 4
    keys = _retrieval_keys(rng.integers(0, m, 2), m, 32, seed=6)[0]
    table = _table(rng, m, 2, 32)
    monkeypatch.setattr(gpu_eval, "LEAF_BUDGET", 1)
    got = gpu.DeviceTable(table, "full", DEV).evaluate(0, keys, 2)
    _assert_same(got, _cpu("full", 0, keys, table, 2))


def test_evaluation_rejects_mismatched_keys() -> None:
    rng = np.random.default_rng(2)
    keys = _retrieval_keys(np.array([1, 2]), 5, 32, seed=1)[0]
    dt = gpu.DeviceTable(_table(rng, 6, 2, 32), "full", DEV)
    with pytest.raises(InvalidParameters, match="do not match the table"):
        dt.evaluate(0, keys, 2)
    with pytest.raises(InvalidParameters, match="party"):
        gpu.DeviceTable(_table(rng, 5, 2, 32), "full", DEV).evaluate(1, keys, 2)


def _protocol_round(secemb_round, backend, layout: str, relay: bool) -> tuple[list[bytes], np.ndarray, np.ndarray]:
    """Two users through one SecEmb round (12 items, m' = 2, d = 3); every reply to a user
    and the combined aggregate."""
    proto, cfg, rng, table, s0, s1 = secemb_round(layout=layout, relay=relay, backend=backend, round_id=1, num_items=12,
                                                  width=3, dense_size=1, m_prime=2, seed=11)
    users = [proto.make_user(cfg, _rng=CtrDrbg(100 + u)) for u in range(2)]
    items = [np.array([1, 7]), np.array([4, 11])]
    slots = [it if layout == "full" else cfg.cuckoo().assign(it, rng)[0] for it in items]
    reqs = [users[u].retrieval_request(slots[u]) for u in range(2)]
    a1 = s1.handle_retrieval_many([(u, reqs[u][1]) for u in range(2)])
    a0 = s0.handle_retrieval_many([(u, reqs[u][0]) for u in range(2)])
    if relay:
        masked = s1.relay_retrieval_many([(u, a0[u]) for u in range(2)])
        a0 = [s0.complete_retrieval(u, masked[u]) for u in range(2)]
    for u in range(2):
        rows = users[u].retrieval_result(a0[u], a1[u])
        real = slots[u] >= 0
        assert np.array_equal(rows[real], table[slots[u][real]])
        grads = np.zeros((cfg.slots, 3), np.uint32)
        grads[real] = 1000 * u + 1
        up0, up1 = users[u].upload(grads, np.zeros(1, np.uint32))
        fwd = s0.handle_upload(u, up0)
        if up1 is not None:
            s1.handle_upload(u, up1)
        if fwd is not None:
            s1.relay_upload(u, fwd)
    sparse, dense = s0.combine(s1.aggregate_share())
    return [bytes(a) for a in a0 + a1 if a is not None], sparse, dense


def test_gpu_backend_round_is_bit_identical_to_serial(secemb_round) -> None:
    """A whole SecEmb round (cuckoo layout, relay) through ``--backend gpu``: the same reply
    bytes and the same aggregate as the serial CPU backend."""
    from secemb.protocols.backends import SerialBackend, make_backend

    on_gpu = _protocol_round(secemb_round, make_backend("gpu"), "cuckoo", True)
    serial = _protocol_round(secemb_round, SerialBackend(), "cuckoo", True)
    assert on_gpu[0] == serial[0]
    assert np.array_equal(on_gpu[1], serial[1]) and np.array_equal(on_gpu[2], serial[2])


def test_gpu_bench_harness_runs_under_the_interpreter() -> None:
    """The harness of ``secemb bench fss --device cuda`` (quick, on the interpreter's CPU
    tensors): every documented field, and the table shares of the AES rate.  The figures are
    not asserted (timings of the interpreter are not GPU figures)."""
    from secemb.bench import gpu as bench_gpu

    result = bench_gpu.run(quick=True, _device=DEV)
    assert set(result) >= {"device", "aes_blocks_per_s", "walk_leaves_per_s", "retrieval_leaves_per_s",
                           "aggregation_leaves_per_s", "aggregation_aes_share", "yelp_round_s", "machine"}
    assert result["yelp_round_s"] is None
    rows = bench_gpu.table_rows(result)
    assert rows[0][2] == "1.000" and len(rows) == 4


@pytest.mark.parametrize("ring_bits", [32, 64])
def test_ring_matmul_split_over_the_domain_matches_cpu(monkeypatch: pytest.MonkeyPatch, ring_bits: int) -> None:
    """The retrieval product with its inner dimension split into slices summed by atomics (as
    on a GPU for a thin product) equals the CPU's exact ring product, per group."""
    from secemb.fss.linalg import ring_matmul

    monkeypatch.setattr(gpu_eval, "MATMUL_MIN_SLICE", 8)
    rng = np.random.default_rng(ring_bits + 7)
    e = _table(rng, 2 * 3, 300, ring_bits).reshape(2, 3, 300)  # (users, groups, m)
    table = _table(rng, 3 * 300, 5, ring_bits).reshape(3, 300, 5)
    signed = np.int32 if ring_bits == 32 else np.int64
    got = gpu_eval.ring_matmul(torch.from_numpy(e.view(signed)).to(DEV), torch.from_numpy(table.view(signed)).to(DEV))
    want = ring_matmul(e.transpose(1, 0, 2), table, ring_bits).transpose(1, 0, 2)
    assert np.array_equal(got.cpu().numpy().view(e.dtype), want)


@pytest.mark.parametrize("ring_bits", [32, 64])
def test_bits_product_matches_cpu(ring_bits: int) -> None:
    """The cuckoo layout's control-bit part of the aggregation, ``t[g] @ CW[g]`` per bucket,
    equals the CPU's exact product (0/1 left operand)."""
    from secemb.fss.linalg import ring_matmul

    rng = np.random.default_rng(ring_bits + 3)
    t = rng.integers(0, 2, (3, 7, 5), dtype=np.uint8)  # (B, M, U)
    cw = _table(rng, 3 * 5, 4, ring_bits).reshape(3, 5, 4)  # (B, U, w)
    got = gpu.DeviceTable(_table(rng, 10, 1, ring_bits), "full", DEV).bits_product(t, cw)
    assert got.dtype == cw.dtype
    assert np.array_equal(got, ring_matmul(t, cw, ring_bits, a_bits=1))


def test_warm_up_launches_every_kernel_variant(capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """``python -m secemb.fss.gpu.warmup``: one row per kernel variant (five kernels, three in
    both rings), each launched twice; nothing compiles under the interpreter.  Without a device
    it says why in one line and exits 2."""
    from secemb.fss.gpu import warmup

    rows = list(warmup.warm_up(DEV))
    assert [r.variant for r in rows] == [
        "mmo_kernel", "level_kernel",
        "retrieval_kernel Z_2^32", "ring_matmul_kernel Z_2^32", "convert_sum_kernel Z_2^32",
        "retrieval_kernel Z_2^64", "ring_matmul_kernel Z_2^64", "convert_sum_kernel Z_2^64"]
    assert all(r.first_s > 0 and r.second_s > 0 for r in rows)
    if gpu.interpreting():
        assert all(r.compiled == r.cached == 0 and r.compile_s == 0 for r in rows)
    assert warmup.main() == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 + 8 + 1 and out[-1].startswith("total: ")

    def no_device() -> None:
        raise InvalidParameters("no CUDA device")

    monkeypatch.setattr(gpu, "device", no_device)
    assert warmup.main() == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == "error: no CUDA device\n"
