"""``secemb admin``: the operator's commands (docs/deployment.md).

Each server's operator keeps its own half (:mod:`secemb.server.deploy`): ``init --party P``
creates server P's private certificate authority and certificate
(``secemb.server.tls.init_pki``), with ``--num-items``/``--num-users`` its secrets,
configuration and public file (:func:`secemb.server.deploy.init_half`); ``pair`` completes it
with the other server's public file; without ``--party``, ``init`` writes both halves as a
one-person test setup (:func:`secemb.server.deploy.init_deployment`).  ``add-devices`` writes
this server's half of per-device credentials,
``status``, ``count`` and ``open-round`` drive the servers, ``save-denoiser`` writes a GREC
denoiser deployment's trained model to the file ``secemb infer --denoiser`` reads,
``export-model`` a recommender deployment's current public model to a saved-model folder (its
public files: what ``secemb infer --credentials ... --recommender`` reads; both only once server
1's status, read as server 0 reads it, announces the model's SHA-256 too), ``clear-alarms``
lifts the servers' alarms after an investigation (one server: the devices' strikes),
``clear-strikes`` forgives server 0's strikes (upload rejections; a clear of the alarms keeps
them) of one device or of all.  Exit
codes: 0 success, 1 a server refused, did not answer or sent a malformed answer (or the
servers' models differ), 2 bad usage (e.g. a directory that already holds a CA), 3
(``status``) a server shows an alarm (docs/deployment.md, "Alarms").
"""

import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Annotated, Any

import typer

from secemb.options import DEFAULT_MODEL, DEFAULTS

admin_app = typer.Typer(help="Operator commands of a deployment (docs/deployment.md).", no_args_is_help=True)


