"""`data:` section: prompts, reference answers and the reward that scores responses."""
from dataclasses import dataclass
from typing import Optional


@dataclass
class DataConfig:
    task: str = "synthetic_copy"
    """Registered task name: selects the reward function and, for synthetic tasks, the
    generator (gsm8k, dapo_math, synthetic_*). Unknown names are a validation error."""
    train_path: Optional[str] = None
    """jsonl or parquet file of training prompts; null only for synthetic tasks."""
    val_path: Optional[str] = None
    """Optional held-out file, same format as train_path."""
    prompt_key: str = "prompt"
    """Column holding the prompt text."""
    answer_key: str = "answer"
    """Column holding the reference answer the reward compares against."""
    max_prompt_len: int = 512
    """Prompt tokens kept (longer prompts are dropped); with algorithm.max_response_len it
    bounds the sequence length checked against inference.max_model_len and
    trainer.max_tokens_per_microbatch."""
