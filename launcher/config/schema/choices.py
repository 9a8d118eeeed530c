"""Fixed choices of the config, as Enums.

OmegaConf 2.3 validates Enum fields (a YAML string must name a member) but not
`typing.Literal`, so every closed set of values is an Enum here. Member names are the
exact strings users write in YAML.
"""
from enum import Enum


class DType(str, Enum):
    bfloat16 = "bfloat16"
    float16 = "float16"
    float32 = "float32"


class GpuArch(str, Enum):
    """GPU generation; rules key on it (Blackwell needs FLA_TILELANG=0, Hopper needs
    CUDA_DEVICE_MAX_CONNECTIONS=1 with TP/CP > 1)."""

    cpu = "cpu"
    ampere = "ampere"
    ada = "ada"
    hopper = "hopper"
    blackwell = "blackwell"


# Functional form because `async` is a Python keyword and OmegaConf matches YAML
# strings against member names.
PlacementMode = Enum("PlacementMode", [("colocated", "colocated"), ("async", "async")], type=str)


class TrainerBackendName(str, Enum):
    megatron = "megatron"
    hf = "hf"


class InferenceBackendName(str, Enum):
    vllm = "vllm"
    hf = "hf"


class RecomputeGranularity(str, Enum):
    none = "none"
    selective = "selective"
    full = "full"


class RecomputeMethod(str, Enum):
    uniform = "uniform"
    block = "block"


class KvCacheDtype(str, Enum):
    auto = "auto"
    bfloat16 = "bfloat16"
    fp8 = "fp8"


class WeightsDtype(str, Enum):
    """What an engine holds its weights in (inference.weights_dtype): `bf16` as trained, or `fp8`:
    E4M3 with one FP32 scale per 128x128 block where vLLM's FP8 kernels apply (docs/fp8_rollouts.md)."""

    bf16 = "bf16"
    fp8 = "fp8"


class RouterPolicy(str, Enum):
    round_robin = "round_robin"
    least_loaded = "least_loaded"


class UpdateMode(str, Enum):
    """When an async run's weight update reaches a generating engine (inference.update_mode)."""

    between_chunks = "between_chunks"
    in_flight = "in_flight"


class AlgorithmName(str, Enum):
    grpo = "grpo"
    dapo = "dapo"


class LossAgg(str, Enum):
    """How per-token losses become one number: `token_mean` averages over every token
    of the mini-batch (DAPO), `seq_mean_token_mean` averages per sequence first (GRPO)."""

    token_mean = "token_mean"
    seq_mean_token_mean = "seq_mean_token_mean"
    seq_mean_token_sum = "seq_mean_token_sum"


class LogBackend(str, Enum):
    console = "console"
    jsonl = "jsonl"
    wandb = "wandb"


class WandbMode(str, Enum):
    online = "online"
    offline = "offline"
    disabled = "disabled"


class ChatTemplate(str, Enum):
    """`auto`: prompts read from a file go through the tokenizer's own chat template when it
    has one (a checkpoint's); raw text otherwise. `none`: raw text always."""

    auto = "auto"
    none = "none"


class BadRows(str, Enum):
    """What a malformed data row does: `error` refuses the file listing every bad row,
    `skip` drops them and reports each with its file and row."""

    error = "error"
    skip = "skip"


class OffPolicyMode(str, Enum):
    """What an importance weight w = pi_old / pi_rollout does (algorithm.off_policy):
    `off`: w = 1; `truncate`: w clamped to [lower, upper] (TIS); `mask`: w inside
    [lower, upper], 0 outside (IcePop); `reject`: 1 inside, 0 outside (a pure rejection,
    e.g. the geometric sequence mask)."""

    off = "off"
    truncate = "truncate"
    mask = "mask"
    reject = "reject"


class StopSignal(str, Enum):
    """A signal that asks a run to stop and save (run.preemption_signals): SIGTERM is what Slurm
    and Kubernetes send, SIGUSR1/SIGUSR2 what a batch script asks ahead of a time limit
    (`sbatch --signal`). Its exit code is 128 + its number (launcher/exit_codes.py)."""

    SIGTERM = "SIGTERM"
    SIGUSR1 = "SIGUSR1"
    SIGUSR2 = "SIGUSR2"