@admin_app.command("init")
def init(
    out: Annotated[Path, typer.Option(help="Directory for the half (or, without --party, the test setup); "
                                      "created, 0700.")],
    party: Annotated[int | None, typer.Option(
        min=0, max=1, help="Create only this server's half (its own CA, certificate and secrets): what each "
                           "server's operator runs. Without it: both halves in OUT/server0 and OUT/server1, a "
                           "one-person TEST SETUP.")] = None,
    host0: Annotated[list[str] | None, typer.Option(help="A host name or IP address of server 0 (repeatable).")] = None,
    host1: Annotated[list[str] | None, typer.Option(help="A host name or IP address of server 1 (repeatable).")] = None,
    num_items: Annotated[int | None, typer.Option(
        min=1, help="Write the whole half (secrets, configuration, operator.json, public.json) for this many "
                    "items; with --num-users.")] = None,
    num_users: Annotated[int | None, typer.Option(min=1, help="Devices of the deployment (with --num-items).")] = None,
    model: Annotated[str, typer.Option(help="The model the servers train (with --num-items).")] = DEFAULT_MODEL,
    port0: Annotated[int, typer.Option(min=1, max=65535, help="Server 0's port.")] = 8700,
    port1: Annotated[int, typer.Option(min=1, max=65535, help="Server 1's port.")] = 8701,
    protocol: Annotated[str | None, typer.Option(
        help="A one-server protocol (e.g. sfsl): write a ONE-SERVER deployment in OUT (its server at --host0 and "
             "--port0; docs/deployment.md, 'One server'). Default: a two-server deployment.")] = None,
    dataset: Annotated[str | None, typer.Option(help="With --protocol: the devices' dataset.")] = None,
    users_per_round: Annotated[int | None, typer.Option(min=2, help=(
        "With --protocol: devices per round (default 20). Two servers (with --num-items): the most users a round "
        "the payload bound is proved for ([protocol.options] users_per_round; default 100, or --num-users when "
        "fewer; docs/deployment.md, 'Bounded payloads')."))] = None,
    bound: Annotated[bool | None, typer.Option(
        "--bound/--no-bound", help="Two servers (with --num-items): devices prove bounded payloads "
                                   "([protocol.options] bound; default: on where it applies). --no-bound lets a "
                                   "malicious device corrupt the model.")] = None,
    seed: Annotated[int, typer.Option(
        min=0, help="With --protocol: seed of the initial public model.")] = DEFAULTS.seed,
    option: Annotated[list[str] | None, typer.Option(
        metavar="NAME=VALUE", help="With --protocol: one of its options (repeatable; e.g. sfsl_preset=CPP1, lr=0.5; "
                                   "VALUE read as JSON, else a string).")] = None,
    stage_deadline: Annotated[float, typer.Option(
        min=0.1, help="With --protocol: seconds after which the server closes a stage that not every device "
                      "still in has sent.")] = 60.0,
) -> None:
    """Create server --party's half: its own private CA and TLS certificate (keys 0600), and
    with --num-items and --num-users its secrets, configuration and public.json.  Hand
    public.json to the other server's operator (read its SHA-256 out to them), then run
    'secemb admin pair' with theirs.  Certificates only (no --num-items): print the [tls]
    section (its ca is the other operator's ca.pem).  Without --party: both halves, paired,
    in OUT/server0 and OUT/server1 -- a TEST SETUP, since one person then holds both servers'
    secrets (docs/deployment.md, 'Two operators, two halves')."""
    from secemb.cli._usage import fail
    from secemb.errors import InvalidParameters
    from secemb.server.deploy import init_deployment, init_half, public_sha256
    from secemb.server.tls import init_pki

    hosts, ports = (host0, host1), (port0, port1)
    if protocol is not None:
        if party is not None or host1 or num_items is not None or num_users is not None:
            fail("--protocol writes a one-server deployment: give --host0 (and --port0), not --party, --host1, "
                 "--num-items or --num-users")
        if bound is not None:
            fail("--bound/--no-bound is for a two-server deployment (its [protocol.options])")
        _init_exchange(out, protocol, dataset, 20 if users_per_round is None else users_per_round, seed, option or [],
                       host0 or [], port0, stage_deadline)
        return
    if dataset is not None or option:
        fail("--dataset and --option go with --protocol (a one-server deployment)")
    if (num_items is None) != (num_users is None):
        fail("give both --num-items and --num-users (a whole half), or neither (certificates only)")
    parties = (0, 1) if party is None else (party,)
    for p in (0, 1):
        if p in parties and not hosts[p]:
            fail(f"give --host{p} (server {p}'s host names or addresses)")
        if p not in parties and hosts[p]:
            fail(f"--party {party} creates server {party}'s half only: --host{p} is for server {p}'s operator")
    if num_items is None and (bound is not None or users_per_round is not None):
        fail("--bound/--no-bound and --users-per-round go with --num-items and --num-users (a whole half)")
    options = {k: v for k, v in (("bound", bound), ("users_per_round", users_per_round)) if v is not None}
    settings: dict[str, Any] = {"num_items": num_items, "num_users": num_users, "model": model}
    if options:  # else the configuration's default (ServerConfig: bounds on where they apply)
        settings["protocol_options"] = options
    try:
        if num_items is None:
            files = {p: init_pki(out if party is not None else out / f"server{p}", p, hosts[p] or []) for p in parties}
            for p in parties:
                ca = files[1 - p].ca if 1 - p in files else f"<server {1 - p}'s operator's ca.pem>"
                typer.echo(f"# server{p}.toml\n[tls]\nca = \"{ca}\"\ncert = \"{files[p].cert(p)}\"\n"
                           f"key = \"{files[p].key(p)}\"\n")
            return
        if party is None:
            dep = init_deployment(out, (host0 or [], host1 or []), ports=ports, **settings)
        else:
            dep = init_half(out, party, hosts[party] or [], port=ports[party], **settings)
    except (InvalidParameters, OSError) as exc:
        fail(exc)
    if party is None:
        for p in (0, 1):
            typer.echo(f"server {p}: {dep.url(p)}  config {dep.config_path(p)}")
        typer.echo(f"TEST SETUP in {out}: you hold both servers' secrets (local tests and demos only); "
                   f"'secemb admin status --deployment {out}'")
        return
    public = dep.public_path(party)
    typer.echo(f"server {party}: {dep.url(party)}  half {out}  (secret: keep it)")
    typer.echo(f"public file for server {1 - party}'s operator: {public}\n  SHA-256 {public_sha256(public)} "
               f"(read it out to them; they compare it with 'sha256sum')")
    typer.echo(f"then: secemb admin pair --deployment {out} --peer <server {1 - party}'s public.json>")


def _init_exchange(out: Path, protocol: str, dataset: str | None, users_per_round: int, seed: int,
                   option: list[str], hosts: list[str], port: int, stage_deadline: float) -> None:
    """``secemb admin init --protocol P`` for a one-server P (:func:`secemb.server.exchange_deploy.init_exchange`)."""
    from secemb.cli._usage import fail
    from secemb.errors import InvalidParameters
    from secemb.protocols import protocol_servers
    from secemb.protocols.exchange import ExchangeRun
    from secemb.server.exchange_deploy import init_exchange

    options: dict[str, Any] = {}
    for item in option:
        name, sep, raw = item.partition("=")
        if not sep or not name:
            fail(f"--option must be NAME=VALUE, got {item!r}")
        try:
            options[name] = json.loads(raw)
        except ValueError:
            options[name] = raw
    try:
        if protocol_servers(protocol) != 1:
            fail(f"--protocol {protocol} has two servers: its deployment is 'secemb admin init' without --protocol "
                 "(the protocol is the configuration's [protocol])")
        if dataset is None:
            fail(f"--protocol {protocol}: give --dataset (the devices' dataset)")
        if not hosts:
            fail("give --host0 (the server's host names or addresses)")
        dep = init_exchange(out, protocol, ExchangeRun(dataset, users_per_round=users_per_round, seed=seed), options,
                            hosts, port=port, stage_deadline_s=stage_deadline)
    except (InvalidParameters, OSError) as exc:
        fail(exc)
    typer.echo(f"one server ({protocol}): {dep.url}  config {dep.config_path}")
    typer.echo(f"then: secemb serve --config {dep.config_path}; "
               f"secemb admin add-devices --deployment {out} --users ...")


