"""The trainer end to end on CPU: a kill -9 and relaunch reproduce an uninterrupted run exactly; every conf key
is read; a finished run relaunched says so and exits 0."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from dagrl.config.load import compose
from dagrl.config.tree import leaf_keys
from dagrl.trainer.run_dir import LOCK_FILE
from tests.conftest import cpu_run_overrides
from tests.engine.engine_helpers import free_port
from tests.helpers import metrics_by_step, run_concurrently, run_in_session, undocumented_metrics

REWARD = Path(__file__).with_name("reward_by_length.py")
# Keys only a GPU run reads (covered by tests/gpu).
# read only where vLLM starts (cache_dir: engine/rollout/vllm.vllm_cache_root, tests/rollout/test_vllm_startup.py)
# read only by a rollout sharing a GPU with the actor (offload_train_state: tests/trainer/test_colocated_resume.py)
ROOT = Path(__file__).resolve().parents[2]
GPU_ONLY_KEYS = {
    "actor_rollout_ref.rollout.gpu_memory_utilization",
    "actor_rollout_ref.rollout.cache_dir",
    "actor_rollout_ref.rollout.offload_train_state",
}
# vLLM's engine keys: read where the vLLM rollout is built (the GPU kit's tests run it); checked here by name
VLLM_KEYS = {
    f"actor_rollout_ref.rollout.{name}"
    for name in (
        "enable_chunked_prefill",
        "enable_prefix_caching",
        "enforce_eager",
        "engine_kwargs.vllm",
        "fp8_scales",
        "free_cache_engine",
        "kv_cache_dtype",
        "max_num_batched_tokens",
        "max_num_seqs",
    )
}
# keys another CPU run of the suite reads, and asserts it does: GAE's (tests/trainer/test_ppo.py), dynamic
# sampling's (tests/trainer/test_dapo.py), LoRA's (tests/trainer/test_lora_run.py)
OTHER_RUNS = {"algorithm.gamma", "algorithm.lam", "algorithm.filter_groups.max_num_gen_batches"} | {
    f"actor_rollout_ref.model.lora.{key}" for key in ("alpha", "dropout", "target_modules", "merge")
}


def files_and_times(root: Path) -> list[tuple[str, int]]:
    """(name, mtime) of every file under root but the run directory's lock, which every launch takes."""
    return sorted((p.name, p.stat().st_mtime_ns) for p in root.rglob("*") if p.name != LOCK_FILE)


def train(overrides: list[str], env: dict | None = None, expect_kill: bool = False) -> str:
    code, stderr = run_in_session([sys.executable, "-m", "dagrl.main_dag", *overrides], env)
    assert code == (-9 if expect_kill else 0), stderr[-3000:]
    return stderr


ONE_THREAD = {"OMP_NUM_THREADS": "1"}  # runs that go two at a time on the two cores (every run compared: the same)


def train_together(*runs: tuple[list[str], dict, bool]) -> list[str]:
    """train(overrides, env, expect_kill) of each run at the same time, each on one thread; the stderr of each."""
    results = run_concurrently(
        [([sys.executable, "-m", "dagrl.main_dag", *overrides], {**ONE_THREAD, **env}) for overrides, env, _ in runs]
    )
    for (code, stderr), (_, _, expect_kill) in zip(results, runs):
        assert code == (-9 if expect_kill else 0), stderr[-3000:]
    return [stderr for _, stderr in results]


@pytest.fixture(scope="module")
def run_args(tiny_model, tiny_data):
    def make(out: Path, **extra) -> list[str]:
        return cpu_run_overrides(
            tiny_model,
            tiny_data,
            out,
            **{
                "custom_reward_function.path": str(REWARD),
                "+custom_reward_function.reward_kwargs.scale": 2.0,
                "trainer.total_training_steps": 4,
                "trainer.save_freq": 2,
                "trainer.test_freq": 2,
                "actor_rollout_ref.actor.use_kl_loss": True,
                "algorithm.use_kl_in_reward": True,
                "actor_rollout_ref.actor.ppo_epochs": 2,
                "actor_rollout_ref.actor.shuffle": True,
                "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio": 0.5,
                "actor_rollout_ref.actor.optim.lr_decay_style": "cosine",
                "actor_rollout_ref.model.trainable_top_layers": 1,
                **extra,
            },
        )

    return make


