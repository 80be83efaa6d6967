from __future__ import annotations

from tests.reliability.corpus.case import MODEL_KEY, Case
from tests.reliability.corpus.file_makers import text_file

TOPIC = "Environment variables"
CASES: tuple[Case, ...] = (
    Case(
        "env_variable_unset",
        "`actor_rollout_ref.model.path=${oc.env:MODEL_DIR}` with MODEL_DIR not exported",
        (f"{MODEL_KEY}=${{{{oc.env:DAGRL_UNSET_MODEL_DIR}}}}",),
        ("DAGRL_UNSET_MODEL_DIR is not set", "export DAGRL_UNSET_MODEL_DIR="),
    ),
    Case(
        "world_size_not_a_number",
        "`WORLD_SIZE=two` in the environment",
        (),
        ("WORLD_SIZE='two' is not a positive integer", "torchrun --nproc-per-node N"),
        env={"WORLD_SIZE": "two"},
    ),
    Case(
        "world_size_zero", "`WORLD_SIZE=0`", (), ("WORLD_SIZE='0' is not a positive integer",), env={"WORLD_SIZE": "0"}
    ),
    Case(
        "rank_beyond_world",
        "`RANK=1` exported by hand for a one-process run",
        (),
        ("RANK=1 is outside this launch of WORLD_SIZE=1", "torchrun"),
        env={"RANK": "1"},
    ),
    Case("rank_negative", "`RANK=-1`", (), ("RANK=-1",), env={"RANK": "-1"}),
    Case(
        "local_rank_beyond_world",
        "`LOCAL_RANK=3` exported for a one-process run",
        (),
        ("LOCAL_RANK=3 is outside 0..0",),
        env={"LOCAL_RANK": "3"},
    ),
    Case(
        "master_port_not_a_number",
        "`MASTER_PORT=abc`",
        (),
        ("MASTER_PORT='abc'", "MASTER_PORT=29500"),
        env={"MASTER_PORT": "abc"},
    ),
    Case(
        "log_level_unknown",
        "`DAGRL_LOG_LEVEL=verbose`",
        (),
        ("DAGRL_LOG_LEVEL='verbose'", "DEBUG, INFO, WARNING"),
        env={"DAGRL_LOG_LEVEL": "verbose"},
    ),
    Case(
        "mlflow_server_unreachable",
        "`MLFLOW_TRACKING_URI=http://127.0.0.1:9` (no server there) with mlflow logging",
        ("trainer.default_local_dir={ws}/run", "trainer.logger=[console,mlflow]"),
        ("MLFLOW_TRACKING_URI=http://127.0.0.1:9 cannot be reached", "start the server", "or unset it"),
        env={"MLFLOW_TRACKING_URI": "http://127.0.0.1:9"},
    ),
    Case(
        "mlflow_file_store_is_a_file",
        "a file named mlruns in trainer.default_local_dir (mlflow logging, no MLFLOW_TRACKING_URI)",
        ("trainer.default_local_dir={ws}/run", "trainer.logger=[console,mlflow]"),
        ("the mlflow file store goes in <tmp>/run/mlruns, but <tmp>/run/mlruns is a file", "MLFLOW_TRACKING_URI"),
        make=text_file("run/mlruns", "x"),
    ),
)
