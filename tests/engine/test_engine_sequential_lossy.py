"""The lossy baselines (quant8, ternary, svd, colr) on the sequential models' item-embedding
update: they train SASRec and Caser through the round engine with Table 10's rank for the
sequential models (K.6: 8 on ML-1M, ML-100K's preset as ML-1M), and every device sends exactly
the protocol's compressed message sizes for the model's row width."""

import pytest

from secemb.models import get_model
from secemb.protocols.lossy import TABLE10_RANKS
from secemb.training import Experiment
from secemb.training.builder import build_experiment
from secemb.training.loop import train
from secemb.round.messages import RECEIPT_BYTES


@pytest.mark.parametrize(("model", "protocol"), [("sasrec", "quant8"), ("sasrec", "ternary"), ("sasrec", "svd"),
                                                 ("sasrec", "colr"), ("caser", "svd"), ("caser", "colr")])
def test_lossy_baseline_trains_a_sequential_model(model, protocol):
    built = build_experiment(Experiment(dataset="synthetic-mini", model=model, protocol=protocol, epochs=1,
                                        users_per_round=60, seed=2, dim=8))
    assert built.protocol.rank == TABLE10_RANKS[model]["ml-1m"] == 8
    result = train(built.model, built.protocol, built.train_data, built.test_data, built.config,
                   val_data=built.val_data, extra_config=built.extra_config)
    assert result.rounds == 2 and result.config["task"] == "sequential"
    width = get_model(model, dim=8).sparse_width
    assert width == built.model.sparse_width == (8 if model == "sasrec" else 3 * 8 + 1)
    rc = built.protocol.round_config(0, built.train_data.num_items, width, built.model.dense_size,
                                     result.config["m_prime"], 32)

    def size(kind: str) -> int:
        return sum(built.protocol.max_message_bytes(kind, rc, party=p, num_users=1) for p in (0, 1))

    # with server 1's receipt, which the device appends to its upload to server 0 (no relay)
    assert result.upload_bytes_per_user_round == size("retrieval_request") + size("upload") + RECEIPT_BYTES
    assert result.download_bytes_per_user_round > 4 * built.train_data.num_items * width  # the whole table down
    assert set(result.epochs[0].test_metrics) == {"hr@10", "ndcg@10", "hr_sampled@10", "ndcg_sampled@10"}
    assert all(0.0 <= v <= 1.0 for v in result.epochs[0].test_metrics.values())
