"""docs/config_reference.md is generated from conf/ and must be current; the generator covers every key."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from dagrl.config.load import ConfigError, compose
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
    # a node (of the graph, or of a switch's changes): one row
    rows = {re.sub(r"^(dag\.(?:nodes|switches\.\w+\.nodes)\.\w+)\..*", r"\1", key) for key in leaf_keys(compose([]))}
    missing = [key for key in rows if f"| `{key}` |" not in text]
    assert not missing, missing
    row = next(line for line in text.splitlines() if line.startswith("| `data.truncation` |"))
    assert row == (
        "| `data.truncation` | `error` | one of error, left, right, middle | prompt longer than "
        "max_prompt_length: "
        "error \\| left \\| right \\| middle |"
    )


def test_comment_split_respects_quotes():
    split = load_generator().split_comment
    assert split(' "a # b"   # the comment') == ('"a # b"', "the comment")
    assert split(" checkpoints/${x.y}  # root") == ("checkpoints/${x.y}", "root")
    assert split(" [1, 2]") == ("[1, 2]", "")


def test_from_verl_refused_keys_table_is_current_and_lists_every_refused_key():
    generator = load_generator()
    page = (ROOT / "docs" / "from_verl.md").read_text()
    assert page == generator.render_from_verl(page), (
        "docs/from_verl.md's refused-keys table is stale: run python3 scripts/gen_config_reference.py"
    )
    from dagrl.config.load import VERL_KEYS

    table = page[page.index(generator.MARKS[0]) : page.index(generator.MARKS[1])]
    folded = [key for key in VERL_KEYS if generator.SHARED_LAYOUT.match(key)]
    assert folded and all(f"`{key.rsplit('.', 1)[1]}`" in table for key in folded)
    assert all(f"| `{key}` |" in table for key in VERL_KEYS if key not in folded)


def test_from_verl_unknown_key_examples_are_refused_as_unknown():
    # the page's examples of verl keys dagrl does not have: each must fail as unknown, not be taken or answered
    # by the refused-keys table (a key that gained a meaning must leave the list)
    page = (ROOT / "docs" / "from_verl.md").read_text()
    paragraph = page[page.index("fails as an unknown key") : page.index("dagrl has none of these features")]
    keys = re.findall(r"`([a-z_]+(?:\.[a-z_]+)+)`", paragraph)
    assert len(keys) >= 10, keys
    for key in keys:
        with pytest.raises(ConfigError, match=f"unknown config key '{re.escape(key)}'"):
            compose([f"{key}=1"])


def test_from_verl_defaults_table_gives_dagrls_defaults():
    # "Defaults that differ from verl's": the dagrl column's first value is the key's default in conf/
    page = (ROOT / "docs" / "from_verl.md").read_text()
    section = page[page.index("## Defaults that differ") : page.index("## dagrl keys verl does not have")]
    config, checked = compose([]), 0
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        node = config
        for part in re.findall(r"`([^`]+)`", cells[0])[0].split("."):
            node = node[part]
        if isinstance(node, bool) or node is None:
            value = {None: "null", True: "true", False: "false"}[node]
        else:
            value = "[" + ", ".join(node) + "]" if isinstance(node, list) else str(node)
        assert re.split(r" [(/]", cells[2].replace("`", ""))[0] == value, line
        checked += 1
    assert checked >= 15


def test_algorithm_table_and_choice_rows_come_from_the_catalog():
    from dagrl.algo.catalog import REGISTRIES

    generator = load_generator()
    page = (ROOT / "docs" / "algorithms.md").read_text()
    assert page == generator.render_between(page, generator.ALGORITHM_MARKS, generator.algorithms_table()), (
        "docs/algorithms.md's table is stale: run python3 scripts/gen_config_reference.py"
    )
    table = page[page.index(generator.ALGORITHM_MARKS[0]) : page.index(generator.ALGORITHM_MARKS[1])]
    reference = generator.render()
    for registry in REGISTRIES:
        assert all(f"`{name}`" in table for name in (*registry.names(), *registry.refused))
        for key in registry.keys:  # the reference names exactly what pre-flight takes
            row = next(line for line in reference.splitlines() if line.startswith(f"| `{key}` |"))
            assert f"| one of {', '.join(registry.names())} |" in row and row.endswith("docs/algorithms.md |"), row
