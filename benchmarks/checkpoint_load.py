"""Issue 14: the Megatron trainer's streamed checkpoint load on CPU ranks, against its targets.

    PYTHONPATH=. .venv/bin/python benchmarks/checkpoint_load.py --out-dir /tmp/checkpoint_load --ranks 1,2,4

Builds once (cached in --out-dir/ckpt) a save_pretrained checkpoint of GLM-5.3-Flash's real
widths cut to the 4-layer slice (model/descriptors/glm5_3_flash_4layer.yaml: KDA+dense, KDA+MoE,
KDA+MoE, DSA+MoE) with --experts routed experts and a --vocab-size vocabulary, in bf16.
Then, per rank count and mesh, spawns that many gloo CPU ranks; each builds its shard of the
Megatron model (torch.empty: untouched, so not yet resident) and times
`load_model_folder` -- the trainer's path: compose with model.hf_path, ModelSpec, build,
load. Per rank: shard bytes (this rank's parameters and buffers), wall and CPU seconds of the
load, GB/s = shard bytes / wall s, and RSS growth over the post-build baseline, sampled from
/proc/self/status every --sample-ms (RssAnon, RssFile: safetensors mmaps the shards, so
touched file pages count in RSS though the kernel can reclaim them) and the kernel's own peak
(VmHWM, reset after the build). Targets: peak RSS growth <= shard + 1 GiB; >= 1 GB/s per rank.

`cold` first drops the shards from the page cache with posix_fadvise(DONTNEED) (no root
needed; fincore checks it); `warm` reads them again with every page cached. On a VM the
host may still cache a "cold" read. Ranks share one page cache: with several ranks the
replicated tensors come from disk for the first reader only.
Rank 0 then checks its loaded slice of one routed-expert and one TP-split tensor against
safetensors' load_file of the shard file (outside the timing).
"""
import argparse
import gc
import json
import os
import subprocess
import tempfile
import threading
import time
from pathlib import Path

DESCRIPTOR = "glm5_3_flash_4layer"
GiB = 2**30
MESHES = {"ep": lambda n: (1, n, 1), "tp": lambda n: (n, 1, 1), "tp_ep": lambda n: (n, n, 1)}
"""Mesh name -> (tp, ep, etp) for n ranks. ep: experts split, the rest replicated (the
trainer's usual MoE mesh); tp: dense weights split, experts replicated; tp_ep: both
(Megatron's MoE parallel folding), the mesh that leaves the least on each rank."""
EXPERT_TENSOR = "layers.1.mlp.experts.linear_fc1.weight"
TP_TENSOR = "layers.0.self_attention.q_proj.weight"


def checkpoint_overrides(args) -> dict:
    return {"n_routed_experts": args.experts, "vocab_size": args.vocab_size}


def build_checkpoint(args) -> Path:
    """The checkpoint folder, written unless one with the same sizes is already there."""
    from launcher.workers.hf.tiny_checkpoint import write_tiny_checkpoint

    folder = Path(args.out_dir) / "ckpt"
    stamp = folder / "bench_sizes.json"
    want = {**checkpoint_overrides(args), "shards": args.shards, "descriptor": DESCRIPTOR}
    if stamp.is_file() and json.loads(stamp.read_text()) == want:
        print(f"checkpoint: reusing {folder}")
        return folder
    start = time.perf_counter()
    write_tiny_checkpoint(folder, DESCRIPTOR, shards=args.shards, dtype="bfloat16",
                          arch_overrides=checkpoint_overrides(args))
    stamp.write_text(json.dumps(want))
    print(f"checkpoint: wrote {folder} in {time.perf_counter() - start:.0f} s")
    return folder


def shard_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("model*.safetensors"))


def drop_page_cache(folder: Path) -> None:
    """Evict the shards' clean pages (posix_fadvise DONTNEED works without root)."""
    os.sync()
    for path in shard_files(folder):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def resident_fraction(folder: Path) -> float:
    """Share of the shards' bytes in the page cache (util-linux fincore)."""
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--raw", "--output", "RES,SIZE",
                          *map(str, shard_files(folder))], capture_output=True, text=True, check=True).stdout
    pairs = [tuple(map(int, line.split())) for line in out.splitlines() if line.strip()]
    return sum(r for r, _ in pairs) / max(1, sum(s for _, s in pairs))


def _status_kib() -> dict[str, int]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
                out[key] = int(rest.split()[0])
    return out


class RssSampler(threading.Thread):
    """Peak VmRSS, RssAnon and RssFile (each its own maximum), read every `period_s`."""

    def __init__(self, period_s: float):
        super().__init__(daemon=True)
        self.period_s, self.stop, self.peak, self.samples = period_s, threading.Event(), _status_kib(), 0

    def run(self) -> None:
        while not self.stop.is_set():
            now = _status_kib()
            self.peak = {k: max(v, now[k]) for k, v in self.peak.items()}
            self.samples += 1
            self.stop.wait(self.period_s)


