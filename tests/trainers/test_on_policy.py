"""The on-policy editing stream of EditSFTTrainer (`dllm_edit.trainers.on_policy`)."""

import pytest
import torch

from tests.helpers import MASK, tiny_llama, tiny_tokenizer

pytest.importorskip("trl")
from datasets import Dataset

from dllm_edit.trainers import DiffusionForward, EditSFTTrainer, draft_masked
from tests.helpers.training import reversal_rows, sft_config


def recording(model):
    """`model` with a hook appending (input_ids, grad enabled, training mode) to `model.calls` per forward."""
    model.calls = []

    def hook(module, args, kwargs):
        module.calls.append((kwargs["input_ids"].detach().clone(), torch.is_grad_enabled(), module.training))

    model.register_forward_pre_hook(hook, with_kwargs=True)
    return model


def batch(seed=0, rows=3, length=8, block=4):
    gen = torch.Generator().manual_seed(seed)
    clean = torch.randint(2, 40, (rows, length), generator=gen)  # [B, T]
    response = torch.zeros(rows, length, dtype=torch.bool)
    response[:, 2:] = True  # a 2-token prompt
    masked = response & (torch.rand(rows, length, generator=gen) < 0.6)  # [B, T]
    return clean, response, clean.masked_fill(masked, MASK), masked


@pytest.mark.parametrize("form", ["bidirectional", "block_diffusion"])
def test_the_draft_pass_never_sees_the_labels_and_keeps_no_gradient(form):
    model = recording(tiny_llama("sdpa", seed=3)).train()
    clean, response, noisy, masked = batch()
    forward = DiffusionForward(model, form, block_length=4)
    valid = torch.ones_like(response)
    rows = torch.tensor([True, False, True])
    kw = dict(mask_token_id=MASK, confidence=0.0)
    out = draft_masked(forward, model, noisy, clean, valid, response, rows, **kw)
    assert model.training  # restored after the eval-mode draft
    (ids, grad_enabled, training), *more = model.calls
    assert not more and not grad_enabled and not training
    seen = ids[:, -noisy.shape[1] :]  # the noisy copy (block diffusion puts x_0 first)
    assert seen.shape[0] == 2  # only the on-policy rows ran
    assert torch.equal(seen, noisy[rows])  # masks at the masked positions, no clean token there
    assert all(p.grad is None for p in model.parameters())
    assert not out.noisy.requires_grad
    assert torch.equal(out.drafted, masked & rows[:, None])  # confidence 0: every masked response slot
    assert torch.equal(out.noisy[~rows], noisy[~rows])
    assert not (out.noisy[rows[:, None] & masked] == MASK).any()  # the mask token is never drafted

    # The labels of the masked positions do not change the draft: block diffusion reads x_0 only as the
    # clean *earlier* blocks, so changing the last block's clean tokens changes nothing.
    other = clean.clone()
    last = torch.zeros_like(masked)
    last[:, 4:] = True
    other[masked & last] = (other[masked & last] + 1) % 40 + 2
    again = draft_masked(forward, model, noisy, other, valid, response, rows, **kw)
    assert torch.equal(again.noisy, out.noisy)


def test_confidence_keeps_unsure_positions_masked_and_sampling_uses_the_generator():
    model = tiny_llama("sdpa", seed=3)
    clean, response, noisy, masked = batch()
    forward = DiffusionForward(model, "bidirectional", block_length=4)
    valid, rows = torch.ones_like(response), torch.ones(3, dtype=torch.bool)
    kwargs = dict(mask_token_id=MASK, confidence=0.99)
    sure = draft_masked(forward, model, noisy, clean, valid, response, rows, **kwargs)
    assert sure.drafted.sum() < masked.sum()  # a random model is unsure: most stay masked

    def sample(seed):
        gen = torch.Generator().manual_seed(seed)
        kw = dict(mask_token_id=MASK, confidence=0.0, draft="sample", generator=gen)
        return draft_masked(forward, model, noisy, clean, valid, response, rows, **kw).noisy

    assert torch.equal(sample(0), sample(0))
    assert not torch.equal(sample(0), sample(1))
    with pytest.raises(ValueError, match="draft"):
        draft_masked(forward, model, noisy, clean, valid, response, rows, mask_token_id=MASK, draft="beam")


def on_policy_trainer(tmp_path, model=None, **kw):
    base = dict(max_steps=3, on_policy_rate=1.0, on_policy_confidence=0.0, editing_stream_rate=0.0)
    base.update(kw)
    return EditSFTTrainer(
        model if model is not None else tiny_llama("sdpa", seed=7),
        args=sft_config(tmp_path, **base),
        train_dataset=Dataset.from_list(reversal_rows(32)),
        processing_class=tiny_tokenizer(),
    )


def test_the_option_changes_the_training_batch_after_the_warm_up(tmp_path):
    recorder = recording(tiny_llama("sdpa", seed=7))
    trainer = on_policy_trainer(tmp_path, model=recorder, on_policy_warmup_steps=1)
    trainer.train()
    kinds = [(grad, training) for _, grad, training in recorder.calls]
    # step 0 (warm-up): the training forward only; steps 1 and 2: a no-grad eval-mode draft, then training
    assert kinds == [(True, True), (False, False), (True, True), (False, False), (True, True)]
    drafts = [ids for ids, grad, _ in recorder.calls if not grad]
    trained = [ids for ids, grad, _ in recorder.calls if grad]
    assert (trained[0] == MASK).any()  # the warm-up step trains on masks
    for draft_input, train_input in zip(drafts, trained[1:], strict=True):
        assert (draft_input == MASK).any()
        assert not (train_input == MASK).any()  # every mask drafted (rate 1, confidence 0)
    logged = [h for h in trainer.state.log_history if "draft_error_rate" in h]
    assert logged and 0.0 <= logged[-1]["draft_error_rate"] <= 1.0


def test_one_run_equals_a_resumed_run(tmp_path):
    kw = dict(max_steps=4, save_strategy="steps", save_steps=2, on_policy_rate=0.5, on_policy_draft="sample")
    straight = on_policy_trainer(tmp_path / "a", **kw)
    straight.train()
    first = on_policy_trainer(tmp_path / "b", **kw)
    first.train()
    resumed = on_policy_trainer(tmp_path / "b", **kw)
    resumed.train(resume_from_checkpoint=str(tmp_path / "b" / "out" / "checkpoint-2"))
    for (name, a), b in zip(straight.model.named_parameters(), resumed.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
    off = on_policy_trainer(tmp_path / "c", **{**kw, "on_policy_rate": 0.0})
    off.train()
    assert not all(torch.equal(a, b) for a, b in zip(straight.model.parameters(), off.model.parameters()))


def test_bad_on_policy_settings_are_refused_before_training(tmp_path):
    for field, value in (
        ("on_policy_rate", 1.5),
        ("on_policy_rate", -0.1),
        ("on_policy_warmup_steps", -1),
        ("on_policy_draft", "beam"),
        ("on_policy_confidence", 1.0),
    ):
        with pytest.raises(ValueError, match=field):
            sft_config(tmp_path, **{field: value})
    no_mask = tiny_tokenizer()
    no_mask.mask_token = None
    with pytest.raises(ValueError, match="mask_token"):
        EditSFTTrainer(
            tiny_llama("sdpa", seed=7),
            args=sft_config(tmp_path, on_policy_rate=0.5),
            train_dataset=Dataset.from_list(reversal_rows(4)),
            processing_class=no_mask,
        )
