"""Custom rewards (`data.reward_fn`), the guard that keeps any reward from ending a run, the
`reward_errors` metric, and DATA003 (which finds the module without importing it)."""
import io
import signal
import sys
import textwrap
import threading
import time

import pytest

from launcher.rl.reward_fn import (
    LOGGED_ERRORS,
    RewardFnError,
    RewardScorer,
    custom_score,
    find_module_file,
    load_reward_fn,
    make_scorer,
)
from launcher.rl.tasks import TASKS, Problem
from tests.shared_compose import compose_shipped

REWARDS = textwrap.dedent('''
    import time

    calls = []

    def verl_style(data_source, solution_str, ground_truth, extra_info):
        calls.append((data_source, solution_str, ground_truth, extra_info))
        extra_info["seen"] = True  # must not leak into the Problem
        return {"score": 0.5 if solution_str == ground_truth else 0.0, "acc": solution_str == ground_truth,
                "pred": solution_str}

    def plain(data_source, solution_str, ground_truth, extra_info=None, sandbox_url=None):
        return float(solution_str == ground_truth)

    def flaky(data_source, solution_str, ground_truth, extra_info):
        if solution_str.startswith("x"):
            raise RuntimeError("cannot parse " + solution_str[:3])
        return 1.0

    def returns_nan(data_source, solution_str, ground_truth, extra_info):
        return float("nan")

    def returns_text(data_source, solution_str, ground_truth, extra_info):
        return "1.0"

    def no_score(data_source, solution_str, ground_truth, extra_info):
        return {"acc": True}

    def sleeps(data_source, solution_str, ground_truth, extra_info):
        time.sleep(30)

    def spins_and_swallows(data_source, solution_str, ground_truth, extra_info):
        while True:
            try:
                sum(range(1000))
            except Exception:
                pass

    NOT_A_FUNCTION = 3
''')


@pytest.fixture
def rewards_module(tmp_path, monkeypatch):
    """A user's reward module in tmp_path, importable as `user_rewards` (fresh in every test)."""
    (tmp_path / "user_rewards.py").write_text(REWARDS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "user_rewards", raising=False)
    yield tmp_path
    sys.modules.pop("user_rewards", None)


def _scorer(fn: str, task: str = "synthetic_copy", **kwargs) -> RewardScorer:
    return RewardScorer(TASKS.get(task), f"user_rewards:{fn}", data_source=task, **kwargs)


def test_custom_reward_through_score_group(rewards_module):
    """The loops' entry point (rollout.score_group with the run's scorer) calls the user's function
    with verl's arguments; a dict's score is the reward and its acc the accuracy."""
    import torch

    from launcher.contract.messages import Generation
    from launcher.driver.loop.rollout import score_group
    from launcher.driver.loop.step import generation_summary
    from launcher.rl.algorithm import make_algorithm
    from launcher.rl.tokenizer import CharTokenizer

    cfg = compose_shipped(["recipe=tiny_grpo", "data.reward_fn=user_rewards:verl_style"]).config
    scorer = make_scorer(cfg.data)
    tok = CharTokenizer(64)
    problem = Problem("c57=", "57", extra_info={"index": 4})
    gen = Generation(tokens=[tok.encode("57"), tok.encode("75")], logprobs=[[0.0, 0.0]] * 2, finished=[True] * 2,
                     policy_version=0, token_versions=[[0, 0]] * 2)
    group = score_group(problem, tok.encode(problem.prompt), gen, range(2), scorer, tok, make_algorithm(cfg.algorithm))
    assert group.task_rewards == [0.5, 0.0] and group.correct == [True, False] and group.reward_errors == 0
    assert torch.allclose(torch.tensor(group.rewards), torch.tensor([0.5, 0.0]))  # GRPO: no shaping
    calls = sys.modules["user_rewards"].calls
    assert calls[0][:3] == ("synthetic_copy", "57", "57")  # data_source falls back to data.task
    assert calls[0][3] == {"index": 4, "seen": True} and problem.extra_info == {"index": 4}
    assert generation_summary([group], 0.0)["reward_errors"] == 0

    tagged = Problem("c57=", "57", data_source="openai/gsm8k")
    scorer.score("57", tagged)
    assert calls[-1][0] == "openai/gsm8k" and calls[-1][3] == {"seen": True}  # {} when the row has none


