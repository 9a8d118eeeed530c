"""Every validator rule, table-driven: a base point that passes it and overrides that make it fire.

Each row: the rule id, a base point (a shipped recipe, sometimes with a few overrides) that does
NOT produce the id, the overrides that break it, and what the finding must say: id, severity,
full key, and substrings of the message that carry the actual values (literal, or computed from
the plan so planner constants can move without breaking the test). A rule added to
`launcher.validate.RULES` without a row here fails `test_every_rule_has_a_failing_and_a_passing_case`.

Rows marked `bug=` are launcher defects found while writing these tests: strict xfail, so the
suite goes red (XPASS) the moment one is fixed and the marker must be removed. Rows for an id that
is not registered are skipped with that reason (so a renamed rule shows up in `-ra`).
"""
import atexit
import json
import math
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from launcher.errors import ConfigError
from launcher.validate import RULES


def _tiny_checkpoint_json() -> str:
    """A folder as MODEL003/MODEL006 read it: the tiny descriptor's config.json, an index and its
    (empty) shard; JSON only, so this table needs neither torch nor transformers."""
    folder = Path(tempfile.mkdtemp(prefix="test_rules_ckpt_"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    arch = yaml.safe_load((Path(__file__).parents[3] / "model/descriptors/tiny.yaml").read_text())["arch"]
    text = {k: v for k, v in arch.items() if k != "model_type"}
    (folder / "config.json").write_text(json.dumps({"model_type": "glm5_next", "text_config": text}))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": "model-1.safetensors"}}))
    (folder / "model-1.safetensors").write_bytes(safetensors_bytes({"w": [1]}))
    # A tokenizer without a chat template (a base model's): DATA005 warns when file prompts would use it.
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    return str(folder)


def safetensors_bytes(shapes: dict[str, list[int]]) -> bytes:
    """A safetensors file of zero-filled float32 tensors of these shapes (its header is what MODEL009 reads)."""
    header, offset = {}, 0
    for name, shape in shapes.items():
        size = 4 * math.prod(shape)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    return len(raw).to_bytes(8, "little") + raw + bytes(offset)


TINY_CHECKPOINT = _tiny_checkpoint_json()


def _misshaped_checkpoint() -> str:
    """TINY_CHECKPOINT with its shard holding the embedding as [64, 60] (hidden_size is 64)."""
    folder = Path(tempfile.mkdtemp(prefix="test_rules_shapes_"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    shutil.copytree(TINY_CHECKPOINT, folder, dirs_exist_ok=True)
    name = "model.language_model.embed_tokens.weight"
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {name: "model-1.safetensors"}}))
    (folder / "model-1.safetensors").write_bytes(safetensors_bytes({name: [64, 60]}))
    return str(folder)


MISSHAPED_CHECKPOINT = _misshaped_checkpoint()


def _preflight_files() -> tuple[str, str]:
    """(a GSM8K-format JSON-lines file whose second row's answer is null, a copy of the tiny
    tokenizer whose chat template raises on a system message) for DATA009 and DATA006."""
    folder = Path(tempfile.mkdtemp(prefix="test_rules_data_"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    rows = [{"question": "what is 3 plus 4?", "answer": "#### 7"}, {"question": "and 5 plus 5?", "answer": None},
            {"question": "what is 2 plus 2?", "answer": "#### 4"}]
    (folder / "bad.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "no_answers.jsonl").write_text("".join(json.dumps({**r, "answer": None}) + "\n" for r in rows))
    (folder / "no_prompts.jsonl").write_text("".join(json.dumps({**r, "question": None}) + "\n" for r in rows))
    tok = folder / "tok"
    shutil.copytree(Path(__file__).parents[3] / "data/tiny_tokenizer", tok)
    config = json.loads((tok / "tokenizer_config.json").read_text())
    config["chat_template"] = ("{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('no system "
                               "role here') }}{% endif %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}")
    (tok / "tokenizer_config.json").write_text(json.dumps(config))
    return str(folder / "bad.jsonl"), str(tok)


BAD_ROWS_FILE, RAISING_TEMPLATE = _preflight_files()
NO_ANSWERS_FILE, NO_PROMPTS_FILE = (str(Path(BAD_ROWS_FILE).with_name(n)) for n in ("no_answers.jsonl", "no_prompts.jsonl"))


def _eos_tokenizers() -> tuple[str, str]:
    """(a copy of the tiny tokenizer whose generation_config.json lists eos id 99, past its 64
    ids; a copy with neither an eos_token nor a generation config) for MODEL008."""
    folder = Path(tempfile.mkdtemp(prefix="test_rules_eos_"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    unknown, none = folder / "unknown_eos", folder / "no_eos"
    for tok in (unknown, none):
        shutil.copytree(Path(__file__).parents[3] / "data/tiny_tokenizer", tok)
    (unknown / "generation_config.json").write_text(json.dumps({"eos_token_id": [0, 4, 99]}))
    (none / "generation_config.json").unlink()
    config = json.loads((none / "tokenizer_config.json").read_text())
    del config["eos_token"]
    (none / "tokenizer_config.json").write_text(json.dumps(config))
    return str(unknown), str(none)


UNKNOWN_EOS, NO_EOS = _eos_tokenizers()


def _reward_modules() -> str:
    """A folder of reward modules for DATA010: one with verl's signature, one that raises on
    import, one whose function takes other parameters. On sys.path and PYTHONPATH while this
    file's tests run (reward_path): DATA003 finds the file, DATA010's child process imports it."""
    folder = Path(tempfile.mkdtemp(prefix="test_rules_reward_"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    (folder / "rules_reward_good.py").write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 1.0\n")
    (folder / "rules_reward_raises.py").write_text("import json\njson.loads('{')\n")
    (folder / "rules_reward_wrong.py").write_text("def compute_score(response, answer):\n    return 1.0\n")
    return str(folder)


REWARD_MODULES = _reward_modules()


@pytest.fixture(scope="module", autouse=True)
def reward_path():
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(REWARD_MODULES)
        mp.setenv("PYTHONPATH", os.pathsep.join(filter(None, [REWARD_MODULES, os.environ.get("PYTHONPATH")])))
        yield


BASES: dict[str, tuple[str, ...]] = {
    "dapo_sync": ("recipe=dapo_sync",),
    "dapo_async": ("recipe=dapo_async",),
    "dapo_fullft": ("recipe=dapo_fullft",),
    "gsm8k_grpo": ("recipe=gsm8k_grpo",),
    "tiny_grpo": ("recipe=tiny_grpo",),
    # the 3-node DAPO recipe (DOMAIN 5.10 before the node was lost): dp 12
    "dapo_sync_3nodes": ("recipe=dapo_sync", "cluster=b300x3", "inference.engines=3"),
    # GSM8K with MoE LoRA normalisation on (rank 32 / top-8 = 4)
    "gsm8k_normalized": ("recipe=gsm8k_grpo", "trainer.lora.normalize_moe_lora=true"),
    # async with adapter sync instead of merged weights over the network
    "dapo_async_adapter": ("recipe=dapo_async", "trainer.lora.merge=false", "inference.lora_targets=[experts,q_proj]"),
    # a 22 GiB card (DOMAIN 5.13) running the tiny model at the default utilisation 0.7
    "tiny_qwen3_vllm": ("recipe=tiny_qwen3_vllm",),
    "small_card": ("recipe=tiny_grpo", "cluster=h200x1", "cluster.gpu.memory_gib=22", "inference.engines=1"),
    # the tiny model loaded from a checkpoint folder whose config.json is the tiny descriptor's
    "tiny_checkpoint": ("recipe=tiny_grpo", f"model.hf_path={TINY_CHECKPOINT}"),
    # the chat demo: the tiny tokenizer's template over the copy task's parquet files
    "tiny_grpo_chat": ("recipe=tiny_grpo_chat",),
    "qwen3_moe_lora": ("recipe=tiny_grpo", "model=qwen3_moe_4layer", "cluster=h200x1", "inference.engines=1",
                       "trainer.lora.rank=4", "trainer.lora.targets=[q_proj]"),
    # a custom reward with verl's signature
    "good_reward": ("recipe=tiny_grpo", "data.reward_fn=rules_reward_good:compute_score"),
    "tiny_multiturn": ("recipe=tiny_multiturn",),
}

Value = str | Callable[[object], str]


@dataclass(frozen=True)
class Case:
    rule: str
    base: str
    breaking: tuple[str, ...]
    severity: str
    key: str
    values: tuple[Value, ...]
    bug: str | None = None

    @property
    def id(self) -> str:
        """The same in every process (pytest-xdist's workers compare their collections): the
        fixture folders' random mkdtemp names are written as <test_rules_KIND>."""
        text = f"{self.rule}[{self.base}: {' '.join(self.breaking)}]"
        return re.sub(r"[^\s=]*/(test_rules_[a-z]+)_[^/\s]+", r"<\1>", text)


def C(rule, base, breaking, severity, key, *values, bug=None) -> Case:  # noqa: N802 - table constructor
    return Case(rule, base, tuple(breaking), severity, key, values, bug)


E, W = "error", "warning"

CASES = [
    # --- algorithm, batch chain, run length
    C("ALGO001", "dapo_sync", ["algorithm.clip_high=0.1"], E, "algorithm.clip_high", "clip_low=0.2", "clip_high=0.1"),
    C("ALGO002", "dapo_sync", ["algorithm.overlong.buffer_len=8192"], E, "algorithm.overlong.buffer_len",
      "buffer_len=8192", "max_response_len=8192"),
    C("ALGO003", "dapo_async", ["algorithm.overlong.buffer_len=2048", "algorithm.overlong.expected_response_len=2440"],
      W, "algorithm.overlong.buffer_len", "starts at 2048 tokens", "mean response of 2440"),
    C("ALGO004", "dapo_async", ["algorithm.max_staleness=0"], E, "algorithm.max_staleness", "max_staleness=0", "async"),
    C("ALGO005", "dapo_sync", ["algorithm.temperature=0"], E, "algorithm.temperature", "temperature=0.0"),
    C("ALGO005", "dapo_sync", ["algorithm.top_p=1.5"], E, "algorithm.top_p", "top_p=1.5"),
    C("ALGO005", "dapo_sync", ["algorithm.dual_clip=1.0"], E, "algorithm.dual_clip", "dual_clip=1.0"),
    C("ALGO006", "dapo_sync", ["run.steps=0"], E, "run.steps", "run.steps=0"),
    C("ALGO006", "dapo_sync", ["checkpoint.keep=0"], E, "checkpoint.keep", "checkpoint.keep=0"),
    C("ALGO006", "dapo_sync", ["checkpoint.every_steps=-1"], E, "checkpoint.every_steps", "every_steps=-1"),
    C("ALGO007", "dapo_sync", ["algorithm.off_policy.token.upper=0.9"], E, "algorithm.off_policy.token.upper",
      "mode=truncate", "upper=0.9"),
    C("ALGO007", "dapo_sync", ["algorithm.off_policy.token.mode=mask", "algorithm.off_policy.token.upper=null"], E,
      "algorithm.off_policy.token.upper", "mode=mask", "upper=None"),
    C("ALGO007", "dapo_sync", ["algorithm.off_policy.sequence.mode=reject", "algorithm.off_policy.sequence.lower=1.0",
                               "algorithm.off_policy.sequence.upper=1.001"], E,
      "algorithm.off_policy.sequence.lower", "mode=reject", "lower=1.0"),
    C("ALGO007", "dapo_sync", ["algorithm.off_policy.sequence.mode=reject"], E, "algorithm.off_policy.sequence",
      "lower=None, upper=None"),
    C("ROUTE001", "tiny_qwen3_vllm", ["inference.backend=hf", "algorithm.routing_replay=true"], E,
      "algorithm.routing_replay", "no routed experts"),
    C("ROUTE001", "tiny_grpo", ["model=tiny_qwen3_moe", "model.arch.model_type=mixtral", "algorithm.routing_agreement=true"],
      E, "algorithm.routing_agreement", "model_type mixtral"),
    C("ROUTE002", "tiny_grpo", ["inference.backend=vllm", "algorithm.routing_replay=true"], E, "inference.backend",
      "routing_replay=true with inference.backend=vllm on cluster.gpu.arch=cpu"),
    C("ROUTE004", "tiny_grpo", ["trainer.backend=megatron", "trainer.mesh.ep=2", "algorithm.routing_agreement=true",
                                "cluster.gpu.arch=hopper"], W,
      "trainer.mesh", "routing_agreement=true", "trainer.backend=megatron", "ep=2"),
    C("ROUTE003", "dapo_sync", ["algorithm.routing_replay=true", "cluster.host_memory_gib=64"], E,
      "algorithm.routing_replay", "4 step(s)", "672 B", "78.75 GiB in the object store"),
    C("ROUTE003", "dapo_sync", ["algorithm.routing_agreement=true", "cluster.host_memory_gib=300"], W,
      "algorithm.routing_agreement", "~90.0 GiB"),
    C("ROUTE003", "dapo_sync", ["algorithm.indexer_agreement=true", "cluster.host_memory_gib=512"], E,
      "algorithm.indexer_agreement", "2816 B", "330.00 GiB in the object store"),
    C("ROUTE005", "tiny_qwen3_vllm", ["inference.backend=hf", "algorithm.indexer_replay=true"], E,
      "algorithm.indexer_replay", "model_type qwen3)", "no indexed_attention layer"),
    C("ROUTE006", "tiny_grpo", ["inference.backend=vllm", "algorithm.indexer_agreement=true"], E, "inference.backend",
      "indexer_agreement=true with inference.backend=vllm"),
    C("ROUTE007", "tiny_grpo", ["algorithm.indexer_replay=true", "model.arch.index_kpool=1",
                                "algorithm.max_response_len=70000"], E, "model.arch.index_kpool", "index_kpool=1",
      lambda plan: f"{plan.batch.max_seq_len:,} pools per sequence"),
    C("ROUTE008", "tiny_grpo", ["trainer.backend=megatron", "trainer.mesh.tp=2", "algorithm.indexer_replay=true",
                                "cluster.gpu.arch=hopper"], W, "trainer.mesh.tp", "indexer_replay=true", "tp=2"),
    C("BATCH001", "dapo_sync_3nodes", ["algorithm.samples_per_prompt=8"], E, "algorithm.samples_per_prompt",
      "mini_batch_prompts 32", "samples_per_prompt 8", "= 256", "dp 12"),
    C("BATCH002", "dapo_sync", ["algorithm.mini_batch_prompts=48"], E, "algorithm.mini_batch_prompts",
      "prompts_per_step 128", "mini_batch_prompts 48"),
    C("BATCH003", "dapo_sync", ["algorithm.samples_per_prompt=1"], E, "algorithm.samples_per_prompt",
      "samples_per_prompt=1"),
    # --- data
    C("DATA001", "tiny_grpo", ["data.task=no_such_task"], E, "data.task", "data.task='no_such_task'"),
    C("DATA002", "tiny_grpo", ["data.train_path=/nonexistent/train.jsonl"], E, "data.train_path",
      "/nonexistent/train.jsonl", "does not exist"),
    C("DATA002", "tiny_grpo", ["data.val_path=prompts.csv"], E, "data.val_path", "prompts.csv", ".jsonl"),
    C("DATA002", "tiny_grpo", ["data.task=gsm8k"], E, "data.train_path", "train_path=null", "'gsm8k'"),
    C("DATA004", "gsm8k_grpo", ["data.answer_key=solution"], E, "data.answer_key", "'solution'",
      "data/gsm8k_sample.jsonl", "no column 'solution'", "['question', 'answer']"),
    C("DATA004", "gsm8k_grpo", ["data.train_path=data/verl_gsm8k_sample.parquet"], E, "data.prompt_key",
      "'question'", "verl_gsm8k_sample.parquet", "reward_model.ground_truth"),
    C("DATA004", "dapo_sync", ["data.train_path=data/dapo_math_sample.parquet", "data.answer_key=reward_model"], E,
      "data.answer_key", "column reward_model of data/dapo_math_sample.parquet holds a struct", "not text or number"),
    C("DATA004", "dapo_sync", ["data.train_path=data/dapo_math_sample.parquet", "data.answer_key=reward_model.ground_truth",
                               "data.prompt_key=extra_info.index.x"], E, "data.prompt_key", "extra_info.index (text)"),
    C("DATA005", "tiny_checkpoint", ["data.task=gsm8k", "data.train_path=data/gsm8k_sample.jsonl",
                                     "data.prompt_key=question"], W, "data.chat_template", "data.chat_template=auto",
      "has no chat_template"),
    # the data pre-flight: gsm8k_grpo's 32 sampled prompts are 119..179 characters with the task's instruction
    C("DATA006", "tiny_checkpoint", ["data.task=gsm8k", "data.train_path=data/gsm8k_sample.jsonl",
                                     "data.prompt_key=question"], W, "model.hf_path", "not checked", "no tokenizer.json"),
    C("DATA006", "tiny_grpo_chat", [f"model.tokenizer_path={RAISING_TEMPLATE}", "data.system_prompt=be brief",
                                    "data.val_path=null"], E, "data.chat_template", "data.train_path=",
      "no system role here"),
    C("DATA007", "gsm8k_grpo", ["data.max_prompt_len=100"], E, "data.max_prompt_len", "no prompt fits",
      "32 of 32 sampled prompts", "data.max_prompt_len=100", "min 119", "max 179", "data/gsm8k_sample.jsonl"),
    C("DATA007", "gsm8k_grpo", ["data.max_prompt_len=150"], W, "data.max_prompt_len", "% of prompts would be dropped",
      "data.max_prompt_len=150"),
    C("DATA007", "tiny_grpo_chat", ["data.max_prompt_len=7", "data.val_path=null"], E, "data.max_prompt_len",
      "no prompt fits", "chat template", "model.tokenizer_path=data/tiny_tokenizer"),
    C("DATA008", "gsm8k_grpo", ["inference.max_model_len=1100"], E, "inference.max_model_len",
      "32 of 32 sampled prompts", "algorithm.max_response_len=1024", "inference.max_model_len=1100"),
    C("DATA008", "gsm8k_grpo", ["inference.max_model_len=1180"], W, "inference.max_model_len",
      "algorithm.max_response_len=1024", "inference.max_model_len=1180"),
    C("DATA009", "gsm8k_grpo", [f"data.train_path={BAD_ROWS_FILE}"], E, "data.bad_rows", "1 bad rows",
      "bad.jsonl:2: answer is null"),
    C("DATA009", "gsm8k_grpo", [f"data.train_path={NO_ANSWERS_FILE}", "data.bad_rows=skip"], E, "data.answer_key",
      "3 bad rows", "no_answers.jsonl:1: answer is null"),
    C("DATA009", "gsm8k_grpo", [f"data.train_path={NO_PROMPTS_FILE}", "data.bad_rows=skip"], E, "data.prompt_key",
      "3 bad rows", "no_prompts.jsonl:1: prompt is null"),
    C("DATA009", "gsm8k_grpo", [f"data.train_path={BAD_ROWS_FILE}", "data.bad_rows=skip"], W, "data.bad_rows",
      "bad.jsonl:2: answer is null"),
    C("DATA003", "tiny_grpo", ["data.reward_fn=no_such_module_q7.rewards:score"], E, "data.reward_fn",
      "data.reward_fn='no_such_module_q7.rewards:score'", "module 'no_such_module_q7.rewards' not found"),
    C("DATA003", "tiny_grpo", ["data.reward_fn=rewards.compute_score"], E, "data.reward_fn",
      "'rewards.compute_score'", "package.module:function"),
    C("DATA010", "good_reward", ["data.reward_fn=rules_reward_raises:compute_score"], E, "data.reward_fn",
      "cannot import module 'rules_reward_raises'", "JSONDecodeError"),
    C("DATA010", "good_reward", ["data.reward_fn=rules_reward_wrong:compute_score"], E, "data.reward_fn",
      "cannot be called with verl's keywords", "missing a required argument: 'response'"),
    # --- multi-turn environments
    C("ENV001", "tiny_multiturn", ["data.environment.cls=no_such_env_q7:Env"], E, "data.environment.cls",
      "module 'no_such_env_q7' not found"),
    C("ENV001", "tiny_multiturn", ["data.environment.cls=launcher.envs.lookup:value_of"], E, "data.environment.cls",
      "has no class 'value_of'"),
    C("ENV002", "tiny_multiturn", ["algorithm.partial_rollout.max_tokens_per_step=4"], E,
      "algorithm.partial_rollout.max_tokens_per_step", "max_tokens_per_step=4"),
    C("ENV003", "tiny_multiturn", ["data.environment.max_turn_tokens=9"], E, "data.environment.max_turn_tokens",
      "max_turn_tokens=9 > algorithm.max_response_len=8"),
    C("ENV003", "tiny_multiturn", ["data.environment.max_turns=9"], E, "data.environment.max_turns", "max_turns=9"),
    C("ENV004", "tiny_multiturn", ["data.reward_fn=rules_reward_good:compute_score"], W, "data.reward_fn",
      "rules_reward_good:compute_score"),
    # --- rollout checks
    C("CHECK001", "tiny_grpo", ["run.steps=3", "run.rollout_checks.stop_after_steps=5"], E,
      "run.rollout_checks.stop_after_steps", "stop_after_steps=5, run.steps=3"),
    # --- inference
    C("INF001", "dapo_sync", ["inference.tp=3"], E, "inference.tp", "inference.tp=3", "64"),
    C("INF002", "dapo_sync", ["inference.engines=1"], E, "inference.engines", "1 x 8 = 8", "16 trainer GPUs"),
    C("INF002", "dapo_async", ["inference.engines=2"], E, "inference.engines", "= 16 GPUs", "8 GPUs on the inference nodes"),
    C("INF003", "dapo_sync", ["inference.max_num_seqs=8192"], E, "inference.max_num_seqs", "max_num_seqs=8192",
      "8 KDA heads per rank", "65535"),
    C("INF004", "dapo_sync", ["inference.gpu_memory_utilization=1.0"], E, "inference.gpu_memory_utilization",
      "gpu_memory_utilization=1.0"),
    C("INF005", "small_card", ["inference.gpu_memory_utilization=0.9"], E, "inference.gpu_memory_utilization",
      "gpu_memory_utilization=0.9", "leaves 2.2 GiB of 22 GiB",
      lambda p: f"{p.memory.inference.outside_budget_gib:.1f} GiB is needed"),
    C("INF006", "dapo_sync", ["inference.router.queue_size=100"], E, "inference.router.queue_size",
      "128 x 2 engines = 256", "queue_size 100"),
    C("INF006", "dapo_sync", ["inference.router.queue_size=256"], E, "inference.router.queue_size",
      "= 256 >= router.queue_size 256"),
    C("INF007", "dapo_sync", ["inference.router.queue_timeout_s=60"], W, "inference.router.queue_timeout_s",
      "queue_timeout_s=60", lambda p: f"generation round {p.timing.generation_round_s:.0f} s"),
    C("INF008", "dapo_sync", ["inference.concurrency_per_engine=1024"], W, "inference.concurrency_per_engine",
      "concurrency_per_engine=1024", "max_num_seqs=512"),
    C("INF009", "dapo_sync", ["inference.ep=3"], E, "inference.ep", "inference.ep=3", "tp=8", "288 experts"),
    C("INF010", "dapo_sync", ["inference.sleep_level=3"], E, "inference.sleep_level", "sleep_level=3"),
    C("INF010", "dapo_async", ["inference.sleep_level=1"], W, "inference.sleep_level", "sleep_level=1", "async"),
    C("INF010", "gsm8k_grpo", ["inference.sleep_level=1"], W, "inference.sleep_level", "merged sync",
      lambda p: f"keeps {8 * p.memory.inference.weights_gib:,.1f} GiB of weights per node in host RAM"),
    C("INF010", "dapo_fullft", ["inference.sleep_level=1"], W, "inference.sleep_level", "full sync"),
    # --- LoRA
    C("LORA001", "gsm8k_normalized", ["trainer.lora.rank=12"], E, "trainer.lora.rank", "rank=12",
      "num_experts_per_tok=8"),
    C("LORA002", "dapo_sync", ["trainer.lora.rank=48"], E, "trainer.lora.rank", "rank=48", "adapter sync"),
    C("LORA003", "dapo_sync", ["inference.lora_targets=[q_proj,o_proj]"], E, "inference.lora_targets",
      "['q_proj', 'o_proj']", "experts"),
    C("LORA004", "dapo_sync", ["trainer.lora.targets=[q_proj,f_b_proj]"], E, "trainer.lora.targets", "f_b_proj"),
    C("LORA004", "dapo_sync", ["inference.lora_targets=[experts,g_b_proj]"], E, "inference.lora_targets", "g_b_proj"),
    C("LORA005", "dapo_sync", ["trainer.lora.targets=[q_proj,qkv_proj]"], E, "trainer.lora.targets", "qkv_proj"),
    C("LORA006", "dapo_fullft", ["trainer.lora.targets=[q_proj]"], E, "trainer.lora.targets", "rank=0", "1 targets",
      "q_proj"),
    C("LORA012", "tiny_grpo", ["trainer.lora.rank=4", "trainer.lora.targets=[linear_q_down_proj]",
                               "model.arch.layer_types=[linear_attention,linear_attention,linear_attention,linear_attention]"],
      E, "trainer.lora.targets", "linear_q_down_proj", "0 DSA layers"),
    C("BACKEND001", "tiny_grpo", ["inference.tp=2", "inference.engines=1"], E, "inference.tp", "tp=2", "backend=hf"),
    C("BACKEND002", "tiny_grpo", ["trainer.mesh.tp=2"], E, "trainer.mesh.tp", "tp=2", "backend=hf"),
    C("BACKEND003", "tiny_grpo", ["trainer.backend=megatron", "model.arch.tie_word_embeddings=true"], E,
      "model.arch.tie_word_embeddings", "backend=megatron"),
    C("LORA013", "qwen3_moe_lora", ["trainer.lora.targets=[q_proj,linear_fc1]"], E, "trainer.lora.targets",
      "linear_fc1", "qwen3_moe"),
    C("LORA010", "tiny_grpo", ["trainer.lora.rank=4"], E, "trainer.lora.targets", "rank=4", "targets=[]"),
    C("LORA011", "tiny_grpo", ["trainer.lora.rank=4", "trainer.lora.targets=[linear_fc1]",
                               "trainer.lora.share_expert_adapters=true"], E, "trainer.lora.share_expert_adapters",
      "backend=hf"),
    C("LORA007", "dapo_sync", ["trainer.lora.rank=-1"], E, "trainer.lora.rank", "rank=-1"),
    C("MEM007", "dapo_sync", ["trainer.lora.rank=0", "trainer.lora.targets=[]"], E, "trainer.optimizer.cpu_offload",
      "cpu_offload=true", "lora.rank=0"),
    C("LORA009", "dapo_sync", ["trainer.lora.targets=[linear_kv_up_proj,q_proj]"], E, "trainer.lora.targets",
      "['linear_kv_up_proj']", "['kv_b_proj']"),
    C("LORA008", "dapo_sync", ["trainer.lora.share_expert_adapters=true", "trainer.mesh.ep=4", "trainer.mesh.etp=2"],
      E, "trainer.lora.share_expert_adapters", "share_expert_adapters=true", "etp=2"),
    # --- memory
    C("MEM001", "dapo_sync", ["trainer.mesh.ep=1"], E, "trainer.mesh.ep", "B300 has 268.2 GiB",
      lambda p: f"needs {p.memory.trainer.total_gib:,.1f} GiB per GPU"),
    C("MEM001", "dapo_fullft", ["trainer.mesh.ep=8", "trainer.mesh.etp=1"], E, "trainer.lora.rank", "B200 has 179.1 GiB",
      lambda p: f"needs {p.memory.trainer.total_gib:,.1f} GiB per GPU"),
    C("MEM002", "dapo_sync", ["inference.gpu_memory_utilization=0.2"], E, "inference.gpu_memory_utilization",
      "10752-token sequence", "53.6 GiB budget", lambda p: f"engine weights {p.memory.inference.weights_gib:,.1f} GiB"),
    C("MEM003", "dapo_sync", ["inference.max_num_seqs=1000"], W, "inference.max_num_seqs", "max_num_seqs=1000",
      lambda p: f"fits {p.memory.inference.max_len_sequences_in_budget} max-length"),
    C("MEM004", "dapo_sync", ["inference.sleep_level=0"], E, "inference.gpu_memory_utilization", "> 268.2 GiB",
      lambda p: f"peak {p.memory.colocated.peak_gib:,.1f} GiB"),
    # every step fits a 170 GiB card (peak ~124 GiB), the first sync with the trainer still whole does not
    C("MEM008", "dapo_fullft", ["cluster.gpu.memory_gib=170"], E, "trainer.mesh.ep", "has 170.0 GiB",
      lambda p: f"first weight sync {p.memory.colocated.first_sync_gib:,.1f} GiB"),
    # awake engines next to a building trainer: the start-up order's reason
    C("MEM008", "dapo_sync", ["inference.sleep_level=0"], E, "inference.sleep_level", "engines awake",
      lambda p: f"trainer built {p.memory.colocated.startup_gib:,.1f} GiB"),
    C("MEM005", "dapo_sync", ["cluster.host_memory_gib=256"], E, "cluster.host_memory_gib", "it has 256.0 GiB",
      lambda p: f"needs {p.memory.host.total_per_node_gib:,.1f} GiB"),
    C("MEM005", "dapo_sync", ["cluster.host_memory_gib=1000"], E, "cluster.host_memory_gib", "it has 1,000.0 GiB",
      "sleeping engine weights 587.5 GiB"),  # sleep level 2 alone fits: its fix says so
    C("MEM006", "dapo_fullft", ["cluster=b300x1"], E, "trainer.lora.rank", "5.13 TiB", "313.3 B params",
      "8 x B300 hold 2.10 TiB", "hosts 2.00 TiB"),
    # --- trainer mesh
    C("MESH001", "dapo_sync", ["trainer.mesh.tp=32"], E, "trainer.mesh.tp", "16 trainer GPUs", "tp 32"),
    C("MESH002", "tiny_grpo", ["trainer.mesh.pp=2"], E, "trainer.mesh.pp", "pp=2", "hc_mult=4"),
    C("MESH003", "dapo_sync", ["trainer.mesh.cp=2"], E, "trainer.mesh.cp", "cp=2", "KDA"),
    C("MESH013", "tiny_grpo", ["trainer.backend=megatron", "model.arch.hc_mult=1", "trainer.mesh.pp=2"], E,
      "trainer.mesh.pp", "pp=2 with trainer.backend=megatron"),
    C("MESH004", "gsm8k_grpo", ["trainer.mesh.etp=null"], E, "trainer.mesh.etp", "ep 8 x etp 2 x pp 1 = 16",
      "8 trainer GPUs", "etp unset"),
    C("MESH005", "dapo_sync", ["trainer.mesh.ep=5"], E, "trainer.mesh.ep", "n_routed_experts=288", "ep=5"),
    C("MESH006", "dapo_sync", ["model.arch.num_attention_heads=40", "trainer.mesh.tp=16"], E, "trainer.mesh.tp",
      "num_attention_heads=40", "tp=16"),
    C("MESH006", "dapo_sync", ["model.arch.linear_num_heads=36", "trainer.mesh.tp=8"], E, "trainer.mesh.tp",
      "linear_num_heads=36", "tp=8"),
    C("MESH007", "dapo_sync", ["model.arch.intermediate_size=12289"], E, "trainer.mesh.tp", "intermediate_size=12289",
      "tp=2"),
    C("MESH007", "dapo_fullft", ["model.arch.moe_intermediate_size=2049"], E, "trainer.mesh.etp",
      "moe_intermediate_size=2049", "etp=2"),
    C("MESH008", "tiny_grpo", ["trainer.mesh.sequence_parallel=true"], E, "trainer.mesh.sequence_parallel",
      "sequence_parallel=true", "tp=1"),
    C("MESH009", "dapo_sync", ["trainer.mesh.sequence_parallel=false"], E, "trainer.mesh.sequence_parallel", "tp=2",
      "sequence_parallel=false", "MoE"),
    C("MESH009", "dapo_sync", ["model=tiny", "model.arch.mlp_layer_types=[dense,dense,dense,dense]",
                               "trainer.mesh.sequence_parallel=false"], E, "trainer.mesh.sequence_parallel", "tp=2",
      "dense model"),
    C("MESH010", "dapo_sync", ["trainer.mesh.etp=null"], W, "trainer.mesh.etp", "etp unset", "tp=2"),
    C("MESH011", "dapo_sync", ["model.arch.hc_mult=1", "trainer.mesh.pp=2"], E, "trainer.mesh.pp",
      "num_hidden_layers=45", "pp=2"),
    C("MESH012", "dapo_async", ["placement.trainer_nodes=2"], E, "placement.trainer_nodes", "needs 24 GPUs",
      "`b300x2` has 16"),
    C("MHC001", "dapo_sync", ["trainer.use_fused_mhc=true"], E, "trainer.use_fused_mhc", "use_fused_mhc=true"),
    # --- model
    C("MODEL001", "dapo_sync", ["model.language_model_only=false"], E, "model.language_model_only",
      "language_model_only=false"),
    C("INF011", "tiny_grpo", ["inference.backend=vllm"], E, "inference.backend", "model_type=glm5_next on CPU"),
    C("INF011", "tiny_qwen3_vllm", ["model.arch.head_dim=32"], E, "model.arch.head_dim", "head_dim 32"),
    C("INF011", "tiny_qwen3_vllm", ["model=qwen3_moe_4layer", "model.arch.vocab_size=64", "model.arch.hidden_size=128",
                                    "model.arch.num_attention_heads=2", "model.arch.num_key_value_heads=1",
                                    "model.arch.num_hidden_layers=2", "model.arch.mlp_layer_types=[sparse,sparse]",
                                    "inference.max_model_len=64", "trainer.lora.rank=8", "trainer.lora.alpha=16",
                                    "trainer.lora.targets=[q_proj,v_proj]", "trainer.lora.merge=false",
                                    "inference.lora_targets=[q_proj,v_proj,experts]"],
      E, "trainer.lora.merge", "adapter sync into a vLLM engine on CPU"),
    C("INF015", "tiny_grpo", ["inference.update_mode=in_flight"], E, "inference.update_mode", "placement.mode=colocated"),
    C("INF017", "tiny_grpo", ["inference.weights_dtype=fp8"], E, "inference.weights_dtype",
      "inference.weights_dtype=fp8", "inference.backend=hf"),
    C("INF018", "dapo_sync", ["inference.weights_dtype=fp8", "cluster.gpu.arch=ampere"], E, "inference.weights_dtype",
      "inference.weights_dtype=fp8", "cluster.gpu.arch=ampere"),
    C("INF018", "tiny_grpo", ["inference.backend=vllm", "inference.weights_dtype=fp8"], E, "inference.weights_dtype",
      "cluster.gpu.arch=cpu"),
    C("INF019", "dapo_sync", ["inference.weights_dtype=fp8", "algorithm.off_policy.token.mode=off"], E,
      "algorithm.off_policy.token.mode", "token.mode=off", "inference.weights_dtype=fp8"),
    C("INF016", "dapo_async", ["inference.backend=hf", "inference.update_mode=in_flight",
                               "algorithm.routing_agreement=true", "run.eval_every_steps=5"], E, "inference.update_mode",
      "routing_agreement=true", "eval_every_steps=5"),
    C("PART001", "tiny_grpo", ["algorithm.partial_rollout.max_tokens_per_step=2"], E,
      "algorithm.partial_rollout.max_tokens_per_step", "max_tokens_per_step=2", "max_response_len=2"),
    C("PART002", "dapo_async", ["algorithm.partial_rollout.max_tokens_per_step=1024"], E,
      "algorithm.partial_rollout.max_tokens_per_step", "max_tokens_per_step=1024", "placement.mode=async"),
    C("PART003", "tiny_grpo", ["algorithm.partial_rollout.max_tokens_per_step=1", "algorithm.routing_agreement=true"],
      E,
      "algorithm.partial_rollout.max_tokens_per_step", "max_tokens_per_step=1", "routing_agreement=true"),
    C("MODEL002", "dapo_sync", ["model.arch.qk_rope_head_dim=64"], E, "model.arch.qk_rope_head_dim",
      "qk_rope_head_dim=64"),
    C("MODEL003", "dapo_sync", ["model.hf_path=/nonexistent/glm5"], E, "model.hf_path", "/nonexistent/glm5",
      "config.json"),
    C("MODEL009", "tiny_checkpoint", [f"model.hf_path={MISSHAPED_CHECKPOINT}"], E, "model.hf_path",
      "1 tensor(s) of another shape", "model-1.safetensors holds model.language_model.embed_tokens.weight as "
      "[64, 60], config.json gives [64, 64]"),
    C("MODEL006", "tiny_checkpoint", ["model.arch.hidden_size=128"], E, "model.arch.hidden_size",
      "hidden_size: descriptor 128 vs checkpoint 64", f"{TINY_CHECKPOINT}/config.json"),
    C("MODEL007", "tiny_grpo", ["model.tokenizer_path=/nonexistent/tok"], E, "model.tokenizer_path",
      "/nonexistent/tok", "no tokenizer.json"),
    C("MODEL007", "tiny_grpo", ["model.tokenizer_path=data/tiny_tokenizer", "model.arch.vocab_size=48"], E,
      "model.tokenizer_path", "64 token ids", "vocab_size=48"),
    C("MODEL008", "tiny_grpo_chat", [f"model.tokenizer_path={UNKNOWN_EOS}"], E, "model.tokenizer_path",
      f"{UNKNOWN_EOS}/generation_config.json has eos_token_id=[0, 4, 99]: [99] not a token of", "ids up to 63"),
    C("MODEL008", "tiny_grpo_chat", [f"model.tokenizer_path={NO_EOS}"], E, "model.tokenizer_path",
      f"model.tokenizer_path={NO_EOS}: no eos token"),
    C("MODEL004", "dapo_sync", ["model.arch.layer_types=[linear_attention]"], E, "model.arch.layer_types",
      "1 entries", "45 layers"),
    C("MODEL004", "dapo_sync", ["model.arch.mlp_layer_types=[dense,moe]"], E, "model.arch.mlp_layer_types",
      "2 entries", "'moe'", "45 layers"),
    C("MODEL004", "dapo_sync", ["model.arch.indexer_types=[full]"], E, "model.arch.indexer_types",
      "1 entries", "45 layers"),
    C("MODEL005", "tiny_grpo", ["model.arch.indexer_types=[full,full,full,shared]"], E, "model.arch.indexer_types",
      "indexer_types[3]=shared", "layer 2 (linear_attention"),
    # --- placement
    C("PLACE001", "dapo_async", ["cluster=b300x1"], E, "placement.trainer_nodes", "trainer_nodes 1",
      "inference_nodes 1", "<= 1 nodes"),
    C("PLACE001", "tiny_grpo", ["placement.trainer_nodes=0"], E, "placement.trainer_nodes", "trainer_nodes=0"),
    C("PLACE002", "dapo_sync", ["placement.inference_nodes=1"], W, "placement.inference_nodes", "inference_nodes=1",
      "colocated"),
    # --- recompute
    C("RECOMP001", "dapo_sync", ["trainer.recompute.granularity=full"], E, "trainer.recompute.granularity",
      "granularity=full", "mHC"),
    C("RECOMP002", "dapo_sync", ["trainer.recompute.modules=[core_attn,mhc]"], E, "trainer.recompute.modules", "['mhc']"),
    C("RECOMP002", "dapo_sync", ["trainer.recompute.modules=[core_attn,layernorm,mlp]"], E, "trainer.recompute.modules",
      "['layernorm', 'mlp']"),
    C("RECOMP003", "dapo_sync", ["trainer.recompute.num_layers=2"], E, "trainer.recompute.num_layers", "num_layers=2",
      "selective"),
    C("RECOMP003", "dapo_sync", ["model.arch.hc_mult=1", "trainer.recompute.granularity=full"], E,
      "trainer.recompute.method", "method=null", "granularity=full"),
    C("RECOMP003", "dapo_sync", ["model.arch.hc_mult=1", "trainer.recompute.granularity=full",
                                 "trainer.recompute.method=uniform"], E, "trainer.recompute.num_layers",
      "num_layers=null", "granularity=full"),
    C("RECOMP004", "dapo_sync", ["trainer.recompute.modules=[core_attn,fancy_attn]"], E, "trainer.recompute.modules",
      "['fancy_attn']"),
    C("RECOMP004", "dapo_sync", ["model.arch.hc_mult=1", "trainer.recompute.modules=[core_attn,mhc]"], E,
      "trainer.recompute.modules", "['mhc']"),
    C("RECOMP006", "dapo_sync", ["trainer.recompute.modules=[core_attn,gdn_norm_out]"], E, "trainer.recompute.modules",
      "['gdn_norm_out']", "gated delta net"),
    C("RECOMP007", "tiny_grpo", ["model.arch.mlp_layer_types=[dense,dense,dense,dense]",
                                 "trainer.recompute.granularity=selective", "trainer.recompute.modules=[core_attn,moe_act]"],
      E, "trainer.recompute.modules", "['moe_act']", "without MoE layers"),
    C("RECOMP005", "dapo_sync", ["trainer.recompute.modules=[]"], W, "trainer.recompute.modules", "empty module list"),
    C("RECOMP008", "dapo_sync", ["trainer.recompute.modules=[core_attn,moe,moe_act,shared_experts]"], W,
      "trainer.recompute.modules", "['moe_act', 'shared_experts']", "not applied"),
    C("RECOMP008", "tiny_grpo", ["trainer.recompute.granularity=selective", "trainer.recompute.modules=[core_attn]"], W,
      "trainer.recompute.granularity", "granularity=selective", "trainer.backend=hf"),
    # --- runtime
    C("RUN001", "dapo_sync", ["trainer.nccl_timeout_s=600"], E, "trainer.nccl_timeout_s", "nccl_timeout_s=600",
      lambda p: f"{p.timing.longest_wait_phase} of {p.timing.longest_wait_s:.0f} s"),
    C("RUN004", "dapo_sync", ["run.preemption_grace_s=20"], W, "run.preemption_grace_s", "run.preemption_grace_s=20",
      "the save of the last completed step"),
    C("RUN002", "dapo_async_adapter", ["trainer.lora.merge=true"], W, "trainer.lora.merge", "merged weight sync",
      lambda p: f"{p.sync.gib_per_engine:,.1f} GiB per engine", lambda p: f"~{p.sync.seconds:.0f} s per step"),
    C("RUN003", "tiny_grpo", ["cluster.ray_address=10.0.0.1:6379"], W, "run.output_dir", "run.output_dir='runs'",
      "relative"),
    C("RUN003", "tiny_grpo", ["cluster.ray_address=10.0.0.1:6379", "run.output_dir=/dev/shm/runs"], W,
      "run.output_dir", "/dev/shm", "local to each node"),
    C("RUN003", "tiny_grpo", ["cluster.ray_address=10.0.0.1:6379", "run.output_dir=/mnt/shared/runs",
                              "checkpoint.dir=/tmp/ckpt"], W, "checkpoint.dir", "checkpoint.dir='/tmp/ckpt'", "/tmp"),
    # --- held-out evaluation
    C("EVAL001", "tiny_grpo", ["run.eval_every_steps=-1"], E, "run.eval_every_steps", "run.eval_every_steps=-1"),
    C("EVAL001", "tiny_grpo", ["run.eval_problems=0"], E, "run.eval_problems", "run.eval_problems=0"),
    C("EVAL001", "gsm8k_grpo", ["run.eval_every_steps=10"], E, "data.val_path", "run.eval_every_steps=10",
      "data.val_path=null", "'gsm8k'"),
    # --- sequence lengths
    C("SEQ001", "dapo_sync", ["inference.max_model_len=8192"], E, "inference.max_model_len", "max_prompt_len 2048",
      "max_response_len 8192", "= 10240", "max_model_len 8192"),
    C("SEQ002", "dapo_sync", ["trainer.max_tokens_per_microbatch=8192"], E, "trainer.max_tokens_per_microbatch",
      "max_tokens_per_microbatch=8192", "10240 tokens"),
    C("SEQ003", "dapo_sync", ["model.arch.index_kpool=1"], E, "model.arch.index_kpool", "10240 tokens",
      "index_topk=2048", "index_kpool=1"),
    C("SEQ004", "dapo_sync", ["model.arch.index_kpool=3"], E, "model.arch.index_kpool", "index_topk=2048",
      "index_kpool=3"),
    C("SEQ005", "tiny_grpo", ["inference.max_model_len=8192"], E, "inference.max_model_len", "max_model_len=8192",
      "max_position_embeddings=4096"),
]


def _marks(rule: str, bug: str | None = None) -> list:
    if rule not in RULES:  # a row written ahead of its rule (or left behind by a rename): visible in -ra
        return [pytest.mark.skip(reason=f"{rule} is not registered in launcher.validate.RULES")]
    return [pytest.mark.xfail(strict=True, reason=bug)] if bug else []


PASSES = sorted({(c.rule, c.base) for c in CASES if not c.bug})
INSTALLED_VLLM_RULES = {"INF012", "INF013", "INF014", "INF020"}
"""Rules that read the installed vLLM's version, which no override sets: their cases set the
version the rule sees (tests/unit/validate/test_vllm_release.py, test_in_flight_release.py)."""


def test_every_rule_has_a_failing_and_a_passing_case():
    failing = {c.rule for c in CASES if not c.bug}
    passing = {rule for rule, _ in PASSES}
    assert set(RULES) - failing - INSTALLED_VLLM_RULES == set(), "rules without a case that fires them"
    assert set(RULES) - passing - INSTALLED_VLLM_RULES == set(), "rules without a case that passes them"
    assert {c.base for c in CASES} <= set(BASES)


@pytest.mark.parametrize("rule, base", [pytest.param(r, b, id=f"{r}[{b}]", marks=_marks(r)) for r, b in PASSES])
def test_base_point_passes_rule(point, rule, base):
    found = point(*BASES[base]).of(rule)
    assert found == [], f"{base} should not produce {rule}: {found}"


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=_marks(c.rule, c.bug)) for c in CASES])
def test_overrides_fire_rule(point, case):
    p = point(*BASES[case.base], *case.breaking)
    found = p.of(case.rule)
    assert found, f"{case.rule} did not fire; findings: {[(f.id, f.key) for f in p.findings]}"
    at_key = [f for f in found if f.key == case.key]
    assert at_key, f"{case.rule} fired at {[f.key for f in found]}, expected key {case.key}"
    (finding,) = at_key
    assert finding.severity == case.severity
    for value in case.values:
        text = value(p.plan) if callable(value) else value
        assert text in finding.message, f"{text!r} not in {finding.message!r}"
    assert finding.why.strip() and finding.fix.strip()


@pytest.mark.parametrize("overrides", [
    ("recipe=gsm8k_grpo", "model=glm5_3_flash_4layer", "cluster=h200x1"),  # issue 30: was "engines = 0 for tp 8"
    ("recipe=dapo_sync", "inference.engines=1"),
    ("recipe=dapo_sync", "inference.tp=3"),
])
def test_inf002_fix_is_one_the_validator_accepts(point, overrides):
    """INF002's suggested settings, applied, clear INF002 without an INF001 (tp divides the heads)."""
    import re

    (finding,) = point(*overrides).of("INF002")
    fix = dict(re.findall(r"(inference\.(?:engines|tp))=(\d+)", finding.fix))
    assert "inference.engines" in fix, finding.fix
    fixed = point(*overrides, *(f"{k}={v}" for k, v in fix.items()))
    assert not fixed.of("INF002") and not fixed.of("INF001"), (finding.fix, fixed.findings)


_SETTING = re.compile(r"(?<![\w.])(?P<key>[a-z_]+(?:\.[a-z_0-9]+)+)\s*(?P<op>>=|<=|=|>|<| to (?:at (?:least|most) )?)\s*"
                      r"(?P<value>-?[\w.\[\]:/-]*\w\]?)")
"""A setting a fix names: `key=value`, `key >= 10240`, `key < 8192`, `key to 179`, `key to at least 64`."""


def _outside_parentheses_and_examples(fix: str) -> str:
    """A fix's text without its asides: `(recipes use 8192)`, `(descriptor model.name=tiny, ...)`
    and `e.g. ...` are context or illustration, not the settings it suggests."""
    while (shorter := re.sub(r"\([^()]*\)", "", fix)) != fix:
        fix = shorter
    return re.sub(r"e\.g\. [^,;]*", "", fix)


def _fix_settings(fix: str) -> list[tuple[str, str]]:
    """(key, value) of every setting a fix names, a bound turned into the nearest value within it."""
    out = []
    for m in _SETTING.finditer(_outside_parentheses_and_examples(fix)):
        value, op = m["value"], m["op"].strip()
        if op.startswith("to") and not _is_number(value):
            continue  # `Set data.train_path to a jsonl file`: prose, not a value
        if op in (">", "<"):
            step = 1 if value.lstrip("-").isdigit() else 0.01
            value = f"{float(value) + (step if op == '>' else -step):g}"
        out.append((m["key"], value))
    return out


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


FOLLOW_UPS = {"DATA006": {("DATA007", "data.max_prompt_len")}}
"""Findings a fix may uncover, each with its own fix: raw text (data.chat_template=none) instead
of a chat template that raises changes every prompt's length."""


def _errors(p) -> set[tuple[str, str]]:
    return {(f.id, f.key) for f in p.findings if f.severity == "error"}


def test_every_fix_a_rule_suggests_is_one_the_validator_accepts(point):
    """Each rule row's finding, its fix's settings applied to the failing point (each alone, then
    all together): at least one way clears the rule's error at its key and adds no error the
    failing point did not have. Fixes that name no setting (prose such as `Use a tp that divides
    64`) are not checked here; the count below keeps the check from going vacuous."""
    checked, wrong = 0, []
    for case in (c for c in CASES if not c.bug and c.severity == E and c.rule in RULES):
        overrides = (*BASES[case.base], *case.breaking)
        broken = point(*overrides)
        (finding,) = [f for f in broken.of(case.rule) if f.key == case.key]
        settings = _fix_settings(finding.fix)
        if not settings:
            continue
        checked += 1
        tried = [[s] for s in settings] + ([settings] if len(settings) > 1 else [])
        for chosen in tried:
            keys = {k for k, _ in chosen}
            try:
                fixed = _errors(point(*(o for o in overrides if o.split("=")[0] not in keys),
                                      *(f"{k}={v}" for k, v in chosen)))
            except ConfigError as err:
                fixed = {("compose", str(err))}
            if (case.rule, case.key) not in fixed and fixed <= _errors(broken) | FOLLOW_UPS.get(case.rule, set()):
                break
        else:
            wrong.append(f"{case.id}: {finding.fix!r} -> {sorted(fixed - _errors(broken) | fixed & {(case.rule, case.key)})}")
    assert checked >= 40, checked
    assert wrong == [], "fixes the validator refuses:\n" + "\n".join(wrong)


def test_rules_are_pure_and_repeatable(point):
    """Running the validator twice on the same point gives the same findings (no hidden state)."""
    from launcher.validate import check

    p = point(*BASES["dapo_sync"], "trainer.mesh.pp=3", "trainer.nccl_timeout_s=600")
    assert tuple(check(p.cfg, p.plan)) == p.findings


def test_all_findings_reported_together_errors_first(point):
    p = point("recipe=dapo_sync", "trainer.mesh.cp=2", "trainer.use_fused_mhc=true", "inference.router.queue_timeout_s=60",
              "trainer.nccl_timeout_s=600", "trainer.recompute.num_layers=2")
    assert {"MESH003", "MHC001", "INF007", "RUN001", "RECOMP003"} <= p.ids
    severities = [f.severity for f in p.findings]
    assert severities == sorted(severities, key=lambda s: s != "error")


@pytest.mark.parametrize("tp, limit", [(1, 1023), (2, 2047), (4, 4095)])
def test_kda_grid_limit_per_inference_tp(point, tp, limit):
    """DOMAIN 4: max_num_seqs x (64 / tp) <= 65535: 1023 at TP1, 2047 at TP2, 4095 at TP4."""
    engines = 16 // tp
    at = point("recipe=dapo_sync", f"inference.tp={tp}", f"inference.engines={engines}",
               f"inference.max_num_seqs={limit}")
    over = point("recipe=dapo_sync", f"inference.tp={tp}", f"inference.engines={engines}",
                 f"inference.max_num_seqs={limit + 1}")
    assert at.of("INF003") == []
    (finding,) = over.of("INF003")
    assert f"max_num_seqs={limit + 1}" in finding.message and f"<= {limit}" in finding.fix


def test_a_one_step_smoke_run_is_not_refused_for_the_default_stop_window(point):
    assert point("recipe=tiny_grpo", "run.steps=1").of("CHECK001") == []


def test_nccl_timeout_below_recommendation_warns(point):
    """RUN001 warns between the estimated longest wait and the recommended (2x) timeout."""
    t = point("recipe=dapo_sync").plan.timing
    between = (int(t.longest_wait_s) + t.recommended_nccl_timeout_s) // 2
    assert t.longest_wait_s < between < t.recommended_nccl_timeout_s
    (finding,) = point("recipe=dapo_sync", f"trainer.nccl_timeout_s={between}").of("RUN001")
    assert finding.severity == "warning" and f"nccl_timeout_s={between}" in finding.message
    assert str(t.recommended_nccl_timeout_s) in finding.fix


def test_complete_hf_checkpoint_passes(point):
    """config.json of a model type the trainer builds, an index and every shard it names."""
    assert point(*BASES["tiny_checkpoint"]).of("MODEL003") == []
    assert point(*BASES["tiny_checkpoint"], "trainer.backend=megatron").of("MODEL003") == []


def test_batch_fix_suggests_working_samples_per_prompt(point):
    (finding,) = point(*BASES["dapo_sync_3nodes"], "algorithm.samples_per_prompt=8").of("BATCH001")
    assert "12" in finding.fix
    assert point(*BASES["dapo_sync_3nodes"], "algorithm.samples_per_prompt=12").of("BATCH001") == []


@pytest.mark.parametrize("breaking", [["trainer.recompute.granularity=full"], ["trainer.recompute.modules=[core_attn,mhc]"]])
def test_mhc_recompute_rules_say_they_are_the_projects_own(point, breaking):
    """megatron-core 0.19.2 has no mHC: RECOMP001/002 must not blame it."""
    (finding,) = [f for f in point(*BASES["dapo_sync"], *breaking).findings if f.id in ("RECOMP001", "RECOMP002")]
    assert "project's rule" in finding.why and "0.19.2 has no mHC" in finding.why
