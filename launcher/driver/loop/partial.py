"""Partial rollouts (algorithm.partial_rollout.max_tokens_per_step), sync loop: a step gives
each sequence at most a token budget instead of waiting for its group's longest one.

A sequence without an EOS and below max_response_len when its budget runs out is carried in
DriverState.carried to the next step, which sends it again as prompt + its tokens so far and
asks only for what is left of its budget; its tokens keep the behaviour log-probs and policy
versions they were sampled with (the re-sent prefix is prefilled by the new weights, so each
token's log-prob is its own version's over the whole sequence before it). A group is scored
(and kept or dropped by dynamic sampling) only once every sample is finished.

Carried groups are plain JSON in DriverState (checkpointed with it, restored with it when a
preemption drops the step); a group names its problem by its prompt-stream position, so a
resume draws the same problem. Chunk seeds are (run seed, step, round, chunk) and a round's
chunks are cut in a fixed order (carried groups first, by stream position), so a resumed run
continues each sequence with the same tokens as an uninterrupted one.
"""
import copy
from collections import Counter
from dataclasses import asdict, dataclass

from launcher.contract.messages import Generation, GenerationRequest, SamplingParams
from launcher.driver.loop.rollout import score_group
from launcher.driver.records.checkpoint import ResumeError


@dataclass
class PartialGroup:
    """One prompt's samples part-way through; per-sample lists are aligned."""

    data_index: int
    """Its problem's prompt-stream position (PromptStream.problem)."""
    tokens: list[list[int]]
    logprobs: list[list[float]]
    """Per token, its behaviour log-prob under its own version (Generation.logprobs)."""
    token_versions: list[list[int]]
    eos: list[bool]
    """The sample ended with an EOS id (Generation.finished)."""

    @classmethod
    def fresh(cls, data_index: int, samples: int) -> "PartialGroup":
        return cls(data_index, [[] for _ in range(samples)], [[] for _ in range(samples)],
                   [[] for _ in range(samples)], [False] * samples)

    def done(self, sample: int, max_response_len: int) -> bool:
        return self.eos[sample] or len(self.tokens[sample]) >= max_response_len

    def complete(self, max_response_len: int) -> bool:
        return all(self.done(s, max_response_len) for s in range(len(self.tokens)))

    def absorb(self, sample: int, gen: Generation, row: int) -> None:
        """Append row `row` of `gen`, the continuation of `sample`."""
        self.tokens[sample] = self.tokens[sample] + gen.tokens[row]
        self.logprobs[sample] = self.logprobs[sample] + gen.logprobs[row]
        self.token_versions[sample] = self.token_versions[sample] + gen.token_versions[row]
        self.eos[sample] = gen.finished[row]

    def as_generation(self) -> Generation:
        """The finished group as one Generation of its samples (what rollout.score_group reads)."""
        return Generation(tokens=self.tokens, logprobs=self.logprobs, finished=self.eos,
                          policy_version=min(min(v) for v in self.token_versions), token_versions=self.token_versions)


def to_state(groups: list[PartialGroup]) -> list[dict]:
    return [asdict(g) for g in groups]


def from_state(rows: list[dict]) -> list[PartialGroup]:
    """Copies: a step extends its groups in place, and a dropped step restores the state before it."""
    return [PartialGroup(**copy.deepcopy(row)) for row in rows]


@dataclass
class _Row:
    """One unfinished sample to continue: (group index in the round, sample, tokens asked)."""

    group: int
    sample: int
    max_tokens: int


def continuation_rows(groups: list[PartialGroup], max_response_len: int, budget: int) -> list[_Row]:
    """Every unfinished sample, asking for min(budget, what max_response_len leaves)."""
    return [_Row(g, s, min(budget, max_response_len - len(group.tokens[s])))
            for g, group in enumerate(groups) for s in range(len(group.tokens))
            if not group.done(s, max_response_len)]


def continuation_chunks(groups: list[PartialGroup], prompt_ids: list[list[int]], alg, rows_per_chunk: int,
                        seed_of) -> list[tuple[list[_Row], GenerationRequest]]:
    """(rows, request) per chunk: rows asking the same number of tokens (one request has one
    max_tokens), in (tokens asked, group, sample) order, at most rows_per_chunk each; each row's
    prompt is its group's prompt and the sample's tokens so far. `seed_of(c)`: chunk c's seed."""
    budget = alg.partial_rollout.max_tokens_per_step or alg.max_response_len
    rows = sorted(continuation_rows(groups, alg.max_response_len, budget),
                  key=lambda r: (-r.max_tokens, r.group, r.sample))
    cuts = [rows[i:i + rows_per_chunk] for i in range(0, len(rows), rows_per_chunk)]
    cuts = [part for cut in cuts for part in _split_by_max_tokens(cut)]
    return [(cut, GenerationRequest(prompts=[prompt_ids[r.group] + groups[r.group].tokens[r.sample] for r in cut],
                                    seed=seed_of(c), sampling=SamplingParams(max_tokens=cut[0].max_tokens,
                                                                             temperature=alg.temperature,
                                                                             top_p=alg.top_p)))
            for c, cut in enumerate(cuts)]


def _split_by_max_tokens(rows: list[_Row]) -> list[list[_Row]]:
    parts: list[list[_Row]] = []
    for row in rows:
        if parts and parts[-1][0].max_tokens == row.max_tokens:
            parts[-1].append(row)
        else:
            parts.append([row])
    return parts


@dataclass
class RoundResult:
    scored: list
    """(round, group index in the round, Group) of every group finished in the round."""
    carried_out: list[PartialGroup]
    """Groups with an unfinished sample, by stream position: the next step's first."""
    tokens: int
    """Tokens generated in the round."""


