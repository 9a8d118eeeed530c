"""Data and prompts: the public dataset layouts load through data.prompt_key /
data.answer_key alone, prompts go through the checkpoint's chat template, the length filter
counts the template, every EOS id stops both engines, bad rows are named by file and row."""
import json
import re
import types
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from launcher.contract.spec import ActorSpec
from launcher.driver.loop.data import DataError, PromptStream, load_problems
from launcher.rl.prompts import GSM8K_INSTRUCTION
from launcher.rl.tasks import TASKS
from launcher.rl.tokenizer import CharTokenizer, HfTokenizer
from tests.shared_compose import compose_shipped

ROOT = Path(__file__).resolve().parents[3]
GSM8K_ANSWERS = [re.search(r"#### (.+)", json.loads(line)["answer"]).group(1).replace(",", "")
                 for line in (ROOT / "data/gsm8k_sample.jsonl").read_text().splitlines()]
DAPO_ANSWERS = [json.loads(line)["answer"] for line in (ROOT / "data/dapo_math_sample.jsonl").read_text().splitlines()]
# (data.task, file, prompt_key, answer_key, answers, has data_source/extra_info)
SAMPLES = {
    "openai_gsm8k_jsonl": ("gsm8k", "data/gsm8k_sample.jsonl", "question", "answer", GSM8K_ANSWERS, False),
    "openai_gsm8k_parquet": ("gsm8k", "data/openai_gsm8k_sample.parquet", "question", "answer", GSM8K_ANSWERS, False),
    "verl_gsm8k": ("gsm8k", "data/verl_gsm8k_sample.parquet", "prompt", "reward_model.ground_truth", GSM8K_ANSWERS,
                   True),
    "skyrl_gsm8k": ("gsm8k", "data/skyrl_gsm8k_sample.parquet", "prompt", "reward_spec.ground_truth", GSM8K_ANSWERS,
                    True),
    "dapo_math_parquet": ("dapo_math", "data/dapo_math_sample.parquet", "prompt", "reward_model.ground_truth",
                          DAPO_ANSWERS, True),
    "dapo_math_jsonl": ("dapo_math", "data/dapo_math_sample.jsonl", "prompt", "answer", DAPO_ANSWERS, False),
}
# How a model that follows each task's instruction writes its final answer.
RESPONSE = {"gsm8k": "so the total is this.\n#### {}", "dapo_math": "work...\nAnswer: {}"}


def _data(*overrides: str):
    """tiny_grpo's data section (synthetic, no file) with `overrides`."""
    return compose_shipped(["recipe=tiny_grpo", *overrides]).config.data


def _sample_cfg(name: str, *extra: str):
    task, path, prompt_key, answer_key, _, _ = SAMPLES[name]
    return _data(f"data.task={task}", f"data.train_path={path}", f"data.prompt_key={prompt_key}",
                 f"data.answer_key={answer_key}", "data.max_prompt_len=4096", *extra)


@pytest.fixture(scope="module")
def glm_tok(tiny_glm_checkpoint):
    return HfTokenizer(str(tiny_glm_checkpoint))


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SAMPLES))
def test_shipped_sample_loads_by_its_keys_with_the_right_answers(name):
    task, _, _, _, answers, verl_columns = SAMPLES[name]
    table = load_problems(_sample_cfg(name), CharTokenizer(64), SAMPLES[name][1])
    problems = list(table)
    assert [p.answer for p in problems] == answers  # file order, nothing dropped
    assert table.report.kept == table.report.rows == len(answers) and table.report.bad == []
    scorer = TASKS.get(task).score
    for p in problems:
        assert scorer(RESPONSE[task].format(p.answer), p.answer)[1], (name, p.answer)
        assert not scorer(RESPONSE[task].format(p.answer + "1"), p.answer)[1]
        assert "[{" not in p.prompt and "'role'" not in p.prompt  # never a Python repr of the messages
    first = problems[0]
    if verl_columns:
        assert first.data_source in ("openai/gsm8k", "math_dapo") and isinstance(first.extra_info, dict)
    else:
        assert first.data_source is None and first.extra_info is None
    if task == "gsm8k":
        assert first.prompt.count(GSM8K_INSTRUCTION.replace("{prompt} ", "")) == 1  # added once or kept once


def test_shipped_parquet_samples_are_what_the_script_writes(tmp_path):
    import runpy

    script = runpy.run_path(str(ROOT / "scripts/write_data_samples.py"))
    script["main"](tmp_path)
    for name in script["SAMPLES"]:
        assert pq.read_table(tmp_path / name).equals(pq.read_table(ROOT / "data" / name)), name


