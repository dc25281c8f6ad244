"""Counts against the libraries that define them: transformers builds each config.json (on the
meta device, or small on the CPU) and its parameters, caches and FlopCounterMode's FLOPs are the
expected values; peft's wrapping for LoRA; gguf's and bitsandbytes' own quantizers for weight
bytes. Every test here is marked oracle."""

import pytest

from tests.support.marks import mark_folder


def pytest_collection_modifyitems(items):
    mark_folder(items, __file__, pytest.mark.oracle)
