"""The bad-input corpus (tests/reliability/corpus/, one module per topic) against `python -m dagrl.main_dag`.

Every case exits non-zero (2 for configuration and data errors) with exactly one error line, no traceback, naming
the key or file and the fix; a case found in pre-flight ends before megatron or vllm is imported, within 5 CPU
seconds (CPU, not wall time: the machine is shared); no checkpoint in trainer.default_local_dir changes.
docs/bad_inputs.md is the corpus's tables, one per topic: each case checks its own row, and `DAGRL_UPDATE_DOCS=1`
rewrites it.

The first case of each topic (and of each kind, pre-flight and start-up) is a fresh `python -m dagrl.main_dag`; the
others are forked from a warm process that has made the imports every launch makes (warm_launch.py), the same
launch without paying the interpreter's start each time.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import os
import pkgutil
import queue
import shutil
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import cpu_run_overrides
from tests.helpers import run_in_session
from tests.reliability import corpus
from tests.reliability.corpus import CASES, PREFLIGHT, RUNTIME, STARTUP, TOPICS, Case, Paths
from tests.reliability.warm_launch import WarmLauncher

PROBE_DIR = Path(__file__).with_name("probe")  # its sitecustomize records imports and CPU time at exit
DOCS = Path(__file__).parents[2] / "docs" / "bad_inputs.md"
# opens each topic's table in docs/bad_inputs.md
TABLE_HEADER = "| case | bad input | found at | exit | the one line on stderr |\n|---|---|---|---|---|"
PREFLIGHT_CPU_S = 5.0
# launched as a user launches them: the first case of each topic and of each kind found before any model
FRESH = {cases[0].id for cases in TOPICS.values()} | {
    next(c.id for c in CASES if c.found == found) for found in (PREFLIGHT, STARTUP)
}


def merged(base: list[str], extra: list[str]) -> list[str]:
    """`base` overrides with `extra` replacing the same keys (Hydra would reject a key given twice); an `extra`
    without `=` (a case's bad input) is kept as written."""
    by_key = {arg.split("=", 1)[0]: arg for arg in [*base, *extra]}
    return list(by_key.values())


def write_checkpoints(root: Path) -> None:
    """A complete checkpoint (global_step_2: marker present) and a partial one, as a killed save leaves it."""
    for name, complete in (("global_step_2", True), (".tmp_global_step_3", False)):
        (root / name / "actor").mkdir(parents=True)
        (root / name / "actor" / "__0_0.distcp").write_bytes(os.urandom(4096))
        (root / name / "data.pt").write_bytes(os.urandom(256))
        if complete:
            (root / name / "dagrl_checkpoint.json").write_text(json.dumps({"global_step": 2}))
        else:  # dagrl's own: a save marks its tmp directory first
            (root / name / ".dagrl_partial").touch()
    (root / "latest_checkpointed_iteration.txt").write_text("2")


def digest(root: Path, checkpoints_only: bool = False) -> str:
    """Names and bytes of every file under root (checkpoints_only: global_step_* and the tracker file)."""
    hasher = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if checkpoints_only and not str(relative).startswith(("global_step_", "latest_checkpointed")):
            continue
        hasher.update(str(relative).encode())
        if path.is_file():
            hasher.update(path.read_bytes())
    return hasher.hexdigest()


@pytest.fixture
def paths(tmp_path, tiny_model, tiny_data) -> Paths:
    ckpt = tmp_path / "ckpt"
    write_checkpoints(ckpt)
    return Paths(ws=tmp_path, model=tiny_model, train=tiny_data["train"], ckpt=ckpt)


@pytest.fixture(scope="module")
def trained_checkpoint(tiny_model, tiny_data, tmp_path_factory) -> Path:
    """A real one-step run's checkpoint directory, for the cases that only show once a step runs."""
    out = tmp_path_factory.mktemp("trained") / "ckpt"
    code, stderr = run_in_session(
        [sys.executable, "-m", "dagrl.main_dag", *runtime_base(tiny_model, tiny_data, out, steps=1)]
    )
    assert code == 0, stderr[-3000:]
    return out


def runtime_base(model: Path, data: dict, out: Path, steps: int) -> list[str]:
    return cpu_run_overrides(
        model,
        data,
        out,
        **{
            "trainer.total_training_steps": steps,
            "trainer.save_freq": 1,
            "trainer.val_before_train": False,
            "data.val_files": "null",
        },
    )


def run_case(
    case: Case, paths: Paths, base: list[str], launcher: WarmLauncher | None = None
) -> tuple[int, str, dict, float]:
    """(exit code, stderr, probe record, wall seconds) of `python -m dagrl.main_dag` on the case: a fresh process,
    or one forked by `launcher`."""
    if case.make:
        case.make(paths.ws, paths)
    fields = {"ws": paths.ws, "model": paths.model, "train": paths.train, "ckpt": paths.ckpt}
    args = merged(base, [arg.format(**fields) for arg in case.overrides])
    probe = paths.ws / "probe.json"
    env = {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(PROBE_DIR), os.environ.get("PYTHONPATH")])),
        "DAGRL_IMPORT_PROBE": str(probe),
        **case.env,
    }
    start = time.monotonic()
    if launcher is None:
        code, stderr = run_in_session([sys.executable, "-m", "dagrl.main_dag", *args], env, timeout=300)
    else:
        code, stderr = launcher.run(args, env, timeout=300)
    wall = time.monotonic() - start
    return code, stderr, json.loads(probe.read_text()) if probe.exists() else {}, wall


