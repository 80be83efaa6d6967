"""Kill-anywhere harness: run `python -m dagrl.main_dag`, SIGKILL it at a named phase (DAGRL_FAULT) or at a
wall-clock moment, relaunch with trainer.resume_mode=auto, and repeat until the run finishes.

Every launch is checked against the disk as it was just before it: the checkpoint it resumes from (its
"resumed from <dir> (step N)" line) must be the newest complete one (a `global_step_N` directory holding the marker
file; the harness scans for it itself rather than asking dagrl), never a partial one, and no complete checkpoint
may change or vanish afterwards. Which phase a kill hit is read from the DAGRL_FAULT_TRACE file the run appends to
at every fault point.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import signal
import sys
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from tests.helpers import session_process

MARKER = "dagrl_checkpoint.json"  # written last into a checkpoint: its presence is what "complete" means
RESUMED = re.compile(r"resumed from (\S+) \(step (\d+)\)")
FINISHED = re.compile(r"this run already finished: checkpoint at step (\d+) of")  # chose it without loading it
CHECKPOINT_PHASES = ("before_shards", "between_shards", "before_marker", "before_tracker")
PHASE_LABELS = {
    "startup": "startup (imports, model build, checkpoint load)",
    "rollout": "rollout",
    "actor_update": "actor update",
    "before_shards": "checkpoint: writing the actor shards",
    "between_shards": "checkpoint: between the actor shards and data.pt",
    "before_marker": "checkpoint: before the marker and directory rename",
    "before_tracker": "checkpoint: between the rename and the tracker file",
}


@dataclass(frozen=True)
class KillSpec:
    """How one launch dies: at fault point `phase` of `step`, or (phase None) `delay_s` seconds after it starts
    (`from_first_step`: after it passes its first fault point, i.e. once training has begun)."""

    phase: str | None = None
    step: int = 0
    delay_s: float = 0.0
    from_first_step: bool = False

    @property
    def kind(self) -> str:
        return "named" if self.phase else "wall-clock"


@dataclass
class Launch:
    spec: KillSpec | None
    code: int
    wall_s: float
    newest_before: int | None  # newest complete checkpoint on disk when the launch started
    partials_before: list[str]  # incomplete checkpoint directories on disk then
    resumed_from: int | None  # what the launch said it resumed from
    phase: str = "startup"  # the last fault point it passed
    step: int = 0  # the step of that point
    newest_after: int | None = None
    started_at: float = 0.0  # time.time() at the launch, to compare with the trace's times
    stderr_tail: str = ""

    @property
    def killed(self) -> bool:
        return self.code == -9

    @property
    def died_before_choosing(self) -> bool:
        """Killed in start-up before it picked a checkpoint (or started fresh): nothing to check."""
        return self.killed and self.phase == "startup" and self.resumed_from is None

    @property
    def steps_redone(self) -> int:
        """Steps this kill threw away: those begun after the newest complete checkpoint it left behind."""
        return max(0, self.step - (self.newest_after or 0)) if self.killed else 0


@dataclass
class Chain:
    launches: list[Launch] = field(default_factory=list)
    checkpoint_digests: dict[int, str] = field(default_factory=dict)  # each complete checkpoint, when first seen

    root: Path | None = None

    @property
    def kills(self) -> list[Launch]:
        return [launch for launch in self.launches if launch.killed]

    @property
    def lost(self) -> int:
        """Complete checkpoints seen during the chain that are now changed or gone."""
        assert self.root is not None
        return sum(
            1
            for step, digest in self.checkpoint_digests.items()
            if not (self.root / f"global_step_{step}").is_dir()
            or tree_digest(self.root / f"global_step_{step}") != digest
        )


def complete_steps(root: Path) -> list[int]:
    if not root.is_dir():
        return []
    return sorted(
        int(p.name.rsplit("_", 1)[1]) for p in root.glob("global_step_*") if p.is_dir() and (p / MARKER).is_file()
    )


def partial_dirs(root: Path) -> list[str]:
    """Checkpoint directories without the marker: leftovers of a killed save."""
    if not root.is_dir():
        return []
    return sorted(
        p.name for p in root.iterdir() if p.is_dir() and "global_step_" in p.name and not (p / MARKER).is_file()
    )


def tree_digest(path: Path) -> str:
    digest = hashlib.sha256()
    for item in sorted(path.rglob("*")):
        digest.update(str(item.relative_to(path)).encode())
        if item.is_file():
            digest.update(item.read_bytes())
    return digest.hexdigest()


def _last_trace_point(trace: Path) -> tuple[str, int]:
    lines = trace.read_text().splitlines() if trace.exists() else []
    if not lines:
        return "startup", 0
    _, phase, step = lines[-1].split()
    return phase, int(step)


def wait_for_point(proc: Any, trace: Path, phase: str, step: int) -> None:
    """Return once the run's DAGRL_FAULT_TRACE file shows it passed fault point `phase` of `step`; fails if the
    process ends before that."""
    while not (trace.exists() and [phase, str(step)] in (line.split()[1:] for line in trace.read_text().splitlines())):
        assert proc.poll() is None, f"the run ended before it reached {phase} of step {step}"
        time.sleep(0.02)


def _wait_and_kill(proc: Any, spec: KillSpec, trace: Path, timeout_s: float) -> None:
    """SIGKILL the whole session as `spec` says, unless the process ends first."""
    while spec.from_first_step and proc.poll() is None and not (trace.exists() and trace.stat().st_size):
        time.sleep(0.02)
    deadline = time.monotonic() + spec.delay_s
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=timeout_s)


def launch(
    args: list[str],
    root: Path,
    trace: Path,
    spec: KillSpec | None,
    timeout_s: float = 600,
    env: dict[str, str] | None = None,
) -> Launch:
    """One launch of the run whose checkpoints live in `root`, killed as `spec` says (None: left to finish), with
    `env` added to its environment."""
    env = {"DAGRL_FAULT_TRACE": str(trace), "DAGRL_FAULT": "", **(env or {})}
    if spec is not None and spec.phase:
        env["DAGRL_FAULT"] = f"{spec.phase}:{spec.step}"
    trace.unlink(missing_ok=True)
    newest = complete_steps(root)
    record = Launch(
        spec=spec,
        code=0,
        wall_s=0.0,
        newest_before=newest[-1] if newest else None,
        partials_before=partial_dirs(root),
        resumed_from=None,
    )
    start, record.started_at = time.monotonic(), time.time()
    with session_process([sys.executable, "-m", "dagrl.main_dag", *args], env) as (proc, err):
        if spec is not None and not spec.phase:
            _wait_and_kill(proc, spec, trace, timeout_s)
        record.code = proc.wait(timeout=timeout_s)
        err.seek(0)
        stderr = err.read()
    record.wall_s = time.monotonic() - start
    record.stderr_tail = stderr[-3000:]
    resumed = RESUMED.findall(stderr)
    if resumed:
        record.resumed_from = int(resumed[-1][1])
        assert Path(resumed[-1][0]).name == f"global_step_{record.resumed_from}", resumed
    elif finished := FINISHED.search(stderr):  # a kill after the last checkpoint: the relaunch finds the run done
        record.resumed_from = int(finished[1])
    record.phase, record.step = _last_trace_point(trace)
    after = complete_steps(root)
    record.newest_after = after[-1] if after else None
    return record


def check_launch(chain: Chain, record: Launch, root: Path) -> None:
    """What every launch must satisfy; raises AssertionError naming the launch."""
    where = f"launch {len(chain.launches)} ({record.spec})"
    assert record.code in (0, -9), f"{where} exited with {record.code}:\n{record.stderr_tail}"
    assert record.died_before_choosing or record.resumed_from == record.newest_before, (
        f"{where} resumed from step {record.resumed_from}, but the newest complete checkpoint on disk was "
        f"{record.newest_before} (partials then: {record.partials_before})"
    )
    assert chain.lost == 0, f"{where} modified or removed a complete checkpoint"  # they never change or vanish
    for step in complete_steps(root):
        chain.checkpoint_digests.setdefault(step, tree_digest(root / f"global_step_{step}"))


def run_until_done(
    args: list[str],
    root: Path,
    trace: Path,
    plan: Callable[[int | None, Chain], KillSpec | None],
    max_launches: int = 60,
) -> Chain:
    """Launch, kill as `plan(newest complete step, the chain so far)` says, relaunch, ... until a launch exits 0."""
    chain = Chain(root=root)
    while len(chain.launches) < max_launches:
        newest = complete_steps(root)
        record = launch(args, root, trace, plan(newest[-1] if newest else None, chain))
        check_launch(chain, record, root)
        chain.launches.append(record)
        if record.code == 0:
            return chain
    raise AssertionError(f"the run did not finish in {max_launches} launches")


def trace_timings(trace: Path, started: float) -> tuple[float, float]:
    """(seconds from `started` to the first fault point, mean seconds per step) of a finished launch's trace."""
    points = [line.split() for line in trace.read_text().splitlines()]
    first, last = float(points[0][0]), float(points[-1][0])
    steps = max(int(points[-1][2]) - int(points[0][2]), 1)
    return first - started, (last - first) / steps


