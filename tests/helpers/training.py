"""Helpers of the trainer tests: a task with one right answer, the EditSFT config the tests train
with, and the block-by-block reference of the block-diffusion forward."""

import torch

from dllm_edit.adapters.attention import allowed_matrix, backend_mask


def reversal_rows(n, seed=0, length=4):
    """prompt `wA wB wC wD` → completion the same words reversed (a task with one right answer)."""
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(n):
        words = [f"w{int(i)}" for i in torch.randint(2, 20, (length,), generator=gen)]
        rows.append({"prompt": " ".join(words), "completion": " " + " ".join(reversed(words))})
    return rows


def sft_config(tmp_path, **kw):
    """An `EditSFTConfig` for a short CPU run in `tmp_path / "out"`, with `kw` overriding the fields."""
    from dllm_edit.trainers import EditSFTConfig

    base = dict(
        output_dir=str(tmp_path / "out"),
        block_length=4,
        max_length=32,
        per_device_train_batch_size=8,
        learning_rate=3e-3,
        max_steps=30,
        logging_steps=5,
        save_strategy="no",
        report_to="none",
        activation_checkpointing=False,
        use_cpu=True,
        dataloader_num_workers=0,
        seed=0,
        disable_tqdm=True,
    )
    base.update(kw)
    return EditSFTConfig(**base)


def naive_block_logits(model, noisy, clean, valid, block):
    """Block by block: block k of `noisy` after the clean blocks before it, block-causal attention."""
    batch, width = noisy.shape
    outs = []
    for start in range(0, width, block):
        ids = torch.cat([clean[:, :start], noisy[:, start : start + block]], dim=1)  # [B, start + bl]
        slots = torch.arange(ids.shape[1])
        allowed = allowed_matrix(
            slots, slots // block, slots, torch.zeros_like(slots, dtype=torch.bool), valid, block
        )  # [B, Q, K]
        mask = backend_mask(allowed, model.config._attn_implementation, model.dtype)
        logits = model(input_ids=ids, attention_mask=mask, position_ids=slots.expand(batch, -1)).logits
        outs.append(logits[:, start:])
    return torch.cat(outs, dim=1)  # [B, T, V]


def enable_activation_checkpointing(model, kwargs=None):
    """`activation_checkpointing_enable` (transformers 5.25's name), or the 4.x name where it is absent."""
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
