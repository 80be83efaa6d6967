"""Install off this machine: the extras the docs name exist in setup.py, a hub preprocessor without
`datasets` names the extra in one line, and docs/install.md's check commands work as printed."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.test_printed_commands import VENV, fresh_shell

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "examples" / "data_preprocess"
INSTALL_DOC = ROOT / "docs" / "install.md"
HUB_SCRIPTS = ("gsm8k.py", "gsm8k_tool.py", "math_dataset.py", "deepscaler.py")  # read_hub_source without --source_dir


def extras_require() -> dict[str, list[str]]:
    # read from setup.py's source: running setup() here would need the build tools and the checkout as cwd
    call = next(
        node
        for node in ast.walk(ast.parse((ROOT / "setup.py").read_text()))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setup"
    )
    return ast.literal_eval(next(k.value for k in call.keywords if k.arg == "extras_require"))


def test_every_extra_the_docs_install_is_declared():
    extras = extras_require()
    assert extras["datasets"] == ["datasets"]
    named = set()
    for doc in (ROOT / "README.md", INSTALL_DOC, SCRIPTS / "common.py"):
        for group in re.findall(r'-e \\?"?\.\[([a-z0-9_,-]+)\]', doc.read_text()):
            named.update(group.split(","))
    assert {"datasets", "gpu", "test", "quickstart"} <= named  # the regex still finds what the docs say
    assert named <= set(extras), f"extras the docs install but setup.py lacks: {sorted(named - set(extras))}"


@pytest.mark.parametrize("script", HUB_SCRIPTS)
def test_hub_preprocessor_without_datasets_names_the_extra(script, tmp_path):
    # sys.modules["datasets"] = None makes `import datasets` fail as on a machine without it, installed here or not
    code = (
        "import runpy, sys; sys.modules['datasets'] = None; sys.path.insert(0, sys.argv[1]); "
        "sys.argv = sys.argv[2:]; runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-c", code, str(SCRIPTS), str(SCRIPTS / script), "--local_dir", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("error: ") and 'pip install -e ".[datasets]"' in proc.stderr
    assert "--source_dir" in proc.stderr  # the offline way out
    assert not out.exists()


def test_install_doc_links():
    assert "(docs/install.md)" in (ROOT / "README.md").read_text()
    assert "(install.md)" in (ROOT / "docs" / "README.md").read_text()
    for target in re.findall(r"\]\(([^)#:]+)\)", INSTALL_DOC.read_text()):
        assert (INSTALL_DOC.parent / target).is_file(), target


@pytest.mark.skipif(not (VENV / "bin" / "activate").is_file(), reason="no .venv: made by bash scripts/setup_cpu.sh")
def test_install_doc_check_commands_work_as_printed(tmp_path):
    # the "Check the install" block, run after the CPU set-up's activate; the model directory goes to tmp, not ~
    section = INSTALL_DOC.read_text().split("## Check the install", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    assert "~/models/" in block
    proc = fresh_shell(". .venv/bin/activate && set -e\n" + block.replace("~/models/", '"$DAGRL_TEST_TMP"/'), tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "configs compose" in proc.stdout
    assert re.search(r"^torch \S+ megatron-core 0\.\d+", proc.stdout, re.M), proc.stdout[-2000:]
    assert "8.19B params" in proc.stdout and "TP=2 PP=4 CP=1 DP=1" in proc.stdout  # as docs/install.md says