def test_custom_reward_errors_are_counted_in_step_metrics(rewards_module):
    from launcher.contract.messages import Generation
    from launcher.driver.loop.rollout import score_group
    from launcher.driver.loop.step import generation_summary
    from launcher.rl.algorithm import make_algorithm
    from launcher.rl.tokenizer import CharTokenizer

    cfg = compose_shipped(["recipe=tiny_grpo", "data.reward_fn=user_rewards:flaky"]).config
    log = io.StringIO()
    scorer = RewardScorer(TASKS.get(cfg.data.task), cfg.data.reward_fn, log=log)
    tok = CharTokenizer(64)
    texts = ["x1", "57", "x2", "x3"]
    gen = Generation(tokens=[tok.encode(t) for t in texts], logprobs=[[0.0, 0.0]] * 4, finished=[True] * 4,
                     policy_version=0, token_versions=[[0, 0]] * 4)
    groups = [score_group(Problem("c57=", "57"), [1], gen, range(4), scorer, tok, make_algorithm(cfg.algorithm))
              for _ in range(2)]
    assert groups[0].task_rewards == [0.0, 1.0, 0.0, 0.0] and groups[0].reward_errors == 3
    assert generation_summary(groups, 0.0)["reward_errors"] == 6 and scorer.errors == 6
    lines = log.getvalue().splitlines()
    assert len(lines) == LOGGED_ERRORS + 1  # the first ones, then one line saying the rest are only counted
    assert "RuntimeError: cannot parse x1" in lines[0] and "data.reward_fn=user_rewards:flaky" in lines[0]
    assert "'x1'" in lines[0] and "only counted" in lines[-1]


@pytest.mark.parametrize("value, expected", [
    (1.0, (1.0, True)), (0.25, (0.25, False)), (True, (1.0, True)), (0, (0.0, False)),
    ({"score": 1.0}, (1.0, True)), ({"score": 1.0, "acc": False}, (1.0, False)),
    ({"score": -0.5, "acc": 1, "extra": "x"}, (-0.5, True)),
])
def test_custom_return_values(value, expected):
    assert custom_score(value) == expected


@pytest.mark.parametrize("fn, error", [
    ("returns_nan", "nan, expected a finite number"),
    ("returns_text", "expected a number"),
    ("no_score", "without 'score'"),
])
def test_bad_return_values_score_zero_and_are_counted(rewards_module, fn, error):
    scorer = _scorer(fn, log=io.StringIO())
    score = scorer.score("57", Problem("c57=", "57"))
    assert (score.reward, score.correct) == (0.0, False) and error in score.error and scorer.errors == 1


@pytest.mark.parametrize("fn", ["sleeps", "spins_and_swallows"])
def test_a_hanging_reward_times_out(rewards_module, fn):
    scorer = _scorer(fn, timeout_s=0.3, log=io.StringIO())
    started = time.monotonic()
    score = scorer.score("57", Problem("c57=", "57"))
    assert time.monotonic() - started < 3
    assert score.reward == 0.0 and score.error == "timed out after 0.3 s" and scorer.errors == 1
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)  # disarmed
    assert scorer.score("57", Problem("c57=", "57")).error == "timed out after 0.3 s"  # and usable again


