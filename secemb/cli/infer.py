"""``secemb infer``: a device's private predictions (GREC §3.2), from a saved recommender in
process, or from a running deployment over the network.

The device releases its representation under ``(epsilon, delta)``-LDP (analytic Gaussian,
sensitivity 2B), the server scores its public candidate set (every item) on the noisy
representation, and the device keeps what it wants: the top ``k`` items (without the ones it
rated, left out on the device after the scoring) or its scores for ``--items``.  With ``--denoiser`` (written by
``secemb bench grec --save-dir``, or by ``save_denoiser`` from a deployment's trained denoiser; with
``--credentials`` also ``--recommender``, the recommender's saved folder, of which the device reads
the public model only) the device post-processes with
GREC's denoiser (Eq. 16); without, the predictions are the server's scores of the same
(re-clipped) release plus the device's private offset -- the bench's "re-clipped, no
denoiser" column, better than the paper's naive LDP (no second clip) at the same privacy,
which is therefore offered by the bench only.

Two modes:

* ``--model-dir DIR --user U`` (``U`` the user's raw id in the dataset; or ``--index I``,
  its internal index): a folder of ``secemb train --save-model``; the exchange runs in process
  over the counting transport;
* ``--credentials FILE --state-file STATE``: the device's credentials (``secemb admin
  add-devices``) and private parameters (``secemb client --state-file``); the exchange is
  ``POST /v1/inference`` to server 0 of the deployment, whose reply scores its public
  candidate set (every item, or its ``[inference] candidates``).  ``--dataset`` (with
  ``--data-dir``, ``--seed``, ``--test-fraction``, as ``secemb client`` reads them) gives the
  device its own ratings, which ``-k`` leaves out, and its own user features; without it the
  device knows none.  ``--recommender`` (the recommender's saved folder, its public part) gives
  it the public model a model with user features (FM/DeepFM) or ``--denoiser`` needs.

Items are printed by their raw ids in the dataset, with titles where it has them (the saved
folder's ``items.json``: ``--model-dir``'s, or with ``--credentials`` the ``--recommender``'s;
without one the ids are the indices), and ``--items`` takes raw ids (comma-separated, so an id
holding a comma cannot be given there).  A deployment numbers its devices by index: with
``--credentials``, ``--user``/``--index`` only check the credentials file's device.

Releases: with ``--release-file`` (default in the network mode: ``STATE.grec-releases.npz``)
the device keeps one release per representation version and sends it again while its
representation and ``(epsilon, delta, B)`` are unchanged (no further privacy cost); a new
release is recorded there, and the output reports all releases composed (dp-accounting's PLD
accountant).  Without it (saved-model mode) every invocation makes one fresh release.  The
bytes of the request and of the reply are printed.

Exit codes: 0 success; 1 the deployment refused, did not answer or sent a malformed answer; 2 bad usage (a missing or
malformed folder or file, an unknown user or item id, an index out of range, privacy parameters out of range or
different from the denoiser's).
"""

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from secemb.cli._items import INDEX_HELP, USER_HELP

if TYPE_CHECKING:  # pragma: no cover
    from secemb.data.ids import IdMap


