"""The main job as a user runs it: `python -m launcher` (a subprocess: Ray, actors and all),
GRPO with eval every 2 steps and a checkpoint every 2, Ctrl-C (SIGINT) after step 3,
`run.resume=auto` to step 6, `python -m launcher export`, and the exported folder's
log-probs through `from_pretrained` against the trainer's own, read from the same checkpoint.

    python benchmarks/main_job.py OUT_DIR [--profile slice4|slice2|tiny|qmoe] [--from-checkpoint] [OVERRIDE ...]

slice4 is the 4-layer GLM-5.3-Flash slice (23.8B parameters, all 288 experts) on one H200:
colocated Megatron trainer + hf engine, LoRA with merged sync; slice2 the 2-layer slice (one
KDA and one MLA+DSA layer) on one 80 GiB H100. --from-checkpoint first writes
a real-format checkpoint of it (bf16 `save_pretrained` shards + index + tokenizer, initialized
on the GPU) and exports the LoRA adapter (PEFT) instead of the merged model: the device's
64 GiB disk cannot hold the 44 GiB checkpoint and a 44 GiB merged export at once. tiny is
the same job on the CPU (a rehearsal of this script, minutes). GPU memory per process
(nvidia-smi) and host RSS of the run's processes are sampled every 2 s and classified by
which group holds the GPU. Prints a table per part as soon as it has it; writes report.json.
"""
import argparse
import gc
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
STEPS, INTERRUPT_AFTER, CHECKPOINT_EVERY = 6, 3, 2
BASE = ["recipe=tiny_grpo_chat", "run.eval_every_steps=2", f"checkpoint.every_steps={CHECKPOINT_EVERY}",
        f"run.steps={STEPS}", "algorithm.prompts_per_step=16", "algorithm.mini_batch_prompts=16",
        "algorithm.samples_per_prompt=4", "run.eval_problems=16"]
PROFILES = {
    "slice4": ["model=glm5_3_flash_4layer", "cluster=h200x1", "inference.engines=1", "trainer.backend=megatron",
               "model.dtype=bfloat16",
               "trainer.lora.rank=16", "trainer.lora.alpha=32", "trainer.optimizer.lr=1e-4",
               "trainer.lora.targets=[linear_proj,linear_fc1,linear_fc2,q_proj,k_proj,v_proj,o_proj]"],
    # The same on one 80 GiB H100: 1 KDA + 1 MLA+DSA layer (1 dense + 1 MoE MLP, all 288 experts).
    "slice2": ["model=glm5_3_flash_2layer", "cluster=h100x1", "inference.engines=1", "trainer.backend=megatron",
               "model.dtype=bfloat16",
               "trainer.lora.rank=16", "trainer.lora.alpha=32", "trainer.optimizer.lr=1e-4",
               "trainer.lora.targets=[linear_proj,linear_fc1,linear_fc2,q_proj,k_proj,v_proj,o_proj]"],
    # Route 1 of the vLLM issue: vLLM 0.26 on the H200 (no GLM model before 0.30) with a real MoE
    # shape it serves, trained by the hf trainer; 64 sequences x 256 tokens a step (random init
    # rarely samples an EOS), LoRA on attention merged into the weights (vLLM's CUDA IPC transfer).
    "qmoe": ["model=qwen3_moe_4layer", "cluster=h200x1", "inference.backend=vllm", "inference.engines=1",
             "trainer.backend=hf", "model.dtype=bfloat16", "trainer.lora.rank=16", "trainer.lora.alpha=32",
             "trainer.optimizer.lr=1e-4", "trainer.lora.targets=[q_proj,k_proj,v_proj,o_proj]",
             "algorithm.max_response_len=256", "inference.max_model_len=320", "run.eval_problems=64"],
    "tiny": ["trainer.backend=megatron", "trainer.lora.rank=4", "trainer.lora.alpha=8", "trainer.optimizer.lr=1e-3",
             "trainer.lora.targets=[linear_proj,linear_fc1,linear_fc2,q_proj,k_proj,v_proj,o_proj]"],
}
DESCRIPTOR = {"slice4": "glm5_3_flash_4layer", "slice2": "glm5_3_flash_2layer", "tiny": "tiny", "qmoe": "qwen3_moe_4layer"}
LOGPROB_ATOL = {"bfloat16": 0.1, "float32": 1e-3}
"""Exported vs trainer log-probs, max abs over the probe tokens, by model.dtype. In bf16 the HF
kernels (fla's KDA, eager MoE) and Megatron's differ as much as the run's own engine and trainer
do on the same weights: on the H200 the slice's merged export was within 0.024 and the adapter
export on the HF-initialized checkpoint within 0.070, where that run's engine-vs-trainer
logprob_abs_diff_max was 0.055-0.082 with routing replay on (tiny on the CPU: 0.026). fp32 on
the CPU agree to ~1e-5."""
PROBE_IDS = [7, 30, 20, 22, 26, 9, 15, 40, 33, 12, 11, 50]


