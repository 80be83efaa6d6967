"""docs/config_reference.md is generated from conf/ and must be current; the generator covers every key."""
from __future__ import annotations

import importlib.util
from pathlib import Path

from dagrl.config.load import compose
from dagrl.config.tree import leaf_keys

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gen_config_reference.py"


def load_generator():
    spec = importlib.util.spec_from_file_location("gen_config_reference", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_reference_is_current():
    text = load_generator().render()
    committed = (ROOT / "docs" / "config_reference.md").read_text()
    assert committed == text, "docs/config_reference.md is stale: run python3 scripts/gen_config_reference.py"


def test_every_composed_key_is_in_the_reference_with_its_comment():
    text = load_generator().render()
    missing = [key for key in leaf_keys(compose([])) if f"| `{key}` |" not in text]
    assert not missing, missing
    row = next(line for line in text.splitlines() if line.startswith("| `data.truncation` |"))
    assert row == ("| `data.truncation` | `error` | prompt longer than max_prompt_length: "
                   "error \\| left \\| right \\| middle |")


def test_comment_split_respects_quotes():
    split = load_generator().split_comment
    assert split(' "a # b"   # the comment') == ('"a # b"', "the comment")
    assert split(" checkpoints/${x.y}  # root") == ("checkpoints/${x.y}", "root")
    assert split(" [1, 2]") == ("[1, 2]", "")
