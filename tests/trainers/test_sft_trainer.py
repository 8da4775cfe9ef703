"""EditSFTTrainer end to end on tiny random models and an in-memory tokenizer (no downloads)."""

import pytest
import torch

from tests.helpers import EOS, MASK, tiny_llama, tiny_tokenizer

pytest.importorskip("trl")
from datasets import Dataset

from dllm_edit.trainers import DecodeEvalCallback, EditSFTTrainer
from tests.helpers.training import reversal_rows, sft_config


def trainer_for(tmp_path, model=None, rows=None, **kw):
    train = Dataset.from_list(rows if rows is not None else reversal_rows(64))
    evaluation = Dataset.from_list(reversal_rows(16, seed=1))
    return EditSFTTrainer(
        model if model is not None else tiny_llama("sdpa", seed=7),
        args=sft_config(tmp_path, **kw),
        train_dataset=train,
        eval_dataset=evaluation,
        processing_class=tiny_tokenizer(),
    )


def test_loss_decreases_and_all_weights_train(tmp_path):
    trainer = trainer_for(tmp_path)
    before = {k: v.detach().clone() for k, v in trainer.model.named_parameters()}
    first = trainer.evaluate()["eval_loss"]
    trainer.train()
    last = trainer.evaluate()["eval_loss"]
    assert last < 0.8 * first, (first, last)  # eval noise is the same before and after
    changed = [k for k, v in trainer.model.named_parameters() if not torch.equal(v, before[k])]
    assert len(changed) == len(before)
    logged = [h for h in trainer.state.log_history if "drafting_nll" in h]
    assert logged and all(k in logged[-1] for k in ("editing_nll", "clean_nll", "edited_fraction"))


def test_responses_are_block_aligned_and_end_in_eos(tmp_path):
    trainer = trainer_for(tmp_path, max_steps=1)
    row = trainer.train_dataset[0]
    assert len(row["input_ids"]) % 4 == 0
    prompt = [i for i, lab in zip(row["input_ids"], row["labels"], strict=True) if lab == -100]
    assert len(prompt) == 4 and row["labels"][-1] == EOS  # 4 prompt words, then the response + EOS


def test_lora_trains_only_adapters_and_reloads(tmp_path):
    from peft import LoraConfig, PeftModel

    trainer = EditSFTTrainer(
        tiny_llama("sdpa", seed=7),
        args=sft_config(tmp_path, max_steps=6, learning_rate=1e-2),
        train_dataset=Dataset.from_list(reversal_rows(32)),
        processing_class=tiny_tokenizer(),
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0),
    )
    before = {k: v.detach().clone() for k, v in trainer.model.named_parameters()}
    trainer.train()
    changed = {k for k, v in trainer.model.named_parameters() if not torch.equal(v, before[k])}
    assert changed and all("lora_" in k for k in changed)
    trainer.save_model(str(tmp_path / "adapter"))
    ids = torch.tensor([[5, 6, 7, MASK, MASK, MASK, MASK, 8]])
    trainer.model.eval()
    with torch.no_grad():
        expected = trainer.model(input_ids=ids).logits
        reloaded = PeftModel.from_pretrained(tiny_llama("sdpa", seed=7), str(tmp_path / "adapter")).eval()
        torch.testing.assert_close(reloaded(input_ids=ids).logits, expected)
        merged = reloaded.merge_and_unload()
        torch.testing.assert_close(merged(input_ids=ids).logits, expected, atol=1e-4, rtol=1e-4)


def test_resume_gives_the_same_next_losses(tmp_path):
    kw = dict(max_steps=4, logging_steps=1, save_strategy="steps", save_steps=2)
    straight = trainer_for(tmp_path / "a", **kw)
    straight.train()
    resumed = trainer_for(tmp_path / "b", **kw)
    resumed.train()  # writes checkpoint-2 as well; resume a fresh trainer from it
    fresh = trainer_for(tmp_path / "b", **kw)
    fresh.train(resume_from_checkpoint=str(tmp_path / "b" / "out" / "checkpoint-2"))

    def losses(t):
        return {h["step"]: h["loss"] for h in t.state.log_history if "loss" in h}

    after = losses(fresh)
    assert set(after) >= {3, 4}
    for step in (3, 4):
        assert after[step] == pytest.approx(losses(straight)[step], rel=1e-5)


def test_multi_turn_forward_and_bidirectional_form(tmp_path):
    trainer = trainer_for(tmp_path, max_steps=10, mtf_turns=2, diffusion_attention="bidirectional")
    first = trainer.evaluate()["eval_loss"]
    trainer.train()
    assert trainer.evaluate()["eval_loss"] < first


