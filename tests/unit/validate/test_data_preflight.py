"""validate's data pre-flight (issue 30): the first data.preflight_rows rows of each data file,
formatted and counted as the run's loader does (one function: rl.prompt_rows.measure_rows), with
the run's tokenizer files read by `tokenizers` + jinja2 instead of transformers."""
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from launcher.rl.tokenizer import HfTokenizer, TemplateTokenizer
from launcher.validate import plan_and_check
from launcher.validate.report import findings_json
from tests.shared_compose import compose_shipped

ROOT = Path(__file__).resolve().parents[3]
TINY_TOKENIZER = str(ROOT / "data/tiny_tokenizer")


def _verl_parquet(path: Path, rows: int = 64) -> Path:
    """A verl-format GSM8K file (prompt = chat messages, answer in reward_model.ground_truth)."""
    pq.write_table(pa.Table.from_pylist([
        {"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": "what is 3 plus 4?"}],
         "ability": "math", "reward_model": {"style": "rule", "ground_truth": "7"}, "extra_info": {"index": i}}
        for i in range(rows)]), path)
    return path


def _story(path: Path, *extra: str) -> list[str]:
    """The issue's command: the tiny model with the tiny checkpoint's tokenizer over a verl file."""
    return ["recipe=tiny_grpo", "model=tiny", f"model.tokenizer_path={TINY_TOKENIZER}", "data.task=gsm8k",
            f"data.train_path={path}", "data.prompt_key=prompt", "data.answer_key=reward_model.ground_truth",
            "data.max_prompt_len=48", *extra]


def test_story_every_prompt_too_long_is_an_error_with_file_numbers_and_fix(tmp_path):
    file = _verl_parquet(tmp_path / "train.parquet")
    findings, plan = plan_and_check(compose_shipped(_story(file)))
    (found,) = [f for f in findings if f.id == "DATA007"]
    assert found.severity == "error" and found.key == "data.max_prompt_len"
    for text in (f"data.train_path={file}", "no prompt fits", "64 of 64 sampled prompts", "data.max_prompt_len=48",
                 "lengths min 81 / median 81 / max 81", "chat template + task gsm8k's instruction"):
        assert text in found.message, (text, found.message)
    assert "data.max_prompt_len to 81" in found.fix
    payload = json.loads(findings_json(findings, plan.to_dict()))
    assert payload["ok"] is False
    (summary,) = payload["data"]["files"]
    assert summary == {"key": "data.train_path", "path": str(file), "rows_in_file": 64, "rows_sampled": 64,
                       "bad_rows": 0, "prompt_tokens": {"min": 81, "median": 81, "max": 81},
                       "longer_than_max_prompt_len": 64, "no_room_in_max_model_len": 0}


def test_some_prompts_too_long_is_a_warning_with_the_share(tmp_path):
    rows = [{"question": "what is 3 plus 4?" + " and 1" * (20 * (i % 4 == 0)), "answer": "#### 7"} for i in range(40)]
    file = tmp_path / "mixed.jsonl"
    file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    findings, _ = plan_and_check(compose_shipped(_story(file, "data.prompt_key=question", "data.answer_key=answer",
                                                "data.max_prompt_len=90")))
    (found,) = [f for f in findings if f.id == "DATA007"]
    assert found.severity == "warning"
    assert "25.0% of prompts would be dropped: 10 of 40 sampled prompts" in found.message, found.message


def test_preflight_rows_bounds_the_sample_and_zero_turns_it_off(tmp_path):
    file = _verl_parquet(tmp_path / "train.parquet")
    findings, _ = plan_and_check(compose_shipped(_story(file, "data.preflight_rows=10")))
    assert findings.data["files"][0]["rows_sampled"] == 10 and findings.data["files"][0]["rows_in_file"] == 64
    assert "10 of 10 sampled prompts (the first 10 rows of 64)" in [f for f in findings if f.id == "DATA007"][0].message
    findings, plan = plan_and_check(compose_shipped(_story(file, "data.preflight_rows=0")))
    assert not [f for f in findings if f.id.startswith("DATA00") and f.id >= "DATA006"]
    assert "data" not in json.loads(findings_json(findings, plan.to_dict()))


def test_synthetic_task_has_no_data_summary():
    findings, plan = plan_and_check(compose_shipped(["recipe=tiny_grpo"]))
    assert findings.data is None and "data" not in json.loads(findings_json(findings, None))


def test_malformed_json_line_is_named_by_line(tmp_path):
    file = tmp_path / "bad.jsonl"
    file.write_text(json.dumps({"question": "what is 1 plus 1?", "answer": "#### 2"}) + "\n{not json\n")
    findings, _ = plan_and_check(compose_shipped(_story(file, "data.prompt_key=question", "data.answer_key=answer",
                                                "data.max_prompt_len=200")))
    (found,) = [f for f in findings if f.id == "DATA009"]
    assert found.severity == "error" and f"{file}:2: malformed JSON" in found.message


def test_template_tokenizer_renders_and_counts_as_transformers_does():
    """The pre-flight's tokenizer (tokenizers + jinja2) and the run's (transformers) agree on the
    tiny tokenizer: the chat text, its ids, and every shipped verl sample's prompt count."""
    light, hf = TemplateTokenizer(TINY_TOKENIZER, "model.tokenizer_path"), HfTokenizer(TINY_TOKENIZER)
    conversations = [[{"role": "user", "content": "what is 3 plus 4?"}],
                     [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2 = ?\n\nthink"}],
                     [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                      {"role": "tool", "content": "c"}, {"role": "user", "content": "d é ü"}]]
    for messages in conversations:
        text = light.chat_text(messages)
        assert text == hf.chat_text(messages)
        assert light.encode(text) == hf.encode(text)
    assert (light.eos_id, light.eos_ids, light.pad_id, light.vocab_size, light.has_chat_template) == \
        (hf.eos_id, hf.eos_ids, hf.pad_id, hf.vocab_size, hf.has_chat_template)

    from launcher.driver.loop.data import load_problems
    from launcher.validate.data_sample import data_sample

    cfg = compose_shipped(["recipe=tiny_grpo", f"model.tokenizer_path={TINY_TOKENIZER}", "data.task=gsm8k",
                           "data.train_path=data/verl_gsm8k_sample.parquet", "data.answer_key=reward_model.ground_truth",
                           "data.system_prompt=be brief", "data.max_prompt_len=4096"]).config
    sampled = data_sample(cfg).files[0].tokens
    assert sampled == [len(hf.encode(p.prompt)) for p in load_problems(cfg.data, hf, cfg.data.train_path)]


def test_template_tokenizer_needs_tokenizer_json(tmp_path):
    from launcher.rl.tokenizer import TokenizerFolderError

    (tmp_path / "tokenizer_config.json").write_text("{}")
    with pytest.raises(TokenizerFolderError, match="no tokenizer.json"):
        TemplateTokenizer(str(tmp_path))
