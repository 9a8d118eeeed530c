"""launch(): Ray session -> placement -> actor groups -> resume -> loop -> teardown.

The reward function is imported and the data (train file, and the val file of an evaluating
run) loaded, measured and filtered before Ray starts: a file the run cannot train on costs
seconds, not a cluster's weight load.

Exit codes (launcher/exit_codes.py): 0 done, 1 refused (the data, tokenizer or data.reward_fn
cannot be used as configured: found before Ray started, and a run directory this start made
is removed again), 3 the run failed (an actor died, a backend raised, a checkpoint could not
be resumed, dynamic sampling found nothing to learn), 130 interrupted (Ctrl-C), 128 + the
signal's number for a preemption signal (SIGTERM 143, SIGUSR1 138: launcher/driver/loop/preemption.py
saves the last completed step first). In every case Ray is shut down before returning, so no
Ray process of the run outlives it, and a background checkpoint write the live trainers finish
within EXIT_WRITE_WAIT_S is completed first (a second signal skips that). The last lines name
the newest checkpoint and the command that resumes. A traceback is printed only for an
unexpected error, with a line saying it is one.
"""
import json
import shutil
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from launcher.config.schema.choices import PlacementMode
from launcher.driver.actors.cluster import ray_session
from launcher.driver.actors.errors import ActorDiedError
from launcher.driver.actors.placement import PlacementError
from launcher.driver.actors.ray_processes import RayStartInterrupted
from launcher.driver.actors.session import place_groups
from launcher.driver.actors.startup import Startup
from launcher.driver.loop.canary import RolloutCheckError
from launcher.driver.loop.no_signal import NoSignalError
from launcher.driver.loop.preemption import Preempted, StopNow, make_preemption, resume_command, stopped_report
from launcher.driver.records.phase import RunPhase
from launcher.exit_codes import ExitCode, of_signal, unexpected

EXIT_WRITE_WAIT_S = 30.0
"""How long a failed or interrupted run waits for its trainers to finish a background checkpoint write."""


def _logged_config(composed, plan) -> dict:
    """What wandb records: the resolved config (secrets masked) and the plan."""
    from omegaconf import OmegaConf

    from launcher.secrets import mask_secrets

    return {"config": mask_secrets(OmegaConf.to_container(composed.cfg, resolve=True, enum_to_str=True)),
            "plan": plan.to_dict()}


@dataclass
class _Data:
    """What the driver reads before Ray starts: the tokenizer, the prompt stream (train file
    loaded, measured and filtered) and the evaluator (its val set loaded)."""

    tokenizer: object
    stream: object
    evaluator: object
    episodes: object = None
    """episodes.EpisodeRunner with data.environment.cls (the class imported), else None."""


class Refused(Exception):
    """The run cannot start as configured, found before Ray started: data.reward_fn does not
    load, the tokenizer folder is unusable, or the data cannot be trained on (DataError, a
    missing file or column)."""


def _before_ray(config) -> tuple[object, _Data]:
    """(the scorer, the data): everything the driver reads before it starts Ray."""
    from launcher.driver.loop.data import DataError, PromptStream
    from launcher.driver.loop.episodes import episode_runner
    from launcher.driver.loop.evaluate import make_evaluator
    from launcher.rl.env_class import EnvError
    from launcher.rl.reward_fn import RewardFnError, make_scorer

    try:
        scorer, tokenizer = make_scorer(config.data), _tokenizer(config.model)
        stream = PromptStream(config.data, config.run.seed, tokenizer)
        episodes = episode_runner(config, tokenizer)
        return scorer, _Data(tokenizer, stream, make_evaluator(config, tokenizer, episodes=episodes), episodes)
    except (DataError, FileNotFoundError, RewardFnError, EnvError) as err:
        raise Refused(str(err)) from err
    except KeyError as err:  # a named column is missing: the message is the KeyError's argument
        raise Refused(str(err.args[0]) if err.args else repr(err)) from err


def _tokenizer(model_cfg):
    """The run's tokenizer; a folder the config names that does not load (missing, a damaged
    file, no eos token) is Refused naming the key, where transformers' own error would not."""
    from launcher.rl.tokenizer import make_tokenizer, tokenizer_folder

    try:
        return make_tokenizer(model_cfg)
    except (OSError, ValueError) as err:  # only the user's folder (or vocab_size for the character one) is read here
        found = tokenizer_folder(model_cfg)
        where = f"{found[0]}={found[1]}" if found else "the character tokenizer of model.arch.vocab_size"
        raise Refused(f"the run's tokenizer ({where}) does not load: {type(err).__name__}: {err}") from err


