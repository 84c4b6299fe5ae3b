"""``secemb bench overhead`` (issue 37, goal 1): the kernel clock counts the DPF kernels' calls
on both kernel backends, and the other cryptography's calls by category, and leaves them as
they were; the per-epoch figures come from runs that train the same model."""

from __future__ import annotations

import gc
import hashlib
import hmac
import json
import sys
import types

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from secemb import randomness
from secemb.bench import overhead
from secemb.errors import InvalidParameters
from secemb.fss import _numba_kernels as nk
from secemb.fss import hashing, kernels
from secemb.fss.convert import convert
from secemb.fss.prg import FixedKeyAES
from secemb.protocols.secemb import checks, relay, server, user

_WORDS = np.arange(8, dtype=np.uint64).reshape(4, 2)


def test_the_compiled_kernels_are_counted_and_restored() -> None:
    if not kernels.available():
        pytest.skip("no compiled kernels here")
    before = nk.convert_blocks
    with overhead.kernel_clock() as clock:
        got = convert(_WORDS, 8, 32, "test")
        assert nk.convert_blocks is not before
    assert nk.convert_blocks is before
    assert clock.calls == {"convert_blocks": 1} and clock.total_s >= 0.0
    assert np.array_equal(got, convert(_WORDS, 8, 32, "test"))  # the wrapper changes no result
    assert "cuckoo_assign" not in overhead._entry_points()  # placement, not the DPF


def test_the_sketch_check_counts_as_a_dpf_kernel() -> None:
    """The sketch check's kernel lives in its own module (session 29): it is timed, and restored."""
    if not kernels.available():
        pytest.skip("no compiled kernels here")
    from secemb.fss import _sketch_kernels as sk

    assert overhead._entry_points()["sketch_accumulate"][0] is sk
    before = sk.sketch_accumulate
    with overhead.kernel_clock():
        assert sk.sketch_accumulate is not before
    assert sk.sketch_accumulate is before


def test_a_kernel_compiled_within_the_clock_still_compiles() -> None:
    """The field helpers of ``_sketch_kernels`` (``mulp``, ...) are compiled into the sketch proof's and the
    device's kernels: a timing wrapper in their place made any kernel compiled inside the block (a cold numba
    cache, a kernel module imported late) fail to type (found in session 30: ``bench overhead`` in a fresh
    git-archive tree).  So they are no entry points, and a kernel that calls one compiles within the block."""
    if not kernels.available():
        pytest.skip("no compiled kernels here")
    from numba import njit

    from secemb.fss import _sketch_kernels as sk

    assert not {"addp", "mac128", "mulp", "red128", "subp"} & set(overhead._entry_points())
    with overhead.kernel_clock():
        @njit
        def product(a, b):  # noqa: ANN001, ANN202
            return sk.mulp(a, b)

        assert product(np.uint64(3), np.uint64(5)) == 15


def test_the_reference_counts_the_prg_aes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "BACKEND", "numpy")
    encrypt = FixedKeyAES.encrypt_into
    with overhead.kernel_clock() as clock:
        convert(_WORDS, 8, 32, "test")
    assert FixedKeyAES.encrypt_into is encrypt
    assert set(clock.calls) == {"aes convert"}


def test_fewer_than_two_epochs_is_refused() -> None:
    with pytest.raises(InvalidParameters, match="epochs must be >= 2"):
        overhead.run("synthetic-mini", 1, process=False)


def test_one_run_gives_both_paths_the_same_model() -> None:
    result = overhead.run("synthetic-mini", 2, process=False)
    e = result["epoch"]
    assert e["same_model"] is True
    assert e["plaintext"]["epoch_kernel_s"] == [0.0, 0.0]  # plaintext runs no DPF kernel
    assert e["kernel_s"] > 0 and len(e["secure"]["epoch_cpu_s"]) == 2
    assert e["ratio"] == pytest.approx(e["beyond_s"] / e["kernel_s"])
    assert [row[0] for row in overhead.table_rows(result)][4] == "beyond / kernels"
    # one pair (no --repeat): it is listed, its ratio is the median, and no median row is printed
    assert len(result["epoch_pairs"]) == 1 and result["epoch_ratio_median"] == e["ratio"]
    assert not any("median" in row[0] for row in overhead.table_rows(result))
    # the other cryptography: the secure epoch's seconds per category, the informative ratio, strict JSON
    by_category = e["other_crypto_by_category_s"]
    assert {"upload mac", "sha256 digests", "row tags", "sketch seeds", "sketch proof",
            "os randomness"} <= set(by_category)
    assert set(by_category) <= set(overhead.OTHER_CRYPTO) and min(by_category.values()) >= 0
    assert set(e["secure"]["other_crypto_calls"]) == set(by_category)  # every category was called
    assert e["other_crypto_s"] == pytest.approx(sum(by_category.values()))
    assert e["ratio_with_other_crypto"] == pytest.approx(e["beyond_s"] / (e["kernel_s"] + e["other_crypto_s"]))
    assert json.loads(json.dumps(result, allow_nan=False))["epoch"]["other_crypto_s"] == e["other_crypto_s"]
    assert "beyond / (kernels + other crypto), informative" in [row[0] for row in overhead.table_rows(result)]
    # each run's garbage collection per epoch, and the last epoch's of both beside the ratio
    assert len(e["plaintext"]["epoch_gc_s"]) == len(e["secure"]["epoch_gc_s"]) == 2
    assert e["gc_s"] == {"plaintext": e["plaintext"]["epoch_gc_s"][-1], "secure": e["secure"]["epoch_gc_s"][-1]}
    assert min(e["plaintext"]["epoch_gc_s"] + e["secure"]["epoch_gc_s"]) >= 0


