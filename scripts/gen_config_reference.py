"""Writes docs/config_reference.md: every key of conf/ with its default and its one-line comment, by section.

    python3 scripts/gen_config_reference.py            # regenerate after changing conf/
    python3 scripts/gen_config_reference.py --check    # exit 1 if the committed file is stale (tests do this)

The YAML files are the source: each key's comment is the text after `#` on its line, the default is the value
as written there (interpolations unresolved), and a section's description is its file's leading comment.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import NamedTuple

import yaml

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
OUTPUT = ROOT / "docs" / "config_reference.md"
_KEY = re.compile(r"^(\s*)([A-Za-z_][\w.]*):(.*)$")


class Entry(NamedTuple):
    path: str
    default: str
    comment: str
    mapping: bool


def split_comment(text: str) -> tuple[str, str]:
    """(value, comment) of the text after `key:`; a `#` inside quotes or brackets' strings is not a comment."""
    quote = None
    for index, char in enumerate(text):
        if quote:
            quote = None if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char == "#" and (index == 0 or text[index - 1].isspace()):
            return text[:index].strip(), text[index + 1:].strip()
    return text.strip(), ""


def header_comment(lines: list[str]) -> str:
    """The file's leading comment lines (without Hydra's `# @package` directive), joined."""
    header = []
    for line in lines:
        if not line.startswith("#"):
            break
        if not line.startswith("# @package"):
            header.append(line.lstrip("#").strip())
    return " ".join(header)


def _summary(value) -> str:
    """A block value (a YAML list over several lines) in one cell: graph nodes by id, else the item count."""
    if isinstance(value, list):
        ids = [item.get("id") for item in value if isinstance(item, dict)]
        return ", ".join(map(str, ids)) if ids and all(ids) else f"list of {len(value)}"
    return "" if value is None else str(value)


def scan(path: Path, package: str) -> tuple[str, list[Entry]]:
    """The description and the entries of one config file, keys prefixed by its package."""
    lines = path.read_text().splitlines()
    data = yaml.safe_load(path.read_text()) or {}
    entries: list[Entry] = []
    stack: list[tuple[int, str]] = []
    for line in lines:
        match = _KEY.match(line)
        if not match or line.lstrip().startswith(("#", "- ")):
            continue
        indent, key, rest = len(match.group(1)), match.group(2), match.group(3)
        if indent == 0 and key in ("defaults", "hydra"):
            stack = [(0, "\0")]  # Hydra's own settings: skip this block
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if stack and stack[0][1] == "\0":
            continue
        keys = [k for _, k in stack] + [key]
        value, comment = split_comment(rest)
        node = data
        for part in keys:
            node = node[part]
        prefix = f"{package}." if package else ""
        mapping = isinstance(node, dict) and not value
        if not value:
            stack.append((indent, key))
            value = "" if mapping else _summary(node)
        entries.append(Entry(prefix + ".".join(keys), value, comment, mapping))
    return header_comment(lines), entries


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def table(entries: list[Entry]) -> list[str]:
    rows = ["| key | default | meaning |", "|---|---|---|"]
    for entry in entries:
        key = f"**`{entry.path}`**" if entry.mapping else f"`{entry.path}`"
        default = f"`{_cell(entry.default)}`" if entry.default else ""
        rows.append(f"| {key} | {default} | {_cell(entry.comment)} |")
    return rows


def _package(path: Path, group: str) -> str:
    first = path.read_text().splitlines()[:1]
    if first and first[0].startswith("# @package"):
        package = first[0].split(None, 2)[2].strip()
        return "" if package == "_global_" else package
    return group


def render() -> str:
    sys.path.insert(0, str(ROOT))
    from dagrl.config.load import FREEFORM_MAPS

    defaults = yaml.safe_load((CONF / "dagrl.yaml").read_text())["defaults"]
    groups = [(group, option) for item in defaults if isinstance(item, dict)
              for group, option in item.items() if not group.startswith("override ")]
    out = ["# Configuration reference", "",
           "Generated from the comments in `conf/` by `python3 scripts/gen_config_reference.py`; do not edit by "
           "hand (a test fails when this file is stale).", "",
           "Override any key on the command line: `python3 -m dagrl.main_dag section.key=value ...` (the same "
           "overrides work for `python3 -m dagrl.plan`). Unknown keys are rejected with the closest valid key; "
           "`+key=value` adds keys only under the free-form maps " + ", ".join(f"`{m}`" for m in FREEFORM_MAPS)
           + ". Bold rows are sections.", ""]
    out.append("Sections: " + " · ".join(f"[{group}](#{group})" for group, _ in groups))
    for group, option in groups:
        path = CONF / group / f"{option}.yaml"
        description, entries = scan(path, _package(path, group))
        others = sorted(p.stem for p in (CONF / group).glob("*.yaml") if p.stem != option)
        choices = " (default; other choices: " + ", ".join(f"`{group}={o}`" for o in others) + ")" if others else ""
        out += ["", f"## {group}", "", f"`conf/{group}/{option}.yaml`{choices}. {description}", ""]
        out += table(entries)
        for other in others:
            other_path = CONF / group / f"{other}.yaml"
            description, entries = scan(other_path, _package(other_path, group))
            out += ["", f"### {group}={other}", "", f"`conf/{group}/{other}.yaml`. {description}", ""]
            out += table(entries)
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/config_reference.md is stale")
    args = parser.parse_args()
    text = render()
    if args.check:
        current = OUTPUT.read_text() if OUTPUT.is_file() else ""
        if current != text:
            sys.exit(f"{OUTPUT.relative_to(ROOT)} is stale: run python3 scripts/gen_config_reference.py")
        return
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