def register(app: typer.Typer) -> None:
    """Attach the ``infer`` command to ``app``."""

    @app.command()
    def infer(
        model_dir: Annotated[Path | None, typer.Option(help="Folder written by 'secemb train --save-model' (mf, ncf, "
                                                       "fm, deepfm); in-process mode.")] = None,
        user: Annotated[str | None, typer.Option(help=USER_HELP + " With --credentials: the file's device.")] = None,
        index: Annotated[int | None, typer.Option(help=INDEX_HELP)] = None,
        credentials: Annotated[Path | None, typer.Option(help="This device's credentials file (secemb admin "
                                                         "add-devices): ask the deployment's server 0.")] = None,
        state_file: Annotated[Path | None, typer.Option(help="With --credentials: the device's private parameters "
                                                        "('secemb client --state-file').")] = None,
        k: Annotated[int, typer.Option("-k", "--k", min=1, help="Number of items (top-k of the unrated; with "
                                       "--credentials, of the server's candidates less the --dataset "
                                       "ratings).")] = 10,
        items: Annotated[str, typer.Option(help="Comma-separated item ids (as in the dataset) to score instead of a "
                                           "top-k.")] = "",
        denoiser: Annotated[Path | None, typer.Option(help="Denoiser file ('secemb bench grec --save-dir', or "
                                                      "save_denoiser of a deployment's): post-processing LDP; "
                                                      "without it the release's scores as they are.")] = None,
        recommender: Annotated[Path | None, typer.Option(help="With --credentials and --denoiser: the recommender's "
                                                         "saved folder (only its manifest.json and public.npz are "
                                                         "read: the model and its public dense vector).")] = None,
        release_file: Annotated[Path | None, typer.Option(help="The device's release ledger: one release per "
                                                          "representation version, reused (default with "
                                                          "--credentials: STATE.grec-releases.npz).")] = None,
        epsilon: Annotated[float | None, typer.Option(help="LDP epsilon (default 1, or the denoiser's).")] = None,
        delta: Annotated[float | None, typer.Option(help="LDP delta (default 1e-4, or the denoiser's).")] = None,
        bound: Annotated[float | None, typer.Option(help="Clipping norm B (default 1, or the denoiser's).")] = None,
        max_epsilon: Annotated[float, typer.Option(min=0.0, help="The device's privacy budget: a new release that "
                                                   "would take its releases' composed epsilon beyond it is refused "
                                                   "(exit 2, nothing sent); the current release is sent again "
                                                   "whatever it spent.")] = 10.0,
        dataset: Annotated[str | None, typer.Option(help="With --credentials: where the device's own ratings come "
                                                    "from (as 'secemb client --dataset'); -k leaves them out.")] = None,
        data_dir: Annotated[Path | None, typer.Option(envvar="SECEMB_DATA_DIR", help="With --dataset: its "
                                                      "folder.")] = None,
        seed: Annotated[int, typer.Option(min=0, help="With --dataset: the split seed (as the run's).")] = 0,
        test_fraction: Annotated[float, typer.Option(help="With --dataset: the held-out fraction of the "
                                                     "split.")] = 0.2,
        as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document instead of lines.")] = False,
    ) -> None:
        """Private predictions for one device: LDP release, server scoring, local denoising."""
        import numpy as np

        from secemb.cli._items import item_fields, item_rows
        from secemb.cli._usage import fail
        from secemb.data import DataFormatError, DatasetNotFoundError
        from secemb.errors import InvalidMessage, InvalidParameters
        from secemb.inference.releases import ReleaseLedger

        def parse_items(num_items: int | None, ids: "IdMap | None") -> np.ndarray | None:
            """``--items`` as indices: raw ids through ``ids``, else indices in ``[0, num_items)``."""
            if not items:
                return None
            tokens = [x.strip() for x in items.split(",") if x.strip()]
            if not tokens:
                raise InvalidParameters(f"--items must name at least one item, got {items!r}")
            if ids is not None:
                return np.array([ids.item_index(x) for x in tokens], dtype=np.int64)
            try:
                wanted = np.array([int(x) for x in tokens], dtype=np.int64)
            except ValueError:
                raise InvalidParameters(f"--items must be comma-separated item ids (integers: there is no item id "
                                        f"map), got {items!r}") from None
            if wanted.size == 0 or wanted.min() < 0 or (num_items is not None and wanted.max() >= num_items):
                raise InvalidParameters(f"--items must be item ids in [0, {num_items})")
            return wanted

        given = {"epsilon": epsilon, "delta": delta, "bound": bound}
        if (credentials is None) == (model_dir is None):
            fail("give --model-dir (a saved model, in process) or --credentials with --state-file (a deployment)")
        try:
            ledger = None if release_file is None else ReleaseLedger.load(release_file)
            if credentials is not None:
                if denoiser is not None and recommender is None:
                    raise InvalidParameters("--denoiser with --credentials needs --recommender (the recommender's "
                                            "saved folder: its public model)")
                if state_file is None:
                    raise InvalidParameters("--credentials needs --state-file (the device's private parameters)")
                if ledger is None:
                    ledger = ReleaseLedger.load(Path(f"{state_file}.grec-releases.npz"))
                own = (dataset, data_dir, seed, test_fraction)
                ids = None if recommender is None else _item_ids(recommender)
                doc = _remote(credentials, state_file, _device_index(user, index), given, parse_items(None, ids),
                              ledger, own, recommender, denoiser, max_epsilon)
            else:
                assert model_dir is not None
                if recommender is not None:
                    raise InvalidParameters("--recommender works with --credentials only (--model-dir is the "
                                            "recommender)")
                if dataset is not None:
                    raise InvalidParameters("--dataset works with --credentials only (a saved model knows its "
                                            "users' ratings)")
                doc = _local(model_dir, (user, index), denoiser, given, parse_items, ledger, max_epsilon)
                ids = doc.pop("_ids")
        except (InvalidParameters, InvalidMessage, DataFormatError, DatasetNotFoundError) as exc:
            fail(exc)
        scores, wanted = np.asarray(doc.pop("_scores")), np.asarray(doc.pop("_wanted"))
        if not items:
            order = np.lexsort((wanted, -scores))[:k]
            wanted, scores = wanted[order], scores[order]
        doc = {"user": doc.pop("user"), "user_id": doc.pop("user_id"), "items": wanted.tolist(),
               **item_fields(wanted.tolist(), ids), "scores": scores.tolist(), **doc}
        if as_json:
            typer.echo(json.dumps(doc))
            return
        what = f"scores of {wanted.size} items" if items else f"top {wanted.size} items"
        where = f" from {doc['server']}, model version {doc['model_version']}" if "server" in doc else ""
        who = doc["user"] if doc["user_id"] == str(doc["user"]) else f"{doc['user_id']} (index {doc['user']})"
        typer.echo(f"{what} for user {who}{where} ({doc['model']}, {doc['mode']}, epsilon={doc['epsilon']}, "
                   f"delta={doc['delta']}, B={doc['bound']}, sigma={doc['sigma']:.4f}; sent {doc['upload_bytes']} B, "
                   f"received {doc['download_bytes']} B):")
        if "releases" in doc:
            typer.echo(f"release {'reused' if doc['release_reused'] else 'new'}; {doc['releases']} release(s) so far, "
                       f"together ({doc['spent_epsilon']:.4f}, {doc['spent_delta']:.2g})-LDP")
        for line in item_rows(wanted.tolist(), scores.tolist(), ids):
            typer.echo(line)


