"""The two baselines of Figure 4 of secure-federated-submodel-learning.txt (Section VI-A),
trained in plaintext on the same click samples, rounds and client draws as
:func:`~secemb.protocols.sfsl.simulate.train_sfsl`:

* ``"fl"`` -- conventional federated learning (FedAvg of the full model): each round's n
  clients train locally on all their samples (their real submodel: DIN's other rows get no
  gradient, so this is local training of the full model) and the server adds
  ``sum_i n_i delta_i / sum_i n_i`` to *every* parameter, ``n_i`` the client's training-set size
  -- a row a client never touched enters with a zero update and the client's full weight, the
  averaging the paper blames for FL's divergence.  Secure FL (SFL) sums the same updates under
  secure aggregation and has the same accuracy; no quantization here.
* ``"centralized"`` -- the server holds the data: each round it trains DIN itself with SGD over
  the pooled samples of the round's n clients (the paper: "samples with a similar size to the
  total size of n chosen clients' datasets"), same batch size and step-size schedule, user
  embeddings included.

Both return :class:`~secemb.protocols.sfsl.simulate.SFSLResult` with ``auc`` filled (no
reports: nothing is secured or counted).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from secemb.data.ctr import ClickData
from secemb.errors import InvalidParameters
from secemb.metrics import get_metric
from secemb.models.din import click_batch
from secemb.privacy.randomized_response import get_cpp
from secemb.protocols.sfsl.parties import SFSLDevice, SFSLServer, categories_of
from secemb.protocols.sfsl.simulate import SFSLResult, SFSLRun, start_run

__all__ = ["BASELINES", "train_baseline"]

#: the schemes of :func:`train_baseline`
BASELINES = ("centralized", "fl")


def train_baseline(train: ClickData, test: ClickData, run: SFSLRun, scheme: str, *,
                   progress: Callable[[int, SFSLResult], None] | None = None) -> SFSLResult:
    """Train DIN by ``scheme`` (``"fl"`` or ``"centralized"``, module docstring) with ``run``'s
    clients per round, rounds, training settings, step-size decay, seed and evaluation
    schedule (``run.preset`` is not used); AUC on ``test``.

    Raises
    ------
    InvalidParameters
        An unknown scheme, or fewer users with training samples than ``clients_per_round``.
    """
    if scheme not in BASELINES:
        raise InvalidParameters(f"baseline must be one of {BASELINES}, got {scheme!r}")
    rng, model, server, user_emb, bounds, users = start_run(train, run)
    devices: dict[int, SFSLDevice] = {}
    auc = get_metric("auc")
    result = SFSLResult(run)
    start = time.perf_counter()
    for r in range(1, run.rounds + 1):
        chosen = np.sort(rng.choice(users, size=run.clients_per_round, replace=False))
        settings = replace(run.settings, lr=run.settings.lr * run.lr_decay ** (r - 1))
        if scheme == "fl":
            total = np.zeros((server.space.length, model.dim))
            samples = 0
            for u in (int(x) for x in chosen):
                if u not in devices:  # CPP1: the real set, no perturbation
                    devices[u] = SFSLDevice(u, train.subset(slice(bounds[u], bounds[u + 1])), get_cpp("CPP1"),
                                            model, user_emb[u])
                dev = devices[u]
                reply = server.reply(dev.request(dev.real, r), r)
                rows, deltas, _ = dev.local_update(reply, r, server.space, settings, rng)
                total[rows] += dev.trained * deltas
                samples += dev.trained
            server.add(total / max(samples, 1))
        else:
            idx = np.concatenate([np.arange(bounds[u], bounds[u + 1]) for u in chosen])
            _central_sgd(server, user_emb, train.subset(idx), settings.lr, settings.batch, settings.epochs, rng)
        if r % run.eval_every == 0 or r == run.rounds:
            value = auc(model.score(server.table, server.dense, user_emb, test), test.label, (0.0, 1.0))
            if value is not None:
                result.auc[r] = value
        if progress is not None:
            progress(r, result)
    result.seconds = time.perf_counter() - start
    result.table, result.dense = server.table, server.dense
    return result


def _central_sgd(server: SFSLServer, user_emb: np.ndarray, data: ClickData, lr: float, batch: int, epochs: int,
                 rng: np.random.Generator) -> None:
    """SGD of the full model (and the users' embeddings, ``user_emb`` updated in place) over
    ``data``; only the rows the samples touch take part (the others get no gradient)."""
    import torch

    model, d = server.model, server.model.dim
    h = data.history
    goods = np.unique(np.concatenate([data.target, h[h >= 0]]))
    cats = categories_of(goods, data.goods_category)
    c = model.num_categories * d
    flat = torch.tensor(np.concatenate([np.zeros(c), server.dense[c:]]))
    cat_rows = server.dense[:c].reshape(-1, d)
    fields = {name: (torch.tensor(cat_rows[cats]) if name == "categories" else t.detach()).requires_grad_()
              for name, t in model.layout.views(flat).items()}
    rows_t = torch.tensor(server.table[goods], requires_grad=True)
    who = np.unique(data.user)
    users_t = torch.tensor(user_emb[who], requires_grad=True)
    params = (rows_t, users_t, *fields.values())
    target = np.searchsorted(goods, data.target)
    hist = np.where(h >= 0, np.searchsorted(goods, np.maximum(h, 0)), -1)
    cat_pos = np.searchsorted(cats, data.goods_category[goods])
    tcat, hcat = cat_pos[target], np.where(hist >= 0, cat_pos[np.maximum(hist, 0)], -1)
    upos = torch.as_tensor(np.searchsorted(who, data.user))
    for _ in range(epochs):
        order = rng.permutation(len(data))
        for lo in range(0, len(data), batch):
            i = order[lo:lo + batch]
            b = click_batch(target[i], hist[i], tcat[i], hcat[i], data.label[i])
            loss = model.objective_torch(rows_t, fields, users_t[upos[torch.as_tensor(i)]], b)
            grads = torch.autograd.grad(loss, params)
            with torch.no_grad():
                for p, g in zip(params, grads, strict=True):
                    p.sub_(lr * g)
    server.table[goods] = rows_t.detach().numpy()
    cat_rows[cats] = fields["categories"].detach().numpy()
    server.dense[c:] = flat[c:].numpy()
    user_emb[who] = users_t.detach().numpy()
