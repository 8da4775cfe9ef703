"""Data built by the toolkit: synthetic tasks, the standard-library code corpus, in-memory tokenizers."""

import pytest

from dllm_edit.data import (
    FAMILIES,
    build_bpe_tokenizer,
    build_char_tokenizer,
    code_examples,
    parses,
    synthetic_examples,
    synthetic_mixture,
)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_synthetic_tasks_are_right_deterministic_and_split(family):
    train = synthetic_examples(family, 200, seed=3)
    assert train == synthetic_examples(family, 200, seed=3)
    test = synthetic_examples(family, 200, split="test", seed=3)
    assert train != test
    for row in train[:50]:
        prompt, answer = row["prompt"], row["completion"]
        if family == "addition":
            a, b = prompt[:-1].split("+")
            assert int(answer) == int(a) + int(b)
        elif family == "sort":
            assert answer == "".join(sorted(prompt[5:-1]))
        elif family == "reverse":
            assert answer == prompt[4:-1][::-1]
        elif family == "reverse_digits":
            assert prompt.startswith("mirror:") and answer == prompt[7:-1][::-1] and answer.isdigit()
        else:
            assert parses_brackets(prompt[6:] + answer)


def parses_brackets(text):
    stack, pairs = [], {")": "(", "]": "[", "}": "{"}
    for c in text:
        if c in "([{":
            stack.append(c)
        elif not stack or stack.pop() != pairs[c]:
            return False
    return not stack


def test_bad_arguments():
    with pytest.raises(ValueError, match="family"):
        synthetic_examples("division", 3)
    with pytest.raises(ValueError, match="split"):
        synthetic_examples("sort", 3, split="dev")
    with pytest.raises(ValueError, match="split"):
        code_examples("dev")
    with pytest.raises(ValueError, match="distinct"):
        build_char_tokenizer("aa")
    with pytest.raises(ValueError, match="vocab_size"):
        build_bpe_tokenizer(["x"], vocab_size=100)


def test_char_tokenizer_round_trips_every_task():
    tok = build_char_tokenizer()
    for row in synthetic_mixture(sorted(FAMILIES), 20):
        text = row["prompt"] + row["completion"]
        ids = tok(text)["input_ids"]
        assert len(ids) == len(text) and tok.decode(ids) == text
    assert tok.mask_token_id not in tok("<mask>")["input_ids"]


def test_code_corpus_holds_out_whole_modules():
    train = code_examples("train", limit=400)
    test = code_examples("test", limit=200)
    assert train and test
    assert not {r["module"] for r in train} & {r["module"] for r in test}
    assert all(r["prompt"].rstrip().endswith(":") and r["completion"].startswith("\n") for r in train)
    assert all(parses(r["prompt"], r["completion"]) for r in train + test)
    assert not parses("def f(x):", "\n    return (x\n")


def test_bpe_tokenizer_round_trips_code():
    rows = code_examples("train", limit=300)
    tok = build_bpe_tokenizer([r["prompt"] + r["completion"] for r in rows], vocab_size=512)
    for row in code_examples("test", limit=20):
        text = row["prompt"] + row["completion"]
        assert tok.decode(tok(text)["input_ids"]) == text
    assert (tok.pad_token_id, tok.eos_token_id, tok.mask_token_id) == (0, 1, 2)


def test_builtin_datasets_and_initial_model():
    from dllm_edit.data.builtin import builtin_rows, init_model

    test = builtin_rows("dllm_edit:default_mix", "test")
    kinds = {r["kind"] for r in test}
    assert kinds == {"synthetic", "code"}
    with pytest.raises(ValueError, match="built-in dataset"):
        builtin_rows("dllm_edit:poetry")
    with pytest.raises(ValueError, match="built-in model"):
        init_model("dllm_edit:init/huge")
    model, tok = init_model("dllm_edit:init/tiny")
    again, _ = init_model("dllm_edit:init/tiny")
    assert all(a.equal(b) for a, b in zip(model.parameters(), again.parameters(), strict=True))
    assert model.config.vocab_size == len(tok) and model.config.mask_token_id == tok.mask_token_id


def test_mixture_takes_a_difficulty_per_family():
    rows = synthetic_mixture({"sort": 7, "brackets": 2}, 300)
    assert [r["family"] for r in rows[:4]] == ["sort", "brackets", "sort", "brackets"]
    sort_lengths = {len(r["completion"]) for r in rows if r["family"] == "sort"}
    bracket_lengths = {len(r["completion"]) for r in rows if r["family"] == "brackets"}
    assert sort_lengths == set(range(3, 11)) and bracket_lengths == set(range(2, 5))
    # a family's stream does not depend on which other families exist or are mixed with it
    assert [r for r in rows if r["family"] == "sort"] == synthetic_examples("sort", 300, difficulty=7)
