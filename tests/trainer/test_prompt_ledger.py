"""The prompt ledger: every prompt the trainer draws gets exactly one line in
<trainer.default_local_dir>/prompt_ledger.jsonl — trained, filtered (with the reason) or still in flight at the end —
across kill -9 and an auto-resume, synchronous and with colocated partial rollout. Runs whose order does not matter
go two at a time (the tiny model's runs are mostly start-up)."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

from dagrl.data.batch import Batch
from dagrl.trainer.ledger import LEDGER_FILE, PromptLedger, in_flight_records, step_records
from tests.helpers import metrics_by_step, run_concurrently
from tests.trainer.test_dapo import first_round, make_ctx

BATCH, STEPS, KILL = 4, 4, "actor_update:3"
ENV = {"OMP_NUM_THREADS": "1"}  # two runs share the CPU cores


def launch(*runs: tuple[list[str], dict]) -> list[tuple[int, str]]:
    """Run `python -m dagrl.main_dag <args>` for each (args, env) at the same time; (exit code, stderr) of each."""
    return run_concurrently(
        [([sys.executable, "-m", "dagrl.main_dag", *arguments], {**ENV, **env}) for arguments, env in runs]
    )


def straight_and_resumed(make, tmp_path: Path, kill: str = KILL, **extra) -> tuple[Path, Path, int]:
    """An uninterrupted run beside one killed at `kill` (-9) and relaunched (auto-resume); and the lines the killed
    run's ledger had."""
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    (code, stderr), (killed, _) = launch((make(straight, **extra), {}), (make(resumed, **extra), {"DAGRL_FAULT": kill}))
    assert code == 0, stderr[-3000:]
    assert killed == -9
    lines_at_kill = len(ledger(resumed))
    ((code, stderr),) = launch((make(resumed, **extra), {}))
    assert code == 0, stderr[-3000:]
    return straight, resumed, lines_at_kill


def ledger(root: Path) -> list[dict]:
    return [json.loads(line) for line in (root / LEDGER_FILE).read_text().splitlines()]


def saved_length(root: Path, step: int) -> dict:
    return torch.load(root / f"global_step_{step}" / "data.pt", weights_only=True)["prompt_ledger"]


def assert_exactly_once(records: list[dict]) -> None:
    uids = [record["uid"] for record in records]
    assert len(uids) == len(set(uids)), [uid for uid, count in Counter(uids).items() if count > 1]


# ---- the ledger file and its records ---------------------------------------------------------------------------
def test_the_ledger_truncates_to_a_checkpoint_length_and_copies_a_resumed_runs_prefix(tmp_path, caplog):
    path = tmp_path / "run" / LEDGER_FILE
    ledger_file = PromptLedger(path)
    ledger_file.append([{"uid": "0:1", "fate": "trained@1"}, {"uid": "0:2", "fate": "trained@1"}])
    saved = ledger_file.state()
    assert saved == {"bytes": path.stat().st_size, "lines": 2}
    ledger_file.append([{"uid": "0:3", "fate": "trained@2"}])
    ledger_file.append([])  # nothing to write: nothing changes
    ledger_file.close()
    with open(path, "ab") as torn:  # a kill in the middle of a write
        torn.write(b'{"uid": "0:4", "fa')
    again = PromptLedger(path, saved)  # resume from the checkpoint that recorded `saved`
    assert again.state() == saved and path.read_bytes().count(b"\n") == 2 and path.read_bytes().endswith(b"}\n")
    again.append([{"uid": "0:3", "fate": "trained@2"}])  # the replayed step writes its line again
    again.close()
    assert [json.loads(line)["uid"] for line in path.read_text().splitlines()] == ["0:1", "0:2", "0:3"]
    branch = tmp_path / "branch" / LEDGER_FILE  # trainer.resume_from_path in another directory
    PromptLedger(branch, saved, source=path).close()
    assert branch.read_bytes() == path.read_bytes()[: saved["bytes"]]
    PromptLedger(path, saved, source=path).close()  # the checkpoint's own directory: truncated in place
    assert path.read_bytes() == branch.read_bytes()
    PromptLedger(path).close()  # a fresh run (no checkpoint) starts an empty ledger
    assert path.read_bytes() == b""
    short = PromptLedger(path, saved)  # lines lost outside dagrl: said, and the run goes on after what is there
    assert short.state() == {"bytes": 0, "lines": 0} and "lines of earlier steps are missing" in caplog.text
    short.close()


def test_step_records_name_every_seen_prompt_once_with_its_reason():
    records = step_records(
        3,
        trained=["0:10", "0:9", "0:10"],
        seen=["0:9", "0:10", "1:2", "0:11", "0:5"],
        in_flight=["0:11"],
        reasons={"1:2": "zero_variance"},
    )
    assert records == [
        {"uid": "0:9", "fate": "trained@3"},
        {"uid": "0:10", "fate": "trained@3"},
        {"uid": "0:5", "fate": "filtered:dropped", "step": 3},
        {"uid": "1:2", "fate": "filtered:zero_variance", "step": 3},
    ]
    assert in_flight_records(4, ["0:11", "0:2", "0:11"]) == [
        {"uid": "0:2", "fate": "in_flight", "step": 4},
        {"uid": "0:11", "fate": "in_flight", "step": 4},
    ]


