"""The GPU kernels (``secemb.fss.gpu``) against the CPU path, bit for bit, on small domains.

Without a CUDA device the kernels run under Triton's CPU interpreter (``TRITON_INTERPRET=1``,
set here while the kernels are imported and while this module's tests run, then restored); with
one, the same tests run on the GPU.  The
interpreter runs one numpy operation per Triton operation per program, about 0.3 s per AES
over a block of leaves on this machine, so the domains are small.  Skipped where Triton is
not installed (``pip install 'secemb[gpu]'``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Iterator

import numpy as np
import pytest
import torch

if importlib.util.find_spec("triton") is None:
    pytest.skip("the GPU kernels need Triton: pip install 'secemb[gpu]'", allow_module_level=True)
#: the environment of this module's imports and tests: without a CUDA device, Triton's interpreter.  Triton reads
#: ``TRITON_INTERPRET`` when ``@triton.jit`` wraps a function (at import: its own, tl.zeros..., and the kernels of
#: secemb.fss.gpu._triton) and again at run time (its constexpr functions; secemb.fss.gpu.interpreting: the device,
#: the block sizes).  Set for good, it made every later ``secemb`` process of the pytest process start fresh
#: instead of forking from the warm template (tests/_server_template.py: a variable read at import), in every xdist
#: worker, as each collects this module: it is set for the imports below and for this module's tests only
#: (:func:`interpreter`), then restored.
INTERPRETER = {} if torch.cuda.is_available() else {"TRITON_INTERPRET": "1"}
if INTERPRETER and "triton" in sys.modules:
    from triton.language.standard import cdiv
    from triton.runtime.interpreter import InterpretedFunction

    if not isinstance(cdiv, InterpretedFunction):  # Triton's own jit functions must be interpreted too
        pytest.skip("Triton was imported without TRITON_INTERPRET=1", allow_module_level=True)



@contextlib.contextmanager
def _interpreted() -> Iterator[None]:
    """:data:`INTERPRETER` set inside, the environment restored after (the imports below, the module's tests)."""
    with pytest.MonkeyPatch.context() as env:
        for name, value in INTERPRETER.items():
            env.setenv(name, value)
        yield


with _interpreted():
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    from secemb import fss
    from secemb.errors import InvalidParameters
    from secemb.fss import field, gpu, sketch, tree
    from secemb.fss.cuckoo import CuckooLayout
    from secemb.fss.fused import RETRIEVAL_TAG
    from secemb.fss.gpu import evaluate as gpu_eval
    from secemb.fss.gpu.tables import SBOX, expand_key, expand_keys
    from secemb.fss.prg import fixed_key
    from secemb.protocols.backends import SerialBackend
    from secemb.fss.tasks import evaluate_task, evaluation_form
    from secemb.randomness import CtrDrbg

    DEV = gpu.device()


@pytest.fixture(scope="module", autouse=True)
def interpreter() -> Iterator[None]:
    """:data:`INTERPRETER` set while this module's tests run, the environment restored after them."""
    with _interpreted():
        yield


#: one key for the servers of runs compared across backends: round_setup's sketch key, and the peer
#: key of the servers made here (each protocol object would draw its own sketch key, and the devices'
#: sketch seeds, in the replies, with it)
SKETCH_KEY = bytes(range(32))


def _cpu(layout, party: int, keys, table: np.ndarray, width: int):  # noqa: ANN001, ANN202
    """The CPU evaluation of the same keys (what a server with the serial backend computes):
    the answers, bits and folded part."""
    handle = SerialBackend().publish(evaluation_form(table, layout, 8 * table.dtype.itemsize))
    return evaluate_task(("full" if layout == "full" else "cuckoo", party, keys, handle, width, None, None))[:3]


def _words(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.integers(0, 2**64, (n, 2), dtype=np.uint64)


def test_sbox_and_key_schedule_match_fips197() -> None:
    # FIPS-197 appendix A.1: key 2b7e1516 28aed2a6 abf71588 09cf4f3c, last round key
    # d014f9a8 c9ee2589 e13f0cc8 b6630ca6 (big-endian words; stored little-endian here)
    rk = expand_key(bytes.fromhex("2b7e151628aed2a6abf7158809cf4f3c"))
    assert rk[40:].astype("<u4").tobytes() == bytes.fromhex("d014f9a8c9ee2589e13f0cc8b6630ca6")
    assert (SBOX[0x00], SBOX[0x53], SBOX[0xFF]) == (0x63, 0xED, 0x16)


def test_key_schedules_of_a_batch_of_keys() -> None:
    """The sketch's per-device schedules, computed for all keys at once: FIPS-197's key among
    random ones gives its last round key in its row (the schedules' agreement with OpenSSL's AES
    is checked through the sketch kernel: ``_sketch_by_hand``); refusals of other shapes."""
    keys = np.random.default_rng(4).integers(0, 256, (5, 16), dtype=np.uint8)
    keys[3] = np.frombuffer(bytes.fromhex("2b7e151628aed2a6abf7158809cf4f3c"), np.uint8)
    rk = expand_keys(keys)
    assert rk.dtype == np.uint32 and rk.shape == (5, 44)
    assert rk[3, 40:].astype("<u4").tobytes() == bytes.fromhex("d014f9a8c9ee2589e13f0cc8b6630ca6")
    assert expand_keys(keys[:0]).shape == (0, 44)
    for bad in (keys.astype(np.int16), keys[:, :15], keys[0]):
        with pytest.raises(InvalidParameters, match="uint8"):
            expand_keys(bad)
    with pytest.raises(InvalidParameters, match="16 bytes"):
        expand_key(bytes(15))


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
                                                  width=3, dense_size=1, m_prime=2, seed=11, sketch_key=SKETCH_KEY)
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
    """``python -m secemb.fss.gpu.warmup``: one row per kernel variant (six kernels, three in
    both rings), each launched twice; nothing compiles under the interpreter.  Without a device
    it says why in one line and exits 2.  The rows are the ones ``main`` printed (one warm-up
    in this test: under the interpreter each takes about 15 s)."""
    from secemb.fss.gpu import warmup

    rows: list[warmup.WarmupRow] = []
    real = warmup.warm_up

    def kept(dev: torch.device):  # noqa: ANN202 - the rows main prints, kept for the test
        for r in real(dev):
            rows.append(r)
            yield r

    monkeypatch.setattr(warmup, "warm_up", kept)
    assert warmup.main() == 0
    assert [r.variant for r in rows] == [
        "mmo_kernel", "level_kernel", "sketch_kernel",
        "retrieval_kernel Z_2^32", "ring_matmul_kernel Z_2^32", "convert_sum_kernel Z_2^32",
        "retrieval_kernel Z_2^64", "ring_matmul_kernel Z_2^64", "convert_sum_kernel Z_2^64"]
    assert all(r.first_s > 0 and r.second_s > 0 for r in rows)
    if gpu.interpreting():
        assert all(r.compiled == r.cached == 0 and r.compile_s == 0 for r in rows)
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 + 9 + 1 and out[-1].startswith("total: ")
    assert [line.split()[0] for line in out[2:-1]] == [r.variant.split()[0] for r in rows]

    def no_device() -> None:
        raise InvalidParameters("no CUDA device")

    monkeypatch.setattr(gpu, "device", no_device)
    assert warmup.main() == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == "error: no CUDA device\n"


def _seeds(rng: np.random.Generator, devices: int, size: int) -> sketch.Expanded:
    """The sketch seeds of ``devices`` devices (public test data) expanded over ``size`` positions."""
    return sketch.expand([rng.bytes(sketch.SKETCH_SEED_BYTES) for _ in range(devices)], size)


def _cpu_sketch(path: fss.PathKeys, expanded: sketch.Expanded, per_user: int) -> np.ndarray:
    """The keys' sketch values as the CPU walk computes them (:class:`SketchCheck` over
    :func:`~secemb.fss.tree.leaf_groups`)."""
    want = sketch.SketchCheck(expanded, per_user)
    for r0, r1, group in tree.leaf_groups(path):
        want.add(r0, r1, group)
    return want.values


def _sketch_by_hand(leaves: np.ndarray, expanded: sketch.Expanded, per_user: int) -> np.ndarray:
    """``(sum r z, sum r^2 z, sum z)`` mod ``p`` per key in Python integers, ``z`` the OpenSSL MMO
    block of each leaf word (uint64 (K, L, 2)) under its device's key read as a little-endian
    integer: the definition (docs/security.md), computed apart from both implementations."""
    p = (1 << 61) - 1
    out = []
    for k, row in enumerate(leaves):
        u = k // per_user
        enc = Cipher(algorithms.AES(expanded.keys[u].tobytes()), modes.ECB()).encryptor()
        sums = [0, 0, 0]
        for x, word in enumerate(row):
            block = word.astype("<u8").tobytes()
            z = int.from_bytes(bytes(a ^ b for a, b in zip(enc.update(block), block, strict=True)), "little") % p
            r = int(expanded.r[u, x])
            sums = [(sums[0] + r * z) % p, (sums[1] + r * r * z) % p, (sums[2] + z) % p]
        out.append(sums)
    return np.array(out, np.uint64).reshape(len(leaves), 3)


def _sketch_tensors(expanded: sketch.Expanded) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    rk = gpu_eval.sketch_round_keys(expanded, DEV)
    r, r2 = (torch.from_numpy(a.copy().view(np.int64)).to(DEV) for a in (expanded.r, expanded.r2))
    return rk, r, r2


@pytest.mark.parametrize("party", [0, 1])
def test_leaf_sketches_match_the_cpu_walk_in_slices_and_chunks(monkeypatch: pytest.MonkeyPatch, party: int) -> None:
    """The sketch kernel's values equal :class:`~secemb.fss.sketch.SketchCheck` over the CPU
    walk's leaf groups (the padded domain, 13 items -> 16 leaves) and the definition in Python
    integers, bit for bit: keys given in two chunks (``key0``), each key's positions split into
    slices of several blocks (tiny blocks), each device under its own AES key, and a two-points
    key (its last level's correction word altered) among them."""
    m = 13
    p0, p1, _ = fss.gen_path(np.array([1, 5, 12, 0]), m, _rng=CtrDrbg(3))
    path = (p0, p1)[party]
    path.cw_seed[2, -1, 1] ^= np.uint64(1 << 40)  # key 2 differs from its pair below its last level
    mp = tree.padded_leaves(path.params)
    assert mp == 16
    expanded, per_user = _seeds(np.random.default_rng(party), 2, mp), 2
    want = _cpu_sketch(path, expanded, per_user)
    leaves = gpu_eval.expand(path, DEV, mp)
    assert np.array_equal(want, _sketch_by_hand(leaves.cpu().numpy().view(np.uint64), expanded, per_user))
    monkeypatch.setattr(gpu_eval, "_block", lambda: 4)  # 16 positions: 3 slices of up to 2 blocks per key
    monkeypatch.setattr(gpu_eval, "SKETCH_PROGRAMS", 8)
    rk, r, r2 = _sketch_tensors(expanded)
    got = np.concatenate([gpu_eval.leaf_sketches(leaves[:3], rk, r, r2, per_user),
                          gpu_eval.leaf_sketches(leaves[3:], rk, r, r2, per_user, key0=3)])
    assert got.dtype == np.uint64 and np.array_equal(got, want)
    with pytest.raises(InvalidParameters, match="do not fit"):
        gpu_eval.leaf_sketches(leaves[2:], rk, r, r2, per_user, key0=3)  # keys past the batch
    with pytest.raises(InvalidParameters, match="do not fit"):
        gpu_eval.leaf_sketches(leaves[:, :m], rk, r, r2, per_user)  # not the padded domain
    with pytest.raises(InvalidParameters, match="do not fit"):
        gpu_eval.leaf_sketches(leaves, rk[:1], r, r2, per_user)  # a device's round keys missing
    with pytest.raises(InvalidParameters, match="do not fit"):
        gpu_eval.leaf_sketches(leaves[0], rk, r, r2, per_user)  # not (keys, leaves, 2)


def test_leaf_sketches_at_the_field_edges_and_across_many_lanes() -> None:
    """The kernel's arithmetic mod ``p`` where it can overflow: every coefficient ``p - 1`` (its
    square 1), all-zero and all-ones leaf words, over 300 leaves a key (many lanes and blocks
    summed); against the definition in Python integers."""
    p = (1 << 61) - 1
    rng = np.random.default_rng(11)
    keys, size = 3, 300
    words = rng.integers(0, 2**64, (keys, size, 2), dtype=np.uint64)
    words[0] = 0
    words[1] = np.uint64(2**64 - 1)
    ex = sketch.Expanded(keys=rng.integers(0, 256, (keys, 16), dtype=np.uint8),
                         r=np.full((keys, size), p - 1, np.uint64), r2=np.ones((keys, size), np.uint64))
    rk, r, r2 = _sketch_tensors(ex)
    got = gpu_eval.leaf_sketches(torch.from_numpy(words.view(np.int64)).to(DEV), rk, r, r2, 1)
    assert np.array_equal(got, _sketch_by_hand(words, ex, 1))


@pytest.mark.parametrize(("layout", "ring_bits", "party", "budget"),
                         [("full", 32, 1, None), ("full", 64, 0, 1), ("cuckoo", 64, 1, None), ("cuckoo", 32, 0, 1)])
def test_evaluation_with_the_sketch_matches_cpu(monkeypatch: pytest.MonkeyPatch, layout: str, ring_bits: int,
                                                party: int, budget: int | None) -> None:
    """With the sketch check (verified uploads), the device evaluation's answers, bits and
    folded part equal the CPU task's and the keys' sketch values the CPU walk's, whole or in
    per-user chunks (``budget = 1``); full layout: 2 users of 2 keys over 21 items (padded to
    32), cuckoo: 2 users over the 3 buckets of a 10-item layout.  The values are added, mod
    ``p``, into the check's."""
    rng = np.random.default_rng(ring_bits + party)
    cuckoo = CuckooLayout(10, 3, seed=5) if layout == "cuckoo" else None
    m = 21 if cuckoo is None else cuckoo.bucket_size
    keys = _retrieval_keys(rng.integers(0, m, 4 if cuckoo is None else 6), m, ring_bits, seed=7)[party]
    table = _table(rng, 21 if cuckoo is None else 10, 3, ring_bits)
    per_user = 2 if cuckoo is None else 3
    mp = tree.padded_leaves(keys.params)
    expanded = _seeds(rng, 2, mp)
    want = (*_cpu(layout if cuckoo is None else cuckoo, party, keys, table, 2),
            field.add(_cpu_sketch(keys.path, expanded, per_user), np.uint64(field.P - 1)))
    if budget is not None:
        monkeypatch.setattr(gpu_eval, "LEAF_BUDGET", budget)
    check = sketch.SketchCheck(expanded, per_user)
    check.values[:] = field.P - 1  # the device's values are added to what is there, mod p
    got = gpu.DeviceTable(table, layout if cuckoo is None else cuckoo, DEV).evaluate(party, keys, 2, check)
    _assert_same((*got, check.values), want)
    with pytest.raises(InvalidParameters, match="does not fit"):
        gpu.DeviceTable(table, layout if cuckoo is None else cuckoo, DEV).evaluate(
            party, keys, 2, sketch.SketchCheck(_seeds(rng, 2, mp // 2), per_user))


@pytest.mark.parametrize("ring_bits", [32, 64])
def test_packed_bits_product_matches_apply_bits(monkeypatch: pytest.MonkeyPatch, ring_bits: int) -> None:
    """The full layout's control-bit product at close, from packed rows (19 items: the last byte
    partly used), equals :meth:`PreparedAggregation.apply_bits` without its sign, in one chunk of
    keys and in chunks of 2 keys summed into the same product."""
    from secemb.fss.fused import PreparedAggregation

    rng = np.random.default_rng(ring_bits + 11)
    m, k, w = 19, 5, 3
    bits = np.packbits(rng.integers(0, 2, (k, m), dtype=np.uint8), axis=1)
    cw = _table(rng, k, w, ring_bits)
    want = PreparedAggregation(0, ring_bits, m, w, bits, None).apply_bits(cw)
    assert np.array_equal(gpu_eval.packed_bits_product(bits, cw, m, DEV), want)
    monkeypatch.setattr(gpu_eval, "LEAF_BUDGET", 2 * m)
    assert np.array_equal(gpu_eval.packed_bits_product(bits, cw, m, DEV), want)
    with pytest.raises(InvalidParameters, match="do not match"):
        gpu_eval.packed_bits_product(bits[:, :2], cw, m, DEV)


def _verified_round(backends: tuple, layout: str, relay: bool) -> tuple:
    """Three devices through one verified SecEmb round (12 items, m' = 2, d = 3), server ``b`` on
    ``backends[b]``; device 2 sends keys that are not point functions (two-points).  Returns both
    servers' digests, server 1's sketch answer, the users the servers reject (a digest mismatch
    or a failed sketch check), the combined aggregate over the others and the aggregate of the
    honest devices' rows (computed here)."""
    from secemb.protocols.adversary import MaliciousUser
    from secemb.protocols.placement import place
    from secemb.protocols.secemb import SecEmbProtocol, SecEmbRelayServer, SecEmbUser

    protos = [SecEmbProtocol(layout=layout, relay=relay, backend=b) for b in backends]
    cfg = protos[0].round_config(3, 12, 3, 1, 2)
    gen = np.random.default_rng(5)  # public test data
    table = gen.integers(0, 2**32, (12, 3), dtype=np.uint64).astype(np.uint32)
    s0, s1 = protos[0].make_server(0, peer_key=SKETCH_KEY), protos[1].make_server(1, peer_key=SKETCH_KEY)
    for s in (s0, s1):
        s.begin_round(cfg, table)
    expected = np.zeros((12, 3), np.uint32)
    ids = [0, 1, 2]
    for u in ids:
        rng = CtrDrbg(200 + u)
        user = MaliciousUser(cfg, "two-points", relay=relay, _rng=rng) if u == 2 else SecEmbUser(cfg, relay=relay,
                                                                                                 _rng=rng)
        slots = place(cfg, gen.choice(12, 2, replace=False), gen).indices
        r0, r1 = user.retrieval_request(slots)
        if relay:
            assert isinstance(s0, SecEmbRelayServer) and isinstance(s1, SecEmbRelayServer)
            assert s1.handle_retrieval(u, r1) is None
            forwarded = s0.handle_retrieval(u, r0)
            assert forwarded is not None
            reply = user.retrieval_result(s0.complete_retrieval(u, s1.relay_retrieval(u, forwarded)), None)
        else:
            a0, a1 = s0.handle_retrieval(u, r0), s1.handle_retrieval(u, r1)
            assert a0 is not None and a1 is not None
            reply = user.retrieval_result(a0, a1)
        real = slots >= 0
        rows = np.zeros((cfg.slots, 3), np.uint32)
        rows[real] = (slots[real] + 1)[:, None]
        if u != 2:
            assert np.array_equal(reply[real], table[slots[real]])
            np.add.at(expected, slots[real], rows[real])
        up0, up1 = user.upload(rows, np.zeros(1, np.uint32))
        fwd = s0.handle_upload(u, up0)
        if isinstance(s1, SecEmbRelayServer):
            assert fwd is not None
            s1.relay_upload(u, fwd)
        else:
            assert up1 is not None
            s1.handle_upload(u, up1)
    d0, d1 = s0.upload_digests(ids), s1.upload_digests(ids)
    assert d0 is not None and d1 is not None
    answer = s1.verify_answer(ids)
    rejected = sorted({u for u in ids if d0[u] != d1[u]} | s0.verify_rejected(ids, answer))
    include = [u for u in ids if u not in rejected]
    sparse, _ = s0.combine(s1.aggregate_share(include), include)
    return d0, d1, answer, rejected, sparse, expected


@pytest.mark.parametrize(("layout", "relay"), [("full", False), ("cuckoo", True)])
def test_two_points_device_is_rejected_on_the_gpu_backend_as_on_the_cpu(monkeypatch: pytest.MonkeyPatch, layout: str,
                                                                         relay: bool) -> None:
    """Verified uploads through ``--backend gpu``: the sketch values and, at close, the
    control-bit product are computed on the device (the CPU's sketch fold and products would
    raise here), and every digest and server 1's sketch answer equal the serial backend's, byte
    for byte, so the two-points device is rejected by the sketch (its digests agree: its key
    parts are the same at both servers), as on the CPU, and the honest devices' aggregate is
    exact."""
    from secemb.fss import fused, tasks
    from secemb.fss.sketch import SketchCheck
    from secemb.protocols.backends import make_backend

    def on_the_cpu(*_: object, **__: object) -> None:
        raise AssertionError("the gpu backend computed this on the CPU")

    with monkeypatch.context() as cpu_off:
        for owner, name in ((SketchCheck, "add"), (fused.PreparedAggregation, "apply_bits"), (tasks, "bits_product")):
            cpu_off.setattr(owner, name, on_the_cpu)
        on_gpu = make_backend("gpu")
        gpu_run = _verified_round((on_gpu, on_gpu), layout, relay)
    cpu_run = _verified_round((SerialBackend(), SerialBackend()), layout, relay)
    for run in (gpu_run, cpu_run):
        assert run[0] == run[1] and run[3] == [2]
        assert np.array_equal(run[4], run[5])
    assert gpu_run[:3] == cpu_run[:3]
