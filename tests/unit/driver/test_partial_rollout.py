"""Partial rollouts' carry logic (launcher/driver/loop/partial.py): what a step sends for a carried
group, what the checkpoint keeps, and (slow: a real hf engine in this process, no Ray, ~10 s)
how a carried group's tokens are joined and that a step continued from the same state samples
the same tokens."""
import copy
import dataclasses
import json
from dataclasses import asdict
from types import SimpleNamespace

import pytest

from launcher.contract.spec import ActorSpec
from launcher.driver.loop.data import PromptStream
from launcher.driver.loop.loop_sync import fill_groups
from launcher.driver.loop.no_signal import NoSignalWatch
from launcher.driver.loop.partial import PartialGroup, StepCarry, continuation_chunks, from_state, to_state
from launcher.driver.records.checkpoint import DRIVER_FILE, DriverState, ResumeError, load_driver_state
from launcher.rl.algorithm import make_algorithm
from launcher.rl.tokenizer import CharTokenizer
from launcher.weight_sync.pump import sync_in_process
from launcher.workers import engine_class, trainer_class
from tests.shared_compose import compose_shipped

OVERRIDES = ["recipe=tiny_grpo", "algorithm.prompts_per_step=3", "algorithm.mini_batch_prompts=3",
             "algorithm.samples_per_prompt=2", "algorithm.max_response_len=10",
             "algorithm.partial_rollout.max_tokens_per_step=4"]


def _config(*extra: str):
    return compose_shipped([*OVERRIDES, *extra]).config


def test_a_continuation_sends_the_tokens_so_far_and_asks_for_what_is_left():
    alg = _config().algorithm
    group = PartialGroup(data_index=7, tokens=[[1, 2, 3, 4, 5, 6, 7, 8], [9], [4, 4, 4, 4]],
                         logprobs=[[-1.0] * 8, [-1.0], [-1.0] * 4], token_versions=[[0] * 8, [0], [0] * 4],
                         eos=[False, True, False])
    fresh = PartialGroup.fresh(8, 2)
    chunks = continuation_chunks([group, fresh], [[30, 31], [40]], alg, rows_per_chunk=2, seed_of=lambda c: 100 + c)
    asked = [([(r.group, r.sample) for r in rows], req.sampling.max_tokens, req.prompts, req.seed)
             for rows, req in chunks]
    # sample 1 ended with an EOS: not sent; sample 0 has 2 tokens left of max_response_len 10
    assert asked == [([(0, 2), (1, 0)], 4, [[30, 31, 4, 4, 4, 4], [40]], 100),
                     ([(1, 1)], 4, [[40]], 101),
                     ([(0, 0)], 2, [[30, 31, 1, 2, 3, 4, 5, 6, 7, 8]], 102)]


def test_carried_groups_survive_the_checkpoints_json(tmp_path):
    group = PartialGroup(3, [[5, 6], [7]], [[-0.5, -0.25], [-2.0]], [[0, 1], [1]], [False, True])
    (tmp_path / DRIVER_FILE).write_text(json.dumps(asdict(DriverState(step=2, carried=to_state([group])))))
    assert from_state(load_driver_state(tmp_path).carried) == [group]
    assert load_driver_state(tmp_path).data_position == 0  # a driver.json from before partial rollouts
    (tmp_path / DRIVER_FILE).write_text(json.dumps({"step": 1, "policy_version": 1, "data_position": 4}))
    assert load_driver_state(tmp_path).carried == []


class _InProcessEngines:
    """rt.engines over one hf engine in this process: a chunk runs when submitted."""

    def __init__(self, engine):
        self.engine, self.done = engine, {}

    def __len__(self) -> int:
        return 1

    def submit(self, request, chunk_index: int):
        ref = object()
        self.done[ref] = self.engine.generate(request)
        return ref

    def wait_done(self, refs: list, timeout_s=None) -> list:
        return list(refs)

    def result(self, ref):
        return self.done.pop(ref)


@pytest.fixture(scope="module")
def engine():
    cfg = _config()
    engine = engine_class("hf")(ActorSpec.planned(cfg, 0))
    sync_in_process(trainer_class("hf")(ActorSpec.planned(cfg, 0, 1)), [engine], 0, with_base=True)
    return engine


def _runtime(engine, state: DriverState):
    cfg, tok = _config(), CharTokenizer(64)
    return SimpleNamespace(config=cfg, state=state, stream=PromptStream(cfg.data, 0, tok, announce=False),
                           tokenizer=tok, engines=_InProcessEngines(engine), scorer=None,
                           algorithm=make_algorithm(cfg.algorithm))


def _step(rt, step: int) -> tuple[list, dict]:
    rt.scorer = rt.stream.task
    carry = StepCarry(rt)
    bar = SimpleNamespace(total=0, update=lambda n: None)
    groups, _, _ = fill_groups(lambda r, n: carry.generate_round(r, n, 4, lambda c: 1000 * step + 10 * r + c, bar),
                               rt.algorithm.keep_group, rt.config.algorithm.prompts_per_step, 1, carry.carried_on)
    return groups, carry.finish(groups)


