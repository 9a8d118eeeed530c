"""From a data row's prompt to the text the model reads, and the row's reference answer.

A prompt is a string (openai/gsm8k's `question`) or a list of chat messages (verl's and
SkyRL's `prompt`). Three things are applied, in this order:

1. the instruction (data.instruction, or the task's own: how the answer must be written so
   the reward can find it), added to the last user message unless already there;
2. the system prompt (data.system_prompt), unless the row has a system message;
3. the chat template (data.chat_template=auto and a tokenizer that has one); otherwise the
   messages' contents joined by blank lines (raw text).

The result is one string; `tokenizer.encode` of it gives the template's ids (special tokens
in the text are parsed as such), so everything downstream keeps handling prompts as text.
"""
from launcher.config.schema.choices import ChatTemplate

# verl's examples/data_preprocess/gsm8k.py appends this sentence after a space; using the
# same words means verl's and SkyRL's files (which carry it) are left alone.
GSM8K_INSTRUCTION = "{prompt} Let's think step by step and output the final answer after \"####\"."
# DAPO-Math-17k's own wrapping of each problem (its prompt column holds exactly this).
DAPO_INSTRUCTION = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n{prompt}\n\n"
    "Remember to put your answer on its own line after \"Answer:\"."
)
BOXED_INSTRUCTION = "{prompt}\n\nPlease reason step by step, and put your final answer within \\boxed{}."

TASK_INSTRUCTIONS = {"gsm8k": GSM8K_INSTRUCTION, "dapo_math": DAPO_INSTRUCTION, "math_boxed": BOXED_INSTRUCTION}
"""The instruction a task adds when data.instruction is null; tasks not listed add none."""

PLACEHOLDER = "{prompt}"


class BadPrompt(ValueError):
    """A row's prompt cannot be used; the message says why (reported with file and row)."""


def task_instruction(data_cfg) -> str | None:
    """data.instruction, or the task's when null; None when there is none ("" included)."""
    text = TASK_INSTRUCTIONS.get(data_cfg.task) if data_cfg.instruction is None else data_cfg.instruction
    return text or None


def apply_instruction(text: str, instruction: str | None) -> str:
    """`instruction` with the prompt at `{prompt}` (after a blank line when it has none),
    or the prompt unchanged when it already holds the instruction's own words."""
    if not instruction:
        return text
    if PLACEHOLDER not in instruction:
        instruction = PLACEHOLDER + "\n\n" + instruction
    pieces = [p.strip() for p in instruction.split(PLACEHOLDER) if p.strip()]
    if all(p in text for p in pieces):
        return text
    return instruction.replace(PLACEHOLDER, text)


def as_messages(prompt) -> list[dict]:
    """A prompt value as chat messages ({role, content} with string content)."""
    if prompt is None:
        raise BadPrompt("prompt is null")
    if isinstance(prompt, str):
        if not prompt.strip():
            raise BadPrompt("prompt is empty")
        return [{"role": "user", "content": prompt}]
    if not isinstance(prompt, list | tuple):
        raise BadPrompt(f"prompt is a {type(prompt).__name__}, not text or a list of chat messages")
    if not prompt:
        raise BadPrompt("prompt is an empty list of messages")
    messages = []
    for i, m in enumerate(prompt):
        if not isinstance(m, dict) or not isinstance(m.get("content"), str) or not isinstance(m.get("role"), str):
            raise BadPrompt(f"prompt message {i} is not {{role: str, content: str}}: {str(m)[:80]!r}")
        messages.append({"role": m["role"], "content": m["content"]})
    if not any(m["role"] == "user" for m in messages):
        raise BadPrompt("prompt has no user message")
    return messages


def prompts_templated(data_cfg, tokenizer) -> bool:
    """Whether the run's prompts go through the chat template, as PromptStream formats them: a
    file's rows with data.chat_template=auto on a tokenizer that has one; a synthetic task's never.
    Multi-turn observations follow them (driver/loop/episodes.py)."""
    return PromptFormatter(data_cfg, tokenizer, generated=data_cfg.train_path is None).templated


class PromptFormatter:
    """Formats one dataset's prompts (a pure function of the config and the tokenizer;
    picklable, so datasets.map can run it in worker processes)."""

    def __init__(self, data_cfg, tokenizer, *, generated: bool = False):
        mode = ChatTemplate(getattr(data_cfg.chat_template, "value", data_cfg.chat_template))
        self.instruction = None if generated and data_cfg.instruction is None else task_instruction(data_cfg)
        self.system_prompt = data_cfg.system_prompt or None
        self.templated = mode is ChatTemplate.auto and tokenizer.has_chat_template and not generated
        self.tokenizer = tokenizer

    @property
    def identity(self) -> str:
        """What the formatted text depends on (part of the token-count cache key)."""
        return repr((self.instruction, self.system_prompt, self.templated, self.tokenizer.identity))

    @property
    def is_identity(self) -> bool:
        return not (self.instruction or self.system_prompt or self.templated)

    def messages(self, prompt) -> list[dict]:
        messages = as_messages(prompt)
        if self.instruction:
            last = max(i for i, m in enumerate(messages) if m["role"] == "user")
            messages[last] = {**messages[last], "content": apply_instruction(messages[last]["content"], self.instruction)}
        if self.system_prompt and messages[0]["role"] != "system":
            messages.insert(0, {"role": "system", "content": self.system_prompt})
        return messages

    def format(self, prompt) -> str:
        """The text the model reads for a row's prompt value; raises BadPrompt."""
        if isinstance(prompt, str) and self.is_identity:
            return prompt  # synthetic tasks and plain files without template: the text as it is
        messages = self.messages(prompt)
        if self.templated:
            return self.tokenizer.chat_text(messages)
        return "\n\n".join(m["content"] for m in messages)


def reference_answer(task: str, value) -> str:
    """A row's answer value as the reference text the reward compares against.

    Numbers become their text (an integral float without `.0`); for gsm8k the text after
    the last `####` with thousands separators removed (openai/gsm8k's answer column is the
    worked solution; verl's and SkyRL's ground_truth is already the number), as verl's
    gsm8k preprocessing does.
    """
    if value is None:
        raise BadPrompt("answer is null")
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise BadPrompt(f"answer is a {type(value).__name__}, not text or a number")
    if isinstance(value, float):
        text = str(int(value)) if value.is_integer() else repr(value)
    else:
        text = str(value)
    if task == "gsm8k" and "####" in text:
        text = text.rsplit("####", 1)[1].strip().replace(",", "")
    if not text.strip():
        raise BadPrompt("answer is empty")
    return text
