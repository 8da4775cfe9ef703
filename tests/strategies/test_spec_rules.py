"""Hand-built cases pinning every rule of SPEC-decoding.md on a scripted denoiser."""

import torch

import dllm_edit
from tests.helpers import ScriptedDenoiser, one_hot_table

V = 10
MASK, EOS, PAD = 9, 1, 0
BASE = dict(
    adapter="block_causal",
    use_cache=False,
    mask_token_id=MASK,
    eos_token_id=EOS,
    pad_token_id=PAD,
    suppress_mask_token=False,
    max_steps_per_block=None,
    eos_early_stop=False,
)


def run(script, prompt, bl, G, **kw):
    model = ScriptedDenoiser(script, block_length=bl)
    out = dllm_edit.generate(
        model, torch.tensor([prompt]), block_length=bl, max_new_tokens=G, **{**BASE, **kw}
    )
    return out, model.calls


def test_strict_threshold_and_fallback_to_top1():
    # p == threshold does not pass (strict >): only the fallback top-1 (position 1, p=0.6) is taken
    script = [one_hot_table([2, 3, 4, 5], [0.5, 0.6, 0.5, 0.2], V), one_hot_table([2, 3, 4, 5], [0.9] * 4, V)]
    out, calls = run(script, [7, 7, 7, 7], bl=4, G=4, threshold=0.5, editing_threshold=None, max_post_steps=0)
    # step 1 fills position 1 only; step 2 fills the rest; mask-free top of step 3 ends (max_post_steps=0)
    assert out.sequences[0, 4:].tolist() == [2, 3, 4, 5]
    assert calls == 2


def test_num_to_transfer_fallback_takes_k_most_confident():
    script = [
        one_hot_table([2, 3, 4, 5], [0.3, 0.8, 0.2, 0.7], V),
        one_hot_table([2, 3, 4, 5], [0.99] * 4, V),
    ]
    model = ScriptedDenoiser(script, block_length=4)
    dllm_edit.generate(
        model,
        torch.tensor([[7] * 4]),
        block_length=4,
        max_new_tokens=4,
        threshold=0.75,
        num_to_transfer=2,
        editing_threshold=None,
        max_post_steps=0,
        **{k: v for k, v in BASE.items()},
    )
    # one position passes 0.75 (< 2 required) -> the two most confident (1 and 3) are taken, then the rest
    assert model.calls == 2


def test_post_step_counter_one_verification_forward():
    # all positions confident at the first forward; max_post_steps=1 -> exactly one verification forward
    script = [one_hot_table([2, 3], [0.9, 0.9], V)]
    out, calls = run(script, [7, 7], bl=2, G=2, threshold=0.5, editing_threshold=0.5, max_post_steps=1)
    assert calls == 2 and out.sequences[0, 2:].tolist() == [2, 3]


def test_max_post_steps_zero_gives_no_verification_forward():
    script = [one_hot_table([2, 3], [0.9, 0.9], V)]
    _, calls = run(script, [7, 7], bl=2, G=2, threshold=0.5, editing_threshold=0.5, max_post_steps=0)
    assert calls == 1


def test_edits_are_bounded_by_max_post_steps():
    # the verification forwards keep wanting to flip position 0: at most max_post_steps mask-free forwards
    fill = one_hot_table([2, 3], [0.9, 0.9], V)
    flip_a = one_hot_table([4, 3], [0.9, 0.9], V)
    flip_b = one_hot_table([2, 3], [0.9, 0.9], V)
    out, calls = run(
        [fill, flip_a, flip_b, flip_a, flip_b],
        [7, 7],
        bl=2,
        G=2,
        threshold=0.5,
        editing_threshold=0.5,
        max_post_steps=3,
    )
    assert calls == 1 + 3
    assert out.num_edits.tolist() == [3]
    assert out.sequences[0, 2:].tolist() == [4, 3]