@admin_app.command("pair")
def pair(
    deployment: Annotated[Path, typer.Option(help="This operator's half ('secemb admin init --party P').")],
    peer: Annotated[Path, typer.Option(help="The other server's public.json, as its operator handed it over.")],
) -> None:
    """Complete this half with the other server's public file: keep its CA (the only one this
    server trusts for its peer), agree on the peer secret (X25519: no secret crosses) and
    write this server's configuration.  Compare the printed SHA-256 with the one the other
    operator reads out before serving.  Refused (exit 2, nothing written) if the two halves'
    shared settings differ."""
    from secemb.cli._usage import fail
    from secemb.errors import InvalidParameters
    from secemb.server.deploy import pair as pair_half
    from secemb.server.deploy import public_sha256

    try:
        config = pair_half(deployment, peer)
        sha = public_sha256(peer)
    except InvalidParameters as exc:
        fail(exc)
    typer.echo(json.dumps({"config": str(config), "peer_public_sha256": sha}, indent=2, sort_keys=True))


def _users(spec: str) -> list[int]:
    """``"0-9,12"`` -> ``[0, ..., 9, 12]`` (raises ``InvalidParameters``)."""
    from secemb.errors import InvalidParameters

    users: set[int] = set()
    for part in spec.split(","):
        lo, sep, hi = part.strip().partition("-")
        if not lo.isascii() or not lo.isdigit() or (sep and (not hi.isascii() or not hi.isdigit())):
            raise InvalidParameters(f"users: expected a list like 0-9,12, got {spec!r}")
        a, b = int(lo), int(hi) if sep else int(lo)
        if b < a:
            raise InvalidParameters(f"users: empty range {part!r}")
        users.update(range(a, b + 1))
    return sorted(users)


_DEPLOYMENT = typer.Option(help="This operator's half ('secemb admin init --party P --num-items ...'), or the test "
                                "setup's directory (both halves).")


def _operate(deployment: Path, action: Callable[[Any], Any], one_server: Callable[[Any], Any] | None = None) -> None:
    """Run ``action(deployment)`` -- ``one_server(deployment)`` for a one-server deployment
    (:class:`~secemb.server.exchange_deploy.ExchangeDeployment`; without it the command is refused,
    exit 2); print its JSON; exit 1 if a server refused or failed, 2 on bad usage."""
    from secemb.cli._usage import fail
    from secemb.errors import InvalidMessage, InvalidParameters, ProtocolError
    from secemb.server.deploy import Deployment
    from secemb.server.exchange_deploy import ExchangeDeployment, exchange_config_path
    from secemb.transport.errors import RemoteError, Unreachable

    try:
        if exchange_config_path(deployment) is None:
            out = action(Deployment(deployment))
        elif one_server is None:
            fail(f"{deployment} is a one-server deployment: this command is for two-server ones (one server: "
                 "add-devices, status, open-round, clear-alarms, clear-strikes; docs/deployment.md, 'One server')")
        else:
            out = one_server(ExchangeDeployment.load(deployment))
    except InvalidParameters as exc:
        fail(exc)
    except (RemoteError, Unreachable, InvalidMessage, ProtocolError) as exc:
        fail(exc, 1)
    typer.echo(json.dumps(out, indent=2, sort_keys=True))


@admin_app.command("add-devices")
def add_devices(
    deployment: Annotated[Path, _DEPLOYMENT],
    users: Annotated[str, typer.Option(help="User ids, e.g. 0-99,120.")],
    out: Annotated[Path | None, typer.Option(help="Directory for the files (default DEPLOYMENT/devices).")] = None,
    roster: Annotated[Path | None, typer.Option(
        help="One server: the operator's roster file that certifies each device's identity (default "
             "DEPLOYMENT/roster.json; keep it off the server's machine).")] = None,
) -> None:
    """Write this server's half of each device's credentials (0600): its URL, its CA and that
    device's key at this server only.  Give each device its half; the device merges it with
    the other server's ('secemb credentials merge').  In the test setup: whole files.  One
    server: whole files, each with the device's identity certified by the operator's roster."""
    def written(d: Any) -> dict[str, Any]:
        if roster is not None:
            from secemb.errors import InvalidParameters

            raise InvalidParameters("--roster is a one-server deployment's (its devices' identities)")
        return {"written": [str(p) for p in d.add_devices(_users(users), out)]}

    def one(d: Any) -> dict[str, Any]:
        return {"written": [str(p) for p in d.add_devices(_users(users), out, roster)]}

    _operate(deployment, written, one)