@pytest.mark.parametrize(
    "form, adapter", [("shifted", "shifted"), ("block_diffusion_shifted", "block_causal_shifted")]
)
def test_shifted_forms_train_and_checkpoints_decode_as_trained(tmp_path, monkeypatch, form, adapter):
    """A Llama trained in a shifted form records the adapter it was trained for, so its checkpoint
    decodes that way without being told; the block-diffusion form leaves a Llama's config alone.
    `semi_ar_noise` reaches the corruption with the decoding block length."""
    from transformers import AutoModelForCausalLM

    from dllm_edit.adapters import detect_adapter, get_adapter_class, resolve_adapter
    from dllm_edit.trainers import sft_trainer

    seen = []

    def spy(*args, **options):
        seen.append((options["semi_ar_rate"], options["semi_ar_block_length"]))
        return corrupt(*args, **options)

    corrupt = sft_trainer.corrupt_examples
    monkeypatch.setattr(sft_trainer, "corrupt_examples", spy)
    trainer = trainer_for(
        tmp_path, max_steps=10, diffusion_attention=form, on_policy_rate=0.5, semi_ar_noise=0.5
    )
    assert trainer.model.config.dllm_edit_adapter == adapter
    first = trainer.evaluate()["eval_loss"]
    trainer.train()
    assert trainer.evaluate()["eval_loss"] < first
    assert seen and set(seen) == {(0.5, 4)}
    trainer.save_model(str(tmp_path / "final"))
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "final")
    assert type(resolve_adapter(reloaded, None)) is get_adapter_class(adapter)
    plain = trainer_for(tmp_path / "plain", max_steps=1)
    assert plain.attention_form == "block_diffusion"
    assert getattr(plain.model.config, "dllm_edit_adapter", None) is None
    assert detect_adapter(plain.model) == "block_causal"


def test_conversational_and_messages_formats_noise_only_the_answer(tmp_path):
    rows = reversal_rows(16)
    messages = [
        {
            "messages": [
                {"role": "user", "content": r["prompt"]},
                {"role": "assistant", "content": r["completion"]},
            ]
        }
        for r in rows
    ]
    trainer = EditSFTTrainer(
        tiny_llama("sdpa", seed=7),
        args=sft_config(tmp_path, max_steps=1),
        train_dataset=Dataset.from_list(messages),
        processing_class=tiny_tokenizer(chat=True),
    )
    row = trainer.train_dataset[0]
    supervised = [i for i, lab in zip(row["input_ids"], row["labels"], strict=True) if lab != -100]
    assert (
        len(supervised) >= 4 and supervised[0] != 44
    )  # the prompt ("user ...", "assistant") is not a target
    trainer.train()


def test_decode_eval_callback_logs_both_presets(tmp_path):
    rows = reversal_rows(4, seed=3)
    callback = DecodeEvalCallback(
        [r["prompt"] for r in rows], [r["completion"] for r in rows], every_n_steps=2, max_new_tokens=8
    )
    trainer = EditSFTTrainer(
        tiny_llama("sdpa", seed=7),
        args=sft_config(tmp_path, max_steps=2),
        train_dataset=Dataset.from_list(reversal_rows(16)),
        processing_class=tiny_tokenizer(),
        callbacks=[callback],
    )
    trainer.train()
    logged = [h for h in trainer.state.log_history if "decode/speedy/accuracy" in h]
    assert logged and 0 <= logged[0]["decode/quality/accuracy"] <= 1
    assert logged[0]["decode/speedy/tokens_per_forward"] > 0


def test_bad_input_is_refused_before_training(tmp_path):
    tok = tiny_tokenizer()
    model = tiny_llama("sdpa", seed=7)
    good = Dataset.from_list(reversal_rows(4))
    with pytest.raises(ValueError, match=r"prompt.*completion.*messages"):
        EditSFTTrainer(
            model,
            args=sft_config(tmp_path),
            train_dataset=Dataset.from_list([{"q": "a", "a": "b"}]),
            processing_class=tok,
        )
    no_mask = tiny_tokenizer()
    no_mask.mask_token = None
    with pytest.raises(ValueError, match="mask_token"):
        EditSFTTrainer(model, args=sft_config(tmp_path), train_dataset=good, processing_class=no_mask)
    with pytest.raises(ValueError, match="edit_rate"):
        sft_config(tmp_path, edit_rate_max=1.5)
    with pytest.raises(ValueError, match="mask_rate"):
        sft_config(tmp_path, mask_rate_min=0.9, mask_rate_max=0.2)
    with pytest.raises(ValueError, match="editing_stream_rate"):
        sft_config(tmp_path, editing_stream_rate=1.0)
    with pytest.raises(ValueError, match="edit_noise_in_context"):
        sft_config(tmp_path, edit_noise_in_context=-0.5)
    with pytest.raises(ValueError, match="edit_noise_shift"):
        sft_config(tmp_path, edit_noise_shift=1.5)
    with pytest.raises(ValueError, match="semi_ar_noise"):
        sft_config(tmp_path, semi_ar_noise=-0.1)
    with pytest.raises(ValueError, match="editing_stream_rate=0"):  # plain M2T must say so
        sft_config(tmp_path, edit_rate_max=0.0, clean_loss_weight=0.0)
    with pytest.raises(ValueError, match="multiple of `block_length`"):
        EditSFTTrainer(
            model, args=sft_config(tmp_path, max_length=30), train_dataset=good, processing_class=tok
        )
    with pytest.raises(ValueError, match="packing"):
        sft_config(tmp_path, packing=True)
    with pytest.raises(ValueError, match="compute_metrics"):
        EditSFTTrainer(
            model,
            args=sft_config(tmp_path),
            train_dataset=good,
            processing_class=tok,
            compute_metrics=lambda p: {},
        )
    chat = Dataset.from_list(
        [{"messages": [{"role": "user", "content": "w2"}, {"role": "assistant", "content": "w3"}]}]
    )
    with pytest.raises(ValueError, match="chat template"):
        EditSFTTrainer(model, args=sft_config(tmp_path), train_dataset=chat, processing_class=tok)


