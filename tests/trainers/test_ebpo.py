"""EBPO: the ELBO estimate, the ratio and surrogate, invariances, and the trainer end to end."""

import pytest
import torch

from dllm_edit.trainers import DiffusionForward, ebpo_surrogate, elbo_token_logps
from tests.helpers import EOS, MASK, VOCAB, tiny_llama, tiny_tokenizer
from tests.helpers.training import naive_block_logits

BL = 4
ELBO = dict(mask_token_id=MASK, num_timesteps=3, t_min=0.2, t_max=1.0)


def _rows():
    """Right-padded prompt ⊕ completion rows: `(clean, valid, supervised)` `[3, 12]`."""
    gen = torch.Generator().manual_seed(0)
    clean = torch.randint(2, VOCAB - 1, (3, 12), generator=gen)
    pos = torch.arange(12)[None]
    lengths, prompts = torch.tensor([12, 8, 10]), torch.tensor([3, 2, 5])
    valid = pos < lengths[:, None]
    return clean, valid, valid & (pos >= prompts[:, None])


def _summands(model, clean, valid, supervised, seeds):
    forward = DiffusionForward(model, "block_diffusion", BL)
    return elbo_token_logps(forward, clean, valid, supervised, seeds, **ELBO)


def test_ratio_is_exactly_one_for_the_same_policy_and_seeds():
    model = tiny_llama("sdpa", seed=2)
    clean, valid, supervised = _rows()
    seeds = torch.tensor([11, 12, 13])
    with torch.no_grad():
        old = _summands(model, clean, valid, supervised, seeds)
    new = _summands(model, clean, valid, supervised, seeds)
    assert torch.equal(new.detach(), old)
    assert (old[~supervised] == 0).all() and (old[supervised] <= 0).all()
    for level in ("sequence", "block", "token"):
        adv = torch.tensor([1.0, -0.5, 0.2])
        terms = ebpo_surrogate(new, old, adv, supervised, ratio_level=level, block_length=BL)
        assert torch.equal(terms.ratio, torch.ones_like(terms.ratio))
    other = _summands(model, clean, valid, supervised, torch.tensor([21, 22, 23]))
    assert not torch.equal(other.detach(), old)  # the seeds are the noise