def error_lines(case: Case, code: int, stderr: str, paths: Paths) -> list[str]:
    """The `dagrl: error:` lines (one, or one per mistake of a case with several), checked, with this machine's
    paths replaced by placeholders."""
    assert code == case.code, f"{case.id}: exit code {code}, expected {case.code}\n{stderr[-3000:]}"
    assert "Traceback" not in stderr, f"{case.id}: a traceback on stderr\n{stderr[-3000:]}"
    errors = [line for line in stderr.splitlines() if line.startswith("dagrl: error:")]
    expected = (case.expect, *case.also)
    assert len(errors) == len(expected), (
        f"{case.id}: {len(errors)} error lines, expected {len(expected)}\n{stderr[-3000:]}"
    )
    lines = []
    for line, expect in zip(errors, expected):
        for path, placeholder in ((paths.ws, "<tmp>"), (paths.model, "<model>"), (Path(paths.train).parent, "<data>")):
            line = line.replace(str(path), placeholder)
        missing = [text for text in expect if text not in line]
        assert not missing, f"{case.id}: the error line lacks {missing}: {line}"
        lines.append(line)
    return lines


def table_rows(text: str) -> dict[str, str]:
    """Case id -> its row, over every table of docs/bad_inputs.md, in the document's order."""
    rows = [line for line in text.splitlines() if line.startswith("| ") and line not in TABLE_HEADER.splitlines()]
    return {row.split(" | ")[0][2:]: row for row in rows}


def tables(head: str, rows: dict[str, str]) -> str:
    """docs/bad_inputs.md: `head` (the title and the paragraph on what is checked), then one table per topic of the
    corpus, the topic its heading, holding `rows` in the corpus's order."""
    sections = []
    for topic, cases in TOPICS.items():
        listed = [rows[case.id] for case in cases if case.id in rows]
        if listed:
            sections.append(f"## {topic}\n\n{TABLE_HEADER}\n" + "\n".join(listed) + "\n")
    return head + "\n".join(sections)


def table_head(text: str) -> str:
    """What comes before the first table and its topic's heading."""
    return text[: min(i for i in (text.find("\n## "), text.find("\n" + TABLE_HEADER)) if i >= 0) + 1]


def check_table_row(case: Case, code: int, lines: list[str]) -> None:
    """The case's row in docs/bad_inputs.md says what the run said (several lines joined by <br>);
    DAGRL_UPDATE_DOCS=1 writes it instead."""
    message = "<br>".join(line.removeprefix("dagrl: error: ").replace("|", "\\|") for line in lines)
    row = f"| {case.id} | {case.what.replace('|', chr(92) + '|')} | {case.found} | {code} | {message} |"
    text = DOCS.read_text()
    if os.environ.get("DAGRL_UPDATE_DOCS"):
        DOCS.write_text(tables(table_head(text), {**table_rows(text), case.id: row}))
        return
    assert row in text.splitlines(), (
        f"docs/bad_inputs.md is stale for {case.id}; expected the row\n{row}\n"
        f"(DAGRL_UPDATE_DOCS=1 pytest tests/reliability/test_bad_inputs.py rewrites it)"
    )