def test_chat_template_wraps_the_prompt_with_the_checkpoints_tokens(glm_tok):
    stream = PromptStream(_sample_cfg("verl_gsm8k"), 0, glm_tok)
    problem = stream.problems[0]
    ids = glm_tok.encode(problem.prompt)
    special = dict(zip(["[gMASK]", "<sop>", "<|user|>", "<|assistant|>"],
                       glm_tok._tok.convert_tokens_to_ids(["[gMASK]", "<sop>", "<|user|>", "<|assistant|>"]),
                       strict=True))
    assert ids[:3] == [special["[gMASK]"], special["<sop>"], special["<|user|>"]]
    assert ids[-2] == special["<|assistant|>"] and glm_tok.decode(ids[-1:]) == "\n"
    row = pq.read_table(ROOT / "data/verl_gsm8k_sample.parquet").slice(0, 1).to_pylist()[0]
    want = glm_tok._tok.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True)["input_ids"]
    assert ids == want  # the text the loops encode is exactly the template's ids
    raw = PromptStream(_sample_cfg("verl_gsm8k", "data.chat_template=none"), 0, glm_tok).problems[0]
    assert raw.prompt == row["prompt"][0]["content"]


@pytest.mark.slow
def test_length_filter_counts_the_template_tokens(glm_tok):
    raw = load_problems(_sample_cfg("verl_gsm8k", "data.chat_template=none"), glm_tok, SAMPLES["verl_gsm8k"][1])
    raw_len = [len(glm_tok.encode(p.prompt)) for p in raw]
    templated_len = [len(glm_tok.encode(glm_tok.chat_text([{"role": "user", "content": p.prompt}]))) for p in raw]
    # [gMASK] <sop> <|user|> \n ... <|assistant|> \n
    assert {t - r for t, r in zip(templated_len, raw_len, strict=True)} == {6}
    limit = sorted(raw_len)[len(raw_len) // 2] + 2  # raw: about half fit; with the template's 6 tokens fewer do
    fit_raw, fit_templated = sum(n <= limit for n in raw_len), sum(n <= limit for n in templated_len)
    assert 0 < fit_templated < fit_raw
    for mode, kept in (("none", fit_raw), ("auto", fit_templated)):
        table = load_problems(_sample_cfg("verl_gsm8k", f"data.chat_template={mode}", f"data.max_prompt_len={limit}"),
                              glm_tok, SAMPLES["verl_gsm8k"][1])
        assert (table.report.kept, table.report.too_long) == (kept, 32 - kept)
        assert all(len(glm_tok.encode(p.prompt)) <= limit for p in table)
        assert f"kept {kept} of 32 prompts; {32 - kept} longer than data.max_prompt_len={limit}" in table.report.summary()


def test_char_tokenizer_has_no_template_and_auto_gives_raw_text():
    problem = PromptStream(_sample_cfg("verl_gsm8k"), 0, CharTokenizer(64)).problems[0]
    assert problem.prompt.startswith("Tom has 3 boxes") and "<|" not in problem.prompt


@pytest.mark.slow
def test_instruction_is_added_once_and_can_be_overridden_or_dropped(glm_tok):
    question = json.loads((ROOT / "data/gsm8k_sample.jsonl").read_text().splitlines()[0])["question"]
    openai = load_problems(_sample_cfg("openai_gsm8k_jsonl", "data.chat_template=none"), glm_tok,
                           "data/gsm8k_sample.jsonl")[0]
    verl = load_problems(_sample_cfg("verl_gsm8k", "data.chat_template=none"), glm_tok,
                         "data/verl_gsm8k_sample.parquet")[0]
    assert openai.prompt == verl.prompt == GSM8K_INSTRUCTION.replace("{prompt}", question)
    none = load_problems(_sample_cfg("openai_gsm8k_jsonl", "data.chat_template=none", "data.instruction="), glm_tok,
                         "data/gsm8k_sample.jsonl")[0]
    assert none.prompt == question
    mine = load_problems(_sample_cfg("openai_gsm8k_jsonl", "data.chat_template=none", "data.instruction='Q: {prompt} A:'"),
                         glm_tok, "data/gsm8k_sample.jsonl")[0]
    assert mine.prompt == f"Q: {question} A:"


def test_system_prompt_goes_first_through_the_template(glm_tok):
    problem = PromptStream(_sample_cfg("dapo_math_parquet", "data.system_prompt=be brief"), 0, glm_tok).problems[0]
    assert problem.prompt.startswith("[gMASK]<sop><|system|>\nbe brief<|user|>\n")
    assert problem.prompt.endswith("<|assistant|>\n")
    raw = PromptStream(_sample_cfg("dapo_math_parquet", "data.system_prompt=be brief", "data.chat_template=none"), 0,
                       glm_tok).problems[0]
    assert raw.prompt.startswith("be brief\n\nSolve the following math problem")


@pytest.mark.slow
def test_synthetic_prompts_stay_raw_text_with_a_checkpoint_tokenizer(glm_tok):
    stream = PromptStream(_data("data.task=synthetic_copy"), 3, glm_tok)
    assert re.fullmatch(r"c\d\d=", stream.problem(0).prompt)
    assert stream.take(0, 4) == PromptStream(_data("data.task=synthetic_copy"), 3, CharTokenizer(64)).take(0, 4)


def test_stream_is_a_pure_function_of_seed_and_position(glm_tok):
    cfg = _sample_cfg("dapo_math_parquet")
    a, b = PromptStream(cfg, 5, glm_tok), PromptStream(cfg, 5, glm_tok)
    n = len(a.problems)
    assert a.take(3, 2 * n) == [b.problem(3 + i) for i in range(2 * n)]  # across an epoch boundary
    assert sorted(p.answer for p in a.take(0, n)) == sorted(DAPO_ANSWERS)
    assert a.take(0, n) != a.take(n, n)  # each epoch reshuffled
    assert PromptStream(cfg, 6, glm_tok).take(0, n) != a.take(0, n)


def test_table_stays_arrow_backed():
    table = load_problems(_sample_cfg("dapo_math_parquet"), CharTokenizer(64), "data/dapo_math_sample.parquet")
    assert table.dataset.cache_files  # memory-mapped from datasets' cache, rows decoded when indexed
    assert table[2:4] == [table[2], table[3]]


# ---- EOS ids ----------------------------------------------------------------------------------------


def test_eos_ids_are_every_id_of_generation_config(glm_tok, tiny_glm_checkpoint):
    listed = json.loads((tiny_glm_checkpoint / "generation_config.json").read_text())["eos_token_id"]
    assert glm_tok.eos_ids == tuple(listed) == (0, 4, 6)
    text = glm_tok.encode("12")
    assert glm_tok.decode(text + [4] + glm_tok.encode("34")) == "12"  # <|user|> ends the turn
    assert glm_tok.decode(text + [6, 0]) == "12"
    assert CharTokenizer(64).eos_ids == (1,)


class _ScriptedModel(torch.nn.Module):
    """Emits `script[k]` at decode step k, whatever the input (a stand-in for the policy)."""

    def __init__(self, script, vocab=64):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.config = types.SimpleNamespace(model_type="scripted")
        self.script, self.vocab, self.step = script, vocab, 0

    def forward(self, input_ids, use_cache=True, cache=None, **_):
        logits = torch.full((input_ids.shape[0], input_ids.shape[1], self.vocab), -30.0)
        logits[:, -1, self.script[min(self.step, len(self.script) - 1)]] = 30.0
        self.step += 1
        return types.SimpleNamespace(logits=logits, cache=None)


@pytest.mark.parametrize("stop", [0, 4, 6])
def test_hf_sampling_stops_at_any_eos_id(stop):
    from launcher.contract.messages import SamplingParams
    from launcher.workers.hf.sampling import sample

    (result,) = sample(_ScriptedModel([9, 11, stop, 12]), [[3, 5]], SamplingParams(max_tokens=6), (0, 4, 6), 0, seed=0)
    assert result.tokens == [9, 11, stop] and result.finished
    (one_id,) = sample(_ScriptedModel([9, 11, 4, 12]), [[3, 5]], SamplingParams(max_tokens=6), 0, 0, seed=0)
    assert one_id.tokens == [9, 11, 4, 12, 12, 12] and not one_id.finished  # the old single-id behaviour


def test_hf_engine_takes_the_checkpoints_eos_ids(tiny_glm_checkpoint):
    from launcher.workers import engine_class

    cfg = compose_shipped(["recipe=tiny_grpo", f"model.hf_path={tiny_glm_checkpoint}"]).config
    assert engine_class("hf")(ActorSpec.planned(cfg, 0)).eos_ids == (0, 4, 6)


def test_vllm_requests_stop_on_every_eos_id(tiny_glm_checkpoint, monkeypatch):
    from launcher.contract.messages import SamplingParams
    from launcher.workers.vllm import engine as vllm_engine
    from launcher.workers.vllm.actor import VllmInference
    from launcher.workers.vllm.sampling import stop_ids

    class FakeEngine:
        def __init__(self, cfg, plan, *, eos_id, pad_id, seed, engine_index=0):
            self.eos_id, self.model_dir_eos = eos_id, eos_id

    monkeypatch.setattr(vllm_engine, "VllmEngine", FakeEngine)
    cfg = compose_shipped(["recipe=tiny_qwen3_vllm", f"model.hf_path={tiny_glm_checkpoint}"]).config
    engine = VllmInference(ActorSpec.planned(cfg, 0)).engine
    assert engine.model_dir_eos == 0 and stop_ids(engine.eos_id) == [0, 4, 6]
    assert stop_ids(7) == [7]
    pytest.importorskip("vllm")
    from launcher.workers.vllm.sampling import vllm_sampling_params

    params = vllm_sampling_params(SamplingParams(max_tokens=4), engine.eos_id, seed=1)
    assert list(params.stop_token_ids) == [0, 4, 6]


# ---- bad rows ---------------------------------------------------------------------------------------

GOOD = {"question": "what is 1+1?", "answer": "#### 2"}


def _write_jsonl(path: Path) -> Path:
    lines = [json.dumps(GOOD), "", json.dumps({"question": "q2", "answer": None}), '{"question": "q3", "answer": ',
             json.dumps({"question": None, "answer": "#### 4"}), json.dumps({**GOOD, "question": "what is 2+2?"})]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_bad_jsonl_rows_are_named_by_line_and_refused(tmp_path):
    file = _write_jsonl(tmp_path / "d.jsonl")
    cfg = _data("data.task=gsm8k", f"data.train_path={file}", "data.prompt_key=question")
    assert cfg.bad_rows.value == "error"  # the default
    with pytest.raises(DataError) as err:
        PromptStream(cfg, 0, CharTokenizer(64))
    message = str(err.value)
    assert f"{file}:3: answer is null" in message
    assert f"{file}:4: malformed JSON" in message
    assert f"{file}:5: prompt is null" in message
    assert "3 bad rows of 5" in message and "data.bad_rows=skip" in message


def test_bad_jsonl_rows_are_skipped_and_reported(tmp_path, capsys):
    file = _write_jsonl(tmp_path / "d.jsonl")
    cfg = _data("data.task=gsm8k", f"data.train_path={file}", "data.prompt_key=question", "data.bad_rows=skip",
                "data.instruction=", "data.max_prompt_len=64")
    stream = PromptStream(cfg, 0, CharTokenizer(64))
    assert sorted(p.prompt for p in stream.problems) == ["what is 1+1?", "what is 2+2?"]
    assert [p.answer for p in stream.problems] == ["2", "2"]
    report = stream.problems.report
    assert (report.rows, report.kept) == (5, 2) and len(report.bad) == 3
    printed = capsys.readouterr().out
    assert "kept 2 of 5 prompts" in printed and "3 bad rows skipped" in printed and f"{file}:4: malformed JSON" in printed


def test_bad_parquet_rows_are_named_by_row_index(tmp_path):
    file = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist([
        {"prompt": [{"role": "user", "content": "q0"}], "reward_model": {"ground_truth": "1"}},
        {"prompt": [{"role": "user", "content": "q1"}], "reward_model": {"ground_truth": None}},
        {"prompt": [], "reward_model": {"ground_truth": "3"}},
        {"prompt": [{"role": "user", "content": "q3"}], "reward_model": None},
    ]), file)
    cfg = _data("data.task=dapo_math", f"data.train_path={file}", "data.answer_key=reward_model.ground_truth",
                "data.max_prompt_len=4096")
    with pytest.raises(DataError) as err:
        load_problems(cfg, CharTokenizer(64), str(file))
    message = str(err.value)
    for row, why in ((1, "answer is null"), (2, "prompt is an empty list"), (3, "answer is null")):
        assert f"{file} row {row}: {why}" in message
    cfg.bad_rows = "skip"
    table = load_problems(cfg, CharTokenizer(64), str(file))
    assert [p.answer for p in table] == ["1"] and len(table.report.bad) == 3


def test_a_missing_nested_column_names_the_key(tmp_path):
    cfg = _sample_cfg("verl_gsm8k", "data.answer_key=reward_model.answer")
    with pytest.raises(KeyError, match=r"data.answer_key.*reward_model.ground_truth|reward_model.ground_truth.*data"):
        load_problems(cfg, CharTokenizer(64), SAMPLES["verl_gsm8k"][1])


def test_copy_demo_splits_hold_disjoint_strings_in_one_prompt_width():
    """The default recipe's held-out accuracy measures copying strings training never showed;
    both answer lengths train (the ten one-digit strings all do), prompts have one width."""
    answers, widths = {}, set()
    for split in ("train", "val"):
        rows = pq.read_table(ROOT / f"data/copy_{split}.parquet").to_pylist()
        answers[split] = {r["reward_model"]["ground_truth"] for r in rows}
        widths |= {len(r["prompt"][0]["content"]) for r in rows}
    assert {len(a) for a in answers["train"]} == {1, 2} and {len(a) for a in answers["val"]} == {2}
    assert len(answers["val"]) == 20 and not answers["train"] & answers["val"] and widths == {len("c57")}
