from __future__ import annotations

import pytest

from tests.helpers import make_tiny_tokenizer


@pytest.fixture(scope="session")
def tokenizer(tmp_path_factory):
    return make_tiny_tokenizer(str(tmp_path_factory.mktemp("tokenizer")))


@pytest.fixture(scope="session")
def tokenizer_without_pad(tmp_path_factory):
    return make_tiny_tokenizer(str(tmp_path_factory.mktemp("tokenizer_no_pad")), with_pad=False)