def test_the_table_lists_the_corpus_and_the_base_config_is_valid(tiny_model, tiny_data, tmp_path):
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)) and len(ids) >= 30
    # every topic module of the corpus is in it (one left out of corpus.MODULES would drop its cases unseen)
    modules = {
        m.name: importlib.import_module(f"{corpus.__name__}.{m.name}") for m in pkgutil.iter_modules(corpus.__path__)
    }
    topics = {name for name, module in modules.items() if hasattr(module, "TOPIC")}
    assert topics == set(corpus.MODULES)
    text = DOCS.read_text()
    assert list(table_rows(text)) == ids  # every case has a row, in the corpus's order
    assert tables(table_head(text), table_rows(text)) == text  # under its topic's heading, and nothing else
    # every case fails because of its own change: the base it changes passes pre-flight
    from dagrl.config.load import compose
    from dagrl.config.tree import Cfg
    from dagrl.config.validate import preflight

    # a fresh checkpoint root: pre-flight reads the checkpoint a run resumes from, and the corpus's stand-ins
    # (write_checkpoints) hold random bytes
    preflight(Cfg(compose(cpu_run_overrides(tiny_model, tiny_data, tmp_path / "ckpt"))))


def cannot_run_here(case: Case) -> bool:
    return case.id == "checkpoint_dir_not_writable" and (
        not os.path.isdir("/proc/sys") or os.access("/proc/sys", os.W_OK)
    )


class CaseRuns:
    """The launches of the pre-flight and start-up cases, each in its own workspace, two at a time: a case's test
    starts its own launch and the next selected case's, then waits for its own. Hundreds of launches of a second or
    so, each on one core: two cores halve the wait. Each test checks only its own case's launch. A case outside
    FRESH goes to one of two warm launchers (one per thread), started at the first such case."""

    def __init__(self, order: list[Case], factory, tiny_model, tiny_data) -> None:
        self.order = [c for c in order if not cannot_run_here(c)]  # the tests' order
        self.factory, self.model, self.data = factory, tiny_model, tiny_data
        self.pool = ThreadPoolExecutor(2)
        self.started: dict[str, tuple[Paths, str, Future]] = {}
        self.launchers: queue.Queue[WarmLauncher] = queue.Queue()
        self.made: list[WarmLauncher] = []
        self.lock = threading.Lock()

    def launch(self, case: Case, paths: Paths, base: list[str]) -> tuple[int, str, dict, float]:
        if case.id in FRESH:
            return run_case(case, paths, base)
        with self.lock:
            if not self.made:
                self.made = [WarmLauncher({"PYTHONPATH": str(PROBE_DIR)}) for _ in range(2)]
                for launcher in self.made:
                    self.launchers.put(launcher)
        launcher = self.launchers.get()
        try:
            return run_case(case, paths, base, launcher)
        finally:
            self.launchers.put(launcher)

    def close(self) -> None:
        self.pool.shutdown(cancel_futures=True)
        for launcher in self.made:
            launcher.close()

    def start(self, case: Case) -> None:
        if case.id in self.started:
            return
        ws = self.factory.mktemp(case.id)
        paths = Paths(ws=ws, model=self.model, train=self.data["train"], ckpt=ws / "ckpt")
        write_checkpoints(paths.ckpt)
        if case.found == PREFLIGHT:
            # the case's files first (some are in the checkpoint directory): then nothing may change
            if case.make:
                case.make(paths.ws, paths)
            before = digest(paths.ckpt)
            base = cpu_run_overrides(self.model, self.data, paths.ckpt)
        else:  # a fresh run: pre-flight reads the checkpoint it would resume from (stand-ins here)
            before = digest(paths.ckpt, checkpoints_only=True)
            if case.make:
                case.make(paths.ws, paths)
            base = cpu_run_overrides(self.model, self.data, paths.ws / "run")
        launch = self.pool.submit(self.launch, dataclasses.replace(case, make=None), paths, base)
        self.started[case.id] = (paths, before, launch)

    def result(self, case: Case) -> tuple[Paths, str, tuple[int, str, dict, float]]:
        """(paths, digest of the checkpoint directory before the launch, run_case's result) of the case."""
        self.start(case)
        ids = [c.id for c in self.order]
        if case.id in ids and ids.index(case.id) + 1 < len(ids):
            self.start(self.order[ids.index(case.id) + 1])
        paths, before, launch = self.started.pop(case.id)
        return paths, before, launch.result()


@pytest.fixture(scope="module")
def case_runs(request, tmp_path_factory, tiny_model, tiny_data):
    tests = ("test_bad_input_is_refused_in_preflight", "test_bad_input_found_at_start_up_stops_before_any_model")
    order = [
        item.callspec.params["case"] for item in request.session.items if getattr(item, "originalname", "") in tests
    ]
    runs = CaseRuns(order, tmp_path_factory, tiny_model, tiny_data)
    yield runs
    runs.close()