def test_surrogate_gradient_at_old_policy_is_advantage_weighted_elbo_gradient():
    clean, valid, supervised = _rows()
    seeds = torch.tensor([1, 2, 3])
    adv = torch.tensor([1.0, -2.0, 0.5])

    def grads(loss_fn):
        model = tiny_llama("sdpa", seed=2)
        logp = _summands(model, clean, valid, supervised, seeds)
        loss_fn(logp).backward()
        return [p.grad.clone() for p in model.parameters() if p.grad is not None]

    def surrogate(logp):
        return ebpo_surrogate(logp, logp.detach(), adv, supervised, epsilon_low=0.2, epsilon_high=0.3).loss

    def weighted_elbo(logp):
        return -(adv * logp.sum(dim=1) / supervised.sum(dim=1)).mean()

    for a, b in zip(grads(surrogate), grads(weighted_elbo), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_block_terms_in_one_forward_equal_block_by_block():
    model = tiny_llama("eager", seed=4)
    clean, valid, supervised = _rows()
    seeds = torch.tensor([5, 6, 7])

    def naive(noisy, clean_, valid_):
        return naive_block_logits(model, noisy, clean_, valid_, BL)

    with torch.no_grad():
        fast = _summands(model, clean, valid, supervised, seeds)
        slow = elbo_token_logps(naive, clean, valid, supervised, seeds, **ELBO)
    torch.testing.assert_close(
        fast.view(3, -1, BL).sum(-1), slow.view(3, -1, BL).sum(-1), atol=1e-4, rtol=1e-4
    )


def test_loss_is_invariant_to_shuffling_and_accumulation():
    model = tiny_llama("sdpa", seed=2)
    clean, valid, supervised = _rows()
    seeds = torch.tensor([31, 32, 33])
    adv = torch.tensor([0.7, -1.0, 0.3])
    with torch.no_grad():
        old = _summands(model, clean, valid, supervised, seeds) + 0.01 * supervised  # θ ≠ θ_old

    def loss(idx):
        logp = _summands(model, clean[idx], valid[idx], supervised[idx], seeds[idx])
        return ebpo_surrogate(logp, old[idx], adv[idx], supervised[idx]).loss

    whole = loss(torch.tensor([0, 1, 2]))
    parts = [loss(torch.tensor([i])) for i in (2, 0, 1)]  # shuffled micro-batches
    torch.testing.assert_close(whole, sum(parts) / 3, atol=1e-6, rtol=1e-5)


# ---- the trainer ------------------------------------------------------------------------------------------

trl = pytest.importorskip("trl")
from datasets import Dataset  # noqa: E402

from dllm_edit.trainers import EBPOConfig, EBPOTrainer  # noqa: E402


def contains_w5(completions, **kwargs):
    return [float("w5" in c.split()) for c in completions]


def even_words(completions, **kwargs):
    """Fraction of the completion's words `wN` with N even (varies across a random model's samples)."""
    return [sum(int(w[1:]) % 2 == 0 for w in c.split()) / max(1, len(c.split())) for c in completions]


def ebpo_config(tmp_path, **kw):
    base = dict(
        output_dir=str(tmp_path / "out"),
        num_generations=4,
        per_device_train_batch_size=8,
        max_steps=3,
        max_completion_length=8,
        block_length=BL,
        learning_rate=5e-3,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        activation_checkpointing=False,
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
    )
    base.update(kw)
    return EBPOConfig(**base)


def prompts(n=8):
    return Dataset.from_list([{"prompt": f"w{2 + i} w{3 + i}", "answer": "w5"} for i in range(n)])


def test_end_to_end_with_lora(tmp_path):
    from peft import LoraConfig

    trainer = EBPOTrainer(
        tiny_llama("sdpa", seed=7),
        reward_funcs=[even_words],
        args=ebpo_config(tmp_path, num_iterations=2),
        train_dataset=prompts(),
        processing_class=tiny_tokenizer(),
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0),
    )
    before = {k: v.detach().clone() for k, v in trainer.model.named_parameters()}
    trainer.train()
    changed = {k for k, v in trainer.model.named_parameters() if not torch.equal(v, before[k])}
    assert changed and all("lora_" in k for k in changed)
    logs = [h for h in trainer.state.log_history if "ratio/mean" in h]
    assert [h["step"] for h in logs] == [1, 2, 3]
    fresh = [h for h in logs if "reward" in h]  # rollouts at steps 1 and 3, reused at step 2
    assert [h["step"] for h in fresh] == [1, 3]
    for entry in fresh:
        assert 0.0 <= entry["reward"] <= 1.0 and entry["rollout/tokens_per_forward"] > 0
        assert "clip_ratio/high" in entry and "rewards/even_words" in entry and entry["reward_std"] > 0
        assert entry["ratio/mean"] == pytest.approx(1.0)  # first use of a rollout batch: θ = θ_old
    assert logs[1]["ratio/mean"] != pytest.approx(1.0, abs=1e-7)  # reused after an update: θ ≠ θ_old


def test_empty_completions_are_counted(tmp_path):
    model = tiny_llama("sdpa", seed=7)
    with torch.no_grad():
        model.lm_head.bias[EOS] = 1e4  # every completion ends at once
    trainer = EBPOTrainer(
        model,
        reward_funcs=contains_w5,
        args=ebpo_config(tmp_path, max_steps=1),
        train_dataset=prompts(),
        processing_class=tiny_tokenizer(),
    )
    trainer.train()
    entry = next(h for h in trainer.state.log_history if "reward" in h)
    assert entry["completions/empty_fraction"] == 1.0 and entry["reward"] == 0.0


