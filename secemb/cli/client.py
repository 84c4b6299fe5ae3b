"""``secemb client``: one simulated device taking part in rounds of a running deployment (two
servers; or one server: ``--credentials`` written by a one-server deployment's ``secemb admin
add-devices``, docs/deployment.md, "One server").

Exit codes: 0 the device took part in the asked number of rounds (or sent its count share);
1 no round for it before ``--wait`` ran out (a server that did not answer is named: "server
unreachable"), or a round failed; 2 bad usage.
"""

import json
import math
import os
import time
from pathlib import Path
from typing import Annotated, NoReturn

import typer


def register(app: typer.Typer) -> None:
    """Attach the ``client`` command to ``app``."""

    @app.command()
    def client(
        ctx: typer.Context,
        user: Annotated[int, typer.Option(min=0, help="This device's user id.")],
        credentials: Annotated[Path | None, typer.Option(
            envvar="SECEMB_DEVICE_CREDENTIALS",
            help="This device's credentials file (secemb admin add-devices): URLs, CA, its two keys.")] = None,
        server0: Annotated[str | None, typer.Option(help="Server 0's URL (without --credentials).")] = None,
        server1: Annotated[str | None, typer.Option(help="Server 1's URL (without --credentials).")] = None,
        dataset: Annotated[str, typer.Option(help="Where the device's own ratings come from.")] = "synthetic",
        model: Annotated[str | None, typer.Option(
            help="The deployment's model, for --count when the credentials do not name it (rounds announce it; "
                 "default: a rating model).")] = None,
        data_dir: Annotated[Path | None, typer.Option(
            envvar="SECEMB_DATA_DIR", help="Directory of the dataset files: --dataset's, or a one-server protocol's "
                                           "own.")] = None,
        seed: Annotated[int, typer.Option(min=0, help="Dataset/split seed (as the run's).")] = 0,
        test_fraction: Annotated[float, typer.Option(help="Held-out fraction of the split.")] = 0.2,
        rounds: Annotated[int, typer.Option(min=1, help="Rounds to take part in.")] = 1,
        count: Annotated[bool, typer.Option("--count", help="Send the Eq. 11 count share, then exit.")] = False,
        wait: Annotated[
            float, typer.Option(min=0.0, help="Seconds to wait for a round that includes this device.")
        ] = 60.0,
        state_file: Annotated[
            Path | None, typer.Option(help="Private parameters and optimizer state (.npz; created if missing).")
        ] = None,
        ca: Annotated[Path | None, typer.Option(
            help="A CA certificate both servers' certificates must chain to (default: with --credentials, each "
                 "server's own CA from the file).")] = None,
        min_users: Annotated[int, typer.Option(
            min=2, help="This device's floor: it joins no round announced for fewer users.")] = 10,
        recommender: Annotated[Path | None, typer.Option(
            help="For a GREC denoiser's rounds: the recommender's saved folder (its manifest.json and public.npz: "
                 "the model, its public dense vector, its table: the one the servers froze).")] = None,
        recommender_state: Annotated[Path | None, typer.Option(
            help="For a GREC denoiser's rounds: this device's state file of the recommender's run (its private "
                 "parameters, read only).")] = None,
        upload_quantum: Annotated[float, typer.Option(
            help="Upload at the next multiple of this many seconds after the round's last download, so that "
                 "the servers cannot time the local step (whose work grows with the device's ratings); 0 "
                 "uploads at once; at most 60 (docs/security.md, \"Participation and timing\").")] = 0.25,
        new_set_up: Annotated[bool, typer.Option(
            "--new-set-up", help="A SecEA silo: take one new set-up although it took part in one before (the "
                                 "operator's approval: a server may learn one more bit of its entities; "
                                 "docs/deployment.md).")] = False,
    ) -> None:
        """Run one device: fetch its rounds, retrieve its rows privately, train locally, upload.

        Credentials: --credentials FILE (written 0600 by 'secemb admin add-devices'), or
        --server0/--server1 with the device's keys in SECEMB_DEVICE_KEY0 and SECEMB_DEVICE_KEY1
        (hex; never on the command line).  The device's interactions are its part of the run's
        training split, which the model's task defines (the rating task: a random split by
        --test-fraction; a sequential model: leave-one-out, the sequence in time order); the
        model is the one the rounds announce (for --count: the credentials', else --model).
        An FM or DeepFM deployment trained with features (the servers' [model] item_features)
        is built with the device's own features, --dataset's (its user row: it enters only the
        local step, whose gradients leave as the protocol's shares; never sent in the clear).

        A GREC denoiser (model grec-denoiser) is trained on the device's clean representation:
        give --recommender and --recommender-state; the device builds its one-device context
        from them, its own features (--dataset's, for a recommender with user features) and
        the mechanism the rounds announce.  The recommender's table must be the one the
        servers froze (the rounds announce its SHA-256): another exits 2 before anything is
        sent.

        One server (credentials of a one-server deployment): the device takes part in --rounds
        rounds that list it, stage by stage as the server closes them; it takes --user,
        --credentials, --rounds, --wait and --data-dir only.  A SecEA silo takes part in one
        set-up only (a server that fails set-ups on purpose learns one bit of its entities from
        each): --new-set-up is its operator's approval of one more."""
        if credentials is not None:
            from secemb.server.exchange_deploy import ExchangeCredentials

            if ExchangeCredentials.sniff(credentials):
                _exchange_client(ctx, user, credentials, rounds, wait, data_dir, new_set_up)
                return
        import numpy as np

        from secemb.client.device import MAX_UPLOAD_QUANTUM_S, Device, DeviceClient, RoundInfo
        from secemb.data import RatingData, by_user, load_dataset
        from secemb.data.features import FeatureSet
        from secemb.errors import InvalidMessage, InvalidParameters, SecembError
        from secemb.models import RecModel, get_model, uses_features
        from secemb.models.base import UserSnapshot
        from secemb.models.task import RATING, Task
        from secemb.transport.credentials import DeviceCredentials
        from secemb.transport.errors import RemoteError, Unreachable
        from secemb.transport.signing import parse_secret

        def fail(msg: str, code: int) -> NoReturn:
            typer.echo(json.dumps({"user": user, "error": msg}))
            raise typer.Exit(code)

        if not 0.0 <= upload_quantum <= MAX_UPLOAD_QUANTUM_S:  # NaN too: before anything is sent
            fail(f"bad usage: --upload-quantum must be a number of seconds in [0, {MAX_UPLOAD_QUANTUM_S:g}], got "
                 f"{upload_quantum}", 2)

        try:
            announced: dict | None = None
            ring_bits = 32
            cas: tuple[Path | None, Path | None] = (ca, ca)
            if credentials is not None:
                creds = DeviceCredentials.load(credentials)
                if creds.user != user:
                    raise InvalidParameters(f"{credentials} holds user {creds.user}'s keys, not --user {user}'s")
                urls, keys = list(creds.urls), list(creds.keys)
                cas = (ca, ca) if ca is not None else creds.cas
                announced, ring_bits = creds.model, creds.ring_bits
            else:
                env = [os.environ.get(f"SECEMB_DEVICE_KEY{b}") for b in (0, 1)]
                if server0 is None or server1 is None or env[0] is None or env[1] is None:
                    fail("bad usage: give --credentials, or --server0 and --server1 with SECEMB_DEVICE_KEY0 and "
                         "SECEMB_DEVICE_KEY1 (hex) in the environment", 2)
                urls, keys = [server0, server1], [parse_secret(f"SECEMB_DEVICE_KEY{b}", env[b]) for b in (0, 1)]
            data = load_dataset(dataset, data_dir, seed=seed)
            if not 0.0 < test_fraction < 1.0:
                raise InvalidParameters(f"--test-fraction must be in (0, 1), got {test_fraction}")
            if not 0 <= user < data.num_users:
                raise InvalidParameters(f"--user must be in [0, {data.num_users}) for dataset {dataset!r}, got {user}")
            count_task: Task = RATING
            if announced is not None:
                count_task = get_model(announced["name"], **announced.get("hparams", {})).task
            elif model is not None:
                count_task = get_model(model).task
            if (recommender is None) != (recommender_state is None):
                raise InvalidParameters("--recommender and --recommender-state go together")
            if new_set_up:
                raise InvalidParameters("--new-set-up is a SecEA silo's (a one-server deployment's credentials)")
        except (OSError, KeyError, ValueError, TypeError, InvalidParameters) as exc:  # TypeError: a model's arguments
            fail(f"bad usage: {exc}", 2)

        def own_features() -> FeatureSet:
            """This device's features, as the run's (the dataset's, its seed for a stand-in): its
            own user row and the public item matrix."""
            from secemb.data.features import load_features

            return load_features(dataset, data_dir, num_users=data.num_users, num_items=data.num_items,
                                 seed=seed).for_device(user)

        def round_model(info: RoundInfo) -> RecModel:
            """The announced model (FM, DeepFM: with this device's features where the round's
            sizes say the deployment trains with features); a denoiser over this device's
            one-device context, once its recommender's table is the one the servers froze.

            Raises
            ------
            InvalidMessage
                A model the device cannot build from the announcement (:meth:`RoundInfo.make_model`).
            SecembError
                This device's arguments or data do not fit the round (exit 2).
            """
            from secemb.inference.denoiser import NAME, Denoiser

            def checked(model: RecModel, source: str) -> RecModel:
                """``model`` once :meth:`RoundInfo.check_model` passes; its refusal names ``source``,
                where the part of the model that differs from the servers' comes from."""
                try:
                    info.check_model(model)
                except InvalidParameters as exc:
                    raise InvalidParameters(f"{source}: {exc}") from None
                return model

            if info.model.get("name") != NAME:
                model = info.make_model()
                if uses_features(model.name) and not info.fits(model):  # the deployment trains with features
                    source = f"--dataset {dataset}" + ("" if data_dir is None else f" --data-dir {data_dir}")
                    return checked(info.make_model(own_features()), f"the features of {source} (--seed {seed})")
                info.check_model(model)
                return model
            if recommender is None or recommender_state is None:
                raise InvalidParameters("the rounds train a GREC denoiser: give --recommender and --recommender-state")
            from secemb.inference.saved import load_public_recommender

            try:
                rec, rec_dense, *_, rec_table = load_public_recommender(recommender)
            except InvalidMessage as exc:  # the device's own --recommender folder
                raise InvalidParameters(f"--recommender {recommender}: {exc}") from None
            try:
                with np.load(recommender_state, allow_pickle=False) as z:
                    params = np.asarray(z["params"], dtype=np.float64)
            except (OSError, KeyError, ValueError) as exc:
                raise InvalidParameters(f"--recommender-state {recommender_state}: not a device state file ({exc})"
                                        ) from None
            info.make_model()  # the announced spec builds a denoiser (InvalidMessage, the servers' fault, if not)
            spec = info.model["hparams"]
            user_x = own_features().user[0] if getattr(rec, "l_x", 0) else None
            # its table must be the one the servers froze (the round's recommender_table_sha256)
            return checked(Denoiser.for_device(spec, rec, rec_dense, params, user_x, table_sha256=rec_table),
                           f"--recommender {recommender}")

        def own(task: Task, train: RatingData | None = None) -> tuple[np.ndarray, np.ndarray]:
            """This user's training interactions under ``task``'s split, in its order."""
            train = train if train is not None else task.split(data, test_fraction, seed)[0]
            return by_user(train, order=task.order).of(user)

        from secemb.server.tls import client_context

        try:  # each server verified against its own CA
            tls0 = None if cas[0] is None else client_context(cas[0])
            tls = (tls0, None if cas[1] is None else client_context(cas[1]))
        except InvalidParameters as exc:
            fail(f"bad usage: {exc}", 2)
        dc = DeviceClient(user, urls[0], urls[1], keys[0], keys[1], min_users=min_users, tls=tls)
        if count:
            from secemb.round.local import distinct_items

            distinct = distinct_items(np.sort(own(count_task)[0]))[0].size
            try:
                n = dc.send_count(int(count_task.request_counts(np.array([distinct]))[0]), ring_bits)
            except Unreachable as exc:
                fail(f"server unreachable: {exc}", 1)
            except SecembError as exc:
                fail(f"count: {exc}", 1)
            typer.echo(json.dumps({"user": user, "count_bytes": n}))
            return
        device: Device | None = None
        round_rec: RecModel | None = None
        done: set[int] = set()
        deadline = time.monotonic() + wait
        polled: SecembError | None = None  # why the last poll for a round failed
        while len(done) < rounds:
            try:
                info, polled = dc.round_info(), None
            except (RemoteError, SecembError) as exc:
                info, polled = None, exc
            if info is None or info.state != "open" or not info.participant or info.round_id in done:
                if time.monotonic() > deadline:
                    fail(_no_round(user, wait, polled), 1)
                time.sleep(0.2)
                continue
            if device is None or round_rec is None:  # the announced model's task says what the device trains on
                try:
                    round_rec = round_model(info)
                    device = Device(dc, *own(round_rec.task), upload_quantum_s=upload_quantum)
                except InvalidMessage as exc:  # the announcement
                    fail(f"round {info.round_id}: {exc}", 1)
                except SecembError as exc:  # a bad argument, or the dataset's features missing or malformed
                    fail(f"bad usage: {exc}", 2)
            if device.store is None and state_file is not None and state_file.exists():
                try:
                    device.store = round_rec.new_user_store(1, device.rng, info.adam())
                except InvalidMessage as exc:
                    fail(f"round {info.round_id}: {exc}", 1)
                try:
                    with np.load(state_file, allow_pickle=False) as z:
                        device.store.restore(0, UserSnapshot(z["params"], z["m"], z["v"], int(z["t"])))
                except (OSError, KeyError, ValueError, TypeError) as exc:  # InvalidParameters: other sizes
                    fail(f"bad usage: --state-file {state_file}: not this model's device state ({exc})", 2)
            try:
                session = device.participate(info, model=round_rec)
                outcome = device.settle(wait_s=wait)
            except SecembError as exc:
                fail(f"round {info.round_id}: {exc}", 1)
            done.add(info.round_id)
            assert session.result is not None  # participate trained
            loss = session.result.loss  # strict JSON: a diverged (non-finite) loss is null
            typer.echo(json.dumps({"user": user, "round_id": info.round_id, "outcome": outcome,
                                   "loss": loss if math.isfinite(loss) else None, "upload_bytes": session.upload_bytes,
                                   "download_bytes": session.download_bytes}, allow_nan=False))
            if state_file is not None:
                import io

                from secemb.outputs import atomic_write_bytes

                assert device.store is not None  # participate made it
                snap = device.store.snapshot(0)
                buf = io.BytesIO()
                np.savez(buf, params=snap.params, m=snap.m, v=snap.v, t=np.int64(snap.t))
                try:  # the device's private state: 0600
                    atomic_write_bytes(state_file, buf.getvalue(), mode=0o600)
                except OSError as exc:
                    fail(f"--state-file {state_file}: cannot be written ({exc.strerror or exc})", 1)
            deadline = time.monotonic() + wait


