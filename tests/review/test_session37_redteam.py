"""Red team of session 37's product changes (task R), tests only.

* ``secemb.cli.main``'s dispatch on ``argv[1]`` (helper C, f9b2d86): argv shapes whose first word is no command
  (``--version serve``, ``-- serve``, ``serve=x``, ``SERVE``, ``--help serve``, a command's option first) build
  the whole app and answer what the whole app answers (text and exit code, against ``CliRunner`` on
  ``secemb.cli.app``); a command named first builds that command alone; a lazily built command whose module
  needs an absent extra ends in ``missing_extra``'s one line, exit 2, naming the command.
* The fss wrappers' one-layout normalization (helper K): ``convert_accumulate``'s copies of a (U, G, w) batch
  view of ``key_acc`` (disjoint, and overlapping ``acc``: numpy's path) against numpy's backend over the whole
  buffer; ``retrieve_and_prepare_buckets``' copied payload views (reversed, one of the two strided) written back
  with nothing lost, against the walk's own new arrays, and views overlapping each other refused with nothing
  changed; ``kernels.read_only`` leaves the caller's array writeable; ``ring_matmul`` and ``convert_eval_into``
  with read-only outputs.

Cost: every compiled call passes uint32/uint64 C-contiguous arrays (what the wrappers now hand the kernels), so
no signature the suite does not compile.  Reference values are numpy's backend or Python-integer sums, never the
compiled path under test.

Findings (strict xfails, hazmat layer, none reachable from bytes off the wire):

* S37-R1 (low, pre-existing; fixed by the lead): ``convert_eval_into`` with a read-only ``out`` was not refused
  by the wrapper: the compiled path handed it to numba (a ``TypingError`` after a failed compile attempt), numpy's
  path raised numpy's ``ValueError``; its contract lists only ``InvalidParameters``.  It now refuses a read-only
  ``out`` or ``bits`` before either path.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import typer
import typer.core
from typer.testing import CliRunner

import secemb.cli as cli
from secemb import fss
from secemb.errors import InvalidParameters
from secemb.fss import kernels

COMPILED = pytest.mark.skipif(not kernels.available(), reason="the compiled kernels need numba and AES-NI")


def _words(n: int) -> np.ndarray:
    return np.frombuffer(os.urandom(16 * n), np.uint64).reshape(n, 2).copy()


# --- the CLI's dispatch (helper C) ---------------------------------------------------------------------------

def _main(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: list[str]
          ) -> tuple[int, str, str, list[list[str]]]:
    """``secemb ARGS`` through :func:`secemb.cli.main` in process: exit code, stdout, stderr and the command
    lists ``build_app`` was called with."""
    built: list[list[str]] = []
    real = cli.build_app

    def spy(commands=cli.COMMANDS):  # noqa: ANN001, ANN202 - the spied function's own signature
        built.append(list(commands))
        return real(commands)

    monkeypatch.setattr(cli, "build_app", spy)
    monkeypatch.setattr(cli.atexit, "register", lambda f: f)  # no gc.freeze at the test process's exit
    monkeypatch.setattr("sys.argv", ["secemb", *args])
    # the console script's name, not pytest's __main__ (typer's own copy of click detects it)
    monkeypatch.setattr(typer.core._click.utils, "_detect_program_name", lambda *_, **__: "secemb")
    monkeypatch.setenv("COLUMNS", "80")
    capsys.readouterr()
    code: int | str | None = 0
    try:
        cli.main()
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return (0 if code is None else int(code)), out, err, built


@pytest.mark.parametrize("args", [["--version", "serve"], ["--", "serve"], ["serve=x"], ["SERVE"],
                                  ["--help", "serve"], ["--config", "serve"], ["-h"], ["serve "]])
def test_a_first_word_that_is_no_command_gets_the_whole_app(args: list[str], monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err, built = _main(monkeypatch, capsys, args)
    assert built == [list(cli.COMMANDS)], args
    want = CliRunner().invoke(cli.app, args, terminal_width=78)
    assert (code, out, err) == (want.exit_code, want.stdout, want.stderr), args
    assert code in (0, 2), (args, out, err)


@pytest.mark.parametrize(("args", "code"), [(["serve", "--help"], 0), (["serve", "--version"], 2),
                                            (["serve", "serve"], 2), (["admin", "serve"], 2)])
def test_a_command_named_first_is_built_alone_and_answers_as_the_whole_app(
        args: list[str], code: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A command name after the command (an argument, another group's subcommand) or the root's own option after
    it: the command's usage error, as in the whole app."""
    got, out, err, built = _main(monkeypatch, capsys, args)
    assert built == [[args[0]]]
    want = CliRunner().invoke(cli.app, args, terminal_width=78)
    assert (got, out, err) == (want.exit_code, want.stdout, want.stderr) and got == code, args