#: ``secemb admin status``'s exit code when a server shows an alarm
EXIT_ALARM = 3


@admin_app.command("status")
def status(deployment: Annotated[Path, _DEPLOYMENT]) -> None:
    """The status of each server whose half DEPLOYMENT holds (one operator's: its own server;
    the test setup: both): model version and hash, round, count phase, m', alarms, the devices' strikes
    (strikes: server 0's count per device rejected since its strikes were cleared; 'secemb admin
    clear-strikes'), whether devices prove bounded payloads (payload_bounds).  Exits 3
    if a server shows an alarm (a detected deviation: docs/deployment.md, "Alarms").  One server: the
    current (or last) round's document with its reason and what its secure aggregations found
    (bad_shares, proven_bad_shares, complaints; docs/deployment.md, "What the operator reads of a
    round"), the devices' strikes (strikes, strike_limit, refused: a device proven to cheat in
    strike_limit signed rounds is refused at the door until 'secemb admin clear-alarms') and
    their aborting dropouts (dropouts: {dropouts, dropout_limit, dropout_window, refused,
    let_in_after}: a device named for the abort of dropout_limit of the last dropout_window rounds
    -- its dropout breached min_row_holders, or the complaints against it alone left its secret
    short -- is refused alike, let in again after let_in_after more rounds or at the clear)."""
    from secemb.transport.http import HttpAdminLink

    seen: dict[str, Any] = {}

    def both(d: Any) -> dict[str, Any]:
        seen.update({f"server{p}": HttpAdminLink(p, d.admin(p)).status() for p in d.parties})
        return seen

    def one(d: Any) -> dict[str, Any]:
        from secemb.transport.http import HttpStageAdmin

        with d.admin() as api:
            admin = HttpStageAdmin(api)
            return {"server": _current_round(admin), **admin.strikes(), "dropouts": admin.dropouts()}

    _operate(deployment, both, one)
    alarmed = [name for name, doc in seen.items() if doc.get("alarms") or doc.get("halted")]
    if alarmed:
        typer.echo(f"ALARM at {' and '.join(alarmed)}: a deviation was detected; see docs/deployment.md, 'Alarms'",
                   err=True)
        raise typer.Exit(EXIT_ALARM)


@admin_app.command("clear-alarms")
def clear_alarms(deployment: Annotated[Path, _DEPLOYMENT]) -> None:
    """After the investigation (docs/deployment.md, "Alarms"): forget the alarms of each server
    whose half DEPLOYMENT holds (each operator clears its own) and lift the halt, so rounds
    open again.  One server: forget the devices' strikes and aborting dropouts (journaled), so
    the door lets the refused devices in again (docs/deployment.md, "Strikes: a device proven to
    cheat")."""
    from secemb.transport.http import HttpAdminLink

    _operate(deployment, lambda d: {f"server{p}": HttpAdminLink(p, d.admin(p)).clear_alarms() for p in d.parties},
             _clear_one_server_strikes)


def _clear_one_server_strikes(d: Any) -> dict[str, Any]:
    """A one-server deployment's clear of every device's strikes and aborting dropouts
    (``POST /v1/admin/exchange/strikes/clear``); ``{"server": its answer}``."""
    from secemb.transport.http import HttpStageAdmin

    with d.admin() as api:
        return {"server": HttpStageAdmin(api).clear_strikes()}


@admin_app.command("clear-strikes")
def clear_strikes(
    deployment: Annotated[Path, _DEPLOYMENT],
    device: Annotated[int | None, typer.Option(min=0, help="Only this device's strikes (a user id of the "
                                               "deployment). Default: every device's.")] = None,
) -> None:
    """Server 0's operator, after the investigation (docs/deployment.md, "Alarms"): forget the
    strikes of --device (or of every device) -- the rounds in which its upload failed the
    servers' verification; 3 refuse it at server 0's door.  Clearing the alarms keeps them, so a
    device cannot have them forgotten by forcing a clear.  Journaled; prints {"server0":
    {"cleared": {device: strikes}}}.  One server: every device's strikes and aborting dropouts at
    once, as 'secemb admin clear-alarms' does there (--device is refused, exit 2); prints
    {"server": {"cleared": {device: strikes}}}."""
    from secemb.errors import InvalidParameters
    from secemb.transport.http import HttpAdminLink

    def run(d: Any) -> dict[str, Any]:
        num_users = d.config(0).num_users
        if device is not None and device >= num_users:
            raise InvalidParameters(f"--device {device}: the deployment's devices are 0-{num_users - 1}")
        return {"server0": HttpAdminLink(0, d.admin(0)).clear_strikes(device)}

    def one(d: Any) -> dict[str, Any]:
        if device is not None:
            raise InvalidParameters("--device: a one-server deployment clears every device's strikes at once "
                                    "(omit --device)")
        return _clear_one_server_strikes(d)

    _operate(deployment, run, one)


