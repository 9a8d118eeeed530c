"""A host WeightBucket pickles its tensors' bytes out of band (the buffers Ray writes straight into
its object store) and comes back equal: every dtype the checkpoints hold, 0-d and empty tensors."""
import pickle

import torch

from launcher.weight_sync.messages import WeightBucket


def _bucket() -> WeightBucket:
    tensors = [("w", torch.randn(3, 4).to(torch.bfloat16)), ("scale", torch.tensor(2.5)),
               ("empty", torch.zeros(0, 5)), ("mask", torch.tensor([True, False])),
               ("strided", torch.arange(12, dtype=torch.int64).reshape(3, 4).t())]
    return WeightBucket("weights", tensors, sum(t.numel() * t.element_size() for _, t in tensors), last=True)


def test_the_bytes_travel_out_of_band_and_come_back_equal():
    bucket, buffers = _bucket(), []
    data = pickle.dumps(bucket, protocol=5, buffer_callback=buffers.append)
    assert sum(len(b.raw()) for b in buffers) == bucket.nbytes  # every tensor byte outside the pickle
    assert len(data) < 1024
    back = pickle.loads(data, buffers=buffers)
    assert (back.kind, back.nbytes, back.last, back.transport) == (bucket.kind, bucket.nbytes, True, bucket.transport)
    for (name, want), (got_name, got) in zip(bucket.tensors, back.tensors, strict=True):
        assert got_name == name and got.dtype == want.dtype and torch.equal(got, want)


def test_plain_pickle_still_round_trips():
    bucket = _bucket()
    back = pickle.loads(pickle.dumps(bucket))
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(bucket.tensors, back.tensors, strict=True))