def generate_round(rt, round_index: int, groups: list[PartialGroup], rows_per_chunk: int, seed_of,
                   on_done=lambda n_rows: None) -> RoundResult:
    """Continue every unfinished sample of `groups` by one budget; score the groups that end
    complete as their last chunk comes back, return the others to carry. `on_done(n)`: a chunk
    of n sequences is back (the progress bar)."""
    alg = rt.config.algorithm
    problems = [rt.stream.problem(g.data_index) for g in groups]
    prompt_ids = [rt.tokenizer.encode(p.prompt) for p in problems]
    chunks = continuation_chunks(groups, prompt_ids, alg, rows_per_chunk, seed_of)
    pending = {rt.engines.submit(request, c): rows for c, (rows, request) in enumerate(chunks)}
    rows_left = Counter(r.group for rows, _ in chunks for r in rows)
    result = RoundResult(scored=[], carried_out=[], tokens=0)
    while pending:
        for ref in rt.engines.wait_done(list(pending)):
            rows, gen = pending.pop(ref), rt.engines.result(ref)
            result.tokens += sum(len(t) for t in gen.tokens)
            for i, r in enumerate(rows):
                groups[r.group].absorb(r.sample, gen, i)
                rows_left[r.group] -= 1
            for g in sorted({r.group for r in rows if not rows_left[r.group]}):  # its last chunk is back
                if not groups[g].complete(alg.max_response_len):
                    result.carried_out.append(groups[g])
                    continue
                result.scored.append((round_index, g, score_group(
                    problems[g], prompt_ids[g], groups[g].as_generation(), range(alg.samples_per_prompt),
                    rt.scorer, rt.tokenizer, rt.algorithm)))
            on_done(len(rows))
    result.carried_out.sort(key=lambda g: g.data_index)
    return result


def _check_group_size(carried: list[PartialGroup], samples: int) -> None:
    """A checkpoint's carried groups were cut with the samples_per_prompt of the run that saved it."""
    sizes = sorted({len(g.tokens) for g in carried} - {samples})
    if sizes:
        raise ResumeError(f"the checkpoint carries unfinished groups of {sizes[0]} samples (partial rollouts) but "
                          f"algorithm.samples_per_prompt={samples}: a group is scored and trained whole. Resume with "
                          f"algorithm.samples_per_prompt={sizes[0]}, or start the run afresh (run.resume=never with a "
                          "new run.name).")


def refuse_in_async(state) -> None:
    """The async loop has no partial rollouts (PART002): a checkpoint of a colocated run that
    carries unfinished groups would have them silently dropped there."""
    if state.carried:
        raise ResumeError(f"the checkpoint carries {len(state.carried)} unfinished groups (algorithm.partial_rollout "
                          "in the colocated loop), which placement.mode=async does not continue: resume with "
                          "placement.mode=colocated until they are trained, or start the run afresh (run.resume=never "
                          "with a new run.name).")


def active(rt) -> bool:
    """Partial rollouts run when configured, and on a resume that turned them off until the
    checkpoint's carried groups are finished (then with max_response_len as the budget)."""
    return bool(rt.config.algorithm.partial_rollout.max_tokens_per_step or rt.state.carried)


class StepCarry:
    """One sync step's partial rollouts: round 0 continues the carried groups first and fills
    the rest with new prompts; a group left unfinished by any round is carried out and, like a
    kept one, fills the step's share (dynamic sampling regenerates only for dropped groups), so
    never more than prompts_per_step groups are carried."""

    def __init__(self, rt):
        self.rt = rt
        self.carried_in = from_state(rt.state.carried)
        _check_group_size(self.carried_in, rt.config.algorithm.samples_per_prompt)
        self.sequences_in = sum(not g.done(s, rt.config.algorithm.max_response_len)
                                for g in self.carried_in for s in range(len(g.tokens)))
        self.carried_out: list[PartialGroup] = []
        self.tokens = 0

    def carried_on(self) -> int:
        """Groups this step carries to the next: they count towards its prompts_per_step."""
        return len(self.carried_out)

    def generate_round(self, round_index: int, n_prompts: int, rows_per_chunk: int, seed_of, bar) -> list:
        """loop_sync.fill_groups' round: (round, group index, Group) of the groups finished."""
        rt, samples = self.rt, self.rt.config.algorithm.samples_per_prompt
        groups, self.carried_in = self.carried_in, []
        new = max(n_prompts - len(groups), 0)
        groups += [PartialGroup.fresh(rt.state.data_position + i, samples) for i in range(new)]
        rt.state.data_position += new
        bar.total = (bar.total or 0) + len(continuation_rows(groups, rt.config.algorithm.max_response_len, 1))
        result = generate_round(rt, round_index, groups, rows_per_chunk, seed_of, on_done=bar.update)
        self.carried_out += result.carried_out
        self.tokens += result.tokens
        return result.scored

    def finish(self, trained: list) -> dict:
        """Store the groups carried out in the driver state and return the row's partial-rollout
        metrics; `trained`: the step's groups (their staleness and version spans)."""
        rt, max_len = self.rt, self.rt.config.algorithm.max_response_len
        self.carried_out.sort(key=lambda g: g.data_index)
        rt.state.carried = to_state(self.carried_out)  # a new list: a dropped step restores the old one
        ages = [rt.state.policy_version - g.policy_version for g in trained] or [0]
        spans = [max(v) - min(v) for g in trained for v in g.token_versions] or [0]
        return {"generated_tokens": self.tokens, "partial_carried_in": self.sequences_in,
                "partial_carried_out": sum(not g.done(s, max_len) for g in self.carried_out
                                           for s in range(len(g.tokens))),
                "partial_groups_carried": len(self.carried_out),
                "staleness_mean": sum(ages) / len(ages), "staleness_max": max(ages),
                "version_span_max": max(spans)}