@admin_app.command("count", short_help="Run the m' phase: collect the devices' count shares, print m'.")
def count(
    deployment: Annotated[Path, _DEPLOYMENT],
    wait: Annotated[float, typer.Option(min=0.0, help="Seconds at most to collect the devices' count shares "
                                        "(the phase closes once every listed user sent its share to both "
                                        "servers).")] = 60.0,
    users: Annotated[str | None, typer.Option(help="Only these users (default: every device of the "
                                              "deployment).")] = None,
) -> None:
    """Run the m' phase (Eq. 11): open it, collect the devices' count shares ('secemb client
    --count') until every listed user has sent its share to both servers, or for --wait seconds
    at most, close it; print m' and the mean count.  The progress (k of n users at each
    server) goes to stderr; stdout holds the one JSON document."""
    from secemb.transport.http import HttpAdminLink

    def run(d: Any) -> Any:
        link = HttpAdminLink(0, d.admin(0))
        ids = _users(users) if users is not None else list(range(d.config(0).num_users))
        link.count_open(ids)
        if wait > 0:
            typer.echo(f"count phase open: collecting the devices' count shares for {wait:g} s at most "
                       f"('secemb client --count'), closing it once all {len(ids)} users have sent theirs to both "
                       "servers", err=True)
            _await_count_shares(link, len(ids), time.monotonic() + wait)
        return link.count_close()

    _operate(deployment, run)


#: seconds between two asks of server 0 for the count phase's progress
_COUNT_POLL_S = 0.5


def _await_count_shares(link: Any, expected: int, deadline: float) -> None:
    """Return once ``expected`` users have sent their count share to both servers (server 0's
    ``count_progress``, asked every :data:`_COUNT_POLL_S` seconds) or at ``deadline``
    (``time.monotonic()``), whichever comes first.  Each new progress, and each new failure to
    read it (asked again next time: only the progress read can end the wait early), is one
    stderr line."""
    from secemb.errors import InvalidMessage
    from secemb.transport.errors import RemoteError, Unreachable

    said = ""
    while time.monotonic() < deadline:
        try:
            p = _within(link.count_progress, deadline - time.monotonic())
            line = (f"count shares: {p['server0']} of {expected} users at server 0, {p['server1']} of {expected} at "
                    f"server 1, {p['both']} at both")
            done = p["both"] >= expected
        except (RemoteError, Unreachable, InvalidMessage, TimeoutError) as exc:
            line, done = f"count progress unknown: {exc}", False
        if line != said:
            typer.echo(line, err=True)
            said = line
        if done:
            return
        time.sleep(max(0.0, min(_COUNT_POLL_S, deadline - time.monotonic())))


def _within(read: Callable[[], Any], seconds: float) -> Any:
    """``read()``'s result, or its exception, if it returns within ``seconds``; else
    ``TimeoutError``, and the call goes on in a daemon thread whose result is dropped (a server
    that stalls an answer cannot hold ``admin count`` past its ``--wait``: S40-R2; an executor's
    worker would hold the process at exit until the call returns)."""
    answer: Future[Any] = Future()

    def run() -> None:
        try:
            answer.set_result(read())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller by the future
            answer.set_exception(exc)

    threading.Thread(target=run, daemon=True, name="secemb-count-progress").start()
    try:
        return answer.result(timeout=max(seconds, 0.0))
    except TimeoutError:
        raise TimeoutError("no answer before the wait ends") from None


@admin_app.command("open-round")
def open_round(
    deployment: Annotated[Path, _DEPLOYMENT],
    participants: Annotated[str, typer.Option(help="The round's users, e.g. 0-99.")],
    deadline: Annotated[float, typer.Option(min=1.0, max=86400.0, help="Seconds until server 0 closes it.")] = 120.0,
) -> None:
    """Open the next round for --participants (at least the servers' floor); print its document.
    One server: the devices drive its stages (its --stage-deadline, not --deadline, bounds each)."""
    from secemb.transport.http import HttpAdminLink

    def one(d: Any) -> Any:
        from secemb.transport.http import HttpStageAdmin

        with d.admin() as api:
            admin = HttpStageAdmin(api)
            last = _current_round(admin)
            return admin.open_round(1 if last is None else int(last["round_id"]) + 1, _users(participants))

    _operate(deployment, lambda d: HttpAdminLink(0, d.admin(0)).open_round(_users(participants), deadline), one)


