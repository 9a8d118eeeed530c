"""An hf engine in a second process on the same GPU, driven by the product's weight-sync driver
(launcher/weight_sync/pump.stream_weights) without Ray: what a colocated run does with its
trainer rank 0 and engine 0, so CUDA IPC buckets cross a real process boundary.

The device machine has no Ray, so the engine runs under torch.multiprocessing (spawn) and
takes EngineGroup's calls over two queues, in order; `wait` returns once the engine has
answered, as EngineGroup.wait does. Host buckets cross as torch shares CPU tensors between
processes (shared memory, as Ray's object store); CUDA IPC buckets carry handles only.
Used by tests/gpu/test_ipc_sync_gpu.py and benchmarks/colocated_ipc_sync.py.
"""
import queue
import time

import torch
import torch.multiprocessing as mp

from launcher.contract.spec import ActorSpec

STARTED = -1
"""The call id of the engine's start-up answer."""
ANSWER_TIMEOUT_S = 900.0
"""A 4-layer GLM engine takes minutes to build (random init of 44 GiB) and its first forward autotunes."""


def _checkpoint_state(engine) -> dict:
    from launcher.workers.hf.model import checkpoint_state

    return {name: t.to("cpu") for name, t in checkpoint_state(engine._base_model()).items()}


def _kl(engine, ids_T: torch.Tensor, trainer_TV: torch.Tensor) -> dict:
    """KL(trainer || engine) per token on one sequence, against the trainer's logits."""
    from device.harness.parity import kl_and_dlogp

    with torch.no_grad():
        engine_TV = engine.model(input_ids=ids_T[None].to(engine.device), use_cache=False).logits[0].float()
    return kl_and_dlogp(trainer_TV.to(engine.device).float(), engine_TV, ids_T.roll(-1).to(engine.device))


EXTRA = {"checkpoint_state": _checkpoint_state, "kl": _kl,
         "memory_allocated": lambda engine: torch.cuda.memory_allocated() if engine.device.type == "cuda" else 0}
"""Calls the tests and the benchmark make besides the InferenceBackend methods."""


def _serve(overrides: list[str], requests, replies) -> None:
    """The engine process: build the engine, then answer (call id, method, args) until None."""
    from launcher.config.compose import compose
    from launcher.workers.hf.engine import HfEngine

    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):  # built in place: a 44 GiB CPU init takes minutes
        engine = HfEngine(ActorSpec.planned(compose(overrides).config, 0))
    replies.put((STARTED, True, None))
    while (request := requests.get()) is not None:
        call_id, method, args = request
        try:
            result = EXTRA[method](engine, *args) if method in EXTRA else getattr(engine, method)(*args)
            replies.put((call_id, True, result))
        except Exception as err:  # noqa: BLE001 - the driver re-raises it, named
            replies.put((call_id, False, f"{type(err).__name__}: {err}"))
        del request, args  # a bucket's tensors (or mapping) go now, not at the next call


class EngineProcess:
    """EngineGroup's update calls (begin / load bucket / finish / wait) on an engine process.

    The engine builds while the caller goes on (a trainer can build beside it); the first
    answer waited for comes after the start-up, or call wait_started."""

    def __init__(self, overrides: list[str]):
        ctx = mp.get_context("spawn")
        self.requests, self.replies = ctx.Queue(), ctx.Queue()
        self.process = ctx.Process(target=_serve, args=(overrides, self.requests, self.replies), daemon=True)
        self.process.start()
        self._next, self._answers = 0, {}

    def wait_started(self) -> None:
        self.wait([STARTED], "start-up")

    def _submit(self, method: str, *args) -> list[int]:
        call_id, self._next = self._next, self._next + 1
        self.requests.put((call_id, method, args))
        return [call_id]

    def begin_weight_update(self, update) -> list[int]:
        return self._submit("begin_weight_update", update)

    def load_weight_bucket(self, bucket) -> list[int]:
        return self._submit("load_weight_bucket", bucket)

    def finish_weight_update(self, version: int) -> list[int]:
        return self._submit("finish_weight_update", version)

    def wait(self, refs: list[int], what: str) -> list:
        out = []
        for call_id in refs:
            deadline = time.monotonic() + ANSWER_TIMEOUT_S
            while call_id not in self._answers:
                try:
                    answer_id, ok, value = self.replies.get(timeout=max(deadline - time.monotonic(), 0.1))
                except queue.Empty:
                    raise TimeoutError(f"engine process (pid {self.process.pid}, alive "
                                       f"{self.process.is_alive()}) did not answer {what}") from None
                self._answers[answer_id] = (ok, value)
            ok, value = self._answers[call_id]  # kept: as with a Ray ref, a call may be waited on again
            if not ok:
                raise RuntimeError(f"engine process failed during {what}: {value}")
            out.append(value)
        return out

    def call(self, method: str, *args):
        return self.wait(self._submit(method, *args), method)[0]

    def close(self) -> None:
        self.requests.put(None)
        self.process.join(timeout=60)


class LocalTrainers:
    """TrainerGroup's export calls on a trainer rank in this process, with a fixed transport.

    `held_at_release` records this process's device bytes right before release_export: what
    rank 0 still kept for the engine once its finish was confirmed."""

    def __init__(self, trainer, transport: str):
        self.trainer, self.transport = trainer, transport
        self.held_at_release: int | None = None

    def begin_export(self, version, with_base, max_bucket_bytes, transport):
        return self.trainer.begin_export(version, with_base, max_bucket_bytes, transport)

    def next_bucket(self):
        return self.trainer.next_bucket()

    def release_export(self) -> None:
        if torch.cuda.is_available():
            self.held_at_release = torch.cuda.memory_allocated()
        self.trainer.release_export()
