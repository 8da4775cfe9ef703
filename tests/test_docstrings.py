"""Run the docstring examples of the public modules."""

import doctest
import importlib

import pytest

MODULES = [
    "dllm_edit",
    "dllm_edit.config",
    "dllm_edit.generation",
    "dllm_edit.adapters.block_causal",
    "dllm_edit.adapters.bidirectional",
    "dllm_edit.adapters",
    "dllm_edit.adapters.shifted",
    "dllm_edit.adapters.masked_lm",
    "dllm_edit.hf",
    "dllm_edit.streaming",
    "dllm_edit.strategies.schedules",
    "dllm_edit.strategies.unmask",
    "dllm_edit.strategies.edit",
    "dllm_edit.strategies.multi_block",
    "dllm_edit.strategies.repeat_penalty",
    "dllm_edit.strategies.registry",
    "dllm_edit.kernels.candidates.reference",
]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