def test_bad_input(tmp_path):
    model, tok = tiny_llama("sdpa", seed=7), tiny_tokenizer()

    def two_args(a, b):
        return [0.0]

    with pytest.raises(TypeError, match="two_args"):
        EBPOTrainer(
            model,
            reward_funcs=two_args,
            args=ebpo_config(tmp_path),
            train_dataset=prompts(),
            processing_class=tok,
        )

    def short(completions, **kwargs):
        return [1.0]

    trainer = EBPOTrainer(
        model, reward_funcs=short, args=ebpo_config(tmp_path), train_dataset=prompts(), processing_class=tok
    )
    with pytest.raises(ValueError, match="'short' must return one value"):
        trainer.train()
    with pytest.raises(ValueError, match="num_generations"):
        ebpo_config(tmp_path, per_device_train_batch_size=6)
    no_mask = tiny_tokenizer()
    no_mask.mask_token = None
    with pytest.raises(ValueError, match="mask token"):
        EBPOTrainer(
            model,
            reward_funcs=contains_w5,
            args=ebpo_config(tmp_path),
            train_dataset=prompts(),
            processing_class=no_mask,
        )
    with pytest.raises(ValueError, match="'prompt' column"):
        EBPOTrainer(
            model,
            reward_funcs=contains_w5,
            args=ebpo_config(tmp_path),
            train_dataset=Dataset.from_list([{"question": "w2"}]),
            processing_class=tok,
        )
    with pytest.raises(ValueError, match="use_vllm"):
        ebpo_config(tmp_path, use_vllm=True)


def test_data_options_are_honoured(tmp_path, monkeypatch):
    import transformers

    import dllm_edit.trainers.ebpo_trainer as ebpo_module

    model_dir = tmp_path / "model"
    tiny_llama("sdpa", seed=7).save_pretrained(model_dir)
    seen = {}
    original = transformers.AutoModelForCausalLM.from_pretrained

    def recording(name, **kwargs):
        seen.update(kwargs)
        return original(name, **{k: v for k, v in kwargs.items() if k != "trust_remote_code"})

    monkeypatch.setattr(ebpo_module.AutoModelForCausalLM, "from_pretrained", recording)

    def trainer(data=None, **kw):
        return EBPOTrainer(
            str(model_dir),
            reward_funcs=contains_w5,
            args=ebpo_config(tmp_path, **{"per_device_train_batch_size": 4, **kw}),
            train_dataset=data if data is not None else prompts(6),
            processing_class=tiny_tokenizer(),
        )

    def order(t):
        return [row["prompt"] for batch in t.get_train_dataloader() for row in batch]

    ordered = trainer(shuffle_dataset=False, trust_remote_code=True)  # a model given by name
    assert seen["trust_remote_code"] is True
    assert order(ordered) == [f"w{2 + i} w{3 + i}" for i in range(6)]
    shuffled = order(trainer(shuffle_dataset=True))
    assert sorted(shuffled) == sorted(order(ordered)) and shuffled != order(ordered)
    assert order(trainer(data_seed=1)) != shuffled  # data_seed, not seed, draws the order
    loader = trainer(dataloader_drop_last=True, dataloader_pin_memory=False).get_train_dataloader()
    assert len(loader) == 6 and not loader.pin_memory  # 6 prompts, 1 per batch (4 completions / 4)
    odd = Dataset.from_list([{"prompt": "w2", "answer": "w5"}] * 3)
    assert len(trainer(odd, per_device_train_batch_size=8).get_train_dataloader()) == 2  # last batch kept
    assert (
        len(trainer(odd, per_device_train_batch_size=8, dataloader_drop_last=True).get_train_dataloader())
        == 1
    )

    chat_tok = tiny_tokenizer(chat=True)
    chat_tok.chat_template = (
        "{% if hint %}w9 {% endif %}{% for m in messages %}{{ m['content'] }} {% endfor %}"
    )
    chat = EBPOTrainer(
        tiny_llama("sdpa", seed=7),
        reward_funcs=contains_w5,
        args=ebpo_config(tmp_path, chat_template_kwargs={"hint": True}),
        train_dataset=Dataset.from_list([{"prompt": [{"role": "user", "content": "w2"}], "answer": "w5"}]),
        processing_class=chat_tok,
    )
    assert chat._prompt_texts([[{"role": "user", "content": "w2"}]]) == ["w9 w2 "]


