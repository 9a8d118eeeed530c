"""What each trainer and engine backend can run, checked before any actor is built (the
backends' own refusals of these configs came after Ray had started, with a traceback)."""
from launcher.config.schema.choices import InferenceBackendName, TrainerBackendName
from launcher.validate.registry import error, rule


@rule("BACKEND001")
def hf_engine_one_device(cfg, plan):
    """The hf engine runs on one device (inference.tp=1)."""
    tp = cfg.inference.tp
    if cfg.inference.backend is InferenceBackendName.hf and tp != 1:
        yield error("inference.tp", f"inference.tp={tp} with inference.backend=hf",
                    "The hf engine is one transformers model on one device; it has no tensor parallelism.",
                    f"Set inference.tp=1 and inference.engines={cfg.inference.engines * tp}, one engine per GPU "
                    "(or inference.backend=vllm, which shards an engine over GPUs).")


@rule("BACKEND002")
def hf_trainer_data_parallel(cfg, plan):
    """The hf trainer is data parallel only (trainer.mesh.tp=1)."""
    tp = cfg.trainer.mesh.tp
    if cfg.trainer.backend is TrainerBackendName.hf and tp != 1:
        yield error("trainer.mesh.tp", f"trainer.mesh.tp={tp} with trainer.backend=hf",
                    "The hf trainer holds the whole model on every rank and sums gradients over all of them, "
                    f"while a tp={tp} mesh gives the {tp} ranks of a group the same sequences: every gradient would "
                    f"count {tp} times.",
                    "Set trainer.mesh.tp=1 (the ranks become data parallel), or trainer.backend=megatron.")


@rule("BACKEND003")
def megatron_untied_embeddings(cfg, plan):
    """The Megatron GLM-5.3-Flash keeps the output layer apart from the embedding."""
    if cfg.trainer.backend is TrainerBackendName.megatron and cfg.model.arch.tie_word_embeddings:
        yield error("model.arch.tie_word_embeddings", "model.arch.tie_word_embeddings=true with trainer.backend=megatron",
                    "GLM-5.3-Flash unties its embedding and output layer; model/megatron implements only that "
                    "and would train a separate output layer.",
                    "Set model.arch.tie_word_embeddings=false, or trainer.backend=hf.")
