"""GLM-5.3-Flash on megatron-core 0.19.2: model, HF weight mapping, LoRA.

Read in this order: spec (numbers from the descriptor), model (the stack), layer, then the
token mixers kda / dsa (+ indexer), mhc, moe; mapping (HF <-> Megatron names and shards);
lora; build (parallel state + model from a RunConfig).
"""
from model.megatron.model import GlmModel, full_logits, token_logprobs
from model.megatron.packing import Packed, pack_lengths
from model.megatron.spec import ModelSpec

__all__ = ["GlmModel", "ModelSpec", "Packed", "full_logits", "pack_lengths", "token_logprobs"]