def test_a_lazily_built_command_missing_an_extra_names_it(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """The command's module needing an absent extra at import (as a plug-in command's could): one line, exit 2."""
    import importlib

    real = importlib.import_module

    def absent(name: str, package: str | None = None):  # noqa: ANN202
        if name == cli.COMMANDS["admin"]:
            raise ModuleNotFoundError("No module named 'httpx'", name="httpx")
        return real(name, package)

    monkeypatch.setattr(cli.importlib, "import_module", absent)
    code, out, err, built = _main(monkeypatch, capsys, ["admin", "status", "--json"])
    assert built == [["admin"]] and code == 2 and out == ""
    assert err == ("error: secemb admin status needs the optional extra 'server' (httpx is not installed): "
                   "pip install 'secemb[server]'\n")
    code, _, err, _ = _main(monkeypatch, capsys, ["train", "--help"])  # another command does not import admin
    assert code == 0 and err == ""


def test_typer_is_what_the_dispatch_builds() -> None:
    assert isinstance(cli.build_app(["train"]), typer.Typer)
    with pytest.raises(KeyError):
        cli.build_app(["SERVE"])


# --- the fss wrappers' layouts (helper K) --------------------------------------------------------------------

@pytest.fixture
def backend(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    def use(name: str) -> None:
        monkeypatch.setattr(kernels, "BACKEND", name)
    return use


def _accumulate_both(backend, make, **kw) -> tuple[list[np.ndarray], list[np.ndarray]]:  # noqa: ANN001
    """``make()`` -> (buffers, acc, key_acc, key_t) summed by the compiled and by numpy's path; the whole
    buffers after each."""
    from secemb.fss.convert import convert_accumulate

    words = kw.pop("words")
    outs = []
    for name in ("numba", "numpy"):
        backend(name)
        buffers, acc, key_acc, key_t = make()
        convert_accumulate(words, "relay", acc, kw["start"], kw["live"], key_acc=key_acc, period=kw["period"],
                           key_t=key_t, fresh=kw["fresh"])
        outs.append(buffers)
    return outs[0], outs[1]


@COMPILED
@pytest.mark.parametrize("fresh", [False, True])
@pytest.mark.parametrize("dtype", [np.uint32, np.uint64])
def test_convert_accumulate_batch_views_sum_as_numpy(backend, fresh: bool, dtype: type) -> None:  # noqa: ANN001
    """key_acc (U, G, w) a bucket range of a batch (rows contiguous, not C: K's copy), key_t the same range,
    reversed along G; acc C-contiguous: every element of the batches equals numpy's path."""
    big_m, w, period = 6, 3, 4
    words = _words(2 * 3 * period - 1)

    def make():  # noqa: ANN202
        batch = np.full((2, 7, w), 11, dtype)
        counts = np.full((2, 7), -3, np.int64)
        acc = np.full((big_m, w), 5, dtype)
        return [batch, counts, acc], acc, batch[:, 1:4], counts[:, 6:3:-1]

    got, want = _accumulate_both(backend, make, words=words, start=1, live=np.arange(big_m) % 3 != 1,
                                 period=period, fresh=fresh)
    for g, x in zip(got, want, strict=True):
        assert g.dtype == x.dtype and np.array_equal(g, x)
    assert (got[0][:, 4:] == 11).all() and (got[1][:, :4] == -3).all()  # outside the views untouched


@COMPILED
def test_convert_accumulate_batch_view_overlapping_acc_loses_no_sum(backend) -> None:  # noqa: ANN001
    """key_acc a (U, G, w) view of the buffer acc's rows live in (fresh=False, allowed): K copies the view, so
    the sums must take numpy's path (S36-R1); every element of the buffer equals numpy's."""
    big_m, w, period = 4, 2, 2
    words = _words(9)

    def make():  # noqa: ANN202
        buf = np.arange(2 * 8 * w, dtype=np.uint64).reshape(2, 8, w)
        acc = buf.reshape(-1, w)[2:2 + big_m]  # C-contiguous rows 2..5 of batch 0
        return [buf], acc, buf[:, 3:8], None

    got, want = _accumulate_both(backend, make, words=words, start=0, live=None, period=period, fresh=False)
    assert np.array_equal(got[0], want[0])
    # and the numpy reference itself against Python integers: each word once into acc and once into its key
    buf = np.arange(2 * 8 * w, dtype=np.uint64).reshape(2, 8, w).astype(object)
    from secemb.fss.convert import convert

    backend("numpy")
    vals = convert(words, w, 64, "relay").astype(object)
    for i in range(len(words)):
        buf.reshape(-1, w)[2 + i % big_m] += vals[i]
        u, g = divmod(i // period, 5)
        buf[u, 3 + g] += vals[i]
    assert np.array_equal(want[0].astype(object), buf % (1 << 64))


def _buckets():  # noqa: ANN202
    from secemb.fss.fused import RETRIEVAL_TAG

    sizes, big_m = np.array([9, 4, 1]), 9
    alphas = np.array([0, 3, 0, 8, 2, 0])
    p0, _, state = fss.gen_path(alphas, big_m)
    cw = fss.convert_gen(state, np.ones((len(alphas), 1), np.uint32), ring_bits=32, tag=RETRIEVAL_TAG)
    tables = np.frombuffer(os.urandom(4 * 3 * big_m * 2), np.uint32).reshape(3, big_m, 2).copy()
    return p0, cw, tables, sizes


@COMPILED
@pytest.mark.parametrize("layout", ["reversed", "key_conv strided", "t_count strided", "both C"])
def test_the_walks_copied_payload_views_are_written_back_whole(backend, layout: str) -> None:  # noqa: ANN001
    """payload_out as a batch's views in K's copied layouts (one copied and not the other, reversed buckets):
    the sums written back equal the walk's own new arrays', nothing around them written; answers, t and
    conv_sum those of the walk without payload_out."""
    from secemb.fss.fused import PayloadSums, retrieve_and_prepare_buckets

    backend("numba")
    p0, cw, tables, sizes = _buckets()
    w = 3
    plain = retrieve_and_prepare_buckets(p0, 0, cw, tables, w, sizes=sizes, payload_sums=True)
    key_conv, t_count = np.full((2, 6, w), 7, np.uint32), np.full((2, 6), -9, np.int64)
    views = {"reversed": (key_conv[:, 4:1:-1], t_count[:, 5:2:-1]),
             "key_conv strided": (key_conv[:, 1:4], t_count[0, :3].reshape(1, 3).repeat(2, 0)),
             "t_count strided": (key_conv[0, :3].reshape(1, 3, w).repeat(2, 0), t_count[:, 2:5]),
             "both C": (np.zeros((2, 3, w), np.uint32), np.zeros((2, 3), np.int64))}[layout]
    *got, sums = retrieve_and_prepare_buckets(p0, 0, cw, tables, w, sizes=sizes, payload_sums=True,
                                              payload_out=PayloadSums(*views))
    assert sums.key_conv is views[0] and sums.t_count is views[1]
    assert np.array_equal(views[0].reshape(6, w), plain[3].key_conv)
    assert np.array_equal(views[1].reshape(6), plain[3].t_count)
    for g, x in zip(got, plain[:3], strict=True):
        assert np.array_equal(g, x)
    if layout == "reversed":
        assert (key_conv[:, :2] == 7).all() and (key_conv[:, 5:] == 7).all()
        assert (t_count[:, :3] == -9).all()


@COMPILED
@pytest.mark.parametrize("strided", [False, True])
def test_the_walk_refuses_payload_views_that_overlap_each_other(backend, strided: bool) -> None:  # noqa: ANN001
    """key_conv and t_count sharing elements of one buffer, C-contiguous or strided views (which K's walk would
    copy were they disjoint): refused, InvalidParameters, the buffer unchanged (copies of overlapping views would
    each be summed and written back over the other)."""
    from secemb.fss.fused import PayloadSums, retrieve_and_prepare_buckets

    backend("numba")
    p0, cw, tables, sizes = _buckets()
    raw = np.full(96, 3, np.uint8)
    if strided:
        t_count = raw.view(np.int64).reshape(2, 6)[:, ::2]
        key_conv = raw.view(np.uint32).reshape(2, 6, 2)[:, 1:4]
    else:
        t_count = raw[:48].view(np.int64).reshape(2, 3)
        key_conv = raw[8:56].view(np.uint32).reshape(2, 3, 2)
    assert np.shares_memory(t_count, key_conv) and key_conv.flags.c_contiguous != strided
    with pytest.raises(InvalidParameters):
        retrieve_and_prepare_buckets(p0, 0, cw, tables, 2, sizes=sizes, payload_sums=True,
                                     payload_out=PayloadSums(key_conv, t_count))
    assert (raw == 3).all()


def test_read_only_leaves_the_callers_array_as_it_was() -> None:
    a = np.arange(12, dtype=np.uint64).reshape(3, 4)
    for given in (a, a[:, ::2], a.T, a[::-1]):
        ro = kernels.read_only(given)
        assert ro.flags.c_contiguous and not ro.flags.writeable and np.array_equal(ro, given)
        assert given.flags.writeable
    a[0, 0] = 99  # still the caller's: writeable


@COMPILED
@pytest.mark.parametrize("name", ["numba", "numpy"])
def test_ring_matmul_refuses_a_read_only_out(backend, name: str) -> None:  # noqa: ANN001
    from secemb.fss.linalg import ring_matmul

    backend(name)
    a, b = np.ones((2, 3, 5), np.uint32), np.ones((2, 5, 4), np.uint32)
    out = np.zeros((2, 3, 4), np.uint32)
    out.flags.writeable = False
    with pytest.raises(InvalidParameters):
        ring_matmul(a, b, 32, out=out)
    assert (out == 0).all()


@COMPILED
@pytest.mark.parametrize("name", ["numba", "numpy"])
def test_convert_eval_into_refuses_a_read_only_out(backend, monkeypatch: pytest.MonkeyPatch, name: str) -> None:  # noqa: ANN001
    from secemb.fss import _numba_kernels
    from secemb.fss.convert import convert_eval_into

    def never(*_: object) -> None:
        raise AssertionError("the kernel got a read-only out")  # and numba would try to compile it

    monkeypatch.setattr(_numba_kernels, "convert_eval", never)
    backend(name)
    out = np.zeros((12, 2), np.uint32)
    out.flags.writeable = False
    with pytest.raises(InvalidParameters):
        convert_eval_into(_words(12), np.ones((3, 2), np.uint32), 0, 4, 1, "relay", out)