def _no_round(user: int, wait: float, polled: Exception | None) -> str:
    """What ``secemb client`` says (exit 1) when no round it can take part in came within
    ``--wait`` s: the server unreachable (``polled``, the last poll's error, an ``Unreachable``:
    a server down is not "no round"), else no open round, with why the last poll failed (e.g.
    a round document longer than the floor)."""
    from secemb.transport.errors import Unreachable

    if isinstance(polled, Unreachable):
        return f"server unreachable for {wait} s: {polled}"
    why = "" if polled is None else f" (the last poll failed: {polled})"
    return f"no open round for user {user} within {wait} s{why}"


def _exchange_client(ctx: typer.Context, user: int, credentials: Path, rounds: int, wait: float,
                     data_dir: Path | None, new_set_up: bool) -> None:
    """``secemb client`` of a one-server deployment: its device (the protocol's ``make_device``)
    takes part in ``rounds`` rounds (:func:`secemb.client.stages.take_part`); one JSON
    line per round.  ``new_set_up``: a SecEA silo's operator approves one more set-up
    (:meth:`~secemb.protocols.secea.protocol.SecEASilo.approve_new_set_up`)."""
    from secemb.cli._exchange import given_options
    from secemb.data import DataFormatError, DatasetNotFoundError
    from secemb.client.stages import deployed_device, device_state_file, take_part
    from secemb.errors import InvalidParameters, SecembError
    from secemb.protocols.exchange import SignedDevice
    from secemb.server.exchange_deploy import ExchangeCredentials
    from secemb.server.tls import client_context
    from secemb.transport.errors import RemoteError
    from secemb.transport.http import HttpStageLink
    from secemb.transport.network import ApiClient

    def fail(msg: object, code: int) -> NoReturn:
        typer.echo(json.dumps({"user": user, "error": str(msg)}))
        raise typer.Exit(code)

    stray = sorted(set(given_options(ctx)) - {"user", "credentials", "rounds", "wait", "data_dir", "new_set_up"})
    if stray:
        fail(f"bad usage: a one-server device does not take --{stray[0].replace('_', '-')}", 2)
    try:
        creds = ExchangeCredentials.load(credentials)
        if creds.user != user:
            raise InvalidParameters(f"{credentials} holds user {creds.user}'s key, not --user {user}'s")
        protocol = creds.protocol(data_dir)
        state = device_state_file(creds.path, user, creds.doc, creds.key, creds.ca.read_bytes())
        device = deployed_device(protocol, user, state)  # a SecEA silo: restored from its state file if there
        if isinstance(device, SignedDevice):  # it signs with its credentials' identity (docs/secagg.md)
            if creds.identity is None:
                raise InvalidParameters(f"{credentials} carries no device identity, which this protocol's devices "
                                        "sign with: have the operator issue it again ('secemb admin add-devices')")
            device.identity = creds.identity
        if new_set_up:
            from secemb.protocols.secea.protocol import SecEASilo

            if not isinstance(device, SecEASilo):
                raise InvalidParameters("--new-set-up is a SecEA silo's (this deployment's devices take no set-up)")
            device.approve_new_set_up()
        tls = client_context(creds.ca)
    except (InvalidParameters, DatasetNotFoundError, DataFormatError, OSError) as exc:
        fail(f"bad usage: {exc}", 2)
    plan = protocol.plan()
    done: set[int] = set()
    with ApiClient(creds.url, f"user:{user}", creds.key, tls=tls) as api:
        link = HttpStageLink(user, api)
        deadline = time.monotonic() + wait
        polled: SecembError | None = None
        while len(done) < rounds:
            try:
                doc, polled = link.round_info(), None
            except (RemoteError, SecembError) as exc:  # 409: no round yet
                doc, polled = None, exc
            stages = list(plan.stages) if doc is None else list(doc.get("stages") or plan.stages)
            if doc is None or doc.get("state") != "open" or user not in doc.get("users", []) \
                    or doc.get("stage") != stages[0] or doc.get("round_id") in done:
                if time.monotonic() > deadline:
                    fail(_no_round(user, wait, polled), 1)
                time.sleep(0.2)
                continue
            assert doc is not None
            try:
                res = take_part(link, device, plan, doc, wait_s=wait)
            except SecembError as exc:
                fail(f"round {doc.get('round_id')}: {exc}", 1)
            done.add(int(doc["round_id"]))
            typer.echo(json.dumps({"user": user, **res}))
            if res["outcome"] != "committed":
                fail(f"round {res['round_id']}: {res['outcome']}", 1)
            deadline = time.monotonic() + wait