def test_kill_and_resume_matches_uninterrupted_run_and_all_keys_are_read(run_args, tmp_path):
    reads = tmp_path / "reads.json"
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    train_together(
        (
            run_args(straight, **{"trainer.validation_data_dir": str(tmp_path / "generations")}),
            {"DAGRL_RECORD_CONFIG_READS": str(reads)},
            False,
        ),
        (run_args(resumed), {"DAGRL_FAULT": "actor_update:4"}, True),
    )  # dies inside step 4
    dumped = sorted(p.name for p in (tmp_path / "generations").iterdir())
    assert dumped == ["0.jsonl", "2.jsonl", "4.jsonl"]  # before training, then every test_freq steps
    rows = [json.loads(line) for line in (tmp_path / "generations" / "4.jsonl").read_text().splitlines()]
    assert len(rows) == 8 and {"data_source", "index", "score", "response"} <= set(rows[0])

    assert sorted(p.name for p in resumed.glob("global_step_*")) == ["global_step_2"]
    # the relaunch, and beside it a relaunch of the finished run, which says so and exits 0 without touching the
    # checkpoints
    before = files_and_times(straight)
    summary, finished = train_together((run_args(resumed), {}, False), (run_args(straight), {}, False))
    # the run ends with how it went; the resumed start step (validated before the kill) is validated once
    assert (
        "run summary: steps 3..4 of 4 in" in summary
        and "checkpoints: " in summary
        and "(newest: global_step_4)" in summary
    )
    assert "val-core/dagrl/arithmetic/acc/mean@1: first" in summary and "metrics: " in summary
    assert "step/s]" not in summary and "s/step]" not in summary  # no progress bar outside a terminal (a log file)
    assert "Loading weights" not in summary and "it/s]" not in summary  # transformers' bars neither
    # the minutes before step 1 say what they are spent on, in order
    marks = [
        "start-up: ",
        " s composing the config, ",
        " s of pre-flight, ",
        " s importing the trainer and joining",
        "data: ",
        " training prompts, 4 steps of 4;",
        "building the actor and the reference from",
        "starting the hf rollout engine",
        "ready in",
        "resumed from",
    ]
    where = [summary.find(mark) for mark in marks]
    assert -1 not in where and where == sorted(where), dict(zip(marks, where))
    rows = [json.loads(line) for line in (resumed / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if any(k.startswith("val-core/") for k in r)] == [0, 2, 4]
    assert all(isinstance(r["time"], float) for r in rows)  # wall clock of every row: curves against time

    expected, actual = metrics_by_step(straight), metrics_by_step(resumed)
    assert sorted(expected) == [0, 1, 2, 3, 4]
    assert actual == expected  # bit-identical metrics, losses and grad norms included
    assert expected[4]["actor/grad_norm"] > 0 and "actor/kl_loss" in expected[4]
    assert not undocumented_metrics(straight), "add these to docs/metrics.md"
    assert (straight / "global_step_4" / "data.pt").read_bytes() == (resumed / "global_step_4" / "data.pt").read_bytes()

    assert "already finished" in finished
    assert files_and_times(straight) == before  # the relaunch of a finished run wrote nothing but its lock record
    assert (straight / LOCK_FILE).read_text() == ""  # emptied as the relaunch ended

    # no dead keys: every key in conf/ was read by the validation pass or the run (distillation.*: by the dag=opd
    # run of tests/algo/test_distill.py; critic.*: by the dag=ppo run of tests/trainer/test_ppo.py)
    read = set(json.loads(reads.read_text()))
    all_keys = {key for key in leaf_keys(compose([])) if not key.startswith(("distillation.", "critic."))}
    unread = sorted(
        k
        for k in all_keys - GPU_ONLY_KEYS - VLLM_KEYS - OTHER_RUNS
        if k not in read and not any(r.startswith(k + ".") for r in read)
    )
    assert not unread, f"config keys nothing reads: {unread}"
    vllm_source = "\n".join(
        path.read_text()
        for path in (ROOT / "dagrl" / "trainer" / "build.py", ROOT / "dagrl" / "engine" / "rollout" / "vllm.py")
    )
    assert all(key.split(".")[-1] in vllm_source for key in VLLM_KEYS)


def test_scoring_in_the_background_trains_exactly_as_scoring_in_line(run_args, tmp_path):
    """reward_model.launch_reward_fn_async moves scoring beside the log-prob passes: the same metrics, step by step."""
    common = {
        "trainer.total_training_steps": 2,
        "trainer.save_freq": -1,
        "trainer.test_freq": -1,
        "trainer.val_before_train": False,
    }
    train_together(
        (run_args(tmp_path / "inline", **common), {}, False),
        (run_args(tmp_path / "background", **common, **{"reward_model.launch_reward_fn_async": True}), {}, False),
    )
    inline, background = metrics_by_step(tmp_path / "inline"), metrics_by_step(tmp_path / "background")
    assert sorted(background) == [1, 2] and background == inline
    timings = [json.loads(line) for line in (tmp_path / "background" / "metrics.jsonl").read_text().splitlines()]
    assert all(row["timing_s/reward_background"] > 0 for row in timings if row["step"] > 0)


def test_two_processes_under_torchrun_in_bf16(run_args, tmp_path):
    """DP=2 on CPU: each rank samples its own prompts; metrics and validation cover both ranks; scores are made in
    the background, in the actor layout, and their all-failed check is a collective of the main thread. In bf16
    (the other runs here are float32): bf16 parameters with fp32 main params, a bf16 rollout fed from them."""
    from dagrl.engine.megatron.checkpoint import describe

    out = tmp_path / "dp2"
    args = run_args(
        out,
        **{
            "trainer.n_gpus_per_node": 2,
            "trainer.total_training_steps": 2,
            "trainer.save_freq": 2,
            "trainer.test_freq": 2,
            "reward_model.launch_reward_fn_async": True,
            "actor_rollout_ref.actor.megatron.param_dtype": "bf16",
            "actor_rollout_ref.rollout.dtype": "bfloat16",
        },
    )
    code, stderr = run_in_session(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--master-port",
            str(free_port()),
            "-m",
            "dagrl.main_dag",
            *args,
        ]
    )
    assert code == 0, stderr[-3000:]
    records = metrics_by_step(out)
    assert sorted(records) == [0, 1, 2] and records[2]["actor/grad_norm"] > 0
    assert (out / "global_step_2" / "dagrl_checkpoint.json").is_file()
    assert describe(str(out / "global_step_2" / "actor"))["param_dtype"] == "bfloat16"


