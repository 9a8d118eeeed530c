"""DAPO dynamic sampling with a real hf engine (no Ray): groups without reward variance are
dropped and regenerated from new prompts, at most max_regenerations extra rounds."""
import pytest
import torch

from launcher.contract.spec import ActorSpec
from launcher.driver.loop.data import PromptStream
from launcher.driver.loop.loop_sync import fill_groups
from launcher.driver.loop.rollout import make_chunks, sampling_params, score_group, split_generation
from launcher.rl.algorithm import make_algorithm
from launcher.rl.dapo import has_signal
from launcher.rl.tokenizer import CharTokenizer
from launcher.weight_sync.pump import sync_in_process
from launcher.workers import engine_class, trainer_class
from tests.shared_compose import compose_shipped

SAMPLES = 4


def has_signal_of(group) -> bool:
    return has_signal(torch.tensor(group.task_rewards))


def _setup(max_regenerations: int, *overrides: str):
    cfg = compose_shipped(["recipe=tiny_dapo_async", f"algorithm.samples_per_prompt={SAMPLES}",
                           f"algorithm.dynamic_sampling.max_regenerations={max_regenerations}", *overrides]).config
    tok = CharTokenizer(64)
    engine = engine_class("hf")(ActorSpec.planned(cfg, 0))
    # The engine starts empty: the run's first sync fills it, as here.
    sync_in_process(trainer_class("hf")(ActorSpec.planned(cfg, 0, 1)), [engine], 0, with_base=True)
    return cfg, tok, PromptStream(cfg.data, 0, tok), engine, make_algorithm(cfg.algorithm)


def _rounds(cfg, tok, stream, engine, algorithm, log: list):
    position = [0]

    def generate_round(round_index: int, n_prompts: int) -> list:
        problems = stream.take(position[0], n_prompts)
        position[0] += n_prompts
        log.append(n_prompts)
        prompt_ids = [tok.encode(p.prompt) for p in problems]
        out = []
        for members, request in make_chunks(prompt_ids, SAMPLES, n_prompts, sampling_params(cfg.algorithm),
                                            lambda c: 1000 * round_index + c):
            gen = engine.generate(request)
            for g, rows in split_generation(members, gen, SAMPLES):
                out.append((round_index, g, score_group(problems[g], prompt_ids[g], gen, rows, stream.task, tok,
                                                        algorithm)))
        return out

    return generate_round


@pytest.mark.slow
@pytest.mark.parametrize("max_regenerations", [0, 3])
def test_dropped_groups_are_regenerated_up_to_the_limit(max_regenerations):
    cfg, tok, stream, engine, algorithm = _setup(max_regenerations)
    asked: list[int] = []
    wanted = 8
    kept, seen, rounds = fill_groups(_rounds(cfg, tok, stream, engine, algorithm, asked), algorithm.keep_group,
                                     wanted, max_regenerations)
    # A random-init policy scores most samples 0: many groups have nothing to teach.
    assert any(not has_signal_of(g) for g in seen)
    assert all(has_signal_of(g) for g in kept)
    assert 1 <= rounds <= max_regenerations + 1
    assert asked[0] == wanted and len(asked) == rounds
    for i in range(1, rounds):  # each extra round asks exactly for the shortfall
        kept_before = sum(has_signal_of(g) for g in seen[: sum(asked[:i])])
        assert asked[i] == wanted - kept_before
    assert len(kept) == min(wanted, sum(has_signal_of(g) for g in seen))
    if max_regenerations == 0:
        assert rounds == 1 and len(seen) == wanted
    else:
        assert rounds > 1  # seed 0: the first round leaves a shortfall


def test_the_overlong_penalty_alone_keeps_no_group():
    """Groups are kept on their task rewards: samples that all scored 0 but ran to different
    lengths differ only by the overlong penalty, and keeping them would teach "stop at once"."""
    cfg, tok, stream, engine, algorithm = _setup(0, "algorithm.max_response_len=4", "algorithm.overlong.buffer_len=3")
    kept, seen, _ = fill_groups(_rounds(cfg, tok, stream, engine, algorithm, []), algorithm.keep_group, 16, 0)
    penalty_only = [g for g in seen if not has_signal_of(g) and has_signal(torch.tensor(g.rewards))]
    assert penalty_only, "seed 0: some all-zero groups differ in length"
    assert not any(g in kept for g in penalty_only) and all(has_signal_of(g) for g in kept)
