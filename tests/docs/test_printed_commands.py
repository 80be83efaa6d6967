"""The README's printed commands work as printed in a fresh shell after the two set-up commands: the run scripts
find .venv by themselves, and the rest run after the README's `. .venv/bin/activate`; what a reader must fill in is
marked as a placeholder (`<overrides>`), never an ellipsis that the shell passes on."""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv"
README = ROOT / "README.md"
# what starts a command line (a program, or the environment variables set for one)
COMMAND = re.compile(r"^(?:[A-Z_]+=\S*\s+)*(?:python3|torchrun|bash|ray|tensorboard|pip|\.)\s")

needs_venv = pytest.mark.skipif(
    not (VENV / "bin" / "activate").is_file(), reason="no .venv: made by bash scripts/setup_cpu.sh"
)


def readme_commands() -> list[str]:
    """The README's commands: the lines of its code blocks and its inline code spans that start like one."""
    text = README.read_text(encoding="utf-8")
    blocks = re.findall(r"^\s*```[a-z]*\n(.*?)^\s*```", text, flags=re.M | re.S)
    lines = [line.strip() for block in blocks for line in block.splitlines()]
    spans = [
        " ".join(span.split())
        for span in re.findall(r"`([^`\n]+(?:\n[^`\n]+)?)`", re.sub(r"^\s*```.*?^\s*```", "", text, flags=re.M | re.S))
    ]
    return [command for command in lines + spans if COMMAND.match(command)]


def test_no_printed_command_holds_an_ellipsis_for_the_reader_to_fill_in():
    commands = readme_commands()
    assert any("<overrides>" in command for command in commands)  # the placeholders are found where they are
    unmarked = [command for command in commands if "…" in command or "..." in command]
    assert not unmarked, f"mark what the reader fills in as <name>, or print a command that runs: {unmarked}"


def fresh_shell(command: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """`bash -lc command` from the repo root, as a new terminal: no venv on PATH, none active."""
    hidden = {str(VENV / "bin"), os.path.dirname(sys.executable)}
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p not in hidden)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env.update(PATH=path, DAGRL_TEST_TMP=str(tmp_path))
    return subprocess.run(["bash", "-lc", command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@needs_venv
def test_the_readmes_cfg_job_commands_print_the_config_with_their_overrides(tmp_path):
    commands = [c for c in readme_commands() if c.startswith("python3 -m dagrl.main_dag --cfg job")]
    assert len(commands) >= 2
    for command in commands:
        proc = fresh_shell(f". .venv/bin/activate && {command}", tmp_path)
        assert proc.returncode == 0, f"{command}: {proc.stderr[-2000:]}"
        config = yaml.safe_load(proc.stdout)
        for key, value in re.findall(r"([\w.]+)=(\S+)", command.split("#")[0]):
            assert functools.reduce(dict.__getitem__, key.split("."), config) == yaml.safe_load(value), (command, key)


@pytest.fixture
def shell_has_no_dagrl(tmp_path):
    # the case the scripts handle; a machine whose own python3 has dagrl (a GPU image) has nothing to show here
    probe = fresh_shell("python3 -I -c 'import dagrl'", tmp_path)
    if probe.returncode == 0:
        pytest.skip("this machine's python3 has dagrl without .venv")


@needs_venv
def test_run_script_dry_run_finds_the_venv(shell_has_no_dagrl, tmp_path):
    # with an override appended, as the README's GPU command does: it reaches the printed config
    proc = fresh_shell(
        "DAGRL_DRY_RUN=1 bash examples/grpo_trainer/run_smollm2-135m-vllm.sh actor_rollout_ref.model.fp32_lm_head=True",
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "actor_rollout_ref:" in proc.stdout and "name: vllm" in proc.stdout
    assert "fp32_lm_head: true" in proc.stdout


@needs_venv
def test_plan_of_the_seed_script_after_the_readmes_activate(shell_has_no_dagrl, tmp_path):
    # the README's commands: a config-only model directory to plan with (no data), then the plan through the script
    prepare = fresh_shell(
        ". .venv/bin/activate"
        " && python3 -m dagrl.main_dag --cfg job > /dev/null"
        ' && python3 scripts/init_random_model.py --family qwen3 --size 8b --out "$DAGRL_TEST_TMP/qwen3-8b"'
        " --config-only",
        tmp_path,
    )
    assert prepare.returncode == 0, prepare.stderr[-2000:]
    proc = fresh_shell(
        'DAGRL_PLAN=1 MODEL_PATH="$DAGRL_TEST_TMP/qwen3-8b" bash examples/grpo_trainer/run_qwen3-8b-megatron.sh',
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "8.19B params" in proc.stdout and "TP=2 PP=4 CP=1 DP=1" in proc.stdout
    assert "data files not found: steps per epoch unknown" in proc.stdout
