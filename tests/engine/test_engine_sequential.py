"""Sequential models through the round engine: the item tables go through SecEmb (both
layouts, relay), negatives inside the private request, and the secure run gives the plaintext
run's model bit for bit (same seed, same layout)."""

import pytest

from secemb.training import Experiment, run_experiment


def _run(model: str, protocol: str, layout: str, relay: bool, **kw):
    return run_experiment(Experiment(dataset="synthetic-mini", model=model, protocol=protocol, layout=layout,
                                     relay=relay, epochs=1, users_per_round=60, seed=4, dim=8, **kw))


@pytest.mark.parametrize(("model", "layout", "relay"), [("sasrec", "full", False), ("sasrec", "cuckoo", True),
                                                        ("caser", "cuckoo", True)])
def test_secemb_gives_the_plaintext_model(model, layout, relay):
    secure = _run(model, "secemb", layout, relay, verify=True)
    plain = _run(model, "plaintext", layout, False)
    assert secure.model_sha256 == plain.model_sha256
    assert secure.verified_rounds == secure.rounds == 2
    assert secure.epochs[0].test_metrics == plain.epochs[0].test_metrics
    assert set(secure.epochs[0].test_metrics) == {"hr@10", "ndcg@10", "hr_sampled@10", "ndcg_sampled@10"}
    assert secure.config["task"] == "sequential" and secure.config["m_prime_source"] == "given"
    assert secure.truncated_participations == 0  # m' = the task's largest request


def test_truncated_requests_stay_exact():
    secure = _run("sasrec", "secemb", "full", False, m_prime=30, verify=True)
    plain = _run("sasrec", "plaintext", "full", False, m_prime=30)
    assert secure.truncated_participations > 0 and secure.config["m_prime"] == 30
    assert secure.model_sha256 == plain.model_sha256