class Sampler(threading.Thread):
    """GPU memory and host RSS per role (engine/trainer, by Ray's process title) over the run's process tree."""

    def __init__(self, root_pid: int, file: Path, every_s: float = 2.0):
        super().__init__(daemon=True)
        self.root, self.every_s, self.rows, self.stop = root_pid, every_s, [], threading.Event()
        self.file = file
        """Each sample is appended here as it is taken: a call that ends mid-run keeps them."""

    def _roles(self) -> tuple[dict[int, str], dict[str, float]]:
        """(role by pid, host RSS GiB by role): an actor's compile workers count as its own."""
        roles, rss = {}, {"engine": 0.0, "trainer": 0.0, "other": 0.0}
        try:
            procs = [psutil.Process(self.root), *psutil.Process(self.root).children(recursive=True)]
        except psutil.NoSuchProcess:
            return roles, rss
        for proc in procs:
            try:
                title = " ".join(proc.cmdline())
                parent = roles.get(proc.ppid(), "other")
                engine = "Engine" in title or "VllmInference" in title
                roles[proc.pid] = "engine" if engine else "trainer" if "Trainer" in title else parent
                rss[roles[proc.pid]] += proc.memory_info().rss / 2**30
            except psutil.Error:
                continue
        return roles, rss

    def _gpu_gib(self, roles: dict[int, str]) -> dict[str, float]:
        if shutil.which("nvidia-smi") is None:
            return {}
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True).stdout
        gib = {"engine": 0.0, "trainer": 0.0, "other": 0.0}
        for line in filter(None, out.splitlines()):
            pid, mib = (int(x) for x in line.split(","))
            gib[roles.get(pid, "other")] += mib / 1024
        return gib

    def run(self) -> None:
        while not self.stop.wait(self.every_s):
            roles, rss = self._roles()
            self.rows.append({"t": time.time(), "host_rss_gib": sum(rss.values()),
                              **{f"host_rss_{role}_gib": gib for role, gib in rss.items()}, **self._gpu_gib(roles)})
            with self.file.open("a") as f:
                f.write(json.dumps(self.rows[-1]) + "\n")


def launcher(*args: str, log: Path, interrupt_after: int | None = None, timeout_s: float = 3600) -> dict:
    """Run `python -m launcher ARGS`; SIGINT once metrics.jsonl has `interrupt_after` step rows."""
    metrics = next((Path(a.split("=", 1)[1]) for a in args if a.startswith("run.output_dir=")), None)
    name = next((a.split("=", 1)[1] for a in args if a.startswith("run.name=")), None)
    metrics = metrics / name / "metrics.jsonl" if metrics and name else None
    started = time.time()
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "launcher", *args], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        sampler = Sampler(proc.pid, log.with_suffix(".memory.jsonl"))
        sampler.start()
        seen: dict[str, float] = {}
        while proc.poll() is None and time.time() - started < timeout_s:
            for row in _rows(metrics):
                key = "startup" if "startup" in row else f"step {row['step']}" if "step_s" in row else None
                seen.setdefault(key, time.time()) if key else None
            if interrupt_after and f"step {interrupt_after}" in seen and "sigint" not in seen:
                seen["sigint"] = time.time()
                proc.send_signal(signal.SIGINT)
            time.sleep(0.5)
        if proc.poll() is None:
            proc.kill()
        sampler.stop.set()
    return {"code": proc.wait(), "wall_s": time.time() - started, "started": started, "seen": seen,
            "samples": sampler.rows, "log": str(log)}


def _rows(metrics: Path | None) -> list[dict]:
    if metrics is None or not metrics.exists():
        return []
    rows = []
    for line in metrics.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            pass  # a line being written
    return rows