def test_non_finite_steps_are_skipped_then_the_run_stops_keeping_the_last_good_checkpoint(run_args, tmp_path):
    out = tmp_path / "nan"
    args = run_args(
        out,
        **{
            "trainer.total_training_steps": 6,
            "trainer.max_consecutive_skips": 2,
            "trainer.test_freq": -1,
            "trainer.val_before_train": False,
        },
    )
    code, stderr = run_in_session([sys.executable, "-m", "dagrl.main_dag", *args], {"DAGRL_INJECT_NAN": "2,4,5"})
    assert code == 1
    error = [line for line in stderr.splitlines() if line.startswith("dagrl: error:")]
    assert len(error) == 1 and "2 consecutive steps (up to 5)" in error[0] and "global_step_4" in error[0], stderr
    assert "Traceback" not in stderr
    assert stderr.count("non-finite grad norm") == 3 * 2 * 2  # logged: 3 NaN steps x 2 epochs x 2 mini-batches
    records = metrics_by_step(out)
    assert [records[s]["actor/skipped_steps"] for s in (1, 2, 3, 4, 5)] == [0.0, 1.0, 0.0, 1.0, 1.0]
    assert sorted(p.name for p in out.glob("global_step_*")) == ["global_step_2", "global_step_4"]
    assert (out / "latest_checkpointed_iteration.txt").read_text() == "4"