def _spec(folder: Path):
    from launcher.config.compose import compose
    from model.megatron.spec import ModelSpec

    cfg = compose([f"model={DESCRIPTOR}", f"model.hf_path={folder}"]).config
    return ModelSpec.from_arch(cfg.model.arch, "bfloat16", pad_token_id=0)


def _timed_load(model, folder: Path, sample_ms: float, profile: Path | None) -> dict:
    import resource

    from model.megatron import reader
    from model.megatron.weights import load_model_folder

    opens = []
    real_open = reader.SafetensorsFolder._open
    reader.SafetensorsFolder._open = lambda self, file: (opens.append(file), real_open(self, file))[1]
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:  # "5" resets VmHWM to the current RSS
        f.write("5")
    base = _status_kib()
    sampler = RssSampler(sample_ms / 1000)
    sampler.start()
    cpu0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    if profile is not None:
        import cProfile
        prof = cProfile.Profile()
        prof.runcall(load_model_folder, model, str(folder))
        prof.dump_stats(profile)
    else:
        load_model_folder(model, str(folder))
    wall_s, cpu1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
    sampler.stop.set()
    sampler.join()
    end = _status_kib()
    kib = GiB / 1024
    return {"load_s": wall_s, "cpu_s": cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime,
            "peak_gib": (sampler.peak["VmRSS"] - base["VmRSS"]) / kib,
            "peak_anon_gib": (sampler.peak["RssAnon"] - base["RssAnon"]) / kib,
            "peak_file_gib": (sampler.peak["RssFile"] - base["RssFile"]) / kib,
            "hwm_gib": (end["VmHWM"] - base["VmRSS"]) / kib, "end_gib": (end["VmRSS"] - base["VmRSS"]) / kib,
            "samples": sampler.samples, "file_opens": len(opens), "distinct_files": len(set(opens))}


def check_rank0(model, folder: Path) -> str:
    """Rank 0's loaded slices against the shard files read whole with load_file."""
    import torch
    from megatron.core import parallel_state as ps
    from safetensors.torch import load_file

    weight_map = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]
    params = dict(model.named_parameters())
    lm = "model.language_model."
    expert = params[EXPERT_TENSOR]
    local, ep_rank = expert.shape[0], ps.get_expert_model_parallel_rank()
    experts = range(ep_rank * local, (ep_rank + 1) * local)
    names = [f"{lm}layers.1.mlp.experts.{e}.{p}_proj.weight" for e in experts for p in ("gate", "up")]
    tensors = {}
    for file in sorted({weight_map[n] for n in names}):  # each file read whole once
        tensors.update({n: t for n, t in load_file(folder / file).items() if n in names})
    ok = [torch.equal(expert[j], torch.cat([tensors[names[2 * j]], tensors[names[2 * j + 1]]]))
          for j in range(local)]
    del tensors
    tp_param = params[TP_TENSOR]
    name = f"{lm}layers.0.self_attn.q_proj.weight"
    full = load_file(folder / weight_map[name])[name]
    tp = ps.get_tensor_model_parallel_world_size()
    want = full.chunk(tp, dim=getattr(tp_param, "partition_dim", 0))[ps.get_tensor_model_parallel_rank()] if tp > 1 else full
    ok_tp = torch.equal(tp_param, want)
    return (f"rank 0: {EXPERT_TENSOR} experts {ep_rank * local}..{(ep_rank + 1) * local - 1} "
            f"{'equal' if all(ok) else 'DIFFER'}; {TP_TENSOR} slice {ps.get_tensor_model_parallel_rank()}/{tp} "
            f"{'equal' if ok_tp else 'DIFFER'} (vs safetensors load_file)")


def _worker(rank: int, world: int, store: str, folder: str, mesh: tuple, opts: dict, queue) -> None:
    import torch
    import torch.distributed as dist

    from model.megatron.build import build_model, init_parallel
    from model.megatron.weights import base_tensors

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    init_parallel(*mesh)
    model = build_model(_spec(Path(folder)), "cpu")
    shard_bytes = sum(t.nbytes for t in base_tensors(model).values())
    dist.barrier()
    profile = Path(opts["profile"]) if opts["profile"] and rank == 0 else None
    row = {"rank": rank, "shard_bytes": shard_bytes, **_timed_load(model, Path(folder), opts["sample_ms"], profile)}
    dist.barrier()
    if rank == 0 and opts["check"]:
        row["check"] = check_rank0(model, Path(folder))
    queue.put(row)
    dist.barrier()
    dist.destroy_process_group()


def run_world(folder: Path, world: int, mesh: tuple, opts: dict) -> list[dict]:
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    store = tempfile.NamedTemporaryFile(prefix="gloo-", delete=False).name
    os.unlink(store)
    procs = [ctx.Process(target=_worker, args=(r, world, store, str(folder), mesh, opts, queue)) for r in range(world)]
    for proc in procs:
        proc.start()
    rows = sorted((queue.get(timeout=900) for _ in procs), key=lambda r: r["rank"])
    for proc in procs:
        proc.join(timeout=120)
        if proc.exitcode != 0:
            raise RuntimeError(f"rank process exited with {proc.exitcode} (world {world}, mesh {mesh})")
    return rows


