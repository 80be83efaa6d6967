"""GPU tests: everything under tests/gpu carries the `gpu` marker from collection, so `-m "not gpu"` (CI) deselects
it; run explicitly without CUDA, it is skipped."""

from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config, items):
    skip = None if torch.cuda.is_available() else pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.gpu)
            if skip is not None:
                item.add_marker(skip)
