"""After a weight update, GLM's derived caches in vLLM are reset where the release leaves them
stale (0.32/0.33: KDA merged conv weight, indexer fp32 weights), so the next forward rebuilds
them from the new weights; 0.34 refills its indexer cache in place, and resetting it there
would leave None for the forward. Other models are untouched."""
import torch

from launcher.vllm_release import RELEASES
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
    stale = RELEASES["0.32"].stale_derived_caches
    model = torch.nn.Sequential(_Kda(), _Indexer(), torch.nn.Linear(2, 2))
    model[1]._wp_fp32 = torch.ones(3)
    assert clear_derived_caches(model, stale) == 2
    assert model[0]._merged_conv_weight is None and model[1]._wp_fp32 is None
    assert clear_derived_caches(model, stale) == 0
    assert clear_derived_caches(torch.nn.Linear(2, 2), stale) == 0  # no such attributes: nothing happens


def test_a_release_that_refills_its_caches_keeps_them():
    assert RELEASES["0.33"].stale_derived_caches == RELEASES["0.32"].stale_derived_caches
    indexer = _Indexer()
    indexer._wp_fp32 = refilled = torch.ones(3)  # 0.34: process_weights_after_loading refilled it in place
    assert clear_derived_caches(indexer, RELEASES["0.34"].stale_derived_caches) == 0
    assert indexer._wp_fp32 is refilled
