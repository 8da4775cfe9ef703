"""The load-balancing (router auxiliary) loss of Mixture-of-Experts models, for the diffusion forward.

A transformers MoE model computes this loss itself when asked (`output_router_logits`), but from a
2-D attention mask: the 4-D block-diffusion mask of our training forward breaks it. So the trainer
switches the model's own computation off and records the router logits with forward hooks on the
modules the model declares for them (`_can_record_outputs["router_logits"]`, transformers' own
output-recording table), then computes the same loss (Switch Transformer, equations 4-6, pooled
over layers as transformers does) over the valid tokens of the forward.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch


def router_output_spec(model: Any) -> tuple[type[torch.nn.Module], int] | None:
    """`(module class, output index)` of the router logits the model declares, or None."""
    table = getattr(type(model), "_can_record_outputs", None) or {}
    spec = table.get("router_logits") if isinstance(table, dict) else None
    target = getattr(spec, "target_class", None)
    if target is None:
        return None
    return target, int(getattr(spec, "index", 0) or 0)


def moe_routing(config: Any) -> tuple[int, int]:
    """`(num_experts, experts per token)` from a MoE text config."""
    experts = getattr(config, "num_experts", None) or getattr(config, "num_local_experts", None)
    top_k = getattr(config, "num_experts_per_tok", None)
    if not experts or not top_k:
        raise ValueError(
            f"{type(config).__name__} declares no `num_experts` / `num_experts_per_tok`, which the router "
            "loss needs. Set router_aux_loss_coef=0.0 to train without it."
        )
    return int(experts), int(top_k)


@contextmanager
def record_router_logits(
    model: Any, target: type[torch.nn.Module], index: int
) -> Iterator[list[torch.Tensor]]:
    """Collect every router-logit tensor `[N, E]` (or `[B, S, E]`) the routers produce inside the block."""
    recorded: list[torch.Tensor] = []

    def hook(_module: Any, _inputs: Any, output: Any) -> None:
        value = output[index] if isinstance(output, (tuple, list)) else output
        if isinstance(value, torch.Tensor):
            recorded.append(value)

    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, target)]
    try:
        yield recorded
    finally:
        for handle in handles:
            handle.remove()


def load_balancing_loss(
    router_logits: list[torch.Tensor], valid: torch.Tensor, num_experts: int, top_k: int
) -> torch.Tensor:
    """`num_experts * Σ_e f_e · P_e` over the valid tokens of all layers.

    Args:
        router_logits: per MoE layer, FloatTensor `[N, E]` (or `[B, S, E]`) with `N = B * S` tokens.
        valid: BoolTensor `[B, S]`, tokens that count (padding excluded).
        num_experts: E.
        top_k: experts chosen per token.

    Returns:
        A scalar: f_e is the fraction of (token, choice) assignments routed to expert e (summing to
        top_k), P_e the mean router probability of e.

    Examples:
        >>> import torch
        >>> uniform = [torch.zeros(4, 2)]  # every token splits evenly between 2 experts
        >>> load_balancing_loss(uniform, torch.ones(2, 2, dtype=torch.bool), num_experts=2, top_k=1)
        tensor(1.)
    """
    weight = valid.reshape(-1).float()  # [N]
    counts = torch.zeros(num_experts, device=weight.device)  # [E]
    probs = torch.zeros(num_experts, device=weight.device)  # [E]
    for logits in router_logits:
        p = torch.softmax(logits.reshape(-1, num_experts).float(), dim=-1)  # [N, E]
        chosen = torch.topk(p, top_k, dim=-1).indices  # [N, k]
        hits = torch.zeros_like(p).scatter_(1, chosen, 1.0)  # [N, E]
        counts = counts + (hits * weight[:, None]).sum(0)  # [E]
        probs = probs + (p * weight[:, None]).sum(0)  # [E]
    rows = weight.sum() * max(len(router_logits), 1)
    return num_experts * ((counts / rows) * (probs / rows)).sum()
