"""After a weight update, GLM's derived caches in vLLM (KDA merged conv weight, indexer fp32
weights) are reset so the next forward rebuilds them from the new weights; other models and
a vLLM without them are untouched."""
import torch

from launcher.workers.vllm.worker import clear_derived_caches


class _Kda(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self._merged_conv_weight = torch.ones(2)


class _Indexer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self._wp_fp32 = None  # not built yet


def test_caches_are_reset_and_unrelated_modules_left_alone():
    model = torch.nn.Sequential(_Kda(), _Indexer(), torch.nn.Linear(2, 2))
    model[1]._wp_fp32 = torch.ones(3)
    assert clear_derived_caches(model) == 2
    assert model[0]._merged_conv_weight is None and model[1]._wp_fp32 is None
    assert clear_derived_caches(model) == 0
    assert clear_derived_caches(torch.nn.Linear(2, 2)) == 0  # no such attributes: nothing happens