def test_no_edit_of_token_unmasked_in_same_step_and_edit_threshold_strict():
    # step 1 unmasks position 0 only; step 2 proposes a different token at 0 with p == tau_edit (no edit)
    s1 = one_hot_table([2, 3], [0.9, 0.1], V)
    s2 = one_hot_table([5, 3], [0.5, 0.9], V)
    out, _ = run([s1, s2, s2], [7, 7], bl=2, G=2, threshold=0.5, editing_threshold=0.5, max_post_steps=1)
    assert out.sequences[0, 2:].tolist() == [2, 3]
    assert out.num_edits.tolist() == [0]


def test_editing_threshold_zero_edits_whenever_argmax_differs():
    s1 = one_hot_table([2, 3], [0.9, 0.9], V)
    s2 = one_hot_table([5, 3], [0.15, 0.9], V)  # argmax 5 at p=0.15 > 0.0
    out, _ = run([s1, s2, s1], [7, 7], bl=2, G=2, threshold=0.5, editing_threshold=0.0, max_post_steps=1)
    assert out.sequences[0, 2:].tolist() == [5, 3]


def test_editing_none_is_off():
    s1 = one_hot_table([2, 3], [0.9, 0.9], V)
    s2 = one_hot_table([5, 3], [0.99, 0.9], V)
    out, _ = run([s1, s2], [7, 7], bl=2, G=2, threshold=0.5, editing_threshold=None, max_post_steps=1)
    assert out.sequences[0, 2:].tolist() == [2, 3]


def test_first_block_holds_prompt_tail_which_is_never_edited():
    # P=3, bl=4: decoding starts at block 0 whose first 3 slots are prompt; the script wants to rewrite them
    s = one_hot_table([5, 5, 5, 2], [0.99] * 4, V)
    out, _ = run([s], [7, 7, 7], bl=4, G=1, threshold=0.5, editing_threshold=0.0, max_post_steps=2)
    assert out.sequences[0].tolist() == [7, 7, 7, 2]


def test_output_length_is_prompt_plus_gen_and_tail_is_cut_after_first_eos():
    s = one_hot_table([2, EOS, 3, 4], [0.9] * 4, V)
    out, _ = run([s], [7, 7], bl=4, G=5, threshold=0.5, editing_threshold=None, max_post_steps=0)
    assert out.sequences.shape == (1, 7)
    # canvas [7 7 3 4 | 2 EOS 3 4]: the prompt tail shares block 0; the completion is cut after the
    # first EOS and padded to G
    assert out.sequences[0].tolist() == [7, 7, 3, 4, 2, EOS, PAD]


def test_eos_early_stop_stops_after_the_block():
    s = one_hot_table([2, EOS], [0.9] * 2, V)
    model = ScriptedDenoiser([s], block_length=2)
    out = dllm_edit.generate(
        model,
        torch.tensor([[7, 7]]),
        block_length=2,
        max_new_tokens=8,
        threshold=0.5,
        editing_threshold=None,
        max_post_steps=0,
        **{**BASE, "eos_early_stop": True},
    )
    assert model.calls == 1  # later blocks never run
    assert out.sequences[0].tolist() == [7, 7, 2, EOS] + [PAD] * 6


def test_mask_guard_never_proposes_mask_and_cap_bounds_forwards():
    # the script proposes MASK everywhere with high confidence
    s = one_hot_table([MASK, MASK], [0.99, 0.99], V)
    guarded = ScriptedDenoiser([s], block_length=2)
    out = dllm_edit.generate(
        guarded,
        torch.tensor([[7, 7]]),
        block_length=2,
        max_new_tokens=2,
        threshold=0.5,
        editing_threshold=0.5,
        max_post_steps=1,
        **{**BASE, "suppress_mask_token": True, "max_steps_per_block": "auto"},
    )
    assert MASK not in out.sequences[0].tolist()
    # without the guard the reference would loop; the hard cap stops it
    unguarded = ScriptedDenoiser([s], block_length=2)
    out = dllm_edit.generate(
        unguarded,
        torch.tensor([[7, 7]]),
        block_length=2,
        max_new_tokens=2,
        threshold=0.5,
        editing_threshold=0.5,
        max_post_steps=1,
        **{**BASE, "max_steps_per_block": 7},
    )
    assert unguarded.calls == 7