def test_timeout_off_the_main_thread(rewards_module):
    """No signals there: the call runs in a helper thread that is abandoned after the limit."""
    scorer = _scorer("sleeps", timeout_s=0.3, log=io.StringIO())
    out = []
    worker = threading.Thread(target=lambda: out.append(scorer.score("57", Problem("c57=", "57"))))
    worker.start()
    worker.join(5)
    assert out and out[0].error == "timed out after 0.3 s"
    ok = _scorer("plain")
    worker = threading.Thread(target=lambda: out.append(ok.score("57", Problem("c57=", "57"))))
    worker.start()
    worker.join(5)
    assert (out[1].reward, out[1].correct, out[1].error) == (1.0, True, None)


def test_a_running_alarm_is_given_back():
    previous = signal.signal(signal.SIGALRM, lambda *_: None)
    signal.setitimer(signal.ITIMER_REAL, 30.0)
    try:
        RewardScorer(TASKS.get("dapo_math")).score("Answer: \\frac{1}{2}", Problem("p", "0.5"))
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 25.0 < left <= 30.0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("response", ["Answer: nan", "Answer: inf", "Answer: 1e400"])
def test_builtin_math_scorer_never_raises(response):
    scorer = RewardScorer(TASKS.get("dapo_math"), log=io.StringIO())
    assert scorer.score(response, Problem("p", "1")).reward == 0.0
    assert scorer.score("Answer: x=3", Problem("p", "3")).correct


def test_builtin_scorer_that_raises_is_counted(monkeypatch):
    from launcher.rl import rewards

    def broken(response, answer):
        raise ValueError("could not convert string to float: 'nan'")

    monkeypatch.setattr(rewards, "math_equal", lambda *a: broken(*a))
    log = io.StringIO()
    scorer = RewardScorer(TASKS.get("dapo_math"), log=log)
    score = scorer.score("Answer: " + "9" * 500, Problem("p", "1"))
    assert score.reward == 0.0 and "ValueError" in score.error and scorer.errors == 1
    line = log.getvalue()
    assert "data.task=dapo_math" in line and "..." in line and len(line) < 700  # the response is cut short


@pytest.mark.parametrize("spec, message", [
    ("user_rewards", "not of the form 'package.module:function'"),
    ("user_rewards:", "not of the form"),
    ("user rewards:fn", "not of the form"),
    ("no_such_module_q7:fn", "cannot import module 'no_such_module_q7'"),
    ("user_rewards:missing", "has no attribute 'missing'"),
    ("user_rewards:NOT_A_FUNCTION", "is a int, not a function"),
])
def test_bad_reward_fn_fails_when_the_run_starts(rewards_module, spec, message):
    with pytest.raises(RewardFnError, match="data.reward_fn") as err:
        make_scorer(compose_shipped(["recipe=tiny_grpo", f"data.reward_fn={spec}"]).config.data)
    assert message in str(err.value) and repr(spec) in str(err.value)


