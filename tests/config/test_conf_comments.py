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
