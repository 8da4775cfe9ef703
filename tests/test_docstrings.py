"""Run the docstring examples of the public modules."""

import doctest
import importlib
import importlib.util

import pytest

needs_triton = pytest.mark.skipif(
    importlib.util.find_spec("triton") is None, reason="triton is not installed (the `kernels` extra)"
)

needs_trl = pytest.mark.skipif(
    importlib.util.find_spec("trl") is None, reason="trl is not installed (the `train` extra)"
)

MODULES = [
    "dllm_edit",
    "dllm_edit.config",
    "dllm_edit.generation",
    "dllm_edit.loop.actions",
    "dllm_edit.output",
    "dllm_edit.inputs",
    "dllm_edit.infill",
    "dllm_edit.special_tokens",
    "dllm_edit.vocab",
    "dllm_edit.cli.checks",
    "dllm_edit.cli.parsing",
    "dllm_edit.adapters.block_causal",
    "dllm_edit.adapters.block_causal_static",
    "dllm_edit.adapters.bidirectional",
    "dllm_edit.adapters",
    "dllm_edit.adapters.shifted",
    "dllm_edit.adapters.masked_lm",
    "dllm_edit.hf",
    "dllm_edit.terminal_streamer",
    "dllm_edit.modes",
    "dllm_edit.strategy_factory",
    "dllm_edit.replay",
    "dllm_edit.strategies.base",
    "dllm_edit.strategies.needs",
    "dllm_edit.strategies.canvas_view",
    "dllm_edit.strategies.fields",
    "dllm_edit.strategies.selection",
    "dllm_edit.strategies.schedules",
    "dllm_edit.strategies.unmask",
    "dllm_edit.strategies.edit",
    "dllm_edit.strategies.multi_block",
    "dllm_edit.strategies.repeat_penalty",
    "dllm_edit.strategies.registry",
    "dllm_edit.strategies.fast_dllm",
    "dllm_edit.strategies.eb_sampler",
    "dllm_edit.strategies.dream",
    "dllm_edit.strategies.random_order",
    "dllm_edit.strategies.prophet",
    "dllm_edit.strategies.klass",
    "dllm_edit.strategies.pc_sampler",
    "dllm_edit.strategies.token_prior",
    "dllm_edit.strategies.wino",
    "dllm_edit.adapters.shadow",
    "dllm_edit.adapters.dual_cache",
    "dllm_edit.adapters.cache",
    "dllm_edit.algorithm_bench",
    "dllm_edit.data.synthetic",
    "dllm_edit.shipped",
    "dllm_edit.evaluation",
    "dllm_edit.data.char_tokenizer",
    "dllm_edit.data.bpe_tokenizer",
    "dllm_edit.data.code_corpus",
    "dllm_edit.trainers.corruption",
    "dllm_edit.trainers.diffusion_forward",
    "dllm_edit.trainers.objective",
    "dllm_edit.trainers.elbo",
    "dllm_edit.trainers.ebpo_loss",
    "dllm_edit.trainers.rewards",
    "dllm_edit.trainers.distributed",
    "dllm_edit.trainers.token_ids",
    pytest.param("dllm_edit.trainers.example_noise", marks=needs_trl),
    pytest.param("dllm_edit.trainers.ebpo_config", marks=needs_trl),
    pytest.param("dllm_edit.trainers.ebpo_trainer", marks=needs_trl),
    pytest.param("dllm_edit.trainers.sft_config", marks=needs_trl),
    pytest.param("dllm_edit.trainers.sft_trainer", marks=needs_trl),
    pytest.param("dllm_edit.trainers.callbacks", marks=needs_trl),
    "dllm_edit.loading",
    "dllm_edit.models",
    "dllm_edit.models.auto",
    "dllm_edit.models.common",
    "dllm_edit.models.llada.configuration_llada",
    "dllm_edit.models.llada.modeling_llada",
    "dllm_edit.models.llada_moe",
    "dllm_edit.models.llada_moe.configuration_llada_moe",
    "dllm_edit.models.llada_moe.modeling_llada_moe",
    "dllm_edit.models.dream",
    "dllm_edit.models.dream.configuration_dream",
    "dllm_edit.models.dream.modeling_dream",
    "dllm_edit.models.llada2_moe.configuration_llada2_moe",
    "dllm_edit.models.llada2_moe.modeling_llada2_moe",
    "dllm_edit.kernels.candidates",
    "dllm_edit.kernels.candidates.reference",
    "dllm_edit.kernels.candidates.stats",
    "dllm_edit.kernels.masked_logprob",
    "dllm_edit.kernels.masked_logprob.reference",
    # the Triton modules import triton (the `kernels` extra); their examples run in the interpreter
    # on the CPU (tests/conftest.py sets TRITON_INTERPRET=1) or compiled on CUDA
    pytest.param("dllm_edit.kernels.candidates.triton", marks=needs_triton),
    pytest.param("dllm_edit.kernels.masked_logprob.triton", marks=needs_triton),
]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{name} has no docstring examples: add one or drop it from MODULES"
    assert result.failed == 0