def _device_index(user: str | None, index: int | None) -> int | None:
    """With ``--credentials``: the device index ``--user``/``--index`` names, to check against
    the file's (a deployment numbers its devices by index), or ``None``."""
    from secemb.errors import InvalidParameters

    if user is not None and index is not None:
        raise InvalidParameters("give --user or --index, not both")
    if user is not None and not (user.isascii() and user.isdigit()):
        raise InvalidParameters(f"--user {user!r}: with --credentials, the device's index in the deployment")
    return index if user is None else int(user)


def _item_ids(recommender: Path) -> "IdMap | None":
    """The raw item ids and titles of the recommender's saved folder (``None``: it records none)."""
    from secemb.inference.trained import read_item_ids

    return read_item_ids(recommender)


def _mechanism(given: dict[str, float | None]) -> Any:
    """The :class:`~secemb.inference.GaussianLDP` of the options (defaults 1, 1e-4, 1)."""
    from secemb.inference import GaussianLDP

    eps, delta, bound = given["epsilon"], given["delta"], given["bound"]
    return GaussianLDP(1.0 if eps is None else eps, 1e-4 if delta is None else delta, 1.0 if bound is None else bound)


def _denoiser_mechanism(den: Any, given: dict[str, float | None]) -> Any:
    """The denoiser's mechanism; an option that names another value is bad usage."""
    from secemb.errors import InvalidParameters

    mech = den.mechanism
    for name, value in given.items():
        if value is not None and value != getattr(mech, name):
            raise InvalidParameters(f"--{name} {value} differs from the denoiser's {getattr(mech, name)}")
    return mech


def _ledger_doc(ledger: Any, reused: bool) -> dict[str, Any]:
    """The release fields of the output (``{}`` without a ledger)."""
    if ledger is None:
        return {}
    eps, delta = ledger.spent()
    return {"release_reused": reused, "releases": ledger.releases, "spent_epsilon": eps, "spent_delta": delta}


def _mech_doc(mech: Any) -> dict[str, Any]:
    return {"epsilon": mech.epsilon, "delta": mech.delta, "bound": mech.bound, "sigma": mech.sigma}


