"""The trainer section: each key's type, default, range, choices and doc (conf/trainer/default.yaml is written from
it)."""

from __future__ import annotations

from dataclasses import dataclass

from dagrl.config.schema.spec import (
    ANY_INT,
    EVERY_N,
    NON_NEGATIVE,
    NON_NEGATIVE_INT,
    POSITIVE,
    POSITIVE_INT,
    Dir,
    OutDir,
    Paths,
    Section,
    hinted,
    key,
)


@dataclass(frozen=True)
class Trainer(Section):
    """The loop, checkpoints, logging and launch."""

    project_name: str = key("dagrl", "names the run (checkpoint/tensorboard paths; wandb project, mlflow experiment)")
    experiment_name: str = key("default", "names the run (checkpoint/tensorboard paths; wandb and mlflow run name)")
    logger: Paths = key(["console", "tensorboard"], "any of console, tensorboard, jsonl, wandb, mlflow (pip extras)")
    tensorboard_dir: OutDir | None = key(
        None, "tensorboard event dir; null = $TENSORBOARD_DIR, else <default_local_dir>/tensorboard"
    )
    nnodes: int = key(1, "machines in the job", POSITIVE_INT)
    n_gpus_per_node: int = key(1, "worker processes per machine (GPUs; CPU slots on a CPU run)", POSITIVE_INT)
    launcher: str = key(
        "local",
        "local: this process (or torchrun's env) runs the job | ray: one Ray worker per GPU (CPU slot)",
        choices=("local", "ray"),
    )
    ray_address: str | None = key(
        None, 'ray: cluster to join; null = start a local one (nnodes=1) or "auto" (nnodes>1)'
    )
    balance_batch: bool = key(True, "give actor-DP ranks whole GRPO groups with near-equal token totals per mini-batch")
    total_epochs: int = key(1, "passes over the training prompts", POSITIVE_INT)
    total_training_steps: int | None = key(
        None,
        "stop after this many steps; null = total_epochs worth",
        hinted(POSITIVE_INT, "null: trainer.total_epochs decides"),
    )
    val_before_train: bool = key(True, "validate once before the first step")
    parity_check: bool = key(
        False,
        "before the first step, check the actor's and the rollout's log-probs against HF after a weight sync "
        "(python3 -m dagrl.doctor; docs/numerics.md); logs doctor/* metrics, warns on a finding; colocated only",
    )
    val_only: bool = key(
        False,
        "validate the start weights (model.path, or the checkpoint resumed) once and exit "
        "without training (verl's key)",
    )
    critic_warmup: int = key(
        0, "first N steps train only the critic (no actor update); needs a critic (dag=ppo)", NON_NEGATIVE_INT
    )
    test_freq: int = key(
        -1, "validate every N steps (and after the last); -1 = never during training", hinted(EVERY_N, "-1 = never")
    )
    save_freq: int = key(-1, "checkpoint every N steps (and after the last); -1 = never", hinted(EVERY_N, "-1 = never"))
    resume_mode: str = key(
        "auto",
        "auto: continue from the newest complete checkpoint | disable | resume_path",
        choices=("auto", "disable", "resume_path"),
    )
    resume_from_path: Dir | None = key(None, "checkpoint dir (global_step_N) when resume_mode=resume_path")
    default_local_dir: OutDir = key("checkpoints/${trainer.project_name}/${trainer.experiment_name}", "checkpoint root")
    max_actor_ckpt_to_keep: int | None = key(
        None, "keep the newest N complete checkpoints (earlier runs' too); null = all", ANY_INT
    )
    hang_timeout_s: float = key(
        1800,
        "a rank without progress this long writes every thread's stack to "
        "<default_local_dir>/hang/rank<R>.txt and exits (code 3); 0 = off",
        NON_NEGATIVE,
    )
    hang_startup_timeout_s: float = key(
        3600, "the same allowance for start-up (models loaded, engines started)", POSITIVE
    )
    preemption_grace_s: float = key(
        120,
        "on SIGTERM/SIGUSR1 the run stops after the current step with a checkpoint "
        "and exits 0; the log says whether it fit this grace",
        NON_NEGATIVE,
    )
    max_restarts: int = key(
        0,
        "trainer.launcher=ray: relaunch the workers after a failure or hang up to N times, each"
        " resuming from the newest checkpoint (torchrun: --max-restarts)",
        NON_NEGATIVE_INT,
    )
    max_consecutive_skips: int = key(
        3,
        "stop after N steps in a row whose updates were skipped (non-finite); 0 = never",
        hinted(NON_NEGATIVE_INT, "0 = never stop"),
    )
    validation_data_dir: OutDir | None = key(
        None, "dump validation prompts, responses and scores here as jsonl; null = off"
    )
    log_val_generations: int = key(
        0,
        "log the first N validation generations (prompt, response, score) at each validation; 0 = off (verl's key)",
        hinted(NON_NEGATIVE_INT, "0 = off"),
    )
    rollout_data_dir: OutDir | None = key(
        None,
        "dump each training step's rollouts (prompt, response, score, "
        "data_source, index) as <dir>/<step>.jsonl; null = off (verl's key)",
    )
    plugins: list = key(
        [],
        "Python modules every process imports before pre-flight, e.g. [my_algos]: their "
        "register(...) calls add estimators, losses, KL estimators and rollout engines (Ray workers included)",
    )