def _current_round(admin: Any) -> dict[str, Any] | None:
    """A one-server deployment's current round document (``None``: no round yet)."""
    from secemb.transport.errors import RemoteError

    try:
        doc: dict[str, Any] = admin.round_info()
    except RemoteError as exc:
        if exc.status != 409:
            raise
        return None
    return doc


@admin_app.command("save-denoiser")
def save_denoiser(
    deployment: Annotated[Path, _DEPLOYMENT],
    out: Annotated[Path, typer.Option(help="The file to write (.npz): 'secemb infer --denoiser' reads it.")],
    recommender: Annotated[Path, typer.Option(help="The recommender's saved folder (its public manifest.json and "
                                              "public.npz): the denoiser's frozen columns must be its table.")],
) -> None:
    """Write the trained GREC denoiser of a deployment whose model is grec-denoiser to OUT:
    server 0's current public model (F_i's table e, the dense part, the spec with the
    mechanism; not the recommender's frozen columns), checked against the SHA-256 server 0's
    status announces and server 1's at the same version (exit 1 on a mismatch, or if server 1
    does not answer: nothing written), and the SHA-256 of the recommender it was trained against: RECOMMENDER's,
    once the model's frozen columns with RECOMMENDER's dense vector hash to it.  Devices use it
    with 'secemb infer --credentials ... --denoiser OUT --recommender RECOMMENDER'.  Prints the
    file, the model version and its SHA-256, and the recommender's."""
    from secemb.cli._usage import check_output_file, fail
    from secemb.errors import InvalidMessage, InvalidParameters
    from secemb.inference.saved import load_public_recommender

    check_output_file(out, "--out")
    try:
        rec = load_public_recommender(recommender)
    except (InvalidParameters, InvalidMessage) as exc:
        fail(f"--recommender: {exc}")
    _operate(deployment, lambda d: _save_denoiser(d, out, (recommender, rec[1], rec[2])))


#: tries of :func:`_save_denoiser` at a status and model of one version (a round may commit in between)
_MODEL_TRIES = 3


def _save_denoiser(dep: Any, out: Path, recommender: tuple[Path, Any, str]) -> dict[str, Any]:
    """Fetch the denoiser deployment ``dep``'s current model from server 0 and write it to ``out``
    (:func:`secemb.inference.saved.save_denoiser`) with the SHA-256 of ``recommender``:
    ``(folder, dense, model_sha256)`` of the recommender's public part, whose table the
    model's frozen columns must be (they and ``dense`` hash to ``model_sha256``).

    Raises
    ------
    InvalidParameters
        The deployment's model is not the denoiser, its hyperparameters are not a denoiser's,
        its frozen columns are not ``recommender``'s table, or ``out`` cannot be written.
    InvalidMessage, ModelDisagreement, ProtocolError, RemoteError, Unreachable
        Server 0's model is malformed or not confirmed by server 1 (:func:`_current_model`).
    """
    from secemb.digest import model_sha256
    from secemb.errors import InvalidParameters
    from secemb.inference.denoiser import NAME, Denoiser
    from secemb.inference.saved import save_denoiser as write

    cfg = dep.config(0)
    if cfg.model != NAME:
        raise InvalidParameters(f"the deployment's model is {cfg.model!r}, not GREC's denoiser ({NAME!r})")
    try:
        den = Denoiser(**cfg.model_hparams)
    except TypeError as exc:
        raise InvalidParameters(f"{dep.config_path(0)}: not a denoiser's hyperparameters ({exc})") from None
    table, dense, version, sha, last_round = _current_model(dep, cfg.num_items, den.sparse_width, den.dense_size)
    folder, rec_dense, rec_sha = recommender
    if model_sha256(table[:, den.hat_d :], rec_dense) != rec_sha:
        raise InvalidParameters(f"the deployment {dep.root} trained its denoiser against another recommender than "
                                f"--recommender {folder} (model_sha256 {rec_sha}): its frozen columns with that "
                                f"recommender's dense vector do not hash to it")
    try:
        path = write(out, den, table, dense, recommender_sha256=rec_sha)
    except OSError as exc:
        raise InvalidParameters(f"--out {out}: {exc}") from None
    m = den.mechanism
    return {"written": str(path), "model_version": version, "model_sha256": sha, "recommender_sha256": rec_sha,
            "last_committed_round": last_round, "epsilon": m.epsilon, "delta": m.delta, "bound": m.bound}


