"""GPU weight transfer through vLLM's own weight-transfer engines (GPU only; not run on CPU CI).

Colocated runs use CUDA IPC (transport vllm_ipc, vLLM's "ipc"): a trainer rank and an
engine share each GPU, so the engine maps the trainer's tensors by handle and copies GPU to
GPU, never through the host. Async runs use NCCL (vllm_nccl, vLLM's "nccl"): trainer rank 0
broadcasts packed, double-buffered chunks to every engine worker, so neither side holds a
second full copy. Both stream the trainer's HF-named tensors (a vLLM `WeightSource`) and
load them through vLLM's layerwise reload, as the bucketed path in
launcher/workers/vllm/worker.py does.

Engine side: engines start with weight_transfer_config={"backend": VllmTransfer.backend}
(launcher/workers/vllm/args.py) and the engine actor exposes transfer_* methods. Trainer
side: `VllmTransfer.trainer_sender(...)` builds vLLM's trainer engine once; call `.send_weights()` after
every step on every trainer rank (rank 0 drives the engines, the others join the gathers).
The trainer backends do that through export.py (connect_weight_transfer / send_weights),
which VllmTransfer.sync calls whenever plan.sync.transport names one of these.
"""
import time
from abc import abstractmethod

from launcher.config.schema.root import LauncherConfig
from launcher.contract.errors import PeerLostError
from launcher.plan.sync import SyncTransport, transfer_buffer_bytes
from launcher.weight_sync.messages import EngineWait, SyncStats
from launcher.weight_sync.transports.base import TRANSPORTS, Transport


class VllmTransfer(Transport):
    """The trainer pushes merged weights itself; the driver only starts it (once) and waits."""

    backend: str
    """vLLM's name of its transfer engine (weight_transfer_config's "backend")."""

    def sync(self, trainers, engines, version: int, with_base: bool, wait: bool,
             max_bucket_bytes: int) -> SyncStats:
        trainers.connect_weight_transfer(engines)
        trainers.send_weights(version, engines)
        return SyncStats(path=self.backend)

    def trainer_sender(self, cfg: LauncherConfig, engines: list, source, *, rank: int, wait: EngineWait,
                       master_address: str | None = None, master_port: int | None = None):
        """vLLM's trainer-side engine of this transport, rendezvoused with `engines`.

        `source` is a vLLM WeightSource yielding HF-named full tensors (ModuleSource for an
        HF model; the trainer's stream, stream_source). NCCL needs a free port on the node
        of trainer rank 0; its group is that rank plus every engine worker. `wait` bounds each
        wait on the engines (EngineGroupClient). vLLM 0.26 has no trainer engines: its IPC
        sender is StaticIpcSender.
        """
        from launcher.vllm_release import installed_release

        client = EngineGroupClient(engines, wait)
        if not installed_release().trainer_engines:
            return self.static_sender(cfg, client, source, rank=rank)
        from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory

        info = self.trainer_init_info(cfg, rank=rank, master_address=master_address, master_port=master_port)
        return WeightTransferTrainerFactory.trainer_init(info, client=client, source=source)

    def static_sender(self, cfg: LauncherConfig, client: "EngineGroupClient", source, *, rank: int):
        """The sender for a release without trainer engines (vllm_release.VllmRelease.trainer_engines):
        only CUDA IPC has one (VllmIpc); INF012 refuses the others before Ray, so this is reached
        only by a run that skipped validation."""
        raise RuntimeError(f"the installed vLLM has no trainer-side {self.backend} transfer (INF012): set "
                           "placement.mode=colocated, or install vllm 0.32.x")

    @abstractmethod
    def trainer_init_info(self, cfg: LauncherConfig, *, rank: int, master_address: str | None = None,
                          master_port: int | None = None):
        """vLLM's trainer init info, its packed buffer sized by the plan (plan/sync.py): vLLM's
        1 GiB default is smaller than GLM's embedding and lm_head, and the producer refuses those.
        The trainer ships the buffer size to the workers at init, so both sides agree."""