def test_dynamic_sampling_names_why_it_drops_each_group():
    ctx = make_ctx({0: "ssms", 1: "mmss", 2: "mmmm"})
    draw = ctx.draw_prompts

    def with_ledger_uids(step: int, round_index: int) -> Batch:
        batch = draw(step, round_index)
        batch["ledger_uid"] = [f"L{uid}" for uid in batch["uid"]]
        return batch

    ctx.draw_prompts = with_ledger_uids
    from dagrl.nodes.dynamic_sampling import filter_groups

    out, _ = filter_groups(ctx, first_round(ctx))
    assert sorted(set(out["ledger_uid"])) == ["L7:0:2", "L7:1:0", "L7:1:1", "L7:2:0"]
    assert ctx.dropped == {
        "L7:0:0": "zero_variance",
        "L7:0:1": "zero_variance",
        "L7:0:3": "zero_variance",
        "L7:1:2": "zero_variance",
        "L7:1:3": "zero_variance",
        "L7:2:1": "surplus",
        "L7:2:2": "surplus",
        "L7:2:3": "surplus",
    }


# ---- runs on the tiny model ------------------------------------------------------------------------------------
def test_a_synchronous_run_killed_and_resumed_writes_the_uninterrupted_runs_ledger(partial_rollout_args, tmp_path):
    straight, resumed, at_kill = straight_and_resumed(
        partial_rollout_args,
        tmp_path,
        **{
            "async_training.partial_rollout": False,
            "async_training.oversample_ratio": 1.0,
            "async_training.max_staleness": 0,
        },
    )
    assert at_kill == 2 * BATCH  # killed in step 3's update: steps 1-2 had their lines
    records = ledger(resumed)
    assert len(records) == BATCH * STEPS
    assert_exactly_once(records)
    assert Counter(record["fate"] for record in records) == {f"trained@{step}": BATCH for step in range(1, 5)}
    assert all(set(record) == {"uid", "fate"} and record["uid"].startswith("0:") for record in records)
    assert (resumed / LEDGER_FILE).read_bytes() == (straight / LEDGER_FILE).read_bytes()
    assert saved_length(resumed, 2)["lines"] == 2 * BATCH and saved_length(resumed, 4)["lines"] == 4 * BATCH


@pytest.mark.parametrize("staleness,kill", [pytest.param(1, KILL, marks=pytest.mark.slow), (3, "before_marker:4")])
def test_partial_rollout_killed_and_resumed_keeps_every_prompt_once(partial_rollout_args, tmp_path, staleness, kill):
    """K=3 is killed while saving the last step, after the ledger has its lines: the resume cuts steps 3-4's lines
    and writes them again. Then the finished run is extended by a step: its in_flight lines are replaced."""
    extra = {"async_training.max_staleness": staleness}
    straight, resumed, at_kill = straight_and_resumed(partial_rollout_args, tmp_path, kill=kill, **extra)
    assert at_kill == (2 if staleness == 1 else 4) * BATCH  # before_marker:4: steps 3-4's lines are cut, rewritten
    records = ledger(resumed)
    assert (resumed / LEDGER_FILE).read_bytes() == (straight / LEDGER_FILE).read_bytes()
    assert_exactly_once(records)
    fates = Counter(record["fate"] for record in records)
    assert fates == {**{f"trained@{step}": BATCH for step in range(1, 5)}, "in_flight": BATCH}  # 2 x 4 in flight
    assert [record["fate"] for record in records[-BATCH:]] == ["in_flight"] * BATCH  # at the end, after step 4
    pool = json.loads((resumed / "global_step_4" / "partial_rollout" / "dp0.json").read_text())
    assert {record["uid"] for record in records[-BATCH:]} == {group["ledger_uid"] for group in pool}
    assert saved_length(resumed, 4)["lines"] == len(records) - BATCH  # the in_flight lines come after it
    if staleness != 3:
        return
    ((code, stderr),) = launch((partial_rollout_args(resumed, **extra, **{"trainer.total_training_steps": 5}), {}))
    assert code == 0, stderr[-3000:]
    extended = ledger(resumed)
    assert_exactly_once(extended)
    assert extended[: len(records) - BATCH] == records[:-BATCH]  # the old in_flight lines are gone
    assert {record["uid"] for record in records[-BATCH:]} <= {record["uid"] for record in extended}  # decided now
    pool = json.loads((resumed / "global_step_5" / "partial_rollout" / "dp0.json").read_text())
    assert [record for record in extended if record["fate"] == "in_flight"] == extended[-BATCH:]
    assert {record["uid"] for record in extended[-BATCH:]} == {group["ledger_uid"] for group in pool}
    assert Counter(record["fate"] for record in extended)["trained@5"] == BATCH


def test_dapo_ledger_names_the_zero_variance_groups(dapo_args, tmp_path):
    out = tmp_path / "run"
    ((code, stderr),) = launch((dapo_args(out), {}))
    assert code == 0, stderr[-3000:]
    records, metrics = ledger(out), metrics_by_step(out)
    assert_exactly_once(records)
    for step in (1, 2):  # every prompt of every generation batch has its line
        mine = [r for r in records if r["fate"] == f"trained@{step}" or r.get("step") == step]
        assert len(mine) == metrics[step]["train/num_gen_batches"] * BATCH
        assert sum(r["fate"] == f"trained@{step}" for r in mine) == BATCH
    fates = Counter(record["fate"] for record in records)
    assert fates["filtered:zero_variance"] > 0
    assert set(fates) <= {"trained@1", "trained@2", "filtered:zero_variance", "filtered:surplus"}