def memory_by_phase(run: dict) -> dict[str, dict[str, float]]:
    """Peak GPU GiB (engine + trainer) and host RSS per colocated phase: start-up until the
    startup row (both resident there: the first sync), then by who holds the GPU."""
    startup_end = run["seen"].get("startup", float("inf"))
    peaks: dict[str, dict[str, float]] = {}
    for s in run["samples"]:
        engine, trainer = s.get("engine", 0.0), s.get("trainer", 0.0)
        both = engine > 2 and trainer > 2
        phase = ("first sync" if both else "start-up") if s["t"] < startup_end else \
            "sync" if both else "generation" if engine > 2 else "training"
        row = peaks.setdefault(phase, {"gpu_gib": 0.0, "engine_gib": 0.0, "trainer_gib": 0.0, "host_rss_gib": 0.0})
        for key, value in (("gpu_gib", engine + trainer), ("engine_gib", engine), ("trainer_gib", trainer),
                           ("host_rss_gib", s["host_rss_gib"])):
            row[key] = max(row[key], value)
    return peaks


def step_table(metrics: Path) -> list[dict]:
    keys = ("step", "gen_s", "train_s", "sync_s", "step_s", "reward", "logprob_abs_diff_mean", "logprob_abs_diff_max",
            "rollout_kl", "routing_agreement")
    return [{k: row.get(k) for k in keys} for row in _rows(metrics) if "step_s" in row]


def write_checkpoint(out: Path, profile: str) -> Path:
    """A real-format checkpoint (save_pretrained shards + index, tokenizer, generation config), built on the GPU."""
    import torch

    from launcher.workers.hf.tiny_checkpoint import write_tiny_checkpoint

    t0 = time.time()
    folder = write_tiny_checkpoint(out, DESCRIPTOR[profile], shards=10, dtype="bfloat16",
                                   device="cuda" if torch.cuda.is_available() else "cpu")
    # The model is gone, but this process's allocator would keep its 72 GiB cached for the whole
    # run: the engine's first materialize then ran out of memory (H200, 2026-12-03).
    gc.collect()
    torch.cuda.empty_cache() if torch.cuda.is_available() else None
    size = sum(f.stat().st_size for f in folder.glob("*.safetensors")) / 2**30
    print(f"checkpoint: {size:.1f} GiB written to {folder} in {time.time() - t0:.1f} s", flush=True)
    return folder


def trainer_logprobs(cfg, checkpoint: Path) -> list[float]:
    """The trainer's own log-probs of PROBE_IDS, read from the run's checkpoint (this process, rank 0 of 1)."""
    import torch

    from launcher.contract.messages import TrainShard
    from launcher.contract.spec import ActorSpec
    from launcher.workers import trainer_class
    from launcher.workers.rendezvous import free_address

    trainer = trainer_class(cfg.trainer.backend.value)(ActorSpec.planned(cfg, 0, 1))
    trainer.init_distributed(*free_address())
    trainer.load_checkpoint(str(checkpoint / "trainer"))
    shard = TrainShard(sequences=[PROBE_IDS], prompt_lens=[1], advantages=[0.0],
                       tokens_in_mini_batch=len(PROBE_IDS) - 1, seqs_in_mini_batch=1)
    values = [float(v) for v in trainer.logprobs(shard)[0]]
    del trainer
    torch.cuda.empty_cache() if torch.cuda.is_available() else None
    return values


