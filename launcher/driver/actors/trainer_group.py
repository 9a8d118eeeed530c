"""The trainer group: one Ray actor per trainer rank of the mesh, called together; the weight
export's stream (begin, buckets, release) and the GPU transfer to the engines go through it."""
from launcher.contract.spec import ActorSpec
from launcher.driver.actors.actor_group import ActorGroup, actor_options, remote_with_secrets
from launcher.driver.actors.deadlines import CallDeadlines
from launcher.plan.sync import SyncTransport


class TrainerGroup(ActorGroup):
    role = "trainer"

    def __init__(self, cls, config, plan, placement, board=None):
        """board: the run's StartupBoard, handed to every rank (startup.py); None: no start-up progress."""
        super().__init__(CallDeadlines.of_run(config, plan))
        self.world, self.dp = plan.mesh.world, plan.mesh.dp
        self.model_parallel = plan.mesh.world != plan.mesh.dp or plan.mesh.ep * plan.mesh.etp > 1
        self.transport = plan.sync.transport
        """How weights reach the engines (plan/sync.py sync_transport): weight_sync/push.py picks its plug-in."""
        self._transfer_connected = False
        remote_cls, secrets = remote_with_secrets(cls)
        for rank, gpu_slot in enumerate(plan.placement.trainer_slots):
            slot = placement.slot(gpu_slot)
            spec = ActorSpec(config, plan, rank, self.world, board)
            handle = remote_cls.options(**actor_options(slot, f"trainer-{rank}")).remote(*secrets, spec)
            self._add(handle, f"trainer rank {rank}", slot)

    def start(self) -> None:
        self.wait_ready()
        addr, port = self._get([self.actors[0].master_address.remote()], "master_address")[0]
        self.call("init_distributed", addr, port)

    def _dp_rank(self, rank: int) -> int:
        return rank // (self.world // self.dp)

    def _per_rank(self, method: str, shards: list) -> list:
        refs = [getattr(a, method).remote(shards[self._dp_rank(r)]) for r, a in enumerate(self.actors)]
        return self._get(refs, method)

    def train_step(self, shards: list) -> list[dict]:
        """Stats of one rank per data-parallel shard (the others repeat them)."""
        results = self._per_rank("train_step", shards)
        ranks_per_dp = self.world // self.dp
        return results[::ranks_per_dp]

    def logprobs(self, shards: list, order: list[int]) -> list[list[float]]:
        results = self._per_rank("logprobs", shards)[:: self.world // self.dp]
        out: list[list[float]] = [[] for _ in order]
        for d, values in enumerate(results):
            for row, lp in zip(order[d:: self.dp], values, strict=True):
                out[row] = lp
        return out

    def _exporters(self) -> list:
        """Ranks that run the weight export: rank 0 alone, or with tensor/expert/pipeline
        parallelism every rank (each tensor is gathered across ranks; only rank 0 keeps it)."""
        return self.actors if self.model_parallel else self.actors[:1]

    def begin_export(self, version: int, with_base: bool, max_bucket_bytes: int,
                     transport: SyncTransport = SyncTransport.host):
        """Start the streamed export of policy `version`; returns the ObjectRef of rank 0's
        WeightUpdate header, passed on to the engines unread: a failed begin surfaces through
        the engines' begin_weight_update (which takes it) and through next_bucket. `transport`
        cuda_ipc: rank 0's buckets are handles of its device buffers (the engines' GPU)."""
        refs = [a.begin_export.remote(version, with_base, max_bucket_bytes, transport) for a in self._exporters()]
        return refs[0]

    def release_export(self) -> None:
        """Every engine finished the update: rank 0 frees the device buffers it kept for it."""
        self._get([self.actors[0].release_export.remote()], "release_export")

    def next_bucket(self) -> tuple:
        """(BucketInfo, ObjectRef of rank 0's WeightBucket), or (None, None) after the last.

        The bucket stays in the object store for the engines; the driver reads only the
        info. Every exporting rank takes the step (their gathers are collectives)."""
        pairs = [a.next_bucket.options(num_returns=2).remote() for a in self._exporters()]
        infos = self._get([info for info, _ in pairs], "next_bucket")
        if any(info != infos[0] for info in infos):
            raise RuntimeError(f"trainer ranks disagree on a weight-export bucket ({infos}): their weight "
                               "streams must gather the same tensors in the same order")
        return infos[0], pairs[0][1]

    def fetch(self, ref, what: str):
        """The value of rank 0's `ref` (an export header or bucket, which only `export` reads on
        the driver), waited on as every call of the group is: within `what`'s deadline, a
        dead rank 0 named."""
        return self._get([ref], what)[0]

    def connect_weight_transfer(self, engines) -> None:
        """GPU engines: build the trainer side of their transfer on every rank, once."""
        if self._transfer_connected:
            return
        addr, port = self._get([self.actors[0].master_address.remote()], "master_address")[0]
        self.call("connect_weight_transfer", engines.actors, addr, port, engines.transfer_wait())
        self._transfer_connected = True

    def send_weights(self, version: int, engines) -> None:
        """Rank 0 drives the engines' transfer steps itself, each bounded by the wait handed
        down; this call's own deadline is that much longer (deadlines.HANDED_DOWN_GRACE_S), so
        a lost engine is named by rank 0's wait rather than rank 0 by the driver's."""
        self.call("send_weights", version, engines.transfer_wait())
        engines.transfer_done()
