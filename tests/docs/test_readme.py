"""The README is a short user's page: at most 200 lines, its sections in order, the two commands exactly as printed,
one table of headline numbers whose rows link to docs/results pages that state their provenance, and every link
of the README, the docs index, the architecture page and the results pages resolves (headings included); the
README headings other pages link to still exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
RESULTS = ROOT / "docs" / "results"
TWO_COMMANDS = (
    "bash scripts/quickstart.sh    # 1. install, make model + data locally, train GRPO that visibly "
    "learns\n"
    "bash scripts/test.sh          # 2. install, run the test suite (CI runs exactly this through "
    ".ci/run)\n"
)


def heading_anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.M | re.S)  # a `# comment` in a block is no heading
    return {
        re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        for heading in re.findall(r"^#+ (.+)$", text, re.M)
    }


def links(path: Path) -> list[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.M | re.S)
    return [t for t in re.findall(r"\]\(([^)\s]+)\)", text) if not t.startswith(("http://", "https://"))]


def test_short_and_in_order():
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    sections = re.findall(r"^## (.+)$", text, re.M)
    assert sections == [
        "Install",
        "First CPU run",
        "First GPU run",
        "Configure",
        "Troubleshooting",
        "Headline numbers",
    ], sections
    assert TWO_COMMANDS in text
    assert "examples/grpo_trainer/run_qwen3-8b-megatron.sh" in text and "(docs/bad_inputs.md)" in text
    for node in (
        "rollout",
        "score",
        "to_actor_layout",
        "old_log_prob",
        "ref_log_prob",
        "reward",
        "advantage",
        "actor_update",
        "critic_update",
    ):  # the picture of the graph
        assert re.search(rf"^\[?{node}\]?\s", text, re.M), node


def test_headline_rows_link_to_results_pages_with_provenance():
    table = README.read_text().split("## Headline numbers", 1)[1]
    rows = [line for line in table.splitlines() if line.startswith("| [")]
    assert len(rows) >= 5
    for row in rows:
        target = re.search(r"\]\((docs/results/[\w-]+\.md)\)", row)
        assert target, f"a headline row without its results page: {row}"
        page = (ROOT / target[1]).read_text()
        for field in ("**Date:**", "**Hardware:**", "**Versions:**", "**Commit"):
            assert field in page, f"{target[1]} does not state {field}"
    listed = {re.search(r"\]\((docs/results/[\w-]+\.md)\)", row)[1] for row in rows}
    assert listed == {f"docs/results/{p.name}" for p in RESULTS.glob("*.md")}, "every results page has its row"


def test_links_resolve():
    pages = [README, ROOT / "docs" / "README.md", ROOT / "docs" / "architecture.md", *RESULTS.glob("*.md")]
    for page in pages:
        for target in links(page):
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            assert file.exists(), f"{page.relative_to(ROOT)}: link to a missing file: {target}"
            if anchor and file.suffix == ".md":
                assert anchor in heading_anchors(file), f"{page.relative_to(ROOT)}: no heading for {target}"


def test_readme_headings_other_pages_link_to_exist():
    anchors = heading_anchors(README)
    for page in (ROOT / "docs").rglob("*.md"):
        for anchor in re.findall(r"\((?:\.\./)+README\.md#([\w-]+)\)", page.read_text()):
            assert anchor in anchors, f"{page.relative_to(ROOT)} links to README.md#{anchor}, which is gone"
