"""SFSL's one server behind HTTPS (secemb.server.exchange_app): signed endpoints for the secure
aggregation exchanges, over TLS that a client without the server's CA cannot reach; a refused
request (malformed, unsigned, wrong principal, too large, out of stage) gets its 4xx and changes
nothing; and the networked run trains the in-process model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from secemb.data.ctr import TaobaoShaped, split_clicks
from secemb.transport.http import HttpStageAdmin, HttpStageLink
from secemb.models.din import DIN
from secemb.protocols.sfsl import SFSLServer, TrainingSettings
from secemb.protocols.sfsl.staged import SFSLNode, psu_config
from secemb.secagg import SecAggClient, SecAggConfig
from secemb.secagg.identity import Roster
from secemb.protocols.exchange import ExchangeServer
from secemb.protocols.sfsl.protocol import model_bytes
from secemb.sim.exchange import NodeServer
from secemb.transport.errors import RemoteError, Unreachable
from secemb.transport.network import ApiClient
from secemb.transport.signing import user_key

torch.set_num_threads(1)

#: the devices' roster (SFSL's secure aggregations are signed rounds: docs/secagg.md)
ROSTER = Roster.generate()


def _signed(user: int, config: SecAggConfig) -> SecAggClient:
    """Device ``user``'s secure-aggregation client, with its identity under :data:`ROSTER`."""
    return SecAggClient(user, config, identity=ROSTER.enroll(user))


@pytest.fixture(scope="module")
def clicks():
    world = TaobaoShaped("taobao-mini", seed=3)
    return split_clicks(world.clients(np.arange(40)))


@pytest.fixture()
def served(clicks):
    train, _ = clicks
    model = DIN(num_categories=train.num_categories, dim=4)
    table, dense = model.init_public(train.num_goods, np.random.default_rng(0))
    node = SFSLNode(SFSLServer(model, table, dense, train.goods_category), TrainingSettings())
    with NodeServer(ExchangeServer(node, 1 << 16, lambda: model_bytes(node.server), train.num_users)) as host:
        admin = HttpStageAdmin(ApiClient(host.url, "admin", host.admin_secret, tls=host.tls))
        links = {u: HttpStageLink(u, ApiClient(host.url, f"user:{u}", user_key(host.user_secret, u), tls=host.tls))
                 for u in range(4)}
        yield node, host, admin, links
        for api in [admin.api] + [link.api for link in links.values()]:  # a TLS connection left open
            api.close()  # holds the server's shutdown until its close_notify times out


def _status(fn) -> int:
    with pytest.raises(RemoteError) as info:
        fn()
    return info.value.status


def test_refused_requests_change_nothing(served):
    node, host, admin, links = served
    admin.open_round(1, [0, 1, 2])
    psu_cfg = psu_config(node.bloom, 3, 1)
    good = _signed(0, psu_cfg).advertise()
    other_round = _signed(0, psu_config(node.bloom, 3, 2)).advertise()
    send = links[0].send
    assert _status(lambda: send(1, "psu-advertise", good[:-1])) == 400  # truncated
    assert _status(lambda: send(1, "psu-advertise", good + b"\0")) == 400  # trailing byte
    assert _status(lambda: send(1, "psu-advertise", other_round)) == 400  # another round's message
    assert _status(lambda: send(1, "psu-advertise", b"x" * (1 << 17))) == 413  # over the limit
    assert _status(lambda: send(1, "psu-shares", good)) == 409  # not the round's stage
    assert _status(lambda: send(2, "psu-advertise", good)) == 409  # not the round
    assert _status(lambda: send(1, "nonsense", good)) == 422
    # a device that is not a participant, unsigned and wrongly signed requests, a device calling the operator
    assert _status(lambda: links[3].send(1, "psu-advertise", _signed(3, psu_cfg).advertise())) == 400
    unsigned = ApiClient(host.url, tls=host.tls)
    assert _status(lambda: unsigned.post_bytes("/v1/exchange/rounds/1/psu-advertise", good)) == 401
    forged = ApiClient(host.url, "user:0", b"k" * 32, tls=host.tls)
    assert _status(lambda: forged.post_bytes("/v1/exchange/rounds/1/psu-advertise", good)) == 401
    unsigned.close()
    forged.close()
    assert _status(lambda: links[0].api.post_json("/v1/admin/exchange/rounds/1/psu-advertise/close")) == 403
    assert _status(lambda: admin.api.post_bytes("/v1/exchange/rounds/1/psu-advertise", good)) == 403
    # none of it was kept: the valid message is accepted once (not a duplicate), then refused as one
    send(1, "psu-advertise", good)
    assert _status(lambda: send(1, "psu-advertise", good)) == 400
    for u in (1, 2):
        links[u].send(1, "psu-advertise", _signed(u, psu_cfg).advertise())
    admin.close_stage(1, "psu-advertise")
    keys = links[0].fetch(1, "psu-advertise")
    assert keys is not None and keys[:4] == b"SEMB" and keys[5] == 254  # a secure-aggregation message
    assert links[3].fetch(1, "psu-advertise") is None  # not in the round: no answer (204)
    assert admin.round_status(1)["state"] == "open"


def test_a_client_without_the_servers_ca_is_refused(served):
    node, host, admin, links = served
    assert host.url.startswith("https://")
    # the system's trusted CAs do not include the deployment's private CA: the handshake fails,
    # reported as Unreachable (a SecembError the CLI prints), and the request never reaches the node
    stranger = HttpStageAdmin(ApiClient(host.url, "admin", host.admin_secret))
    with pytest.raises(Unreachable, match="CERTIFICATE_VERIFY_FAILED"):
        stranger.open_round(1, [0, 1, 2])
    # plain HTTP to the TLS port gets no answer either
    plain = HttpStageAdmin(ApiClient("http" + host.url[len("https"):], "admin", host.admin_secret))
    with pytest.raises(Unreachable):
        plain.open_round(1, [0, 1, 2])
    admin.open_round(1, [0, 1, 2])  # not opened by the refused calls: opening it now succeeds
    assert admin.round_status(1)["state"] == "open"


def test_below_the_threshold_the_round_aborts_with_409(served):
    node, host, admin, links = served
    admin.open_round(1, [0, 1, 2])
    psu_cfg = psu_config(node.bloom, 3, 1)
    links[0].send(1, "psu-advertise", _signed(0, psu_cfg).advertise())  # 1 of 3, threshold 2
    assert _status(lambda: admin.close_stage(1, "psu-advertise")) == 409
    assert admin.round_status(1)["state"] == "aborted"
    assert _status(lambda: links[1].send(1, "psu-advertise", _signed(1, psu_cfg).advertise())) == 409


@pytest.mark.slow
def test_networked_run_is_the_in_process_run(clicks):
    # CPP1 perturbs nothing at random (S'' = S), so the OS randomness of the devices does not
    # enter the model: the HTTP run and the in-process run of one seed give the same model
    from secemb.sim.player import train_exchange
    from secemb.protocols.exchange import ExchangeRun
    from secemb.protocols.sfsl.protocol import SFSLProtocol
    from secemb.sim.exchange import train_networked

    opts = SFSLProtocol(ExchangeRun("taobao-mini", users_per_round=20, epochs=1), sfsl_preset="CPP1", batch=8,
                        data=clicks)
    local = train_exchange(opts)
    net = train_networked(opts, concurrency=4)
    assert net.config["network"] and net.rounds == local.rounds == 2
    assert net.model_sha256 == local.model_sha256
    assert net.upload_bytes_per_user_round == local.upload_bytes_per_user_round
    assert net.download_bytes_per_user_round == local.download_bytes_per_user_round
