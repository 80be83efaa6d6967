"""docs/first_gpu_run.md works as printed.

Every bash block of the guide carries a marker comment before its fence:
  <!-- tested: NAME -->       run here, in document order, in a fresh shell after `. .venv/bin/activate`, with HOME a
                              temporary directory: a tiny random Qwen3 stands in for the hub download at
                              ~/models/Qwen3-1.7B and a few hundred gsm8k-format rows for the hub data; the launch and
                              resume commands run as one CPU process with CPU-sized overrides appended (ON_CPU);
  <!-- tested-slow: NAME -->  the same, under -m slow (two emulated torchrun nodes, a one-node Ray run);
  <!-- flags-checked: WHY --> not run (GPU, network, several machines): its options are checked against the program's
                              own --help and its dotted keys against the composed config, as every block's are.
A ```text block marked <!-- output-of: NAME --> must appear, line by line and in order, in that block's output."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.docs.test_printed_commands import VENV
from tests.engine.engine_helpers import free_port

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "first_gpu_run.md"

needs_venv = pytest.mark.skipif(
    not (VENV / "bin" / "activate").is_file(), reason="no .venv: made by bash scripts/setup_cpu.sh"
)

# Appended to the guide's launch and resume commands on a CPU: one process (no GPU), the hf rollout instead of vLLM
# (a GPU-only engine), 2 samples of 8 tokens per prompt; the step count is added per command. The guide's batch
# size and prompt length stay: a checkpoint's data position depends on them, and the plans after the launch check
# the checkpoint it left as a resume would.
ON_CPU = (
    "trainer.n_gpus_per_node=1 actor_rollout_ref.rollout.name=hf data.max_response_length=8 "
    "actor_rollout_ref.rollout.n=2"
)


@dataclass(frozen=True)
class Block:
    kind: str  # tested | tested-slow | flags-checked | output-of | "" (no marker)
    name: str
    lang: str
    code: str


def guide_blocks() -> list[Block]:
    text = GUIDE.read_text()
    blocks = []
    for match in re.finditer(r"(?:<!-- ([a-z-]+): (.*?) -->\n)?```(\w*)\n(.*?)```", text, re.S):
        kind, name, lang, code = match.groups()
        blocks.append(Block(kind or "", (name or "").strip(), lang, code))
    return blocks


def block(name: str) -> Block:
    found = [b for b in guide_blocks() if b.name == name and b.kind in ("tested", "tested-slow")]
    assert len(found) == 1, f"docs/first_gpu_run.md has {len(found)} run blocks named {name!r}"
    return found[0]


# ---- structure and links ------------------------------------------------------------------------------------------
def test_every_bash_block_is_marked():
    blocks = guide_blocks()
    bash = [b for b in blocks if b.lang == "bash"]
    unmarked = [b.code.splitlines()[0] for b in bash if b.kind not in ("tested", "tested-slow", "flags-checked")]
    assert not unmarked, f"bash blocks without a tested/tested-slow/flags-checked marker: {unmarked}"
    run = [b.name for b in bash if b.kind in ("tested", "tested-slow")]
    assert len(run) == len(set(run)), run
    # the path of the guide, each step exercised here
    assert {
        "config-only",
        "preprocess-offline",
        "overrides",
        "plan",
        "plan-config-only",
        "launch",
        "plan-nodes",
        "script-plan-nodes",
        "watch",
        "resume",
        "merge",
        "launch-nodes",
        "ray-one-node",
    } <= set(run)
    outputs = [b for b in blocks if b.kind == "output-of"]
    assert outputs and all(b.name in run for b in outputs)


def heading_anchors(path: Path) -> set[str]:
    anchors = set()
    for heading in re.findall(r"^#+ (.+)$", path.read_text(), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


def test_links_resolve():
    for target in re.findall(r"\]\(([^)\s]+)\)", GUIDE.read_text()):
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        file = (GUIDE.parent / path).resolve() if path else GUIDE
        assert file.is_file(), f"link to a missing file: {target}"
        if anchor:
            assert anchor in heading_anchors(file), f"link to a missing heading: {target}"


# ---- options and keys of every block ------------------------------------------------------------------------------
def commands(code: str) -> list[list[str]]:
    """The simple commands of a bash block as token lists: continuation lines joined, comments, heredoc bodies and
    the bodies of array assignments dropped, `&&`/`;`/`|` split, leading VAR=value assignments removed."""
    lines, skip_until = [], None
    for line in code.replace("\\\n", " ").splitlines():
        if skip_until is not None:
            if line.strip() == skip_until:
                skip_until = None
            continue
        heredoc = re.search(r"<<'?(\w+)'?", line)
        if heredoc:
            skip_until = heredoc.group(1)
            line = line[: heredoc.start()]
        if re.match(r"^\s*[A-Z_]+=\($", line):
            skip_until = ")"
            continue
        line = re.sub(r"^\s*[A-Z_]+=\$\((.*)\)", r"\1", line)  # STEP=$(cat FILE): the command inside
        lines.append(line)
    result = []
    for line in lines:
        tokens = shlex.split(line, comments=True)
        current: list[str] = []
        for token in tokens + [";"]:
            if token in ("&&", ";", "|", "||"):
                while current and re.match(r"^[A-Z_][A-Z0-9_]*=", current[0]):
                    current.pop(0)
                if current:
                    result.append(current)
                current = []
            else:
                current.append(token)
    return result


def help_command(tokens: list[str]) -> tuple[list[str] | None, list[str]]:
    """(the --help command of the program `tokens` runs, the options given to that program); None: nothing to check."""
    program = tokens[0]
    if program in ("python3", "python"):
        if tokens[1] in ("-", "-c"):
            return None, []
        if tokens[1] == "-m":
            return [sys.executable, "-m", tokens[2], "--help"], tokens[3:]
        script = tokens[1]
        assert (ROOT / script).is_file(), f"no such script: {script}"
        if Path(script).name == "model_merger.py":
            return [sys.executable, script, tokens[2], "--help"], tokens[3:]
        return [sys.executable, script, "--help"], tokens[2:]
    if program == "torchrun":
        cut = tokens.index("-m")  # torchrun's options come before the module; the module's after it
        return [str(VENV / "bin" / "torchrun"), "--help"], tokens[1:cut]
    if program in ("hf", "ray"):
        return [str(VENV / "bin" / program), tokens[1], "--help"], tokens[2:]
    if program == "tensorboard":
        return [str(VENV / "bin" / program), "--help"], tokens[1:]
    if program == "bash":
        return None, []  # a run script: its variables are checked against its text below
    if program in ("cat",):
        return None, []
    raise AssertionError(f"the guide runs {program!r}: teach this test how to check it")


def config_keys() -> set[str]:
    from dagrl.config.load import compose

    keys = set()

    def walk(node, prefix):
        for key, value in node.items():
            keys.add(prefix + key)
            if isinstance(value, dict):
                walk(value, prefix + key + ".")

    walk(compose([]), "")
    return keys


@needs_venv
def test_every_option_and_key_exists():
    blocks = [b for b in guide_blocks() if b.lang == "bash"]
    known = config_keys()
    for b in blocks:
        for key in re.findall(r"(?<![\w.$/-])([a-z_]+(?:\.[a-z0-9_]+)+)=", b.code):
            assert key in known, f"{b.kind} {b.name!r}: no config key {key}"
    helps: dict[tuple[str, ...], str] = {}
    checked = 0
    for b in blocks:
        for tokens in commands(b.code):
            help_cmd, args = help_command(tokens)
            if tokens[0] == "bash":  # the example scripts read the variables the guide sets for them
                script = (ROOT / tokens[1]).read_text()
                line = next(line for line in b.code.replace("\\\n", " ").splitlines() if tokens[1] in line)
                for variable in re.findall(r"\b([A-Z][A-Z0-9_]+)=", line.split("bash")[0]):
                    assert variable in script, f"{tokens[1]} does not read {variable}"
                continue
            if help_cmd is None:
                continue
            options = [arg.split("=", 1)[0] for arg in args if arg.startswith("--")]
            if not options:
                continue
            key = tuple(help_cmd)
            if key not in helps:
                env = {**os.environ, "PATH": f"{VENV / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
                proc = subprocess.run(help_cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
                assert proc.returncode == 0, f"{' '.join(help_cmd)}: {proc.stderr[-1000:]}"
                helps[key] = proc.stdout + proc.stderr
            for option in options:
                assert re.search(re.escape(option) + r"\b", helps[key]), f"{' '.join(tokens[:3])}: no option {option}"
                checked += 1
    assert checked >= 20, checked  # the parser still finds the commands


# ---- running the guide on a CPU -----------------------------------------------------------------------------------
def make_stand_ins(home: Path) -> None:
    """What the hub would give: a tiny random Qwen3 at ~/models/Qwen3-1.7B (with the real one's 40960 positions,
    which the guide's prompt + response lengths need) and gsm8k-format rows in ~/data/gsm8k_source."""
    from tests.helpers import make_tiny_tokenizer

    tokenizer = home / "tiny_tokenizer"
    make_tiny_tokenizer(str(tokenizer))
    model = home / "models" / "Qwen3-1.7B"
    proc = subprocess.run(
        [
            sys.executable,
            "scripts/init_random_model.py",
            "--family",
            "qwen3",
            "--size",
            "tiny",
            "--tokenizer",
            str(tokenizer),
            "--out",
            str(model),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    config = json.loads((model / "config.json").read_text())
    config["max_position_embeddings"] = 40960
    (model / "config.json").write_text(json.dumps(config, indent=2))
    source = home / "data" / "gsm8k_source"
    source.mkdir(parents=True)
    for split, count in (("train", 256), ("test", 8)):
        with open(source / f"{split}.jsonl", "w") as handle:
            for index in range(count):
                a, b = index % 9 + 1, (index * 7) % 9 + 1
                handle.write(
                    json.dumps({"question": f"What is {a} + {b}?", "answer": f"{a} + {b} = {a + b}\n#### {a + b}"})
                    + "\n"
                )


def shell(script: str, home: Path, env: dict[str, str] | None = None, output: Path | None = None):
    """`script` in a new bash from the repo root, as a fresh terminal whose HOME is `home`: no venv on PATH, the guide's
    environment made by `. .venv/bin/activate`, the hub offline. With `output`: started in its own session, stdout
    and stderr to `output`.out/.err, and the Popen returned."""
    hidden = {str(VENV / "bin"), os.path.dirname(sys.executable)}
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p not in hidden)
    full_env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    full_env.update(PATH=path, HOME=str(home), HF_HUB_OFFLINE="1", **(env or {}))
    command = ["bash", "-c", ". .venv/bin/activate && set -euo pipefail\n" + script]
    if output is not None:
        with open(f"{output}.out", "w") as out, open(f"{output}.err", "w") as err:
            return subprocess.Popen(command, cwd=ROOT, env=full_env, stdout=out, stderr=err, start_new_session=True)
    return subprocess.run(command, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=300)


def on_cpu(code: str, steps: int) -> str:
    """A launch command of the guide as one CPU process: --nproc-per-node 1, ON_CPU and the step count appended."""
    assert code.count("--nproc-per-node 8") <= 1
    lines = code.rstrip("\n").splitlines()
    assert not lines[-1].lstrip().startswith("#") and not lines[-1].endswith("\\")
    lines[-1] += f" {ON_CPU} trainer.total_training_steps={steps}"
    return "\n".join(lines).replace("--nproc-per-node 8", "--nproc-per-node 1") + "\n"


class GuideSession:
    """The guide's tested blocks, run once each in document order in one HOME (each block after `overrides` gets
    that block first, as the same shell would have it)."""

    STEPS = {"launch": 1, "resume": 2}  # the resume trains one step past the launch's checkpoint

    def __init__(self, home: Path) -> None:
        self.home, self.results = home, {}
        self.order = [b for b in guide_blocks() if b.kind == "tested"]
        self.overrides = block("overrides").code

    def script(self, b: Block) -> str:
        code = on_cpu(b.code, self.STEPS[b.name]) if b.name in self.STEPS else b.code
        seen_overrides = [x.name for x in self.order].index(b.name) > [x.name for x in self.order].index("overrides")
        return (self.overrides if seen_overrides else "") + code

    def run(self, name: str) -> subprocess.CompletedProcess:
        for b in self.order:
            if b.name not in self.results:
                proc = shell(self.script(b), self.home)
                self.results[b.name] = proc
                if proc.returncode != 0 and b.name != name:
                    pytest.fail(f"guide block {b.name!r} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
            if b.name == name:
                proc = self.results[name]
                assert proc.returncode == 0, (
                    f"guide block {name!r} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
                )
                return proc
        raise AssertionError(f"no tested block {name!r}")


@pytest.fixture(scope="module")
def guide(tmp_path_factory):
    if not (VENV / "bin" / "activate").is_file():
        pytest.skip("no .venv: made by bash scripts/setup_cpu.sh")
    home = tmp_path_factory.mktemp("home")
    make_stand_ins(home)
    return GuideSession(home)


def in_order(expected: list[str], output: str) -> None:
    lines, at = [line.rstrip() for line in output.splitlines()], 0
    for want in expected:
        assert want in lines[at:], f"not in the output (in this order): {want!r}\n{output[-3000:]}"
        at = lines.index(want, at) + 1


def test_config_only_and_data(guide):
    guide.run("config-only")
    assert (guide.home / "models" / "qwen3-1.7b-config" / "config.json").is_file()
    guide.run("preprocess-offline")
    assert {p.name for p in (guide.home / "data" / "gsm8k").iterdir()} >= {"train.parquet", "test.parquet"}


def test_plans(guide):
    assert guide.run("overrides").stdout == ""
    plan = guide.run("plan").stdout
    assert "Parallel layout: 1 node(s) x 8 GPU(s) = 8 ranks" in plan and "fits" in plan
    excerpt = next(b for b in guide_blocks() if b.kind == "output-of" and b.name == "plan-config-only")
    in_order([line.rstrip() for line in excerpt.code.splitlines()], guide.run("plan-config-only").stdout)
    nodes = guide.run("plan-nodes").stdout
    assert "Parallel layout: 2 node(s) x 8 GPU(s) = 16 ranks" in nodes and "TP=1 PP=1 CP=1 DP=16" in nodes
    script = guide.run("script-plan-nodes").stdout
    assert "8.19B params" in script and "2 node(s) x 8 GPU(s) = 16 ranks" in script and "TP=2 PP=4 CP=1 DP=2" in script


def test_launch_watch_resume_merge(guide):
    run = guide.home / "ckpts" / "qwen3-1.7b_grpo_gsm8k"
    launch = guide.run("launch")
    assert re.search(r"^step:1 - actor/entropy:", launch.stdout, re.M), launch.stdout[-2000:]
    assert (run / "global_step_1" / "actor").is_dir() and (run / "tensorboard").is_dir()
    watch = guide.run("watch").stdout.splitlines()
    assert watch[0].startswith("0 {'val-core/openai/gsm8k/acc/mean@1'") and watch[-1].startswith("1 {")
    assert "critic/score/mean" in watch[-1]
    resume = guide.run("resume")
    assert f"resumed from {run}/global_step_1 (step 1)" in resume.stderr + resume.stdout
    assert "trainer.total_epochs changed 2 -> 3: applied" in resume.stderr + resume.stdout
    assert (run / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    merge = guide.run("merge")
    assert merge.stdout.strip().endswith("loads")
    merged = guide.home / "models" / "Qwen3-1.7B-grpo-gsm8k"
    assert {"config.json", "model.safetensors"} <= {p.name for p in merged.iterdir()}
    assert f"merged {run}/global_step_2/actor" in merge.stdout + merge.stderr


# ---- several nodes, Ray (slow) ------------------------------------------------------------------------------------
@pytest.fixture
def prepared_home(tmp_path):
    if not (VENV / "bin" / "activate").is_file():
        pytest.skip("no .venv: made by bash scripts/setup_cpu.sh")
    make_stand_ins(tmp_path)
    proc = shell(block("preprocess-offline").code, tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return tmp_path


@pytest.mark.slow
def test_two_nodes_with_torchrun(prepared_home):
    # the guide's command on two "nodes" of one process each, here on one machine (the run directory is shared)
    code = on_cpu(block("launch-nodes").code, 1).replace("--master-port 29500", f"--master-port {free_port()}")
    assert "--nnodes 2" in code and "trainer.nnodes=2" in code
    script = block("overrides").code + code
    logs = {rank: prepared_home / f"node{rank}" for rank in (0, 1)}
    nodes = {
        rank: shell(script, prepared_home, {"NODE_RANK": str(rank), "MASTER_ADDR": "127.0.0.1"}, logs[rank])
        for rank in (1, 0)
    }
    try:
        for node in nodes.values():
            node.wait(timeout=240)
    finally:
        for node in nodes.values():
            if node.poll() is None:  # the whole session: bash, torchrun and its worker
                os.killpg(node.pid, signal.SIGKILL)
                node.wait()
    for rank, node in nodes.items():
        assert node.returncode == 0, Path(f"{logs[rank]}.err").read_text()[-3000:]
    out = Path(f"{logs[0]}.out").read_text()
    assert re.search(r"^step:1 - actor/entropy:", out, re.M), out[-2000:]
    assert (prepared_home / "ckpts" / "qwen3-1.7b_grpo_gsm8k" / "global_step_1" / "actor").is_dir()


@pytest.mark.slow
def test_one_node_ray(prepared_home):
    proc = shell(block("overrides").code + on_cpu(block("ray-one-node").code, 1), prepared_home)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"step:1 - actor/entropy:", proc.stdout + proc.stderr), (proc.stdout + proc.stderr)[-2000:]
    assert (prepared_home / "ckpts" / "qwen3-1.7b_grpo_gsm8k" / "global_step_1" / "actor").is_dir()