def exported_logprobs(folder: Path, base: Path | None) -> list[float]:
    """PROBE_IDS through from_pretrained of the export (with `base`: the PEFT adapter on it)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.models.glm5_next import Glm5NextForConditionalGeneration

    device = "cuda" if torch.cuda.is_available() else "cpu"
    glm = AutoConfig.from_pretrained(base or folder).model_type == "glm5_next"
    cls = Glm5NextForConditionalGeneration if glm else AutoModelForCausalLM
    model = cls.from_pretrained(base or folder, dtype="auto", device_map=device)
    if base is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, folder)
    ids = torch.tensor([PROBE_IDS], device=device)
    with torch.no_grad():
        logits = model.eval()(input_ids=ids).logits[0, :-1].float()
    return torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None])[:, 0].tolist()


def main() -> None:
    # Started in the background by a non-interactive shell (h200_detached.sh), this process would
    # inherit SIGINT ignored and pass that on to the launcher, which then never sees the Ctrl-C it
    # is sent (the H200 run of 2026-12-03 trained on to step 6). A handler is reset at exec.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--profile", choices=sorted(PROFILES), default="slice4")
    parser.add_argument("--from-checkpoint", action="store_true")
    parser.add_argument("overrides", nargs="*", help="more launcher overrides (e.g. algorithm.routing_replay=true)")
    args = parser.parse_intermixed_args()
    out, name = args.out.resolve(), f"main_{args.profile}{'_ckpt' if args.from_checkpoint else ''}"
    out.mkdir(parents=True, exist_ok=True)
    report: dict = {"profile": args.profile, "from_checkpoint": args.from_checkpoint, "overrides": args.overrides}
    extra = []
    if args.from_checkpoint:
        t0 = time.time()
        checkpoint = write_checkpoint(out / "hf_checkpoint", args.profile)
        report["checkpoint_write_s"] = time.time() - t0
        extra = [f"model.hf_path={checkpoint}", "model.tokenizer_path=null"]
    overrides = [*BASE, *PROFILES[args.profile], *extra, *args.overrides, f"run.output_dir={out / 'runs'}", f"run.name={name}"]
    run_dir = out / "runs" / name
    first = launcher(*overrides, log=out / f"{name}_first.log", interrupt_after=INTERRUPT_AFTER)
    report["first"] = _summary(first, run_dir)
    print(json.dumps(report["first"], indent=1), flush=True)
    if first["code"] != 130:
        _finish(out / f"{name}_report.json", report, f"the first run ended with {first['code']}, not 130 (SIGINT)",
                first["log"])
    second = launcher(*overrides, "run.resume=auto", log=out / f"{name}_resumed.log")
    report["resumed"] = _summary(second, run_dir)
    report["steps"] = step_table(run_dir / "metrics.jsonl")
    if second["code"] != 0:
        _finish(out / f"{name}_report.json", report, f"the resumed run ended with {second['code']}", second["log"])
    print(json.dumps({k: report["resumed"][k] for k in ("code", "wall_s", "memory")}, indent=1), flush=True)
    print(json.dumps(report["steps"], indent=1), flush=True)
    report["export"] = export_check(overrides, run_dir / "checkpoints" / f"step_{STEPS:06d}", out / "export",
                                    checkpoint if args.from_checkpoint else None)
    print(json.dumps(report["export"], indent=1), flush=True)
    _finish(out / f"{name}_report.json", report, None)


def _finish(file: Path, report: dict, failure: str | None, log: str | None = None) -> None:
    report["failure"] = failure
    file.write_text(json.dumps(report, indent=1))
    if failure:
        sys.exit(f"main job: {failure} (logs next to {file}){_tail(log)}")


def _tail(log: str | None, lines: int = 60) -> str:
    """The failed run's last lines, warnings left out: this script's own output is what a
    device call surely hands back."""
    if log is None:
        return ""
    kept = [line for line in Path(log).read_text(errors="replace").splitlines()
            if "Warning" not in line and "warnings.warn" not in line]
    return "\n" + "\n".join(kept[-lines:])


def _summary(run: dict, run_dir: Path) -> dict:
    started = run["started"]
    startup = [r for r in _rows(run_dir / "metrics.jsonl") if "startup" in r]
    return {"code": run["code"], "wall_s": round(run["wall_s"], 1),
            "seen_s": {k: round(v - started, 1) for k, v in run["seen"].items()},
            "startup": startup[-1] if startup else None, "memory": memory_by_phase(run), "log": run["log"]}


def export_check(overrides: list[str], checkpoint: Path, folder: Path, base: Path | None) -> dict:
    """`python -m launcher export` (merged, or --adapter on a checkpoint's base), then log-probs."""
    t0 = time.time()
    done = subprocess.run([sys.executable, "-m", "launcher", "export", str(checkpoint), str(folder),
                           *(["--adapter"] if base else [])], cwd=ROOT, capture_output=True, text=True)
    result = {"code": done.returncode, "export_s": round(time.time() - t0, 1), "stderr": done.stderr[-2000:]}
    if done.returncode:
        return result
    from launcher.config.compose import compose

    cfg = compose([o for o in overrides if not o.startswith("run.")]).config
    want = trainer_logprobs(cfg, checkpoint)
    got = exported_logprobs(folder, base)
    diffs = [abs(a - b) for a, b in zip(want, got, strict=True)]
    atol = LOGPROB_ATOL[getattr(cfg.model.dtype, "value", cfg.model.dtype)]
    return {**result, "max_abs_logprob_diff": max(diffs), "mean_abs_logprob_diff": sum(diffs) / len(diffs),
            "atol": atol, "ok": max(diffs) <= atol}


if __name__ == "__main__":
    main()