HEADER = (f"{'cache':5} {'ranks':>5} {'mesh':>12} {'rank':>4} {'shard GiB':>9} {'load s':>7} {'cpu s':>6} "
          f"{'GB/s':>5} {'peak RSS growth GiB (anon / file)':>34} {'HWM GiB':>7} {'opens':>5} {'cached':>6}  target")


def format_row(cache: str, world: int, mesh: tuple, row: dict, resident: float) -> str:
    shard_gib = row["shard_bytes"] / GiB
    gbps = row["shard_bytes"] / 1e9 / row["load_s"]
    rss_ok = max(row["peak_gib"], row["hwm_gib"]) <= shard_gib + 1
    verdict = f"rss {'ok' if rss_ok else 'OVER'}, speed {'ok' if gbps >= 1 else 'SLOW'}"
    growth = f"{row['peak_gib']:.2f} ({row['peak_anon_gib']:.2f} / {row['peak_file_gib']:.2f})"
    mesh_s = f"tp{mesh[0]} ep{mesh[1]} etp{mesh[2]}"
    return (f"{cache:5} {world:>5} {mesh_s:>12} {row['rank']:>4} {shard_gib:>9.2f} {row['load_s']:>7.2f} "
            f"{row['cpu_s']:>6.2f} {gbps:>5.2f} {growth:>34} {row['hwm_gib']:>7.2f} {row['file_opens']:>5} "
            f"{resident:>6.0%}  {verdict}")


def describe_checkpoint(folder: Path, args) -> list[str]:
    files = shard_files(folder)
    sizes = [f.stat().st_size for f in files]
    return [f"checkpoint {folder}: {DESCRIPTOR} widths (hidden 4096, moe_intermediate 2048, intermediate 12288, "
            f"KDA 64x128, MLA q/kv rank 1536/512, indexer 32x128), {args.experts} routed experts, "
            f"vocab {args.vocab_size} (real 154880), bf16",
            f"  {len(files)} shards, {sum(sizes) / GiB:.2f} GiB on disk "
            f"(largest {max(sizes) / GiB:.2f} GiB); machine: {os.cpu_count()} cores, torch threads per rank = "
            f"cores // ranks; targets: peak RSS growth <= shard + 1 GiB, >= 1 GB/s per rank",
            "  GB/s = shard bytes / load s (1e9); cpu s = the rank's user+sys during the load; RSS growth over the "
            "post-build baseline (params are torch.empty, so untouched until loaded); HWM = kernel VmHWM growth; "
            "opens = shard files opened; cached = shard bytes in the page cache before the load (fincore)"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", default="/tmp/checkpoint_load", help="checkpoint cache and profiles")
    parser.add_argument("--ranks", default="1,2,4", help="comma-separated rank counts")
    parser.add_argument("--meshes", default="ep", help=f"comma-separated, of {list(MESHES)} (1 rank: tp1 ep1)")
    parser.add_argument("--cache", default="cold,warm", help="cold (fadvise DONTNEED first), warm, or both")
    parser.add_argument("--experts", type=int, default=16, help="routed experts per MoE layer (real: 288)")
    parser.add_argument("--vocab-size", type=int, default=32768, help="vocabulary (real: 154880)")
    parser.add_argument("--shards", type=int, default=5, help="safetensors files save_pretrained splits into")
    parser.add_argument("--sample-ms", type=float, default=10.0, help="RSS sampling period")
    parser.add_argument("--profile", action="store_true", help="cProfile rank 0's load into --out-dir")
    parser.add_argument("--no-check", action="store_true", help="skip rank 0's load_file comparison")
    parser.add_argument("--results", default=None, help="also write the table to this file")
    args = parser.parse_args()

    folder = build_checkpoint(args)
    lines = describe_checkpoint(folder, args)
    print("\n".join(lines), flush=True)
    rows, checks = [HEADER], []
    for world in map(int, args.ranks.split(",")):
        for mesh_name in (["ep"] if world == 1 else args.meshes.split(",")):
            mesh = MESHES[mesh_name](world)
            for cache in args.cache.split(","):
                if cache == "cold":
                    drop_page_cache(folder)
                resident = resident_fraction(folder)
                profile = Path(args.out_dir) / f"load_{cache}_{world}r_{mesh_name}.prof" if args.profile else None
                opts = {"sample_ms": args.sample_ms, "profile": str(profile) if profile else None,
                        "check": not args.no_check}
                result = run_world(folder, world, mesh, opts)
                for row in result:
                    rows.append(format_row(cache, world, mesh, row, resident))
                    print(rows[-1], f"[{row['samples']} RSS samples]", flush=True)
                checks += [f"{cache} {world} ranks tp{mesh[0]} ep{mesh[1]}: {r['check']}" for r in result if "check" in r]
    table = "\n".join(lines + ["", *rows, "", *checks])
    print("\n" + table)
    if args.results:
        Path(args.results).parent.mkdir(parents=True, exist_ok=True)
        Path(args.results).write_text(table + "\n")


if __name__ == "__main__":
    main()