def _current_model(dep: Any, num_items: int, width: int, dense_size: int) -> tuple[Any, Any, int, str, int | None]:
    """``(table, dense, model_version, model_sha256, last_committed_round)``: server 0's current
    public model of the deployment ``dep`` (a ``(num_items, width)`` table and a
    ``(dense_size,)`` vector), fetched at the version its status announces, checked against
    the SHA-256 it announces, and confirmed by server 1: its status (read as server 0 reads it,
    :meth:`~secemb.server.deploy.Deployment.peer`) announces the same SHA-256 at that version.
    Answers longer than :func:`~secemb.transport.network.answer_limit` of those sizes are not
    read.

    Raises
    ------
    InvalidMessage
        The model does not decode at the announced version or is longer than that limit (after
        ``_MODEL_TRIES`` tries: a round may commit in between), or does not hash to the
        announced SHA-256; or server 1's status is malformed.
    ModelDisagreement
        Server 1 announces another SHA-256 at that version.
    ProtocolError
        Server 1 is at another model version (after ``_MODEL_TRIES`` tries).
    RemoteError, Unreachable
        A server refused or did not answer.
    """
    from secemb.digest import model_sha256
    from secemb.errors import InvalidMessage, ModelDisagreement, ProtocolError
    from secemb.round.messages import decode_model
    from secemb.transport.http import HttpAdminLink
    from secemb.transport.network import answer_limit

    link = HttpAdminLink(0, dep.admin(0))
    link.api.max_answer_bytes = answer_limit(num_items, width, dense_size)  # the model message, not more
    peer = dep.peer()
    try:
        for attempt in range(_MODEL_TRIES):
            last_try = attempt + 1 == _MODEL_TRIES
            version, announced, last_round = _announced_model(link)
            try:
                table, dense = decode_model(link.model(), version=version, num_items=num_items, width=width,
                                            dense_size=dense_size)
            except InvalidMessage:
                if last_try:
                    raise
                continue
            sha = model_sha256(table, dense)
            if sha != announced:
                raise InvalidMessage(f"server 0's model hashes to {sha}, its status announces {announced}")
            their_version, theirs = _server1_model(peer)
            if their_version == version:
                break
            if last_try:
                raise ProtocolError(f"server 1 holds model version {their_version}, server 0 {version}: the model "
                                    f"is not confirmed by server 1; nothing written (retry once a round's sync is "
                                    f"through; docs/deployment.md, 'Alarms' if it persists)")
    finally:
        link.close()
        peer.close()
    if theirs != sha:
        raise ModelDisagreement(f"server 0's model of version {version} hashes to {sha}, server 1 announces "
                                f"{theirs[:80]!r} at that version: the servers disagree; nothing written "
                                f"(docs/deployment.md, 'Alarms')")
    return table, dense, version, sha, last_round


def _server1_model(peer: Any) -> tuple[int, str]:
    """``(model_version, model_sha256)`` of server 1's status, read with ``peer`` (an
    :class:`~secemb.transport.network.ApiClient` signing as server 0,
    :meth:`~secemb.server.deploy.Deployment.peer`).

    Raises
    ------
    InvalidMessage
        The status is not an object with an integer version and a string SHA-256.
    RemoteError, Unreachable
        Server 1 refused or did not answer (the message names server 1).
    """
    from secemb.transport.errors import RemoteError, Unreachable
    from secemb.transport.network import answer_fields

    where = f"server 1 ({peer.base_url}/v1/peer/status)"
    try:
        status = answer_fields(peer.get_json("/v1/peer/status"), where, model_version=int, model_sha256=str)
    except RemoteError as exc:
        raise RemoteError(exc.status, exc.error, f"{where} refused: {exc.detail}") from None
    except Unreachable as exc:
        raise Unreachable(f"{where} did not answer, so server 0's model is not confirmed ({exc})") from None
    return status["model_version"], status["model_sha256"]


