"""What one training micro-batch of the Megatron model keeps for backward, per part, against
the planner's activation model (launcher/plan/memory_trainer.py). Runs on the CPU.

    .venv/bin/python benchmarks/activation_bytes.py [--tokens 256] [--experts 16]

The 4-layer slice's real widths (hidden 4096, KDA 64 x 128, MLA, vocab 154,880, top-8)
with fewer routed experts so it fits in host memory: per-token activation bytes depend on
widths and top-k, not on how many experts exist. Every tensor autograd saves is counted
once (by storage), weights excluded, and charged to the innermost named part that was
running (KDA, MLA, MoE, dense MLP, mHC, norms, the loss). The planner's figure for the same
config is printed beside it; the H200 LoRA steps read 8-9 GiB above the planner at TP1.
KDAttention here is the pure-torch CPU recurrence, which keeps far more than fla's kernel
does on GPU, so its row and the totals say nothing about GPU KDA: read the other rows.
"""
import argparse
from collections import defaultdict
from contextlib import contextmanager

import torch

from device.harness.megatron_setup import init_distributed
from launcher.config.compose import compose
from launcher.plan import make_plan
from launcher.plan.memory_trainer import activation_bytes
from model.megatron import pack_lengths, token_logprobs
from model.megatron.build import build_model
from model.megatron.init import init_weights
from model.megatron.spec import ModelSpec

PARTS = ("attn_hc", "ffn_hc", "input_layernorm", "pre_mlp_layernorm", "self_attention", "mlp")


class SavedBytes:
    """Bytes of distinct storages autograd saves, charged to the part running when saved."""

    def __init__(self, weights: set[int]):
        self.weights, self.seen = weights, set()
        self.by_part: dict[str, int] = defaultdict(int)
        self.stack = ["model (embedding, stream expand/contract, final norm, output layer)"]

    def pack(self, tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key not in self.weights and key not in self.seen and storage.nbytes():
            self.seen.add(key)
            self.by_part[self.stack[-1]] += storage.nbytes()
        return tensor

    @contextmanager
    def charged_to(self, part: str):
        self.stack.append(part)
        try:
            yield
        finally:
            self.stack.pop()


def attach(model, counter: SavedBytes) -> None:
    """Pre/post forward hooks that charge what each named sub-module saves to its kind."""

    def leave(module, args, output) -> None:  # returns None, so the module's output stays
        counter.stack.pop()

    for layer in model.layers:
        for name in PARTS:
            module = getattr(layer, name)
            kind = type(module).__name__ if name in ("self_attention", "mlp") else name
            module.register_forward_pre_hook(lambda m, a, k=kind: counter.stack.append(k))
            module.register_forward_hook(leave)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--experts", type=int, default=16)
    args = parser.parse_args()
    init_distributed(device_type="cpu")
    overrides = ["model=glm5_3_flash_4layer", "cluster=h200x1", "trainer.backend=megatron",
                 f"model.arch.n_routed_experts={args.experts}", f"trainer.max_tokens_per_microbatch={args.tokens}"]
    cfg = compose(overrides).config
    model = build_model(ModelSpec.from_arch(cfg.model.arch, cfg.model.dtype, pad_token_id=0), "cpu")
    init_weights(model, seed=0)
    counter = SavedBytes({p.untyped_storage().data_ptr() for p in model.parameters()})
    attach(model, counter)
    ids_T = torch.randint(0, cfg.model.arch.vocab_size, (args.tokens,))
    with torch.autograd.graph.saved_tensors_hooks(counter.pack, lambda t: t):
        logits_TV = model(ids_T, pack_lengths([args.tokens], "cpu"))
        with counter.charged_to("loss"):
            loss = -token_logprobs(logits_TV, ids_T.roll(-1)).mean()
    loss.backward()
    plan = make_plan(cfg)
    planned = activation_bytes(cfg, plan.mesh, plan.arch) / args.tokens
    measured = sum(counter.by_part.values()) / args.tokens
    print(f"{'part':<48} {'KB/token':>10}")
    for part, nbytes in sorted(counter.by_part.items(), key=lambda kv: -kv[1]):
        print(f"{part:<48} {nbytes / args.tokens / 1e3:>10.1f}")
    print(f"{'measured total':<48} {measured / 1e3:>10.1f}")
    print(f"{'planner (activation_bytes / tokens)':<48} {planned / 1e3:>10.1f}")
    print(f"measured / planner: {measured / planned:.2f} (KDAttention is the CPU recurrence: see the docstring)")


if __name__ == "__main__":
    main()