def test_checkpoints_save_the_decoding_config_they_were_trained_for(tmp_path):
    from dllm_edit import EditGenerationConfig

    trainer = trainer_for(tmp_path, block_length=16, max_steps=2, save_strategy="steps", save_steps=2)
    trainer.train()
    trainer.save_model(str(tmp_path / "final"))
    for folder in (tmp_path / "out" / "checkpoint-2", tmp_path / "final"):
        saved = EditGenerationConfig.from_pretrained(folder)
        assert (saved.block_length, saved.mask_token_id, saved.eos_token_id) == (16, MASK, EOS)
        assert saved.editing_threshold == 0.5  # trained with the editing stream: editing stays on
    plain = trainer_for(tmp_path / "m2t", max_steps=1, edit_rate_max=0.0, editing_stream_rate=0.0)
    plain.save_model(str(tmp_path / "m2t-final"))
    assert EditGenerationConfig.from_pretrained(tmp_path / "m2t-final").editing_threshold is None


def tiny_qwen3_moe(seed=3):
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen3MoeConfig(
        vocab_size=48,
        hidden_size=32,
        intermediate_size=64,
        moe_intermediate_size=16,
        num_experts=4,
        num_experts_per_tok=2,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        attn_implementation="sdpa",
    )
    return Qwen3MoeForCausalLM(cfg)


def test_moe_router_loss_is_added_with_its_coefficient(tmp_path):
    from dllm_edit.trainers.router_loss import load_balancing_loss, record_router_logits, router_output_spec

    def loss_and_aux(coef):
        model = tiny_qwen3_moe()
        trainer = trainer_for(
            tmp_path,
            model=model,
            max_steps=1,
            router_aux_loss_coef=coef,
            diffusion_attention="block_diffusion",
        )
        batch = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
        trainer.model.train()
        target, index = router_output_spec(model)
        with record_router_logits(model, target, index) as recorded:
            loss = trainer.compute_loss(trainer.model, batch)
        return loss, trainer, recorded, batch

    with_aux, trainer, recorded, batch = loss_and_aux(0.5)
    without, plain, _, _ = loss_and_aux(0.0)
    assert plain.router is None and trainer.router is not None
    aux = trainer._metrics["train"]["aux_loss"][-1]
    assert aux > 0 and with_aux.item() == pytest.approx(without.item() + 0.5 * aux, rel=1e-5)
    # the recorded loss is transformers' own load-balancing loss over the forward's valid tokens
    from transformers.models.qwen3_moe.modeling_qwen3_moe import load_balancing_loss_func

    valid = trainer._block_aligned(batch)[2]
    tokens = torch.cat([valid, valid], dim=1)
    ours = load_balancing_loss(recorded, tokens, 4, 2)
    assert ours.item() == pytest.approx(aux, rel=1e-5)
    logits = tuple(r.detach().reshape(-1, 4) for r in recorded)
    reference = load_balancing_loss_func(logits, 4, 2, tokens.long())  # its 2-D padding-mask form
    assert ours.item() == pytest.approx(float(reference), rel=1e-5)


@pytest.mark.parametrize(
    "options",
    [
        dict(mtf_turns=2),
        dict(on_policy_rate=0.5, diffusion_attention="bidirectional"),
        dict(router_aux_loss_coef=0.5, diffusion_attention="block_diffusion"),
        dict(diffusion_attention="shifted"),
        dict(diffusion_attention="block_diffusion_shifted", on_policy_rate=0.5),
    ],
    ids=["mtf", "on_policy", "moe_router", "shifted", "block_diffusion_shifted"],
)
def test_fused_lm_head_gives_the_logits_path_loss_and_gradients(tmp_path, options):
    def loss_and_grads(fused):
        model = tiny_qwen3_moe() if "router_aux_loss_coef" in options else tiny_llama("sdpa", seed=7)
        trainer = trainer_for(tmp_path, model=model, max_steps=1, fused_lm_head=fused, **options)
        batch = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
        trainer.model.train()
        loss = trainer.compute_loss(trainer.model, batch)
        loss.backward()
        grads = {k: p.grad for k, p in trainer.model.named_parameters() if p.grad is not None}
        return loss, grads, trainer._metrics["train"]

    plain, plain_grads, plain_metrics = loss_and_grads(False)
    fused, fused_grads, fused_metrics = loss_and_grads(True)
    torch.testing.assert_close(fused, plain, rtol=1e-5, atol=1e-6)
    assert fused_metrics.keys() == plain_metrics.keys()
    assert fused_grads.keys() == plain_grads.keys()
    for name, grad in plain_grads.items():
        torch.testing.assert_close(fused_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)
