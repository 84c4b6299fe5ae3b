"""secemb bench seq's upload: the bytes of one device's real messages equal the protocol's
own per-message sizes (its parsers' bounds), and the reduction ratio is the uncompressed
float32 gradient over them."""

from secemb.bench.seq import traffic
from secemb.models import get_model
from secemb.protocols import get_protocol


def test_upload_bytes_are_the_protocols_message_sizes():
    t = traffic("sasrec", num_items=20_000)
    model = get_model("sasrec")
    protocol = get_protocol("secemb", layout="cuckoo", relay=True)
    rc = protocol.round_config(0, 20_000, model.sparse_width, model.dense_size, t["m_prime"], 32)

    def size(kind: str) -> int:
        return sum(protocol.max_message_bytes(kind, rc, party=p, num_users=1) for p in (0, 1))

    assert t["m_prime"] == 101 and t["buckets"] == rc.slots and t["placed_items"] == t["requested_items"]
    assert t["request_bytes"] == size("retrieval_request") and t["upload_bytes"] == size("upload")
    assert t["full_gradient_bytes"] == 4 * (20_000 * 50 + model.dense_size)
    assert t["reduction_ratio"] == t["full_gradient_bytes"] / (t["request_bytes"] + t["upload_bytes"])