def _local(model_dir: Path, who: tuple[str | None, int | None], denoiser: Path | None,
           given: dict[str, float | None], parse_items: Any, ledger: Any, max_epsilon: float) -> dict[str, Any]:
    """The in-process exchange on a saved model (the fields of the output, with the private
    ``_scores``, ``_wanted`` and ``_ids``, the model's id map); ``who``: ``(--user, --index)``;
    ``max_epsilon``: the ledger's budget (:meth:`~secemb.inference.releases.ReleaseLedger.release`)."""
    import numpy as np

    from secemb.cli._items import pick_user
    from secemb.errors import InvalidParameters
    from secemb.inference import DenoiserContext
    from secemb.inference.saved import load_denoiser
    from secemb.inference.service import InferenceDevice, InferenceServer
    from secemb.inference.service import infer as run_inference
    from secemb.inference.releases import model_identity
    from secemb.inference.trained import TrainedModel
    from secemb.transport.inprocess import DOWNLOAD, UPLOAD, InProcessTransport

    if who == (None, None):
        raise InvalidParameters("--model-dir needs --user (or --index)")
    trained = TrainedModel.load(model_dir)
    user = pick_user(*who, trained.user_index, trained.num_users)
    trained.user_store.state(user)  # validates the user
    den = None
    if denoiser is not None:
        den = load_denoiser(denoiser, trained, recommender=model_dir)
        mech = _denoiser_mechanism(den[0], given)
    else:
        mech = _mechanism(given)
    ctx = den[0].context if den is not None else DenoiserContext.from_trained(
        trained.model, trained.table, trained.dense, trained.user_store, mech,
        getattr(trained.model, "features", None))
    wanted = parse_items(trained.num_items, trained.ids)
    if wanted is None:
        wanted = np.setdiff1d(np.arange(trained.num_items, dtype=np.int64), trained.rated(user))
    release, reused = None, False
    if ledger is not None:
        h_tilde, z, reused = ledger.release(ctx.h[user], mech, max_epsilon=max_epsilon,
                                            model=model_identity(trained.model.name, trained.model.hparams()))
        if not reused:
            ledger.save()
        release = (h_tilde, z)
    device = InferenceDevice(ctx.h[user], float(ctx.offset[user]), mech, num_items=trained.num_items,
                             denoiser=den, user=user, release=release)
    tp = InProcessTransport()
    scores = run_inference(device, InferenceServer(ctx.rep, trained.table), wanted, user=user, transport=tp)
    return {"user": user, "user_id": trained.user_id(user), "_scores": scores, "_wanted": wanted, "_ids": trained.ids,
            "model": trained.model.name,
            "mode": "ldp-no-denoiser" if den is None else "post-processing-ldp", **_mech_doc(mech),
            "upload_bytes": tp.total_bytes(direction=UPLOAD), "download_bytes": tp.total_bytes(direction=DOWNLOAD),
            **_ledger_doc(ledger, reused)}


def _own_ratings(user: int, dataset: str, data_dir: Path | None, seed: int, test_fraction: float) -> Any:
    """int64: the items ``user`` rated in its part of the training split, as ``secemb client``
    reads a device's data (GREC's models are rating models: the rating task's split)."""
    from secemb.data import by_user, load_dataset
    from secemb.errors import InvalidParameters
    from secemb.models.task import RATING

    if not 0.0 < test_fraction < 1.0:
        raise InvalidParameters(f"--test-fraction must be in (0, 1), got {test_fraction}")
    data = load_dataset(dataset, data_dir, seed=seed)
    if not 0 <= user < data.num_users:
        raise InvalidParameters(f"user {user} is not in dataset {dataset!r} ({data.num_users} users)")
    return by_user(RATING.split(data, test_fraction, seed)[0]).of(user)[0]


def _own_features(user: int, dataset: str, data_dir: Path | None, seed: int, l_x: int) -> Any:
    """float64 ``(l_x,)``: the device's own user features, as the run's
    (:func:`secemb.data.features.load_features` of ``dataset``, its ``seed`` for a stand-in)."""
    import numpy as np

    from secemb.data import load_dataset
    from secemb.data.features import load_features
    from secemb.errors import InvalidParameters

    data = load_dataset(dataset, data_dir, seed=seed)
    feats = load_features(dataset, data_dir, num_users=data.num_users, num_items=data.num_items, seed=seed)
    if feats.l_x != l_x or not 0 <= user < feats.num_users:
        raise InvalidParameters(f"dataset {dataset!r} gives {feats.l_x} user features for {feats.num_users} users, "
                                f"the recommender has {l_x} (user {user})")
    return feats.user[user].astype(np.float64)