def test_import_error_inside_the_module_is_named(tmp_path, monkeypatch):
    (tmp_path / "broken_rewards.py").write_text("import not_installed_pkg_q7\ndef fn(*a): return 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(RewardFnError, match="cannot import module 'broken_rewards'.*not_installed_pkg_q7"):
        load_reward_fn("broken_rewards:fn")
    sys.modules.pop("broken_rewards", None)


# --- DATA003: found without importing ------------------------------------------------------

EXPLODES = "open({marker!r}, 'w').write('imported')\nraise SystemExit('user code ran')\n"


def _rule(spec: str) -> list:
    from launcher.validate.rules.data import reward_fn_found

    return list(reward_fn_found(compose_shipped(["recipe=tiny_grpo", f"data.reward_fn={spec}"]).config, None))


@pytest.mark.slow
def test_rule_finds_modules_without_running_them(tmp_path, monkeypatch):
    marker = tmp_path / "imported.txt"
    (tmp_path / "evil_rewards.py").write_text(EXPLODES.format(marker=str(marker)))
    package = tmp_path / "evil_pkg" / "sub"
    package.mkdir(parents=True)
    for folder in (tmp_path / "evil_pkg", package):
        (folder / "__init__.py").write_text(EXPLODES.format(marker=str(marker)))
    (package / "scores.py").write_text(EXPLODES.format(marker=str(marker)))
    (tmp_path / "ns_pkg").mkdir()
    (tmp_path / "ns_pkg" / "r.py").write_text(EXPLODES.format(marker=str(marker)))
    monkeypatch.syspath_prepend(str(tmp_path))
    for spec in ("evil_rewards:fn", "evil_pkg.sub.scores:fn", "evil_pkg.sub:fn", "evil_pkg:fn", "ns_pkg.r:fn"):
        assert _rule(spec) == [], spec
    assert find_module_file("evil_pkg.sub.scores") == package / "scores.py"
    assert find_module_file("ns_pkg.r") == tmp_path / "ns_pkg" / "r.py"
    assert find_module_file("launcher.rl.rewards").name == "rewards.py"
    assert not marker.exists()
    assert not {"evil_rewards", "evil_pkg", "ns_pkg"} & set(sys.modules)


@pytest.mark.slow
@pytest.mark.parametrize("spec, message", [
    ("no_such_module_q7:fn", "data.reward_fn='no_such_module_q7:fn': module 'no_such_module_q7' not found"),
    ("launcher.rl.no_such_file:fn", "module 'launcher.rl.no_such_file' not found"),
    ("launcher.rl.rewards.deeper:fn", "not found"),  # rewards is a module, not a package
    ("just_a_module", "data.reward_fn='just_a_module' is not of the form 'package.module:function'"),
])
def test_rule_fails_missing_or_malformed(spec, message):
    (finding,) = _rule(spec)
    assert finding.id == "DATA003" and finding.key == "data.reward_fn" and finding.severity == "error"
    assert message in finding.message and finding.why and finding.fix


@pytest.mark.slow
def test_validate_cli_imports_the_module_in_a_child_process(tmp_path, cli):
    """`python -m launcher validate` from the folder holding the module (the current folder is on
    the path): found (DATA003), then imported as the run's start would, in a child process
    (DATA010): its SystemExit is a finding naming it, not validate's own exit."""
    marker = tmp_path / "imported.txt"
    (tmp_path / "my_rewards.py").write_text(EXPLODES.format(marker=str(marker)))
    (tmp_path / "good_rewards.py").write_text("def compute_score(data_source, solution_str, ground_truth, "
                                             "extra_info=None):\n    return 1.0\n")
    exits = cli("validate", "recipe=tiny_grpo", "data.reward_fn=my_rewards:compute_score", cwd=tmp_path)
    assert exits.returncode == 1 and "[ERROR DATA010] data.reward_fn" in exits.stdout, exits.stdout + exits.stderr
    assert "cannot import module 'my_rewards' (SystemExit: user code ran)" in exits.stdout
    assert marker.exists()  # the child ran it
    ok = cli("validate", "recipe=tiny_grpo", "data.reward_fn=good_rewards:compute_score", cwd=tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = cli("validate", "recipe=tiny_grpo", "data.reward_fn=other_rewards:compute_score", cwd=tmp_path)
    assert bad.returncode == 1 and "DATA003" in bad.stdout and "other_rewards" in bad.stdout
    assert "DATA010" not in bad.stdout


def test_the_import_check_never_imports_into_validates_process(tmp_path, monkeypatch):
    from launcher.validate.rules.reward import reward_fn_loads

    marker = tmp_path / "imported.txt"
    (tmp_path / "child_only_rewards.py").write_text(EXPLODES.format(marker=str(marker)))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    (found,) = reward_fn_loads(compose_shipped(["recipe=tiny_grpo", "data.reward_fn=child_only_rewards:fn"]).config, None)
    assert found.id == "DATA010" and "SystemExit: user code ran" in found.message
    assert marker.exists() and "child_only_rewards" not in sys.modules
