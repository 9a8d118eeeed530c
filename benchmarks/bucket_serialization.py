"""A host weight bucket from one Ray actor (the trainer) through the object store to another (an
engine, or `export`'s driver): WeightBucket's out-of-band pickling against torch's own, in-band.

    python benchmarks/bucket_serialization.py [--gib 1.0] [--repeats 3]

Both rows move the same bf16 tensors (64 of them, `--gib` in all) in one Ray session, alternating
(in band, out of band, in band, ...), so the machine's noise falls on both; prints GiB/s per row and
the ratio. On the H200 machine the merged export moved 0.27 GiB/s in band (docs/results.md).
"""
import argparse
import statistics
import time

import ray
import torch

from launcher.weight_sync.messages import WeightBucket


def _tensors(gib: float, count: int = 64) -> list[tuple[str, torch.Tensor]]:
    rows = int(gib * 2**30 / count / 2 / 1024)
    return [(f"layers.{i}.weight", torch.randn(rows, 1024).to(torch.bfloat16)) for i in range(count)]


class InBand(list):
    """The bucket's pairs as torch pickles them (what a WeightBucket was before __reduce__)."""


@ray.remote(num_cpus=0)
class Trainer:
    def __init__(self, gib: float):
        self.tensors = _tensors(gib)

    def bucket(self, out_of_band: bool):
        nbytes = sum(t.numel() * 2 for _, t in self.tensors)
        return WeightBucket("weights", self.tensors, nbytes) if out_of_band else InBand(self.tensors)


@ray.remote(num_cpus=0)
class Engine:
    def load(self, bucket) -> float:
        pairs = bucket.tensors if isinstance(bucket, WeightBucket) else bucket
        return float(sum(t[0, 0].float() for _, t in pairs))  # touch every tensor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    trainer, engine = Trainer.remote(args.gib), Engine.remote()
    ray.get(engine.load.remote(trainer.bucket.remote(True)))  # warm both actors
    rates: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(args.repeats):
        for out_of_band in (False, True):
            start = time.perf_counter()
            ray.get(engine.load.remote(trainer.bucket.remote(out_of_band)))
            rates[out_of_band].append(args.gib / (time.perf_counter() - start))
    ray.shutdown()
    print(f"| pickling ({args.gib:g} GiB bucket, {args.repeats} runs) | GiB/s median | min | max |")
    print("|---|---|---|---|")
    for out_of_band, name in ((False, "torch tensors, in band"), (True, "WeightBucket, out of band")):
        r = rates[out_of_band]
        print(f"| {name} | {statistics.median(r):.2f} | {min(r):.2f} | {max(r):.2f} |")
    print(f"ratio of medians: {statistics.median(rates[True]) / statistics.median(rates[False]):.1f}x")


if __name__ == "__main__":
    main()
