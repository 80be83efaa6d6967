from __future__ import annotations

import pytest

from tests.helpers import make_tiny_tokenizer


@pytest.fixture(scope="session")
def tokenizer(tmp_path_factory):
    return make_tiny_tokenizer(str(tmp_path_factory.mktemp("tokenizer")))