def _remote(credentials: Path, state_file: Path, user: int | None, given: dict[str, float | None], wanted: Any,
            ledger: Any, own: tuple[str | None, Path | None, int, float], recommender: Path | None,
            denoiser: Path | None, max_epsilon: float) -> dict[str, Any]:
    """The exchange with the deployment's server 0 (the fields of the output, with the private
    ``_scores`` and ``_wanted``); a refusal, no answer or a malformed one exits 1.  ``own``: ``(dataset,
    data_dir, seed, test_fraction)`` of the device's own ratings and features (dataset
    ``None``: unknown).  ``recommender``: the recommender's saved folder (its public model),
    needed for user features and for the ``denoiser`` file; the device builds its one-device
    context from its state file, its features and the public model."""
    import numpy as np

    from secemb.cli._usage import fail
    from secemb.client.inference import infer_remote
    from secemb.errors import InvalidMessage, InvalidParameters
    from secemb.server.tls import client_context
    from secemb.transport.credentials import DeviceCredentials
    from secemb.transport.errors import RemoteError, Unreachable
    from secemb.transport.http import HttpServerLink

    creds = DeviceCredentials.load(credentials)
    if user is not None and user != creds.user:
        raise InvalidParameters(f"{credentials} holds user {creds.user}'s keys, not --user {user}'s")
    try:
        with np.load(state_file, allow_pickle=False) as z:
            params = np.asarray(z["params"], dtype=np.float64)
    except (OSError, KeyError, ValueError) as exc:
        raise InvalidParameters(f"--state-file {state_file}: not a device state file ({exc})") from None
    rec, user_x, den = None, None, None
    mech = _mechanism(given)
    if recommender is not None:
        from secemb.inference.saved import load_denoiser_on_device, load_public_recommender

        rec_model, rec_dense, rec_sha, num_items = load_public_recommender(recommender)[:4]
        rec = (rec_model, rec_dense, rec_sha)
        if params.shape != (rec_model.private_size,):
            raise InvalidParameters(f"--state-file {state_file}: parameters of shape {params.shape}, the recommender "
                                    f"{rec_model.name} has {rec_model.private_size} private parameters")
        l_x = int(getattr(rec_model, "l_x", 0))
        if l_x:
            if own[0] is None:
                raise InvalidParameters(f"{rec_model.name} uses user features: give --dataset (where this device's "
                                        "own features come from)")
            user_x = _own_features(creds.user, own[0], own[1], own[2], l_x)
        if denoiser is not None:
            den = load_denoiser_on_device(denoiser, rec_model, rec_dense, params, num_items, user_x,
                                          recommender_sha256=rec_sha, recommender=recommender)
            mech = _denoiser_mechanism(den[0], given)
    rated = None if own[0] is None else _own_ratings(creds.user, own[0], *own[1:])
    tls = None if creds.cas[0] is None else client_context(creds.cas[0])
    link = HttpServerLink(0, creds.user, creds.urls[0], creds.keys[0], tls=tls)
    try:
        ans = infer_remote(link, params, mech, wanted, exclude=rated, ledger=ledger, recommender=rec, user_x=user_x,
                           denoiser=den, max_epsilon=max_epsilon)
    except (RemoteError, Unreachable, InvalidMessage) as exc:  # InvalidMessage: a malformed answer
        fail(f"server 0 ({creds.urls[0]}): {exc}", 1)
    finally:
        link.close()
    return {"user": creds.user, "user_id": str(creds.user), "_scores": ans.scores, "_wanted": ans.items,
            "model": ans.info["model"]["name"],
            "mode": "ldp-no-denoiser" if den is None else "post-processing-ldp", **_mech_doc(mech),
            "upload_bytes": ans.upload_bytes,
            "download_bytes": ans.download_bytes, "server": creds.urls[0], "model_version": ans.model_version,
            "num_candidates": int(ans.info["num_candidates"]),
            # candidates the device rated, left out here (None: its ratings are unknown, or --items)
            "rated_left_out": None if rated is None or wanted is not None else
            int(ans.info["num_candidates"]) - int(ans.items.size),
            **_ledger_doc(ledger, ans.reused)}
