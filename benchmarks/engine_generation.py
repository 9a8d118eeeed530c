"""Generation speed of the launcher's two engines on one GPU, same model and batch: the hf
engine (HfEngine.generate) and the vLLM engine (VllmEngine.generate, CUDA graphs), each a round
of B sequences x N new tokens at temperature 1, against the bandwidth floor (engine weights /
HBM bandwidth: one read of every weight a decode step); then vLLM's sleep and wake at levels
1 and 2 with the GPU memory each frees. In-process, no Ray: the engines as the actors hold them.

    python benchmarks/engine_generation.py [OVERRIDE ...] [--batches 64,256] [--new 256] [--out FILE.json]

Default model: the Qwen3-30B-A3B 4-layer slice on h200x1 (model=qwen3_moe_4layer: what vLLM 0.26
serves). Random weights on both (the hf engine initialized on the GPU, vLLM's dummy load): a
random model rarely samples an EOS, so every sequence runs its N tokens. Prints a table; each
batch runs twice and the second call is the one timed.
"""
import argparse
import gc
import json
import time

import torch

from launcher.config.compose import compose
from launcher.contract.messages import GenerationRequest, SamplingParams
from launcher.contract.spec import ActorSpec
from launcher.rl.tokenizer import make_tokenizer

BASE = ["recipe=tiny_grpo_chat", "model=qwen3_moe_4layer", "cluster=h200x1", "inference.engines=1",
        "inference.max_num_seqs=256", "inference.concurrency_per_engine=256", "inference.max_model_len=320",
        "algorithm.max_response_len=256"]
PROMPT_LEN = 16


def _requests(batch: int, new: int) -> GenerationRequest:
    """Random prompts over ids 10-59: tokens of every model here (the character tokenizer's range)."""
    gen = torch.Generator().manual_seed(batch)
    prompts = torch.randint(10, 60, (batch, PROMPT_LEN), generator=gen).tolist()
    return GenerationRequest(prompts=prompts, seed=0, sampling=SamplingParams(max_tokens=new, temperature=1.0))


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _timed(engine, request: GenerationRequest) -> tuple[float, int]:
    _sync()
    started = time.perf_counter()
    out = engine.generate(request)
    _sync()
    return time.perf_counter() - started, sum(len(t) for t in out.tokens)


def _rows(name: str, engine, batches: list[int], new: int, floor_s: float) -> list[dict]:
    """Each batch twice: the first call of a shape pays its compiles and autotuning (the hf
    engine's first round of a run took 16.8 s where the second took 2.2 s), the second is the
    steady rate reported."""
    rows = []
    for batch in batches:
        first_s, _ = _timed(engine, _requests(batch, new))
        seconds, tokens = _timed(engine, _requests(batch, new))
        step = seconds / new
        rows.append({"engine": name, "batch": batch, "tokens": tokens, "first_call_s": round(first_s, 3),
                     "seconds": round(seconds, 3), "tok_per_s": round(tokens / seconds),
                     "decode_step_ms": round(step * 1e3, 2), "x_floor": round(step / floor_s, 2)})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def hf_rows(cfg, batches, new, floor_s) -> list[dict]:
    from launcher.workers.hf.engine import HfEngine
    from launcher.workers.hf.model import build_model

    engine = HfEngine(ActorSpec.planned(cfg))
    tok = make_tokenizer(cfg.model)
    engine.model = build_model(cfg.model, tok.pad_id, cfg.run.seed, engine.device).eval()
    engine.has_weights = True
    rows = _rows("hf", engine, batches, new, floor_s)
    del engine
    gc.collect()
    torch.cuda.empty_cache()
    return rows


def _used_gib() -> float:
    free, total = torch.cuda.mem_get_info()
    return (total - free) / 2**30


def vllm_rows(cfg, batches, new, floor_s) -> tuple[list[dict], list[dict]]:
    from launcher.plan import make_plan
    from launcher.workers.vllm.engine import VllmEngine

    tok = make_tokenizer(cfg.model)
    started = time.perf_counter()
    engine = VllmEngine(cfg, make_plan(cfg), eos_id=tok.eos_id, pad_id=tok.pad_id, seed=0)
    engine.eos_id = tok.eos_ids
    print(json.dumps({"vllm_up_s": round(time.perf_counter() - started, 1)}), flush=True)
    rows = _rows("vllm", engine, batches, new, floor_s)
    sleeps = []
    for level in (1, 2) if torch.cuda.is_available() else ():  # vLLM has no sleep mode on a CPU
        before = _used_gib()
        t0 = time.perf_counter()
        engine.sleep(level)
        t1 = time.perf_counter()
        asleep = _used_gib()
        engine.wake()
        t2 = time.perf_counter()
        sleeps.append({"level": level, "sleep_s": round(t1 - t0, 2), "wake_s": round(t2 - t1, 2),
                       "freed_gib": round(before - asleep, 1), "used_asleep_gib": round(asleep, 1)})
        print(json.dumps(sleeps[-1]), flush=True)
    return rows, sleeps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--batches", default="64,256")
    parser.add_argument("--new", type=int, default=256)
    parser.add_argument("--engines", default="hf,vllm", help="which to run (a CPU rehearsal runs each from its own venv)")
    parser.add_argument("--out", default=None)
    args = parser.parse_intermixed_args()
    batches = [int(b) for b in args.batches.split(",")]
    cfg = compose([*BASE, "inference.backend=vllm", *args.overrides]).config
    from launcher.plan import make_plan

    plan = make_plan(cfg)
    floor_s = plan.memory.inference.weights_gib * 2**30 / (cfg.cluster.gpu.hbm_tbps * 1e12)
    engines = args.engines.split(",")
    hf = hf_rows(compose([*BASE, "inference.backend=hf", *args.overrides]).config, batches, args.new, floor_s) \
        if "hf" in engines else []
    vllm, sleeps = vllm_rows(cfg, batches, args.new, floor_s) if "vllm" in engines else ([], [])
    print(f"\nweights {plan.memory.inference.weights_gib:.2f} GiB, floor {floor_s * 1e3:.2f} ms a decode step")
    print(f"{'engine':6} {'batch':>5} {'first s':>8} {'tok/s':>8} {'step ms':>8} {'x floor':>8}")
    for row in hf + vllm:
        print(f"{row['engine']:6} {row['batch']:>5} {row['first_call_s']:>8} {row['tok_per_s']:>8} "
              f"{row['decode_step_ms']:>8} {row['x_floor']:>8}")
    for h, v in zip(hf, vllm, strict=False):
        print(f"batch {h['batch']}: vLLM / hf = {v['tok_per_s'] / h['tok_per_s']:.1f}x")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"floor_ms": floor_s * 1e3, "rows": hf + vllm, "sleep": sleeps}, f, indent=1)


if __name__ == "__main__":
    main()
