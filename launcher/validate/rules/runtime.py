"""Runtime rules: collective timeout vs the longest wait, weight-sync cost, placement split."""
import math
from dataclasses import replace

from launcher.config.schema.choices import PlacementMode
from launcher.plan.preemption import grace_s, save_s
from launcher.plan.sync import SyncKind
from launcher.validate.registry import error, rule, warning

SLOW_SYNC_S = 10.0


@rule("RUN001")
def nccl_timeout(cfg, plan):
    """nccl_timeout_s exceeds the estimated longest collective wait."""
    t, have = plan.timing, cfg.trainer.nccl_timeout_s
    if have < t.longest_wait_s:
        yield error("trainer.nccl_timeout_s",
                    f"trainer.nccl_timeout_s={have} < estimated {t.longest_wait_phase} of {t.longest_wait_s:.0f} s",
                    "Ranks wait inside one collective for the whole phase; the NCCL watchdog kills the job "
                    "(a DAPO log-prob pass ran ~37 min against the 600 s default).",
                    f"Set trainer.nccl_timeout_s={t.recommended_nccl_timeout_s}.")
    elif have < t.recommended_nccl_timeout_s:
        yield warning("trainer.nccl_timeout_s",
                      f"trainer.nccl_timeout_s={have} leaves under 2x margin over the {t.longest_wait_phase} "
                      f"estimate of {t.longest_wait_s:.0f} s",
                      "The estimate is rough; slow steps (long responses, dynamic-sampling refills) exceed it.",
                      f"Set trainer.nccl_timeout_s={t.recommended_nccl_timeout_s}.")


@rule("RUN002")
def merged_sync_over_network(cfg, plan):
    """Merged or full-model sync across the network costs seconds every step."""
    s = plan.sync
    if s.link == "inter_node" and s.kind is not SyncKind.adapter and s.seconds > SLOW_SYNC_S:
        yield warning("trainer.lora.merge",
                      f"{s.kind} weight sync ships {s.gib_per_engine:,.1f} GiB per engine over the network: "
                      f"~{s.seconds:.0f} s per step",
                      "Async engines sit on other nodes; the whole model crosses the NICs after every step.",
                      "Use adapter sync (trainer.lora.merge=false with `experts` in inference.lora_targets).")


@rule("PLACE001")
def node_split(cfg, plan):
    """Trainer and inference node counts are >= 1 and, async, fit the cluster disjoint."""
    p, c = cfg.placement, cfg.cluster
    n_train, n_inf = len(plan.placement.trainer_nodes), len(plan.placement.inference_nodes)
    if p.mode is not PlacementMode["async"]:
        if n_train < 1:
            yield error("placement.trainer_nodes", f"placement.trainer_nodes={p.trainer_nodes}",
                        "The trainer needs at least one node.", "Set placement.trainer_nodes >= 1 or null (all nodes).")
        return
    if n_train < 1 or n_inf < 1 or n_train + n_inf > c.nodes:
        yield error("placement.trainer_nodes",
                    f"async placement needs trainer_nodes {n_train} + inference_nodes {n_inf} <= {c.nodes} nodes, "
                    "each >= 1",
                    "Async mode runs trainer and engines on disjoint nodes.",
                    "Use colocated mode on a single node, or a cluster with more nodes.")


@rule("PLACE002")
def colocated_split(cfg, plan):
    """Colocated mode does not take inference_nodes."""
    p = cfg.placement
    if p.mode is PlacementMode.colocated and p.inference_nodes not in (None, p.trainer_nodes or cfg.cluster.nodes):
        yield warning("placement.inference_nodes",
                      f"placement.inference_nodes={p.inference_nodes} in colocated mode",
                      "Colocated engines share the trainer's GPUs; inference_nodes is ignored.",
                      "Remove placement.inference_nodes or use placement.mode=async.")


@rule("EVAL001")
def eval_settings(cfg, plan):
    """Held-out evaluation: counts in range, and something to evaluate on when it is asked for."""
    r = cfg.run
    for key, value, least in (("run.eval_every_steps", r.eval_every_steps, 0), ("run.eval_samples", r.eval_samples, 0),
                              ("run.eval_problems", r.eval_problems, 1)):
        if value is not None and value < least:
            yield error(key, f"{key}={value} is below {least}",
                        "It is a count of steps, samples or problems (launcher/driver/loop/evaluate.py).",
                        f"Set {key} >= {least}.")
    if not (r.eval_every_steps > 0 or r.eval_before_train) or cfg.data.val_path is not None:
        return
    from launcher.rl.tasks import TASKS  # pure Python: reward parsers and synthetic generators

    if cfg.data.task in TASKS.names() and TASKS.get(cfg.data.task).generate is None:
        yield error("data.val_path",
                    f"run.eval_every_steps={r.eval_every_steps}, run.eval_before_train={r.eval_before_train} but "
                    f"data.val_path=null for task {cfg.data.task!r}",
                    f"{cfg.data.task} has no generator to draw held-out problems from; evaluation scores a file.",
                    "Set data.val_path to a held-out jsonl or parquet file (same columns as data.train_path), or "
                    "run.eval_every_steps=0 and run.eval_before_train=false.")


@rule("RUN004")
def preemption_grace_holds_the_save(cfg, plan):
    """A set run.preemption_grace_s leaves time for the save of the last completed step: the step
    in flight may be dropped, the save may not (launcher/plan/preemption.py)."""
    grace = cfg.run.preemption_grace_s
    if grace is None:
        return
    need = save_s(cfg, plan)
    if grace < need:
        derived, _ = grace_s(replace(cfg, run=replace(cfg.run, preemption_grace_s=None)), plan)
        yield warning("run.preemption_grace_s",
                      f"run.preemption_grace_s={grace:g} < the ~{need:.0f} s the save of the last completed step and "
                      "Ray's stop take",
                      "After a preemption signal the scheduler kills the job once the grace is over: a save cut "
                      "short leaves the previous checkpoint as the newest, and the steps since are lost.",
                      f"Set run.preemption_grace_s >= {math.ceil(need)}, or null (derived: {derived:.0f} s, which "
                      "also lets the step in flight finish).")