def test_ratio_is_exactly_one_with_dropout_and_checkpoints_decode_as_trained(tmp_path, capsys):
    from peft import LoraConfig

    from dllm_edit import EditGenerationConfig

    trainer = EBPOTrainer(
        tiny_llama("sdpa", seed=7),
        reward_funcs=[even_words],
        args=ebpo_config(
            tmp_path,
            max_steps=2,
            block_length=16,
            save_strategy="steps",
            save_steps=1,
            log_completions=True,
            num_completions_to_print=2,
        ),
        train_dataset=prompts(),
        processing_class=tiny_tokenizer(),
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.5),
    )
    assert not trainer.args.disable_dropout
    assert any(isinstance(m, torch.nn.Dropout) and m.p == 0.5 for m in trainer.model.modules())
    trainer.train()
    ratios = [h["ratio/mean"] for h in trainer.state.log_history if "ratio/mean" in h]
    assert len(ratios) == 2 and all(r == 1.0 for r in ratios)  # fresh rollouts each step: θ = θ_old
    assert "Step 1" in capsys.readouterr().out  # log_completions printed the table
    for folder in (tmp_path / "out" / "checkpoint-1", tmp_path / "out" / "checkpoint-2"):
        saved = EditGenerationConfig.from_pretrained(folder)
        eos = saved.eos_token_id if isinstance(saved.eos_token_id, list) else [saved.eos_token_id]
        assert (
            saved.block_length == 16 and saved.mask_token_id == MASK and EOS in eos
        )  # the ids decoding used
        assert saved.temperature == 0.0 and saved.max_new_tokens == 8


def test_fused_lm_head_gives_the_same_elbo_summands(tmp_path):
    model = tiny_llama("sdpa", seed=7)
    trainer = EBPOTrainer(
        model,
        reward_funcs=[even_words],
        args=ebpo_config(tmp_path, fused_lm_head=True, diffusion_attention="block_diffusion"),
        train_dataset=prompts(),
        processing_class=tiny_tokenizer(),
    )
    clean, valid, supervised = _rows()
    seeds = torch.tensor([5, 6, 7])
    fused = trainer.elbo_summands(trainer.model, clean, valid, supervised, seeds)
    trainer.args.fused_lm_head = False
    plain = trainer.elbo_summands(trainer.model, clean, valid, supervised, seeds)
    assert plain.abs().sum() > 0
    torch.testing.assert_close(fused, plain, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "form, adapter", [("shifted", "shifted"), ("block_diffusion_shifted", "block_causal_shifted")]
)
def test_shifted_forms_rollouts_and_checkpoints_decode_as_trained(tmp_path, form, adapter):
    """EBPO on a Llama in a shifted form: the config declares the form's adapter before the first
    rollout (so rollouts decode as the ELBO forward reads) and the checkpoint keeps it."""
    from transformers import AutoModelForCausalLM

    from dllm_edit.adapters import detect_adapter

    trainer = EBPOTrainer(
        tiny_llama("sdpa", seed=7),
        reward_funcs=[even_words],
        args=ebpo_config(tmp_path, max_steps=1, diffusion_attention=form),
        train_dataset=prompts(),
        processing_class=tiny_tokenizer(),
    )
    assert trainer.attention_form == form and detect_adapter(trainer.model) == adapter
    trainer.train()
    ratios = [h["ratio/mean"] for h in trainer.state.log_history if "ratio/mean" in h]
    assert ratios == [pytest.approx(1.0)]
    trainer.save_model(str(tmp_path / "final"))
    assert detect_adapter(AutoModelForCausalLM.from_pretrained(tmp_path / "final")) == adapter
