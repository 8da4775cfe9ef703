"""Dataset checks and conversions of the edit-aware SFT trainer (before TRL's own preparation).

TRL's formats are accepted as TRL reads them: `prompt` + `completion` (standard or conversational),
`messages` / `conversations` (rendered by the tokenizer's chat template), a text column (language
modelling: every token is a training target) and pre-tokenized `input_ids` (+ optional `labels`
with -100 where no loss applies). A diffusion model is trained on its *response*: the prompt is
never noised. So a `messages` conversation is split into a prompt (every turn before the last
assistant turn) and a completion (that turn), unless `assistant_only_loss=True` asks TRL for the
assistant-token mask of the chat template.
"""

from __future__ import annotations

from typing import Any

_FORMATS = (
    "'prompt' + 'completion' (standard or conversational), 'messages' or 'conversations' (a chat "
    "conversation, rendered by the tokenizer's chat template), '{text}' (language modelling: every token "
    "is noised), or pre-tokenized 'input_ids' (with 'labels' set to -100 where no loss applies)"
)


def column_names(dataset: Any) -> list[str]:
    """Column names of a `datasets.Dataset` / `IterableDataset` (peeking at one example if needed)."""
    names = getattr(dataset, "column_names", None)
    if names is None:
        names = list(next(iter(dataset)).keys())
    return list(names)


def check_dataset_format(dataset: Any, name: str, text_field: str) -> None:
    """Raise a ValueError naming the expected columns if `dataset` is in none of TRL's formats."""
    columns = set(column_names(dataset))
    if (
        "input_ids" in columns
        or {"prompt", "completion"} <= columns
        or columns & {"messages", "conversations"}
        or text_field in columns
    ):
        return
    raise ValueError(
        f"`{name}` has columns {sorted(columns)}, none of the formats EditSFTTrainer reads: "
        f"{_FORMATS.format(text=text_field)}. Rename your columns (dataset.rename_column) or set "
        "`dataset_text_field` to your text column."
    )


def needs_chat_template(dataset: Any) -> bool:
    """Whether the dataset is conversational (its first example holds a list of messages)."""
    example = next(iter(dataset))
    for key in ("messages", "conversations", "prompt"):
        value = example.get(key)
        if isinstance(value, list) and value and isinstance(value[0], dict):
            return True
    return False


def split_last_assistant_turn(example: dict[str, Any]) -> dict[str, Any]:
    """`messages` → conversational `prompt` (turns before the last assistant turn) + `completion`.

    Raises:
        ValueError: a conversation without an assistant turn, or one that starts with it.
    """
    messages = example["messages"]
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=None)
    if last is None or last == 0:
        raise ValueError(
            "A `messages` conversation needs an assistant turn after at least one other turn (the prompt); "
            f"got roles {[m.get('role') for m in messages]}. Fix the example, or pass prompt/completion "
            "columns."
        )
    return {"prompt": messages[:last], "completion": [messages[last]]}


def conversations_to_prompt_completion(dataset: Any, assistant_only_loss: bool) -> Any:
    """Split `messages` conversations at the last assistant turn (see the module docstring).

    Datasets in other formats, and all datasets when `assistant_only_loss` is set, pass through.
    """
    columns = column_names(dataset)
    if "conversations" in columns and "messages" not in columns:  # ShareGPT from/value → ChatML messages
        from trl.data_utils import maybe_convert_to_chatml

        dataset = dataset.map(maybe_convert_to_chatml, remove_columns=["conversations"])
        columns = column_names(dataset)
    if assistant_only_loss or "messages" not in columns or "prompt" in columns:
        return dataset
    return dataset.map(split_last_assistant_turn, remove_columns=["messages"])