@TRANSPORTS.register(SyncTransport.vllm_ipc)
class VllmIpc(VllmTransfer):
    kind, backend = SyncTransport.vllm_ipc, "ipc"

    def trainer_init_info(self, cfg: LauncherConfig, *, rank: int, master_address: str | None = None,
                          master_port: int | None = None):
        from vllm.distributed.weight_transfer.ipc_engine import IPCTrainerInitInfo

        return IPCTrainerInitInfo(rank=rank, packed=True, packed_buffer_size_bytes=transfer_buffer_bytes(cfg))


    def static_sender(self, cfg: LauncherConfig, client: "EngineGroupClient", source, *, rank: int):
        return StaticIpcSender(client, source, rank=rank, buffer_bytes=transfer_buffer_bytes(cfg))


@TRANSPORTS.register(SyncTransport.vllm_nccl)
class VllmNccl(VllmTransfer):
    kind, backend = SyncTransport.vllm_nccl, "nccl"

    def trainer_init_info(self, cfg: LauncherConfig, *, rank: int, master_address: str | None = None,
                          master_port: int | None = None):
        from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo

        if master_address is None or master_port is None:
            raise ValueError("NCCL weight transfer needs master_address and master_port of trainer rank 0")
        world_size = 1 + cfg.inference.engines * cfg.inference.tp
        return NCCLTrainerInitInfo(master_address=master_address, master_port=master_port, world_size=world_size,
                                   rank=rank, packed_buffer_size_bytes=transfer_buffer_bytes(cfg))


class StaticIpcSender:
    """The trainer side of vLLM 0.26's CUDA IPC transfer, with the send_weights() of 0.32's
    trainer engines: 0.26 offers only IPCWeightTransferEngine.trainer_send_weights (static),
    which packs the source into buffers of `buffer_bytes`, gathers every rank's handles and
    hands each chunk's update info to a callable; the caller opens and closes the round.
    Every rank iterates the source (the gathers run in lockstep); rank 0 alone talks to the
    engines, as 0.32's senders do."""

    def __init__(self, client: "EngineGroupClient", source, *, rank: int, buffer_bytes: int):
        self.client, self.source, self.is_sender, self.buffer_bytes = client, source, rank == 0, buffer_bytes
        if self.is_sender:
            self.client.init_weight_transfer_engine({})  # IPC's init info is empty; its workers' engine exists

    def send_weights(self) -> None:
        from vllm.distributed.weight_transfer.ipc_engine import IPCTrainerSendWeightsArgs, IPCWeightTransferEngine

        if self.is_sender:
            self.client.start_weight_update()
        args = IPCTrainerSendWeightsArgs(send_mode=self._update, packed=True,
                                         packed_buffer_size_bytes=self.buffer_bytes)
        IPCWeightTransferEngine.trainer_send_weights(iter(self.source), args)
        if self.is_sender:
            self.client.finish_weight_update()

    def _update(self, update_info) -> None:
        import dataclasses

        self.client.update_weights(dataclasses.asdict(update_info))