@pytest.mark.parametrize("case", [c for c in CASES if c.found == PREFLIGHT], ids=lambda c: c.id)
def test_bad_input_is_refused_in_preflight(case, case_runs):
    if cannot_run_here(case):
        pytest.skip("needs a read-only /proc/sys")
    paths, before, (code, stderr, probe, wall) = case_runs.result(case)
    lines = error_lines(case, code, stderr, paths)
    assert len(stderr.strip().splitlines()) == len(lines), f"{case.id}: more than the error lines on stderr\n{stderr}"
    assert probe, "the import probe did not report (did the process exit normally?)"
    assert not {"megatron", "vllm"} & set(probe["imported"]), f"{case.id} imported {probe['imported']}"
    assert probe["cpu_s"] < PREFLIGHT_CPU_S, f"{case.id} took {probe['cpu_s']:.1f} CPU s"
    assert digest(paths.ckpt) == before  # nothing written: no checkpoint, no partial removed, no metrics
    print(f"{case.id}: {probe['cpu_s']:.2f} CPU s, {wall:.2f} s wall, imported {probe['imported']}")
    check_table_row(case, code, lines)


@pytest.mark.parametrize("case", [c for c in CASES if c.found == STARTUP], ids=lambda c: c.id)
def test_bad_input_found_at_start_up_stops_before_any_model(case, case_runs):
    """Found once the tokenizer reads the prompts (the length scan of data.truncation=error): one line, exit 2,
    neither megatron nor vllm imported, no checkpoint touched."""
    paths, before, (code, stderr, probe, wall) = case_runs.result(case)
    run_dir = paths.ws / "run"  # a fresh run (CaseRuns.start)
    lines = error_lines(case, code, stderr, paths)
    assert probe, "the import probe did not report (did the process exit normally?)"
    assert not {"megatron", "vllm"} & set(probe["imported"]), f"{case.id} imported {probe['imported']}"
    assert "resumed from" not in stderr  # before any model or checkpoint is loaded
    assert digest(paths.ckpt, checkpoints_only=True) == before and not list(run_dir.glob("*global_step_*"))
    print(f"{case.id}: {probe['cpu_s']:.2f} CPU s, {wall:.2f} s wall, imported {probe['imported']}")
    check_table_row(case, code, lines)


@pytest.mark.slow
@pytest.mark.parametrize("case", [c for c in CASES if c.found == RUNTIME], ids=lambda c: c.id)
def test_bad_input_found_at_run_time_stops_the_run_with_one_line(
    case, paths, trained_checkpoint, tiny_model, tiny_data
):
    shutil.rmtree(paths.ckpt)
    shutil.copytree(trained_checkpoint, paths.ckpt)
    before = digest(paths.ckpt, checkpoints_only=True)
    code, stderr, probe, wall = run_case(case, paths, runtime_base(tiny_model, tiny_data, paths.ckpt, steps=2))
    lines = error_lines(case, code, stderr, paths)
    assert "resumed from" in stderr  # it failed in the step after the checkpoint, which stays as it was
    assert digest(paths.ckpt, checkpoints_only=True) == before
    print(f"{case.id}: {probe.get('cpu_s', 0):.2f} CPU s, {wall:.2f} s wall")
    check_table_row(case, code, lines)


def test_a_warm_launch_says_what_a_fresh_one_says(tmp_path, tiny_model, tiny_data):
    """The warm launcher's fork is the CLI's launch: the same exit code, error lines and heavy imports as a fresh
    `python -m dagrl.main_dag`, for a case found before composing (an environment variable), one in pre-flight and
    one with several lines; and an environment variable one launch sets is gone in the next."""
    chosen = ("log_level_unknown", "lr_zero", "three_mistakes_layout_and_values", "lr_zero")
    launcher = WarmLauncher({"PYTHONPATH": str(PROBE_DIR)})
    try:
        for index, case in enumerate(next(c for c in CASES if c.id == name) for name in chosen):
            said = []
            for how in ("fresh", "warm"):
                ws = tmp_path / f"{index}_{how}"
                paths = Paths(ws=ws, model=tiny_model, train=tiny_data["train"], ckpt=ws / "ckpt")
                write_checkpoints(paths.ckpt)
                base = cpu_run_overrides(tiny_model, tiny_data, paths.ckpt)
                code, stderr, probe, _ = run_case(case, paths, base, launcher if how == "warm" else None)
                said.append((code, error_lines(case, code, stderr, paths), probe["imported"], len(stderr.splitlines())))
            assert said[0] == said[1], f"{case.id}: fresh {said[0]}, warm {said[1]}"
    finally:
        launcher.close()
