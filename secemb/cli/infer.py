"""``secemb infer``: a device's private predictions from a saved recommender (GREC §3.2).

The device releases its representation once under ``(epsilon, delta)``-LDP (analytic Gaussian,
sensitivity 2B), the server scores its public candidate set (every item) on the noisy
representation, and the device keeps what it wants: the top ``k`` items it did not rate, or
its scores for ``--items``.  With ``--denoiser`` (written by ``secemb bench grec --save-dir``)
the device post-processes with GREC's denoiser (Eq. 16); without, the predictions are the
server's scores of the same (re-clipped) release plus the device's private offset -- the
bench's "re-clipped, no denoiser" column, better than the paper's naive LDP (no second clip)
at the same privacy, which is therefore offered by the bench only.  The exchange runs in
process over the counting transport; the bytes each way are printed.

Exit codes: 0 success; 2 bad usage (a missing or malformed folder or file, a user or item out
of range, privacy parameters out of range or different from the denoiser's).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    """Attach the ``infer`` command to ``app``."""

    @app.command()
    def infer(
        model_dir: Annotated[Path, typer.Option(help="Folder written by 'secemb train --save-model' (mf, ncf, fm, "
                                                "deepfm).")],
        user: Annotated[int, typer.Option(help="User id (0-based, the dataset's contiguous ids).")],
        k: Annotated[int, typer.Option("-k", "--k", min=1, help="Number of items (top-k of the unrated).")] = 10,
        items: Annotated[str, typer.Option(help="Comma-separated item ids to score instead of a top-k.")] = "",
        denoiser: Annotated[Path | None, typer.Option(help="Denoiser file ('secemb bench grec --save-dir'): "
                                                      "post-processing LDP; without it the release's scores "
                                                      "as they are.")] = None,
        epsilon: Annotated[float | None, typer.Option(help="LDP epsilon (default 1, or the denoiser's).")] = None,
        delta: Annotated[float | None, typer.Option(help="LDP delta (default 1e-4, or the denoiser's).")] = None,
        bound: Annotated[float | None, typer.Option(help="Clipping norm B (default 1, or the denoiser's).")] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document instead of lines.")] = False,
    ) -> None:
        """Private predictions for one device: LDP release, server scoring, local denoising."""
        import numpy as np

        from secemb.cli._usage import fail
        from secemb.errors import InvalidMessage, InvalidParameters
        from secemb.inference import DenoiserContext, GaussianLDP
        from secemb.inference.saved import load_denoiser
        from secemb.inference.service import InferenceDevice, InferenceServer
        from secemb.inference.service import infer as run_inference
        from secemb.training.trained import TrainedModel
        from secemb.transport.inprocess import DOWNLOAD, UPLOAD, InProcessTransport

        try:
            trained = TrainedModel.load(model_dir)
            trained.user_store.state(user)  # validates the user
            given = {"epsilon": epsilon, "delta": delta, "bound": bound}
            den = None
            if denoiser is not None:
                den = load_denoiser(denoiser, trained)
                mech = den[0].context.mechanism
                for name, value in given.items():
                    if value is not None and value != getattr(mech, name):
                        raise InvalidParameters(f"--{name} {value} differs from the denoiser's {getattr(mech, name)}")
            else:
                mech = GaussianLDP(1.0 if epsilon is None else epsilon, 1e-4 if delta is None else delta,
                                   1.0 if bound is None else bound)
            ctx = den[0].context if den is not None else DenoiserContext.from_trained(
                trained.model, trained.table, trained.dense, trained.user_store, mech,
                getattr(trained.model, "features", None))
            if items:
                try:
                    wanted = np.array([int(x) for x in items.split(",") if x.strip()], dtype=np.int64)
                except ValueError:
                    raise InvalidParameters(f"--items must be comma-separated integers, got {items!r}") from None
                if wanted.size == 0 or wanted.min() < 0 or wanted.max() >= trained.num_items:
                    raise InvalidParameters(f"--items must be item ids in [0, {trained.num_items})")
            else:
                wanted = np.setdiff1d(np.arange(trained.num_items, dtype=np.int64), trained.rated(user))
            device = InferenceDevice(ctx.h[user], float(ctx.offset[user]), mech, num_items=trained.num_items,
                                     denoiser=den, user=user)
            tp = InProcessTransport()
            scores = run_inference(device, InferenceServer(ctx.rep, trained.table), wanted, user=user, transport=tp)
        except (InvalidParameters, InvalidMessage) as exc:
            fail(exc)
        if not items:
            order = np.lexsort((wanted, -scores))[:k]
            wanted, scores = wanted[order], scores[order]
        doc = {"user": user, "items": wanted.tolist(), "scores": scores.tolist(),
               "mode": "ldp-no-denoiser" if den is None else "post-processing-ldp", "epsilon": mech.epsilon,
               "delta": mech.delta, "bound": mech.bound, "sigma": mech.sigma,
               "upload_bytes": tp.total_bytes(direction=UPLOAD), "download_bytes": tp.total_bytes(direction=DOWNLOAD)}
        if as_json:
            typer.echo(json.dumps(doc))
            return
        what = f"scores of {wanted.size} items" if items else f"top {wanted.size} unrated items"
        typer.echo(f"{what} for user {user} ({trained.model.name}, {doc['mode']}, epsilon={mech.epsilon}, "
                   f"delta={mech.delta}, B={mech.bound}, sigma={mech.sigma:.4f}; sent {doc['upload_bytes']} B, "
                   f"received {doc['download_bytes']} B):")
        typer.echo(f"{'rank':>4}  {'item':>8}  score")
        for rank, (item, score) in enumerate(zip(wanted.tolist(), scores.tolist(), strict=True), start=1):
            typer.echo(f"{rank:>4}  {item:>8}  {score:.4f}")
