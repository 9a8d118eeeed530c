"""The vllm actor's GPU weight transfers (CUDA IPC, NCCL: transfer_start ... transfer_finish,
driven by the trainer) hold the update gate like a streamed update: an in-flight chunk
(inference.update_mode: in_flight) pauses at its next engine step for the transfer, and a
failed transfer stops the chunk it paused with its reason. The engine is a stand-in that steps
twice: no GPU transfer runs on CPU, but the gate logic is the actor's own."""
import threading

import pytest

from launcher.contract.messages import GenerationRequest, SamplingParams
from launcher.weight_sync.receive import WeightReceiver
from launcher.workers.vllm.actor import VllmInference


class _SteppingEngine:
    """Two engine steps with the actor's boundary between them; transfers are logged."""

    def __init__(self, events: list):
        self.events, self.mid_step, self.may_step = events, threading.Event(), threading.Event()
        self.fail_update = False

    def generate(self, request, boundary=None):
        self.events.append("step 0")
        self.mid_step.set()
        self.may_step.wait(5)
        boundary()
        self.events.append("step 1")
        return "generation"

    def transfer_start(self):
        self.events.append("transfer start")

    def transfer_update(self, update_info):
        if self.fail_update:
            raise ValueError("NCCL receive timed out")
        self.events.append("transfer update")

    def transfer_finish(self, weight_version):
        self.events.append("transfer finish")


def _actor(events: list) -> VllmInference:
    actor = object.__new__(VllmInference)
    WeightReceiver.__init__(actor, "vllm engine 0")
    actor.engine, actor._transferring = _SteppingEngine(events), False
    return actor


def _in_flight_chunk(actor: VllmInference, outcome: list) -> threading.Thread:
    request = GenerationRequest(prompts=[[1, 2]], seed=0, sampling=SamplingParams(max_tokens=2), in_flight=True)

    def run() -> None:
        try:
            outcome.append(actor.generate(request))
        except RuntimeError as err:
            outcome.append(str(err))

    thread = threading.Thread(target=run)
    thread.start()
    actor.engine.mid_step.wait(5)
    return thread


def test_a_transfer_waits_for_the_next_engine_step_and_the_chunk_goes_on_after_it():
    events, outcome = [], []
    actor = _actor(events)
    chunk = _in_flight_chunk(actor, outcome)
    trainer = threading.Thread(target=lambda: (actor.transfer_start(), actor.transfer_update({}),
                                               actor.transfer_finish("1")))
    trainer.start()
    trainer.join(0.2)
    assert trainer.is_alive() and events == ["step 0"]  # mid step: the transfer waits
    actor.engine.may_step.set()
    trainer.join(5)
    chunk.join(5)
    assert events == ["step 0", "transfer start", "transfer update", "transfer finish", "step 1"]
    assert outcome == ["generation"]


def test_a_failed_transfer_stops_the_chunk_it_paused_and_the_next_transfer_does_not_deadlock():
    events, outcome = [], []
    actor = _actor(events)
    chunk = _in_flight_chunk(actor, outcome)
    actor.engine.may_step.set()
    actor.transfer_start()
    actor.engine.fail_update = True
    with pytest.raises(ValueError, match="NCCL receive timed out"):
        actor.transfer_update({})
    chunk.join(5)
    assert not chunk.is_alive() and "GPU weight transfer failed (ValueError: NCCL receive timed out)" in outcome[0]
    actor.engine.fail_update = False
    done = threading.Thread(target=lambda: (actor.transfer_start(), actor.transfer_update({}),
                                            actor.transfer_finish("2")))
    done.start()
    done.join(5)
    assert not done.is_alive() and events[-3:] == ["transfer start", "transfer update", "transfer finish"]