RUN_FILES = ("config.yaml", "overrides.yaml", "plan.json")
"""What the start writes into the run directory before launch (driver/records/rundir.py write_run_files)."""


def _remove_if_fresh(run_dir: Path) -> bool:
    """Remove a refused run's directory when it holds only what this start wrote (the run
    files and its lock): no half-written run is left to mistake for one. A directory with
    an earlier run's checkpoints or metrics stays. Returns whether it was removed."""
    from launcher.driver.records.rundir import LOCK_NAME

    if not {p.name for p in run_dir.iterdir()} <= {*RUN_FILES, LOCK_NAME}:
        return False
    shutil.rmtree(run_dir)
    return True


def _build_runtime(composed, plan, run_dir: Path, trainers, engines, ckpt, resume_from, scorer, data: _Data,
                   preemption):
    from launcher.driver.loop.runtime import Runtime
    from launcher.driver.records.checkpoint import DriverState, load_driver_state
    from launcher.driver.records.metrics import StepLogger
    from launcher.driver.records.samples_log import forget_after as forget_samples_after
    from launcher.rl.algorithm import make_algorithm

    config = composed.config
    state = load_driver_state(resume_from) if resume_from else DriverState()
    logger = StepLogger(run_dir, config.logging, config.run, state.step, _logged_config(composed, plan))
    forget_samples_after(run_dir, state.step)
    rt = Runtime(config=config, plan=plan, run_dir=run_dir, trainers=trainers, engines=engines,
                 tokenizer=data.tokenizer, stream=data.stream, algorithm=make_algorithm(config.algorithm),
                 logger=logger, checkpointer=ckpt, state=state, last_checkpoint=resume_from,
                 evaluator=data.evaluator, scorer=scorer, preemption=preemption, episodes=data.episodes)
    if config.run.rollout_checks.canary.prompts:
        from launcher.driver.loop.canary import Canary

        rt.canary = Canary(rt)
    return rt


def _start_groups(config, plan, run_dir: Path, embedded: bool, startup: Startup):
    trainers, engines = place_groups(config, plan, embedded, startup=startup)
    (run_dir / "actors.json").write_text(json.dumps(trainers.info + engines.info, indent=2))
    where = "embedded Ray" if embedded else f"Ray at {config.cluster.ray_address}"
    sys.stdout.write(f"{where}, {plan.placement.mode}: trainer ranks {_slots(trainers.info)} (dp {plan.mesh.dp}), "
                     f"engines {_slots(engines.info)}; run dir {run_dir}\n")
    return trainers, engines


def _slots(infos: list[dict]) -> str:
    """`node0/gpu0, node0/gpu1` for the start-up line."""
    return ", ".join(f"node{i['node']}/gpu{i['gpu']}" for i in infos)


def _run(composed, plan, run_dir: Path, ckpt, resume_from, preemption) -> Path | None:
    from launcher.driver.actors.session import restore
    from launcher.driver.loop.loops import LOOPS

    config = composed.config
    scorer, data = _before_ray(config)  # Refused: a reward, tokenizer or data mistake costs seconds
    preemption.phase.enter("start-up")
    # Installed again after ray.init: Ray's core worker installs its own SIGTERM handler, which
    # would end the driver without the teardown below.
    started = time.monotonic()
    with ray_session(config, plan.env) as embedded, preemption.installed():
        ray_s = time.monotonic() - started
        startup = Startup()
        trainers, engines = _start_groups(config, plan, run_dir, embedded, startup)
        if resume_from:  # run.resume=auto: a checkpoint the trainers cannot load gives way to the one before
            startup.driver_phase("resume")
            resume_from = restore(trainers, ckpt, resume_from, fallback=config.run.resume == "auto")
        rt = _build_runtime(composed, plan, run_dir, trainers, engines, ckpt, resume_from, scorer, data, preemption)
        try:
            if resume_from:
                sys.stdout.write(f"resumed from {resume_from} (step {rt.state.step})\n")
            startup.driver_phase("first sync")
            rt.sync_weights(with_base=True, wait=True)
            # Async: both groups own their GPUs. Colocated engines hold only their weights after the
            # first sync (session.place_groups): step 1's wake checks that sync, before step 1 trains.
            if rt.canary is not None and config.placement.mode is not PlacementMode.colocated:
                startup.driver_phase("canary")
                rt.canary.send("start-up (after the first sync)")
                rt.canary.score()
            rt.logger.log_startup(ray_s, startup.finish(), plan.startup.seconds)
            preemption.running = True  # from here a signal saves (before: nothing to save, it stops at once)
            rt.enter_phase("loop")
            LOOPS.get(plan.placement.mode)(rt)
            if preemption.requested and rt.state.step < config.run.steps:
                _save_and_stop(rt, ckpt)
            rt.finish_checkpoint()
        except (Preempted, StopNow):
            raise  # saved already, or a second signal: the clean-up only
        except BaseException:
            rt.complete_write_on_exit(EXIT_WRITE_WAIT_S)  # Ctrl-C or a failure: a write the trainers finish
            raise
        finally:
            curves = rt.logger.close()
        if curves is not None:
            sys.stdout.write(f"wrote {curves}\n")
        return rt.last_checkpoint


