"""What every inference engine (hf, vLLM) is beside its weight updates: its index, how errors
and the start-up board name it, its pid. The updates themselves are
launcher/weight_sync/receive.py's WeightReceiver, which this base extends."""
import os

from launcher.contract.spec import ActorSpec
from launcher.weight_sync.receive import WeightReceiver
from launcher.workers.gpu_free import check_gpu_free
from launcher.workers.progress import Progress


class EngineBase(WeightReceiver):
    def __init__(self, backend: str, spec: ActorSpec):
        super().__init__(f"{backend} engine {spec.rank}")
        self.index = spec.rank
        self.progress = Progress(spec.board, f"engine {spec.rank}")
        """Start-up phases for the driver's board (progress.py); named as the driver's EngineGroup labels it."""
        check_gpu_free(spec, "engine", self.who)

    def pid(self) -> int:
        return os.getpid()
