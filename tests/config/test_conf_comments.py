"""Every key in conf/ is documented by a comment on its own line (the README's config reference reads them)."""

import re
from pathlib import Path

CONF = Path(__file__).resolve().parents[2] / "conf"
KEY_LINE = re.compile(r"^\s*(- )?[A-Za-z_][\w.]*:")


def test_every_key_has_a_one_line_comment():
    undocumented = []
    for path in sorted(CONF.rglob("*.yaml")):
        in_hydra = False
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.startswith("hydra:"):
                in_hydra = True  # Hydra's own settings; commented where set, not dagrl keys
            elif line and not line.startswith(" "):
                in_hydra = False
            if in_hydra or line.startswith("defaults:") or line.lstrip().startswith(("- ", "#")):
                continue
            if KEY_LINE.match(line) and "#" not in line:
                undocumented.append(f"{path.relative_to(CONF)}:{number}: {line.strip()}")
    assert not undocumented, "keys without a comment:\n" + "\n".join(undocumented)


def test_comments_of_keys_taking_catalog_names_do_not_list_them():
    # the names of dagrl/algo/catalog.py reach docs/config_reference.md from the catalog itself: a list copied into
    # a comment would go stale when a name is registered
    from dagrl.algo.catalog import REGISTRIES

    leaves = {key.rsplit(".", 1)[-1]: registry for registry in REGISTRIES for key in registry.keys}
    checked = 0
    for path in sorted(CONF.rglob("*.yaml")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            key = line.strip().split(":", 1)[0]
            if KEY_LINE.match(line) and key in leaves and "#" in line:
                comment = line.split("#", 1)[1]
                named = [
                    name
                    for name in leaves[key].names()
                    if re.search(rf"(?<![\w+-]){re.escape(name)}(?![\w+-])", comment)
                ]
                assert len(named) <= 1, f"{path.relative_to(CONF)}:{number}: the comment lists {named}"
                checked += 1
    assert checked >= 5