# ---- comparing final states ----------------------------------------------------------------------------------
def checkpoint_state(path: Path) -> dict[str, Any]:
    """Everything a checkpoint holds, loaded: the actor's tensors and objects (torch_dist format, read without a
    process group), the Megatron common state and the trainer's data.pt."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    actor = path / "actor"
    reader = dcp.FileSystemReader(str(actor))
    state: dict[str, Any] = {}
    for key, meta in reader.read_metadata().state_dict_metadata.items():
        state[key] = (
            torch.empty(meta.size, dtype=meta.properties.dtype)
            if isinstance(meta, TensorStorageMetadata)
            else io.BytesIO()
        )
    with warnings.catch_warnings():  # "torch.distributed is not initialized: loading in a single process"
        warnings.simplefilter("ignore")
        dcp.load(state, storage_reader=reader, no_dist=True)
    state["common.pt"] = torch.load(actor / "common.pt", weights_only=False)
    state["data.pt"] = torch.load(path / "data.pt", weights_only=False)
    return state


def differences(expected: Any, actual: Any, where: str = "") -> list[str]:
    """Where two loaded states differ; tensors and arrays compared bit for bit."""
    import numpy as np
    import torch

    if torch.is_tensor(expected) or torch.is_tensor(actual):
        same = (
            torch.is_tensor(expected)
            and torch.is_tensor(actual)
            and expected.dtype == actual.dtype
            and expected.shape == actual.shape
            and torch.equal(_bits(expected), _bits(actual))
        )
        return [] if same else [where]
    if isinstance(expected, np.ndarray) or isinstance(actual, np.ndarray):
        return [] if np.array_equal(expected, actual) else [where]
    if isinstance(expected, dict) and isinstance(actual, dict):
        if expected.keys() != actual.keys():
            return [f"{where} keys {sorted(set(expected) ^ set(actual))}"]
        return [d for key in expected for d in differences(expected[key], actual[key], f"{where}/{key}")]
    if isinstance(expected, (list, tuple)) and isinstance(actual, (list, tuple)):
        if len(expected) != len(actual):
            return [f"{where} length"]
        return [d for i, (e, a) in enumerate(zip(expected, actual)) for d in differences(e, a, f"{where}[{i}]")]
    return [] if expected == actual else [where]


def assert_same_run(expected: Path, actual: Path) -> None:
    """Two runs' metrics (timings aside) and every checkpoint's state are identical, bit for bit."""
    from tests.helpers import metrics_by_step

    assert metrics_by_step(actual) == metrics_by_step(expected)
    assert complete_steps(actual) == complete_steps(expected)
    for step in complete_steps(expected):
        name = f"global_step_{step}"
        diff = differences(checkpoint_state(expected / name), checkpoint_state(actual / name))
        assert not diff, f"{name} differs from the uninterrupted run's at {diff[:5]}"


def _bits(tensor: Any) -> Any:
    import torch

    return tensor.detach().reshape(-1).contiguous().view(torch.uint8)


# ---- figures ---------------------------------------------------------------------------------------------------
def figures_table(chains: list[Chain], total_steps: int, save_freq: int) -> str:
    """Markdown figures of kill chains that passed every check: kills per phase and kind, relaunches, partial
    checkpoints seen, work and checkpoints lost."""
    launches = [launch for chain in chains for launch in chain.launches]
    relaunches = [launch for chain in chains for launch in chain.launches[1:]]
    kills = [launch for launch in launches if launch.killed]
    chose = [launch for launch in relaunches if not launch.died_before_choosing]
    by_kind = Counter(k.spec.kind for k in kills if k.spec)
    redone = [k.steps_redone for k in kills]
    rows = [
        (
            "run",
            f"{total_steps} steps, a checkpoint every {save_freq}; tiny Llama, CPU, seeded; "
            f"{len(chains)} run(s) killed until finished",
        ),
        (
            "kills (SIGKILL)",
            f"{len(kills)}: {by_kind['named']} at named phases (DAGRL_FAULT), "
            f"{by_kind['wall-clock']} at seeded random wall-clock moments",
        ),
        ("relaunches (resume_mode=auto)", str(len(relaunches))),
        (
            "relaunches that resumed from the newest complete checkpoint",
            f"{sum(1 for launch in chose if launch.resumed_from == launch.newest_before)} of the {len(chose)} that "
            f"got that far ({len(relaunches) - len(chose)} were killed earlier, while starting)",
        ),
        (
            "relaunches that found a partial checkpoint on disk (chosen: never)",
            str(sum(1 for launch in relaunches if launch.partials_before)),
        ),
        ("complete checkpoints modified or lost (data lost)", str(sum(chain.lost for chain in chains))),
        ("steps redone after kills (work lost)", f"{sum(redone)} in all, at most {max(redone, default=0)} per kill"),
        (
            "wall-clock kills that came too late (the run had finished)",
            str(sum(1 for launch in launches if launch.spec and not launch.killed)),
        ),
        ("launch wall time", f"{sum(launch.wall_s for launch in launches):.0f} s for {len(launches)} launches"),
    ]
    table = ["| figure | value |", "|---|---|", *[f"| {name} | {value} |" for name, value in rows]]
    table += ["", "| phase hit (last fault point passed) | named | wall-clock |", "|---|---|---|"]
    order = list(PHASE_LABELS)
    phases = sorted({k.phase for k in kills}, key=lambda p: (order.index(p) if p in order else len(order), p))
    for phase in phases:
        named = sum(1 for k in kills if k.phase == phase and k.spec and k.spec.phase)
        wall = sum(1 for k in kills if k.phase == phase and k.spec and not k.spec.phase)
        table.append(f"| {PHASE_LABELS.get(phase, 'step: ' + phase)} | {named} | {wall} |")
    return "\n".join(table) + "\n"
