"""Pytest fixtures and process setup only; shared builders live in :mod:`helpers`.

``DYNATREE_TEST_DEVICE`` (default ``cpu``) names the device the tiny models and the reference
tensors live on: ``DYNATREE_TEST_DEVICE=cuda pytest tests/test_exactness.py`` runs the exactness
properties on a GPU (``scripts/gpu_check.sh`` does).
"""

from __future__ import annotations

import os
import tempfile

import pytest
import torch

from dynatree_core.pairs.pair import ModelPair
from helpers import cached_pair
from helpers.bench import make_data_dir
from helpers.ci import fail_browser_skip

torch.set_num_threads(1)  # tiny models: threads only add overhead, and CI has two cores
# calibrations (cost curves, acceptance vectors) measured by tests stay out of the user's cache
os.environ.setdefault("DYNATREE_CACHE_DIR", tempfile.mkdtemp(prefix="dynatree-test-cache-"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under CI=true a skip for a missing browser fails (:func:`helpers.ci.fail_browser_skip`)."""
    outcome = yield
    fail_browser_skip(outcome.get_result())


@pytest.fixture
def llama_pair() -> ModelPair:
    return cached_pair("llama", "sdpa", 0.02)


@pytest.fixture
def neox_pair() -> ModelPair:
    return cached_pair("gpt_neox", "sdpa", 0.02)


@pytest.fixture
def data_dir(tmp_path):
    """A tiny WikiText-2 / PG-19 data directory (the benchmark tests' local text)."""
    return make_data_dir(tmp_path / "data")