def _save_and_stop(rt, ckpt) -> None:
    """A preemption signal stopped the loop: the last completed step saved (runtime.save_on_stop),
    then Preempted, which leaves the Ray session (Ray stops) for launch() to report."""
    newest = ckpt.latest()
    rt.enter_phase("save", rt.state.step)
    rt.save_on_stop()
    latest = ckpt.latest()
    raise Preempted(rt.preemption.signum, rt.state.step, latest, saved=latest != newest)


def _already_complete(config, run_dir: Path, checkpoint: Path) -> str:
    """A finished run asked to resume: say so instead of starting Ray to train 0 steps (a
    resubmitted sweep then skips its finished points and exits 0)."""
    return (f"nothing to do: {run_dir} already completed run.steps={config.run.steps} (checkpoint {checkpoint}); "
            "raise run.steps to train further, or give a new run.name to start over\n")


def launch(composed, plan, run_dir) -> int:
    from launcher.driver.records.checkpoint import (
        Checkpointer,
        CheckpointError,
        checkpoint_root,
        load_driver_state,
        resolve_resume,
    )

    config, run_dir = composed.config, Path(run_dir)
    ckpt = Checkpointer(checkpoint_root(config, run_dir), config.checkpoint.every_steps, config.checkpoint.keep,
                        config.run.steps)
    preemption = make_preemption(config, plan, RunPhase(run_dir))
    with preemption.installed():
        try:
            resume_from = resolve_resume(config.run.resume, ckpt)
            if resume_from is not None and load_driver_state(resume_from).step >= config.run.steps:
                sys.stdout.write(_already_complete(config, run_dir, resume_from))
                return ExitCode.OK
            last = _run(composed, plan, run_dir, ckpt, resume_from, preemption)
        except Refused as err:  # before Ray started: a user error, no traceback
            removed = f"; removed {run_dir}" if _remove_if_fresh(run_dir) else ""
            sys.stderr.write(f"refusing to start: {err}\n(found before Ray started; nothing was run{removed})\n")
            return ExitCode.REFUSED
        except Preempted as stop:
            sys.stderr.write(stopped_report(stop, composed, preemption))
            return of_signal(stop.signum)
        except KeyboardInterrupt as err:  # Ctrl-C, a second preemption signal, or one during start-up
            signum = getattr(err, "signum", signal.SIGINT)
            what = err.args[0] if isinstance(err, RayStartInterrupted) else "interrupted; Ray stopped"
            if isinstance(err, StopNow):
                what = f"{err.args[0]}: stopped at once; Ray stopped"
            sys.stderr.write(f"{what}. Last checkpoint: {ckpt.latest() or 'none'}\n{_resume_line(composed, ckpt)}")
            return of_signal(signum)
        except (ActorDiedError, CheckpointError, PlacementError, NoSignalError, RolloutCheckError) as err:  # expected
            if preemption.requested:  # e.g. Slurm's SIGTERM reached the Ray processes too: they went first
                name = signal.Signals(preemption.signum).name
                sys.stderr.write(f"{name} received, then the run could not finish its step or save: {err}\n"
                                 f"Ray stopped. Last checkpoint: {ckpt.latest() or 'none'}\n"
                                 f"{_resume_line(composed, ckpt)}")
                return of_signal(preemption.signum)
            sys.stderr.write(f"run failed: {err}\nRay stopped. Last checkpoint: {ckpt.latest() or 'none'}\n")
            return ExitCode.RUN_FAILED
        except Exception:  # noqa: BLE001 - any backend error ends the run with its traceback, after teardown
            traceback.print_exc()
            sys.stderr.write(f"{unexpected('run')}. Ray stopped. Last checkpoint: {ckpt.latest() or 'none'}\n")
            return ExitCode.RUN_FAILED
    sys.stdout.write(f"done: {config.run.steps} steps in {run_dir}; last checkpoint {last}\n")
    return ExitCode.OK



def _resume_line(composed, ckpt) -> str:
    return f"resume with: {resume_command(composed)}\n" if ckpt.latest() is not None else ""
