import pytest
import torch

from dllm_edit.strategies import (
    Constant,
    Cosine,
    Linear,
    Stepwise,
    Strategy,
    ThresholdUnmask,
    TokenEdit,
    available_strategies,
    canonical_name,
    get_strategy,
    register_strategy,
    select_unmask,
    strategy_from_dict,
)
from dllm_edit.strategies.registry import snake_case


def test_select_unmask_ties_go_to_lower_index():
    probs = torch.tensor([[0.3, 0.3, 0.3]])
    masked = torch.ones(1, 3, dtype=torch.bool)
    out = select_unmask(probs, masked, torch.tensor([0.9]), torch.tensor([2]))
    assert out.tolist() == [[True, True, False]]


def test_select_unmask_is_per_row():
    probs = torch.tensor([[0.9, 0.8, 0.1], [0.2, 0.3, 0.1]])
    masked = torch.tensor([[True, True, True], [True, False, True]])
    out = select_unmask(probs, masked, torch.tensor([0.5, 0.5]), torch.tensor([1, 1]))
    assert out.tolist() == [[True, True, False], [True, False, False]]


def test_schedules_values():
    steps = torch.tensor([0, 1, 2, 10])
    assert Constant(0.4)(steps).tolist() == pytest.approx([0.4] * 4)
    assert Linear(1.0, 0.0, 2)(steps).tolist() == pytest.approx([1.0, 0.5, 0.0, 0.0])
    assert Cosine(1.0, 0.0, 2)(steps).tolist() == pytest.approx([1.0, 0.5, 0.0, 0.0], abs=1e-6)
    assert Stepwise((0.9, 0.5), (2,))(steps).tolist() == pytest.approx([0.9, 0.9, 0.5, 0.5])
    per_block = Linear(0.9, 0.5, 4, over="block")
    assert per_block(torch.tensor([0, 7]), block_index=2).tolist() == pytest.approx([0.7, 0.7])


def test_schedule_validation():
    with pytest.raises(ValueError, match="start"):
        Linear(1.5, 0.0, 2)
    with pytest.raises(ValueError, match="num_steps"):
        Cosine(0.5, 0.1, 0)
    with pytest.raises(ValueError, match="boundaries"):
        Stepwise((0.5,), (1,))
    with pytest.raises(ValueError, match="over"):
        Constant(0.5, over="token")


def test_registry_and_entry_point_names():
    names = set(available_strategies())
    assert {"threshold_unmask", "quota_unmask", "token_edit", "multi_block_edit", "prophet"} <= names
    assert all(name == snake_case(name) for name in names)  # one style
    # the class names, the registry names of earlier releases, are aliases
    assert get_strategy("TokenEdit") is get_strategy("token_edit") is TokenEdit
    assert TokenEdit().to_dict()["type"] == "token_edit" and canonical_name("TokenEdit") == "token_edit"
    assert strategy_from_dict({"type": "ThresholdUnmask", "threshold": 0.3}) == ThresholdUnmask(0.3)
    with pytest.raises(ValueError, match="Unknown strategy"):
        get_strategy("nope")
    with pytest.raises(TypeError):
        register_strategy("bad")(int)
    for taken in ("TokenEdit", "token_edit"):  # an alias is taken as much as a name
        with pytest.raises(ValueError, match="already registered"):

            @register_strategy(taken)
            class Other(Strategy):
                pass

    with pytest.raises(ValueError, match=r"snake_case.*'my_rule'"):

        @register_strategy("MyRule")
        class Mine(Strategy):
            pass


def test_custom_strategy_runs_in_the_loop(llama_eager):
    from dataclasses import dataclass

    import dllm_edit

    @register_strategy("test_leftmost_unmask", overwrite=True)
    @dataclass(frozen=True)
    class LeftmostUnmask(Strategy):
        """Unmask the leftmost masked position (an autoregressive order)."""

        unmasks = True

        def step(self, ctx):
            masked = ctx.masked & ctx.in_block
            first = masked & (masked.cumsum(-1) == 1)
            return dllm_edit.strategies.StepResult(first, torch.zeros_like(first), ctx.cand_tokens)

    out = dllm_edit.generate(
        llama_eager,
        torch.tensor([[3, 4]]),
        strategies=[LeftmostUnmask()],
        max_new_tokens=6,
        block_length=3,
        mask_token_id=47,
        eos_early_stop=False,
        max_post_steps=0,
        output_trace=True,
    )
    assert all(int(r.commit.sum()) == 1 for r in out.trace)
    assert strategy_from_dict(LeftmostUnmask().to_dict()) == LeftmostUnmask()


def test_strategy_dict_round_trip():
    s = ThresholdUnmask(Cosine(0.9, 0.5, 3), num_to_transfer=2)
    assert strategy_from_dict(s.to_dict()) == s