def test_the_gc_clock_counts_collections_and_is_removed() -> None:
    before = list(gc.callbacks)
    with overhead.gc_clock() as collected:
        heap = [[i] for i in range(200_000)]  # something for a full collection to walk
        gc.collect()
        assert gc.callbacks != before
    counted = collected[0]
    assert counted > 0 and len(heap) == 200_000
    assert gc.callbacks == before
    gc.collect()  # outside the block: not counted
    assert collected[0] == counted


def test_a_failing_child_train_is_an_error_with_its_message() -> None:
    from secemb.errors import SecembError

    with pytest.raises(SecembError, match="exited 2"):
        overhead._process_cpu(["--dataset", "no-such-dataset", "--epochs", "2"])


def test_the_command_refuses_a_bad_dataset_with_one_line() -> None:
    from typer.testing import CliRunner

    from secemb.cli import app

    res = CliRunner().invoke(app, ["bench", "overhead", "--dataset", "no-such-dataset", "--no-process"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert "no-such-dataset" in res.output


def test_other_cryptography_counts_by_category_and_is_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    key, body = b"k" * 16, b"\x05" * 1000
    mac, tags, rng, digests = relay.upload_mac, checks.sha256_many, user.system_rng, server.SecEmbServer.upload_digests
    late = types.ModuleType("secemb._overhead_test_late")  # a module imported within the block binds the wrapper
    monkeypatch.setitem(sys.modules, late.__name__, late)
    with overhead.kernel_clock() as clock:
        got = relay.upload_mac(key, 7, body)
        checks.row_tags(3, np.arange(2), np.ones((2, 4), np.uint64))
        assert user.system_rng is not rng and relay.upload_mac is not mac
        late.system_rng = randomness.system_rng  # type: ignore[attr-defined]
        randomness.system_rng(16)
    k_mac = hmac.new(key, b"secemb-relay-subkey-upload-gmac", hashlib.sha256).digest()[:16]  # the GMAC's sub-key
    want = AESGCM(k_mac).encrypt(bytes(12), b"", b"secemb-relay-upload-gmac" + (7).to_bytes(8, "little") + body)
    assert got == want  # the wrapper changes no result
    assert clock.other_calls == {"upload mac": 1, "row tags": 1, "os randomness": 1} and clock.calls == {}
    assert set(clock.other_seconds) == set(clock.other_calls) and clock.other_s >= 0.0 and clock.total_s == 0.0
    assert relay.upload_mac is mac and checks.sha256_many is tags is hashing.sha256_many
    assert user.system_rng is rng is randomness.system_rng is late.system_rng
    assert server.SecEmbServer.upload_digests is digests


def test_a_timed_call_inside_another_is_counted_once() -> None:
    clock = overhead.KernelClock()
    inner = clock.timed_other("inner", lambda: 1)
    outer = clock.timed_other("outer", lambda: inner() + 1)
    assert outer() == 2 and inner() == 1
    assert clock.other_calls == {"outer": 1, "inner": 1}


def test_repeated_pairs_give_each_pair_s_figures_and_their_median() -> None:
    """``repeat``: alternating pairs of in-process runs; ``epoch`` stays the first pair's, every
    pair's figures are listed, and the median is of the pairs' own ratios (session 33: one
    pair's figure moved 1.16-1.63x between idle runs)."""
    result = overhead.run("synthetic-mini", 2, process=False, repeat=2)
    pairs = result["epoch_pairs"]
    assert len(pairs) == 2 and all(p["same_model"] for p in pairs)
    assert {k: result["epoch"][k] for k in pairs[0]} == pairs[0]
    for p in pairs:
        assert p["ratio"] == pytest.approx(p["beyond_s"] / p["kernel_s"])
        assert p["beyond_s"] == pytest.approx(p["secure_cpu_s"] - p["plaintext_cpu_s"])
        assert p["glue_s"] == pytest.approx(p["beyond_s"] - p["kernel_s"] - p["other_crypto_s"])
    assert result["epoch_glue_median_s"] == pytest.approx((pairs[0]["glue_s"] + pairs[1]["glue_s"]) / 2)
    assert result["epoch_ratio_median"] == pytest.approx((pairs[0]["ratio"] + pairs[1]["ratio"]) / 2)
    rows = {row[0]: row for row in overhead.table_rows(result)}
    assert rows["beyond / kernels, median of 2 alternating pairs"][2] == "<= 1.25x"
    assert rows["same model in every pair"][1] == "True"
    assert rows["glue s, median of 2 pairs, informative"][1] == f"{result['epoch_glue_median_s']:.3f}"
    with pytest.raises(InvalidParameters, match="repeat must be >= 1"):
        overhead.run("synthetic-mini", 2, process=False, repeat=0)

