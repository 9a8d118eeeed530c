"""Tokenizer, prompt streams (synthetic and files), registries, checkpoint bookkeeping."""
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from launcher.driver.loop.data import PromptStream
from launcher.driver.records.checkpoint import Checkpointer, DriverState, ResumeError, resolve_resume
from launcher.registry import Registry, UnknownNameError
from launcher.rl.tokenizer import EOS_ID, UNK_TEXT, CharTokenizer
from launcher.workers import engine_class, trainer_class
from tests.shared_compose import compose_shipped


def test_char_tokenizer_round_trip_and_visible_unknowns():
    tok = CharTokenizer(64)
    ids = tok.encode("C57=")
    assert tok.decode(ids) == "c57="
    assert tok.decode(ids + [EOS_ID] + ids) == "c57="
    assert tok.decode([63]) == UNK_TEXT  # unused vocabulary ids cannot print as nothing
    with pytest.raises(ValueError, match="vocab_size"):
        CharTokenizer(32)


def test_synthetic_stream_is_a_function_of_position():
    data = compose_shipped(["recipe=tiny_grpo"]).config.data
    stream = PromptStream(data, seed=3, tokenizer=CharTokenizer(64))
    assert stream.take(5, 3) == [stream.problem(5), stream.problem(6), stream.problem(7)]
    assert stream.take(0, 4) == PromptStream(data, 3, CharTokenizer(64)).take(0, 4)


def _data_cfg(path, **extra):
    # No instruction: these tests check the file's own prompt text.
    cfg = compose_shipped(["recipe=tiny_grpo", "data.task=gsm8k", f"data.train_path={path}", "data.prompt_key=question",
                           "data.instruction=",
                           "data.max_prompt_len=512"]).config.data
    for key, value in extra.items():
        setattr(cfg, key, value)
    return cfg


def test_jsonl_and_parquet_give_the_same_shuffled_epochs(tmp_path):
    rows = [{"question": f"q{i}", "answer": f"#### {i}"} for i in range(5)]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "d.parquet")
    a = PromptStream(_data_cfg(tmp_path / "d.jsonl"), 0, CharTokenizer(64))
    b = PromptStream(_data_cfg(tmp_path / "d.parquet"), 0, CharTokenizer(64))
    epoch0 = a.take(0, 5)
    assert epoch0 == b.take(0, 5)
    assert sorted(p.prompt for p in epoch0) == [f"q{i}" for i in range(5)]
    assert sorted(p.prompt for p in a.take(5, 5)) == [f"q{i}" for i in range(5)]


def test_missing_column_and_long_prompts(tmp_path):
    (tmp_path / "d.jsonl").write_text(json.dumps({"prompt": "x" * 20, "answer": "1"}) + "\n")
    with pytest.raises(KeyError, match="data.prompt_key"):  # also DATA004 before Ray starts
        PromptStream(_data_cfg(tmp_path / "d.jsonl"), 0, CharTokenizer(64))
    cfg = _data_cfg(tmp_path / "d.jsonl", prompt_key="prompt", max_prompt_len=10)
    with pytest.raises(ValueError, match="max_prompt_len"):
        PromptStream(cfg, 0, CharTokenizer(64))


def test_shipped_samples_load():
    for recipe in ("gsm8k_grpo", "dapo_async"):
        data = compose_shipped([f"recipe={recipe}"]).config.data
        stream = PromptStream(data, 0, CharTokenizer(64))
        assert len(stream.problems) >= 30
        # the response a model following the task's instruction writes (gsm8k answers are the number after ####)
        response = ("#### " if recipe == "gsm8k_grpo" else "Answer: ") + stream.problems[0].answer
        assert stream.task.score(response, stream.problems[0].answer)[1]


def test_registry_rejects_duplicates_and_lists_names_on_a_miss():
    reg: Registry = Registry("thing")
    reg.register("a")(1)
    with pytest.raises(ValueError, match="registered twice"):
        reg.register("a")(2)
    with pytest.raises(UnknownNameError, match="known: a"):
        reg.get("b")


def test_backends_are_found_by_short_name():
    assert trainer_class("hf").__name__ == "HfTrainer"
    assert engine_class("hf").__name__ == "HfEngine"
    with pytest.raises(UnknownNameError, match="hf"):
        trainer_class("nope")


def _fake_save(root, step):
    d = root / f"step_{step:06d}"
    d.mkdir(parents=True)
    (d / "driver.json").write_text(json.dumps({"step": step}))
    return d


def test_only_complete_checkpoints_count(tmp_path):
    ck = Checkpointer(tmp_path, every_steps=2, keep=2, total_steps=5)
    assert ck.due(2) and ck.due(4) and ck.due(5) and not ck.due(3)
    _fake_save(tmp_path, 2)
    assert ck.latest() is None  # no COMPLETE mark: a save that was cut short
    (tmp_path / "step_000002" / "COMPLETE").write_text("")
    assert ck.latest().name == "step_000002"
    assert resolve_resume("auto", ck).name == "step_000002"
    with pytest.raises(ResumeError, match="run.resume=auto"):
        resolve_resume("never", ck)
    with pytest.raises(ResumeError, match="COMPLETE"):
        resolve_resume(str(tmp_path / "nowhere"), ck)


class _Trainers:
    """A trainer group whose save writes an empty folder and whose writes are done at once."""

    def call(self, method, *args):
        import pathlib

        if method == "finalize_checkpoint":
            return [0.0]
        pathlib.Path(args[0]).mkdir()


def test_async_save_is_not_latest_until_finished(tmp_path):
    ck = Checkpointer(tmp_path, every_steps=1, keep=2, total_steps=5)
    ck.save(_Trainers(), DriverState(step=1), async_write=True)
    assert ck.latest() is None and list(tmp_path.glob(".*partial"))
    assert "checkpoint_write_s" in ck.finish(_Trainers())
    assert ck.latest().name == "step_000001" and not list(tmp_path.glob(".*partial"))


def test_save_prunes_to_keep(tmp_path):
    ck = Checkpointer(tmp_path, every_steps=1, keep=2, total_steps=5)
    for step in range(1, 5):
        ck.save(_Trainers(), DriverState(step=step))
    assert [p.name for p in ck.complete()] == ["step_000003", "step_000004"]
    assert not list(tmp_path.glob(".*partial"))


def test_default_recipe_prompts_carry_the_shipped_tokenizers_chat_template():
    """tiny_grpo_chat's random-init model reads the verl parquet through data/tiny_tokenizer:
    each prompt is [gMASK]<sop><|user|>\\n...<|assistant|>\\n and a response ends at any of the
    tokenizer's generation_config eos ids."""
    from launcher.rl.tokenizer import make_tokenizer

    cfg = compose_shipped(["recipe=tiny_grpo_chat"]).config
    tok = make_tokenizer(cfg.model)
    problem = PromptStream(cfg.data, 0, tok).problem(0)
    ids = tok.encode(problem.prompt)
    assert ids[:3] == [1, 2, 4] and ids[-2:] == tok.encode("<|assistant|>\n") and len(ids) <= cfg.data.max_prompt_len
    assert problem.answer.isdigit() and tok.eos_ids == (0, 4, 6)