@admin_app.command("export-model")
def export_model(
    out: Annotated[Path, typer.Argument(help="The folder to write (created; the saved-model format's public files).")],
    deployment: Annotated[Path, _DEPLOYMENT],
    dataset: Annotated[str | None, typer.Option(help="The dataset the devices train on (as 'secemb client "
                                                "--dataset'): its items' raw ids and titles go to items.json; "
                                                "without it the ids are the indices.")] = None,
    data_dir: Annotated[Path | None, typer.Option(envvar="SECEMB_DATA_DIR", help="With --dataset: its "
                                                  "folder.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace a model already saved in OUT.")] = False,
) -> None:
    """Write the deployment's current public model to OUT in the saved-model format: server
    0's model at the version its status announces (checked against the SHA-256 it announces
    and server 1's at the same version: exit 1 on a mismatch, or if server 1 does not answer,
    nothing written), as manifest.json and public.npz, with --dataset also items.json (the items' raw ids and
    titles). A deployment has no user's parameters (they stay on the devices), so OUT has no
    devices.npz nor users.json: a device serves its own recommendations with 'secemb infer
    --credentials FILE --state-file STATE --recommender OUT'; 'secemb recommend' and 'secemb
    infer --model-dir' refuse OUT (no user to recommend for). Not for GREC's denoiser ('secemb
    admin save-denoiser'). OUT must be new, empty, or (with --force) a model saved earlier."""
    from secemb.cli._usage import fail
    from secemb.data import DataFormatError, DatasetNotFoundError
    from secemb.errors import InvalidParameters
    from secemb.outputs import check_output

    try:
        check_output(out, option="OUT", force=force, kind="model-dir", inputs=[deployment])
        ids = None if dataset is None else _catalogue_ids(dataset, data_dir)
    except (InvalidParameters, DataFormatError, DatasetNotFoundError) as exc:
        fail(exc)
    _operate(deployment, lambda d: _export_model(d, out, dataset, ids))


def _catalogue_ids(dataset: str, data_dir: Path | None) -> Any:
    """The items' raw ids and titles of ``dataset`` (an :class:`~secemb.data.ids.IdMap`
    without users: a user's id is its device's own), or ``None`` when it records none."""
    from secemb.data import load_dataset
    from secemb.data.ids import IdMap

    ids = load_dataset(dataset, data_dir).ids
    return None if ids is None else IdMap(None, ids.items, ids.titles)


def _export_model(dep: Any, out: Path, dataset: str | None, ids: Any) -> dict[str, Any]:
    """Write the deployment ``dep``'s current public model to ``out`` (atomically:
    :func:`secemb.outputs.atomic_dir`) with the item ids ``ids`` (of ``dataset``; ``None``:
    none); return what was written.

    Raises
    ------
    InvalidParameters
        The deployment trains GREC's denoiser, its configuration does not build a model, the
        ids cover another number of items than the deployment, or ``out`` cannot be written.
    InvalidMessage, ModelDisagreement, ProtocolError, RemoteError, Unreachable
        Server 0's model is malformed or not confirmed by server 1 (:func:`_current_model`).
    """
    from secemb.errors import InvalidParameters
    from secemb.inference.denoiser import NAME
    from secemb.inference.trained import save_public
    from secemb.outputs import atomic_dir

    cfg = dep.config(0)
    if cfg.model == NAME:
        raise InvalidParameters(f"the deployment {dep.root} trains GREC's denoiser: write it with 'secemb admin "
                                f"save-denoiser'")
    if ids is not None and len(ids.items) != cfg.num_items:
        raise InvalidParameters(f"--dataset {dataset} has {len(ids.items)} items, the deployment {cfg.num_items}")
    model = cfg.make_model()
    table, dense, version, sha, last_round = _current_model(dep, cfg.num_items, model.sparse_width, model.dense_size)
    info = {"protocol": cfg.protocol, "dataset": dataset, "seed": None,
            "config": {"source": "deployment", "deployment": str(dep.root), "model_version": version,
                       "last_committed_round": last_round}}
    try:
        with atomic_dir(out) as tmp:
            save_public(tmp, model, table, dense, info, num_users=cfg.num_users, ids=ids)
    except OSError as exc:
        raise InvalidParameters(f"OUT {out}: the model was not written ({exc.strerror or exc})") from None
    return {"written": str(out), "model": model.name, "model_version": version, "model_sha256": sha,
            "last_committed_round": last_round, "item_ids": ids is not None}


def _announced_model(link: Any) -> tuple[int, str, int | None]:
    """``(model_version, model_sha256, last_committed_round)`` of server 0's status (``link``:
    an :class:`~secemb.transport.http.HttpAdminLink`).

    Raises
    ------
    InvalidMessage
        The status is not a JSON object with an integer version, a string SHA-256 and an
        integer or null last committed round.
    """
    from secemb.errors import InvalidMessage, check_int

    try:
        status = link.status()
        version, sha, last = status["model_version"], status["model_sha256"], status.get("last_committed_round")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # not JSON, not an object, a key missing
        raise InvalidMessage(f"server 0's status is malformed ({type(exc).__name__}: {exc})") from None
    if not isinstance(sha, str):
        raise InvalidMessage(f"server 0's status is malformed (model_sha256 {sha!r} is not a string)")
    version = check_int("server 0's status: model_version", version, error=InvalidMessage)
    if last is not None:
        last = check_int("server 0's status: last_committed_round", last, error=InvalidMessage)
    return version, sha, last


def register(app: typer.Typer) -> None:
    """Attach the ``admin`` command group to ``app``."""
    app.add_typer(admin_app, name="admin")
