"""In-flight weight updates on the hf path (inference.update_mode: in_flight): the update gate
lets a weight update in at a token boundary of a generation running on another thread, and
the sampler records, per token, the version whose weights produced it, with the log-prob
those weights gave it over the kept KV cache (tests/behaviour_logprobs.py recomputes both)."""
import copy
import threading

import pytest

from launcher.contract.messages import SamplingParams
from launcher.weight_sync.update_gate import UpdateGate
from launcher.workers.hf.sampling import sample
from tests.behaviour_logprobs import full_sequence_logprobs, replayed_logprobs

PROMPTS = [[9, 10]] * 2 + [[5, 6, 7, 8]] * 3
"""Two prompt lengths: sample() decodes them as two batches, shortest first; the swap lands in the first."""
SWAP_AT_STEP = 3


@pytest.fixture(scope="module")
def models():
    """Two versions of the tiny model: different seeds stand for two trained versions."""
    from launcher.workers.hf.model import build_model
    from tests.shared_compose import compose_shipped

    cfg = compose_shipped(["model=tiny"]).config.model
    return {0: build_model(cfg, pad_id=0, seed=0).eval(), 1: build_model(cfg, pad_id=0, seed=1).eval()}


def test_a_swap_between_decode_steps_is_recorded_per_token_with_that_versions_logprobs(models):
    served = copy.deepcopy(models[0])
    steps = {"n": 0, "version": 0}

    def boundary() -> int:  # the engine's boundary, the update applied in-line at decode step SWAP_AT_STEP
        if steps["n"] == SWAP_AT_STEP:
            served.load_state_dict(models[1].state_dict())
            steps["version"] = 1
        steps["n"] += 1
        return steps["version"]

    results = sample(served, PROMPTS, SamplingParams(max_tokens=8, temperature=0.9), (), 0, seed=3, boundary=boundary)
    first, second = results[0], results[-1]
    assert first.versions == [0] * SWAP_AT_STEP + [1] * (8 - SWAP_AT_STEP)
    assert second.versions == [1] * 8  # the next prompt length's batch starts on the new weights
    for prompt, res in zip(PROMPTS, results, strict=True):
        replayed = replayed_logprobs(models, prompt, res.tokens, res.versions, temperature=0.9)
        assert res.logprobs == pytest.approx(replayed, abs=1e-4)
    # Before the swap one version did everything, so the trainer's full forward agrees;
    # after it, neither version alone gives the recorded log-probs (the cache is the old one's).
    old = full_sequence_logprobs(models[0], PROMPTS[0], first.tokens, temperature=0.9)
    assert first.logprobs[:SWAP_AT_STEP] == pytest.approx(old[:SWAP_AT_STEP], abs=1e-4)
    assert max(abs(a - b) for a, b in zip(first.logprobs[SWAP_AT_STEP:], old[SWAP_AT_STEP:], strict=True)) > 1e-3


def test_a_holder_waits_for_the_next_token_boundary_and_generation_for_its_release():
    gate, events = UpdateGate(), []
    decoding, may_finish = threading.Event(), threading.Event()

    def generation() -> None:
        with gate.in_flight():
            events.append("step 0")
            decoding.set()
            may_finish.wait(5)
            gate.boundary()
            events.append("step 1")

    thread = threading.Thread(target=generation)
    thread.start()
    decoding.wait(5)
    holder = threading.Thread(target=lambda: (gate.hold(), events.append("update"), gate.release()))
    holder.start()
    holder.join(0.2)
    assert holder.is_alive() and events == ["step 0"]  # mid decode step: the update waits
    may_finish.set()
    holder.join(5)
    thread.join(5)
    assert events == ["step 0", "update", "step 1"]


def test_generation_does_not_start_while_an_update_holds_the_model():
    gate, events = UpdateGate(), []
    gate.hold()

    def generation() -> None:
        with gate.in_flight():
            events.append("generating")

    thread = threading.Thread(target=generation)
    thread.start()
    thread.join(0.2)
    assert thread.is_alive() and not events
    gate.release()
    thread.join(5)
    assert events == ["generating"]


def test_a_failed_update_stops_the_generation_it_paused_with_its_reason():
    gate, errors = UpdateGate(), []
    gate.hold()

    def generation() -> None:
        try:
            with gate.in_flight():
                pass
        except RuntimeError as err:
            errors.append(str(err))

    thread = threading.Thread(target=generation)
    thread.start()
    gate.fail("weight update 3 failed (ValueError: bad bucket)")
    thread.join(5)
    assert not thread.is_alive() and errors == ["weight update 3 failed (ValueError: bad bucket)"]