class EngineGroupClient:
    """vLLM's VLLMWeightSyncClient protocol over this backend's engine actors.

    vLLM's RayVLLMWeightSyncClient calls `update_weights` on the actors, a name the
    weight-update steps already give another meaning (receive.py), so the actors expose the
    transfer steps as transfer_* and this client maps onto them.
    """

    def __init__(self, engines: list, wait: EngineWait):
        self.engines = engines
        self.wait = wait
        """Bounds every wait on the engines and names them; the driver hands a fresh one with each send."""
        self.version: int | None = None
        """Policy version the next finish_weight_update announces (vLLM's senders pass none)."""
        self._metadata_by_src: dict[int, dict] = {}
        """The last names, dtype_names and shapes each broadcasting rank sent (_with_metadata)."""

    def _all(self, method: str, *args) -> None:
        """`method` on every engine, done within self.wait: PeerLostError naming an engine that
        died or did not answer (a stopped engine would hold a bare ray.get, and with it the
        trainer rank and its peers' gathers, forever)."""
        import ray

        refs = [getattr(engine, method).remote(*args) for engine in self.engines]
        who = dict(zip(refs, self.wait.whos, strict=True))
        stop, pending = time.monotonic() + self.wait.seconds, refs
        while pending:
            ready, pending = ray.wait(pending, num_returns=1, timeout=max(stop - time.monotonic(), 0.0))
            if not ready:
                raise PeerLostError(f"{', '.join(who[r] for r in pending)} did not answer {method} within "
                                    f"{self.wait.seconds:.0f} s (deadline: {self.wait.basis})")
            try:
                ray.get(ready[0])
            except ray.exceptions.RayActorError as err:
                cause = (str(err).strip().splitlines() or [type(err).__name__])[0]
                raise PeerLostError(f"{who[ready[0]]} died during {method}: {cause}") from err

    def init_weight_transfer_engine(self, init_info: dict) -> None:
        self._all("transfer_init", init_info)

    def shutdown_weight_transfer_engine(self) -> None:
        self._all("transfer_shutdown")

    def start_weight_update(self) -> None:
        self._all("transfer_start")

    def update_weights(self, update_info: dict) -> None:
        self._all("transfer_update", self._with_metadata(update_info))

    def _with_metadata(self, update_info: dict) -> dict:
        """`update_info` with the round's parameter lists filled in. vLLM's NCCL sender (0.33+,
        nccl_engine.py NCCLWeightTransferUpdateInfo) sends empty names, dtype_names and shapes
        when a round's metadata equals the last one's, and its workers reuse theirs; the
        engine's sync manifest (VllmEngine.transfer_update) counts the names of every round, so
        the last full lists of that sender (`src`, 0 when absent) are put back. IPC rounds and
        0.32 always list them."""
        src = update_info.get("src", 0)
        if update_info.get("names"):
            self._metadata_by_src[src] = {key: update_info[key] for key in ("names", "dtype_names", "shapes")}
            return update_info
        if "names" in update_info and src in self._metadata_by_src:
            return {**update_info, **self._metadata_by_src[src]}
        return update_info

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        version = weight_version if weight_version is not None else self.version
        self._all("transfer_finish", None if version is None else str(version))


def stream_source(named):
    """A vLLM WeightSource over a trainer's HF-named stream: `named()` starts a fresh pass.

    Iteration is the stream itself (one tensor materialised at a time). The metadata takes one
    pass and is kept: names, dtypes and shapes. vLLM's senders read it on every trainer rank
    (NCCL, and IPC from 0.33), so on a model-parallel trainer that pass gathers in lockstep too.
    The release decides the form (vllm_release.VllmRelease.source_iter_full): 0.33+ wants a
    cached_property `metadata` and `iter_full()`, 0.32 a `metadata()` method and `__iter__`.
    Only the chosen class is defined: 0.33's WeightSource refuses the other at class creation.
    """
    from functools import cached_property

    from vllm.distributed.weight_transfer.base import ParamMeta, WeightSource

    from launcher.vllm_release import installed_release

    def read_metadata() -> list:
        return [ParamMeta(name, t.dtype, tuple(t.shape)) for name, t in named()]

    if installed_release().source_iter_full:
        class FullStreamSource(WeightSource):
            @cached_property
            def metadata(self) -> list:
                return read_metadata()

            def iter_full(self):
                return iter(named())

        return FullStreamSource()

    class StreamSource(WeightSource):
        def __init__(self):
            self._meta = None

        def metadata(self) -> list:
            if self._meta is None:
                self._meta = read_metadata()
            return self._meta

        def __iter__(self):
            return iter(named())

    return StreamSource()


def engine_rank_offset(init_info: dict, engine_index: int, tp: int) -> dict:
    """vLLM ranks an engine's workers from `rank_offset` (1: after the trainer sender);
    separate engine actors are not vLLM data-parallel ranks, so each shifts its own."""
    if "rank_offset" not in init_info:
        return init_info
    return dict(init_info, rank_offset=init_info["rank_offset"] + engine_index * tp)
