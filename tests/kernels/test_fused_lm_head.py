"""The fused-linear loss path (`fused_lm_head=True`): same loss and gradients as the logits path."""

import pytest
import torch

from dllm_edit.kernels import candidates
from dllm_edit.trainers import DiffusionForward
from dllm_edit.trainers.elbo import elbo_token_logps
from dllm_edit.trainers.hidden_states import HiddenStates, greedy_tokens
from dllm_edit.trainers.objective import edit_objective
from tests.helpers import MASK, VOCAB, tiny_llama


def _batch(seed=0, batch=3, length=12):
    gen = torch.Generator().manual_seed(seed)
    clean = torch.randint(2, VOCAB - 1, (batch, length), generator=gen)  # [B, T]
    valid = torch.arange(length)[None] < torch.tensor([12, 8, 10])[:batch, None]  # [B, T]
    draw = torch.rand(batch, length, generator=gen)  # [B, T]
    noisy = torch.where(draw < 0.4, MASK, clean)
    noisy = torch.where((draw > 0.8) & valid, (clean + 1) % (VOCAB - 1), noisy)  # some wrong tokens
    response = valid & (torch.arange(length)[None] >= 3)
    return noisy, clean, valid, response


def _loss_and_grads(model, form, fused, seed=0):
    model.zero_grad()
    noisy, clean, valid, response = _batch(seed)
    scores = DiffusionForward(model, form, block_length=4, fused_lm_head=fused).scores(noisy, clean, valid)
    assert isinstance(scores, HiddenStates) == fused
    terms = edit_objective(
        scores, noisy, clean, response, mask_token_id=MASK, mask_rate=torch.full(noisy.shape, 0.4)
    )
    terms.loss.backward()
    grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    return terms, grads


@pytest.mark.parametrize("form", ["block_diffusion", "block_diffusion_shifted", "bidirectional", "shifted"])
@pytest.mark.parametrize("bias", [False, True])
def test_objective_loss_and_gradients_match_the_logits_path(form, bias):
    model = tiny_llama("sdpa", seed=3)
    if not bias:
        model.lm_head.bias = None  # the tiny models' head has a bias; test without one too
    plain, plain_grads = _loss_and_grads(model, form, fused=False)
    fused, fused_grads = _loss_and_grads(model, form, fused=True)
    torch.testing.assert_close(fused.loss, plain.loss, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(fused.nll_sums, plain.nll_sums, rtol=1e-5, atol=1e-5)
    assert torch.equal(fused.counts, plain.counts) and plain.counts.min() > 0
    assert fused_grads.keys() == plain_grads.keys() and "lm_head.weight" in fused_grads
    for name, grad in plain_grads.items():
        torch.testing.assert_close(fused_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_lora_gradients_match_the_logits_path():
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(
        tiny_llama("sdpa", seed=4),
        LoraConfig(
            r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0, init_lora_weights=False
        ),
    )
    plain, plain_grads = _loss_and_grads(model, "block_diffusion", fused=False)
    fused, fused_grads = _loss_and_grads(model, "block_diffusion", fused=True)
    torch.testing.assert_close(fused.loss, plain.loss, rtol=1e-5, atol=1e-6)
    assert fused_grads.keys() == plain_grads.keys() and all("lora_" in k for k in plain_grads)
    for name, grad in plain_grads.items():
        torch.testing.assert_close(fused_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_elbo_summands_match_the_logits_path():
    model = tiny_llama("sdpa", seed=5)
    _, clean, valid, response = _batch(1)
    seeds = torch.tensor([3, 4, 5])
    elbo = dict(mask_token_id=MASK, num_timesteps=3, t_min=0.2, t_max=1.0)
    plain = elbo_token_logps(
        DiffusionForward(model, "block_diffusion", 4), clean, valid, response, seeds, **elbo
    )
    fused_forward = DiffusionForward(model, "block_diffusion", 4, fused_lm_head=True)
    fused = elbo_token_logps(fused_forward, clean, valid, response, seeds, **elbo)
    assert plain.abs().sum() > 0
    torch.testing.assert_close(fused, plain, rtol=1e-5, atol=1e-5)


def test_greedy_tokens_are_the_argmax_of_the_logits():
    model = tiny_llama("sdpa", seed=6)
    noisy, clean, valid, _ = _batch(2)
    logits = DiffusionForward(model, "bidirectional", 4)(noisy, clean, valid)  # [B, T, V]
    states = DiffusionForward(model, "bidirectional", 4, fused_lm_head=True).scores(noisy, clean, valid)
    expected = candidates(logits.detach(), suppress_ids=(MASK,))[0]
    assert torch.equal(greedy_tokens(states, (MASK,), chunk_rows=5), expected)
    assert torch.equal(greedy_tokens(logits, (MASK,)), expected)


def test_post_processed_logits_and_unfit_models_are_refused():
    model = tiny_llama("sdpa", seed=7)
    inner_forward = model.forward

    def scaled(*args, **kwargs):  # logits scaled after the head, as Cohere's logit_scale does
        out = inner_forward(*args, **kwargs)
        out.logits = out.logits * 0.5
        return out

    model.forward = scaled
    noisy, clean, valid, _ = _batch()
    with pytest.raises(ValueError, match="fused_lm_head=False"):
        DiffusionForward(model, "block_diffusion", 4, fused_lm_head=True).scores(noisy, clean, valid)
    with pytest.raises(ValueError, match="masked_lm form"):
        DiffusionForward(tiny_llama("sdpa"), "masked_lm", 4, fused_lm_head=True)
    from peft import LoraConfig, get_peft_model

    lora_head = get_peft_model(tiny_llama("sdpa"), LoraConfig(r=2, target_modules=["lm_head"]))
    with pytest.raises(ValueError, match=r"not a plain torch\.nn\.Linear"):
        DiffusionForward(lora_head, "block_diffusion", 4, fused_lm_head=True)


def test_trainers_refuse_a_non_bool_flag(tmp_path):
    pytest.importorskip("trl")
    from dllm_edit.trainers import EditSFTConfig

    with pytest.raises(ValueError, match="fused_lm_head"):
        EditSFTConfig(output_dir=str(tmp_path), report_to="none", use_cpu=True, fused_lm_head="yes")


def test_the_memory_benchmark_tiny_mode_checks_both_paths_agree(monkeypatch, capsys):
    import runpy
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "trainer_memory.py"
    monkeypatch.setattr(sys, "argv", [str(script), "--tiny"])
    runpy.run_path(str(script), run_name="__main__")
    out = capsys.readouterr().out
    assert "sft: loss" in out and "elbo: loss" in out and out.count("gradients equal: OK") == 2