@pytest.mark.slow
def test_a_carried_group_finishes_in_a_later_step_with_its_first_tokens_kept(engine):
    rt = _runtime(engine, DriverState())
    groups, row = _step(rt, 1)
    assert groups == [] and rt.state.data_position == 3  # 3 groups asked, every sample cut at 4 of 10 tokens
    assert row["partial_carried_out"] == 6 and row["partial_carried_in"] == 0 and row["generated_tokens"] == 24
    first = from_state(rt.state.carried)
    assert [g.data_index for g in first] == [0, 1, 2] and all(len(t) == 4 for g in first for t in g.tokens)

    rt.state.policy_version = 1  # tokens of the next step carry the engine's version: set it as a sync would
    engine.version = 1
    _, second = _step(rt, 2)
    groups, row = _step(rt, 3)  # 4 + 4 + 2 tokens: every sample is done by now
    assert rt.state.data_position == 3 and rt.state.carried == [] and len(groups) == 3
    assert row["partial_carried_in"] == second["partial_carried_out"] and row["partial_carried_out"] == 0
    assert row["staleness_max"] == 1 and row["version_span_max"] == 1
    done = {g.problem.prompt: g for g in groups}
    for carried in first:
        group = done[rt.stream.problem(carried.data_index).prompt]
        assert [t[:4] for t in group.responses] == carried.tokens
        assert [v[:4] for v in group.token_versions] == carried.token_versions == [[0] * 4] * 2
        assert {v for vs in group.token_versions for v in vs[4:]} == {1}
        assert [lp[:4] for lp in group.logprobs] == carried.logprobs
        assert all(len(t) == 10 or t[-1] in rt.tokenizer.eos_ids for t in group.responses)


@pytest.mark.slow
def test_a_step_continued_from_the_same_state_samples_the_same_tokens(engine):
    engine.version = 0
    first, again = _runtime(engine, DriverState()), _runtime(engine, DriverState())
    _step(first, 1)
    _step(again, 1)
    assert first.state.carried == again.state.carried
    resumed = _runtime(engine, load_json_state(first.state))
    before, kept = dataclasses.replace(first.state), copy.deepcopy(first.state.carried)  # as loop_sync._generate
    assert _step(resumed, 2)[1] == _step(first, 2)[1] and resumed.state.carried == first.state.carried
    assert before.carried == kept != first.state.carried  # what a step dropped by preemption restores


def load_json_state(state: DriverState) -> DriverState:
    return DriverState(**json.loads(json.dumps(asdict(state))))


def test_a_step_that_finished_no_group_is_not_an_empty_one(capsys):
    watch = NoSignalWatch(_config("algorithm.name=dapo", "algorithm.dynamic_sampling.enabled=true",
                                  "algorithm.dynamic_sampling.max_empty_steps=1").algorithm)
    watch.sync_step(1, kept=0, rounds=1, seen=[], carried=3)  # every group carried on: nothing to judge
    dropped = SimpleNamespace(correct=[False, False], task_rewards=[0.0, 0.0])
    watch.sync_step(2, kept=1, rounds=2, seen=[dropped] * 2, carried=1)
    assert "kept 1 of 2 finished groups (1 carried to the next step) after 2 round(s)" in capsys.readouterr().out


def test_the_plan_prices_a_round_at_the_budget_not_the_longest_response(point):
    """dapo_sync: 8192-token responses; a budget of 1024 makes a round (and the generate
    deadline and preemption chunk built on it) an eighth as long."""
    full = point("recipe=dapo_sync").plan.timing
    cut = point("recipe=dapo_sync", "algorithm.partial_rollout.max_tokens_per_step=1024")
    assert not cut.errors and cut.plan.timing.decode_step_s == full.decode_step_s
    assert cut.plan.timing.generation_round_s == pytest.approx(full.generation_round_s / 8)


def test_a_resume_with_other_group_sizes_is_refused_naming_the_key():
    state = DriverState(step=2, carried=to_state([PartialGroup.fresh(0, 4)]))
    rt = SimpleNamespace(config=_config(), state=state)
    with pytest.raises(ResumeError, match=r"groups of 4 samples .* algorithm\.samples_per_prompt=2.*"
                                          r"Resume with algorithm\.samples_per_prompt=4"):
        StepCarry(rt)


def test_the_async_loop_refuses_a_checkpoint_carrying_groups_rather_than_dropping_them():
    from launcher.driver.loop.partial import refuse_in_async

    with pytest.raises(ResumeError, match=r"carries 1 unfinished groups .* placement\.mode=async does not continue"):
        refuse_in_async(DriverState(step=2, carried=to_state([PartialGroup.fresh(0, 4)])))
    refuse_in_async(DriverState(step=2))
