"""`python -m launcher export CHECKPOINT_DIR OUT_DIR [--adapter] [overrides]`.

The run's own trainer group loads the checkpoint on the run's mesh (or the mesh the
overrides give, where the checkpoint format reshards) and streams its weights out exactly
as a weight sync does: every tensor gathered across the mesh when reached, under the
checkpoint's on-disk names, LoRA merged in; rank 0's buckets go to a ShardWriter. So no
process ever holds the whole model. With --adapter the LoRA adapter alone is written as
a PEFT folder instead.

The folder is written as `.OUT_DIR.partial` and renamed when complete: a failure leaves
nothing that looks like an export.
"""
import shutil
import sys
from pathlib import Path

from launcher.driver.checkpoint_run import CheckpointRunError, check_checkpoint, rebuild_run
from launcher.exit_codes import ExitCode
from launcher.plan.sync import BUCKET_BYTES


def _check_out(out: Path) -> None:
    if out.exists() and any(out.iterdir()):
        raise CheckpointRunError(f"{out} exists and is not empty; give a new folder")


def _check_space(out: Path, plan, adapter: bool) -> None:
    """Room for the export before any of it is written: the plan's export size (the tensors the
    trainers stream out: the merged model, or the adapter) with the checkpoint writer's margin
    for the files copied from the base folder."""
    from launcher.driver.records.checkpoint import GIB, SPACE_MARGIN

    root = next(p for p in [out, *out.parents] if p.exists())
    need = (plan.sync.export_adapter_bytes if adapter else plan.sync.export_model_bytes) * SPACE_MARGIN
    have = shutil.disk_usage(root).free
    if have < need:
        lora = plan.sync.export_adapter_bytes > 0
        what = "the LoRA adapter" if adapter else "the merged model" if lora else "the model"
        hint = "; or export the adapter alone with --adapter" if lora and not adapter else ""
        raise CheckpointRunError(f"{out}: {what} needs {need / GIB:.1f} GiB, {root} has {have / GIB:.1f} GiB free "
                          f"(nothing was written). Free space there or give a folder on a larger disk{hint}")


def _stream_into(trainers, writer) -> int:
    """Pull the trainers' weight stream bucket by bucket into `writer`; returns tensors written.
    Every wait has the trainer group's deadline (a lost or stopped rank ends the export naming it)."""
    trainers.fetch(trainers.begin_export(0, False, BUCKET_BYTES), "begin_export")
    written = 0
    while True:
        info, ref = trainers.next_bucket()
        if info is None:
            return written
        for name, tensor in trainers.fetch(ref, "next_bucket").tensors:
            writer.add(name, tensor)
            written += 1
        del ref
        if info.last:
            return written


class _AdapterTensors(dict):
    """The adapter is a few hundred MB at most: collected whole, written as one file."""

    def add(self, name: str, tensor) -> None:
        self[name] = tensor.detach().to("cpu").contiguous()


def _write_adapter(cfg, trainers, folder: Path) -> int:
    from peft import LoraConfig
    from safetensors.torch import save_file

    from launcher.plan.lora import peft_kwargs

    tensors = _AdapterTensors()
    count = _stream_into(trainers, tensors)
    save_file(dict(tensors), str(folder / "adapter_model.safetensors"), metadata={"format": "pt"})
    LoraConfig(**peft_kwargs(cfg.trainer.lora), base_model_name_or_path=cfg.model.hf_path).save_pretrained(folder)
    return count


def _write_model(cfg, trainers, folder: Path) -> int:
    from launcher.driver.export_writer import ShardWriter, copy_base_files, copy_other_tensors

    writer = ShardWriter(folder)
    count = _stream_into(trainers, writer)
    if cfg.model.hf_path:
        copy_base_files(Path(cfg.model.hf_path), folder)
        count += copy_other_tensors(Path(cfg.model.hf_path), writer)
    else:
        _write_random_init_config(cfg, folder)
    writer.close()
    return count


def _write_random_init_config(cfg, folder: Path) -> None:
    """A run without a base checkpoint: config.json from model.arch, and the files of
    model.tokenizer_path when it has one (the character tokenizer has no files), so the
    folder loads with AutoTokenizer and generates with the run's eos ids."""
    from launcher.driver.export_writer import copy_base_files
    from launcher.rl.tokenizer import make_tokenizer, tokenizer_folder
    from launcher.workers.hf.model import hf_config

    hf_config(cfg.model.arch, make_tokenizer(cfg.model).pad_id).save_pretrained(folder)
    found = tokenizer_folder(cfg.model)
    if found is not None:
        copy_base_files(found[1], folder)


def _export_on_ray(composed, plan, checkpoint: Path, staging: Path, adapter: bool) -> int:
    from launcher.driver.actors.session import checkpoint_session

    cfg = composed.config
    with checkpoint_session(cfg, plan, checkpoint, with_engines=False) as (trainers, _):
        write = _write_adapter if adapter else _write_model
        return write(cfg, trainers, staging)


def export(checkpoint: str, out: str, adapter: bool, extra: list[str]) -> int:
    """Exit code: 0 written, 1 the config is refused, 3 the export failed (nothing left behind:
    the cli names a lost actor and its call, ActorDiedError, without a traceback)."""
    checkpoint_dir, out_dir = Path(checkpoint).resolve(), Path(out).resolve()
    check_checkpoint(checkpoint_dir)
    _check_out(out_dir)
    rebuilt = rebuild_run(checkpoint_dir, [*extra, f"trainer.lora.merge={'false' if adapter else 'true'}"], "export")
    if rebuilt is None:
        return ExitCode.REFUSED
    composed, plan = rebuilt
    if adapter and not plan.lora.enabled:
        raise CheckpointRunError(f"{checkpoint}: --adapter needs a LoRA run (trainer.lora.rank is 0); export "
                                 "without it")
    _check_space(out_dir, plan, adapter)
    staging = out_dir.parent / f".{out_dir.name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        count = _export_on_ray(composed, plan, checkpoint_dir, staging, adapter)
        if out_dir.exists():
            out_dir.rmdir()
        staging.rename(out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    what = "PEFT adapter" if adapter else "model (LoRA merged)" if plan.lora.enabled else "model"
    sys.stdout.write(f"exported {what}: {count} tensors from {checkpoint_dir} to {out_dir}\n")
    return ExitCode.OK
