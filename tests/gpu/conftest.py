"""GPU tests: run on the GPU machines (shared/devkit); skipped where CUDA is absent."""
import pytest
import torch


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run through the device tool)")
    for item in items:
        if "tests/gpu/" in str(item.fspath):
            item.add_marker(skip)
