"""pytest configuration: Triton's interpreter on a machine without CUDA, the Hypothesis profiles, and
the fixtures. The helpers the tests import (ids, tiny models, denoisers) live in `tests/helpers/`."""

import os

import torch

# The Triton kernels run on the CPU in Triton's interpreter, which triton reads when it is first
# imported: switch it on before anything imports triton (the kernel tests, the doctests of the
# kernels' triton modules). With CUDA, the kernels are compiled and run on the GPU instead.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
from hypothesis import HealthCheck, settings

from tests.helpers import tiny_llama, tiny_qwen3, tiny_tokenizer

settings.register_profile(
    "ci", max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
settings.register_profile(
    "dev", max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True)
def _registries_restored():
    """Every test leaves the strategy, adapter and loop-action registries as it found them: a test (a
    doctest, or a cookbook example it runs) that registers one must not change what the tests after it
    see."""
    from dllm_edit import adapters
    from dllm_edit.loop import actions
    from dllm_edit.strategies import registry

    saved = [
        (table, dict(table))
        for table in (
            registry._REGISTRY,
            registry._ALIASES,
            adapters._ADAPTERS,
            adapters.MODEL_TYPE_ADAPTERS,
            actions._ACTIONS,
        )
    ]
    yield
    for table, content in saved:
        table.clear()
        table.update(content)


@pytest.fixture(scope="session")
def llama_eager():
    return tiny_llama("eager")


@pytest.fixture(scope="session")
def llama_sdpa():
    return tiny_llama("sdpa")


@pytest.fixture(scope="session")
def qwen3_sdpa():
    return tiny_qwen3("sdpa")


@pytest.fixture
def tiny_model_dir(tmp_path):
    """A tiny Llama and its word-level tokenizer saved in a folder (for the command line)."""
    model_dir = tmp_path / "model"
    tiny_llama("sdpa", seed=7).save_pretrained(model_dir)
    tiny_tokenizer().save_pretrained(model_dir)
    return model_dir
