"""The bad-input corpus: each case is one thing a user gets wrong, the overrides (and files) that reproduce it, and
what dagrl's one error line must name (the key or file, and the fix).

Overrides are format strings: {ws} is the case's scratch directory, {model} a valid tiny model, {train} a valid
training file, {ckpt} the checkpoint directory (trainer.default_local_dir) that holds a complete checkpoint
(global_step_2) and a partial one (.tmp_global_step_3). `make(ws, paths)` writes the case's bad files first.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

PREFLIGHT, RUNTIME = "pre-flight", "first step"
STARTUP = "start-up"  # once the tokenizer has read the prompts, before any model is built
MODEL_KEY = "actor_rollout_ref.model.path"
MEGATRON = "actor_rollout_ref.actor.megatron"


@dataclass(frozen=True)
class Paths:
    ws: Path
    model: Path
    train: str
    ckpt: Path


@dataclass(frozen=True)
class Case:
    id: str
    what: str  # the bad input, in words (docs/bad_inputs.md)
    overrides: tuple[str, ...] = ()
    expect: tuple[str, ...] = ()  # the error line contains each: the key or file, and the fix
    also: tuple[tuple[str, ...], ...] = ()  # several independent mistakes: each further error line, in order
    make: Callable[[Path, Paths], None] | None = None
    env: dict[str, str] = field(default_factory=dict)
    code: int = 2
    found: str = PREFLIGHT  # RUNTIME: only once models are built and a step runs (slow suite)


# ---- file makers -----------------------------------------------------------------------------------------------
def model_copy(
    patch: dict | None = None,
    remove: tuple[str, ...] = (),
    config_text: str | None = None,
    tokenizer_patch: dict | None = None,
) -> Callable[[Path, Paths], None]:
    """{ws}/model: the tiny model with config.json patched or replaced, or files removed."""

    def make(ws: Path, paths: Paths) -> None:
        target = ws / "model"
        shutil.copytree(paths.model, target)
        config = json.loads((target / "config.json").read_text())
        config.update(patch or {})
        (target / "config.json").write_text(config_text if config_text is not None else json.dumps(config))
        if tokenizer_patch is not None:
            tokenizer = json.loads((target / "tokenizer_config.json").read_text())
            tokenizer.update(tokenizer_patch)
            (target / "tokenizer_config.json").write_text(json.dumps(tokenizer))
        for name in remove:
            (target / name).unlink()

    return make


def parquet(kind: str) -> Callable[[Path, Paths], None]:
    """{ws}/bad.parquet: corrupt bytes, no rows, a missing column, or a directory of that name."""

    def make(ws: Path, paths: Paths) -> None:
        import pyarrow.parquet as pq

        target = ws / "bad.parquet"
        if kind == "corrupt":
            target.write_bytes(b"PAR1" + bytes(range(256)) * 4)
        elif kind == "dir":
            target.mkdir()
        else:
            table = pq.read_table(paths.train)
            table = table.slice(0, 0) if kind == "empty" else table.drop_columns(["reward_model"])
            pq.write_table(table, target)

    return make


def text_file(name: str, text: str) -> Callable[[Path, Paths], None]:
    def make(ws: Path, paths: Paths) -> None:
        (ws / name).write_text(text)

    return make


def step_dir(name: str, complete: bool) -> Callable[[Path, Paths], None]:
    """{ws}/other/<name>: a user's files under a checkpoint name, or (complete) a stand-in dagrl checkpoint."""

    def make(ws: Path, paths: Paths) -> None:
        target = ws / "other" / name
        target.mkdir(parents=True)
        if complete:  # the marker dagrl writes, beside the actor's part
            step = int(name.rsplit("_", 1)[1])
            (target / "actor").mkdir()
            (target / "dagrl_checkpoint.json").write_text(json.dumps({"global_step": step}))
        else:
            (target / "notes.txt").write_text("{}")

    return make


def fifo(name: str = "bad.parquet") -> Callable[[Path, Paths], None]:
    """{ws}/<name>: a named pipe (opening it for reading waits for a writer forever)."""

    def make(ws: Path, paths: Paths) -> None:
        import os

        os.mkfifo(ws / name)

    return make


def model_weights(kind: str) -> Callable[[Path, Paths], None]:
    """{ws}/model: the tiny model with its weights cut to half their bytes ("truncated"), or split under an index
    that names a second shard the directory lacks ("missing_shard")."""

    def make(ws: Path, paths: Paths) -> None:
        model_copy()(ws, paths)
        weights = ws / "model" / "model.safetensors"
        if kind == "truncated":
            with open(weights, "r+b") as handle:
                handle.truncate(weights.stat().st_size // 2)
            return
        header = json.loads(weights.read_bytes()[8 : 8 + int.from_bytes(weights.read_bytes()[:8], "little")])
        names = sorted(name for name in header if name != "__metadata__")
        weights.rename(ws / "model" / "model-00001-of-00002.safetensors")
        weight_map = {name: f"model-0000{1 + i % 2}-of-00002.safetensors" for i, name in enumerate(names)}
        index = {"metadata": {}, "weight_map": weight_map}
        (ws / "model" / "model.safetensors.index.json").write_text(json.dumps(index))

    return make


def chat_template(text: str) -> Callable[[Path, Paths], None]:
    """{ws}/model: the tiny model with chat_template.jinja replaced."""

    def make(ws: Path, paths: Paths) -> None:
        model_copy()(ws, paths)
        (ws / "model" / "chat_template.jinja").write_text(text)

    return make


TEMPLATE_RAISES = "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"


REWARD_RAISES = "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 1 / 0\n"
REWARD_HANGS = (
    "import time\n\ndef compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
    "    time.sleep(600)\n    return 0.0\n"
)
REWARD_NAN = "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return float('nan')\n"
REWARD_OTHER_NAME = "def score(data_source, solution_str, ground_truth, extra_info=None):\n    return 0.0\n"
WORLD = {"WORLD_SIZE": "2"}  # validate a 2-process launch without starting one (pre-flight reads WORLD_SIZE)
DECOUPLED = "actor_rollout_ref.actor.policy_loss.off_policy=decoupled"
MULTI_TURN = "actor_rollout_ref.rollout.multi_turn.enable=true"
TOOL_CONFIG = Path(__file__).resolve().parents[2] / "examples" / "agentic" / "tool_config.yaml"
TOOL_NOT_IMPORTING = """tools:
  - class_name: my_tools.calc.CalcTool
    tool_schema: {type: function, function: {name: calc, parameters: {type: object, properties: {}}}}
"""
TOOL_BAD_SCHEMA = """tools:
  - class_name: dagrl.agent.calculator.CalculatorTool
    tool_schema:
      type: function
      function: {name: calculator, parameters: {type: object, properties: {expression: {type: string}},
                 required: [expr]}}
"""
INTERACTION_NOT_ONE = """interaction:
  - name: judge
    class_name: collections.OrderedDict
"""
LOG_PROBS = "actor_rollout_ref.rollout.calculate_log_probs=true"
USER_CODE = "tests.reliability.user_code"  # functions and classes that do not fit the trainer's calls
TOOL_WRONG_ARITY = f"""tools:
  - class_name: {USER_CODE}.ToolWithoutParameters
    tool_schema: {{type: function, function: {{name: calc, parameters: {{type: object, properties: {{}}}}}}}}
"""
INTERACTION_WRONG_ARITY = f"""interaction:
  - name: judge
    class_name: {USER_CODE}.InteractionWithoutMessages
"""
# raises only on a prompt with the word "forbidden" (the corpus puts one in row 20): the row-0 check passes
TEMPLATE_RAISES_ON_A_WORD = (
    "{% for m in messages %}{% if 'forbidden' in m['content'] %}"
    "{{ raise_exception('this template refuses the word forbidden') }}{% endif %}"
    "<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
REWARD_EXITS = (
    "import sys\n\ndef compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    sys.exit(0)\n"
)
REWARD_RETURNS_NONE = (
    "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
    "    score = float(solution_str == ground_truth)  # forgot the return\n"
)
REWARD_DICT_WITHOUT_SCORE = (
    "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
    "    return {'reward': 1.0, 'acc': 1.0}\n"
)


def rows_changed(change: Callable[[list[dict]], None], name: str = "bad.parquet") -> Callable[[Path, Paths], None]:
    """{ws}/<name>: the valid training rows, changed in place by `change` (a careless edit of the data)."""

    def make(ws: Path, paths: Paths) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        rows = pq.read_table(paths.train).to_pylist()
        change(rows)
        pq.write_table(pa.Table.from_pylist(rows), ws / name)

    return make


def _set(index: int | None, key: str, value) -> Callable[[list[dict]], None]:
    """Sets `key` (dotted: reward_model.ground_truth) of row `index` (None: every row)."""

    def change(rows: list[dict]) -> None:
        for row in rows if index is None else [rows[index]]:
            *parents, last = key.split(".")
            target = row
            for part in parents:
                target = target[part]
            target[last] = value

    return change


def _ends_with_the_answer(rows: list[dict]) -> None:
    """SFT conversations used as prompts: each ends with the assistant's answer."""
    for row in rows:
        row["prompt"] = [*row["prompt"], {"role": "assistant", "content": row["reward_model"]["ground_truth"]}]


def _tracker_only(ws: Path, paths: Paths) -> None:
    """{ws}/run: a tracker file naming step 7 and no global_step_7 (the checkpoint deleted or never copied)."""
    (ws / "run").mkdir()
    (ws / "run" / "latest_checkpointed_iteration.txt").write_text("7")


def _tracker_text(ws: Path, paths: Paths) -> None:
    """{ws}/run: a tracker file holding a directory name, not a step number (another tool's, or typed by hand)."""
    (ws / "run").mkdir()
    (ws / "run" / "latest_checkpointed_iteration.txt").write_text("global_step_2\n")


def _hf_cache_unfinished(ws: Path, paths: Paths) -> None:
    """{ws}/models--Qwen--Qwen3-0.6B: a hub cache folder whose download did not finish (an empty snapshot)."""
    for name in ("blobs", "refs", "snapshots/abc123"):
        (ws / "models--Qwen--Qwen3-0.6B" / name).mkdir(parents=True)


def _data_dir(ws: Path, paths: Paths) -> None:
    (ws / "data").mkdir()
    shutil.copy(paths.train, ws / "data" / "train.parquet")


TOOL_IS_A_FUNCTION = """tools:
  - class_name: dagrl.config.schema.spec.hinted
    config: {type: native}
    tool_schema: {type: function, function: {name: calc, description: d, parameters: {type: object, properties: {}}}}
"""
TOOL_YAML_WITH_TAB = "tools:\n\t- class_name: dagrl.agent.calculator.CalculatorTool\n"


def _rename_ground_truth(rows: list[dict]) -> None:
    for row in rows:
        row["reward_model"] = {"style": "rule", "answer": row["reward_model"]["ground_truth"]}


LONG_QUESTION = [{"role": "user", "content": "What is 3 + 4? Show every step of your working. " * 4}]
REWARD_TWO_ARGS = "def compute_score(solution_str, ground_truth):\n    return float(solution_str == ground_truth)\n"
REWARD_NO_EXTRA_INFO = (
    "def compute_score(data_source, solution_str, ground_truth):\n    return float(solution_str == ground_truth)\n"
)
REWARD_NO_KWARGS = "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 0.0\n"


def template_and_rows(template: str, change: Callable[[list[dict]], None]) -> Callable[[Path, Paths], None]:
    """{ws}/model with chat_template.jinja replaced, and {ws}/bad.parquet: the training rows changed by `change`."""

    def make(ws: Path, paths: Paths) -> None:
        chat_template(template)(ws, paths)
        rows_changed(change)(ws, paths)

    return make


def tokenizer_only(ws: Path, paths: Paths) -> None:
    """{ws}/tok: the tiny model's tokenizer files alone (no config.json, no weights)."""
    (ws / "tok").mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(paths.model / name, ws / "tok" / name)


def bin_weights_only(ws: Path, paths: Paths) -> None:
    """{ws}/model: the tiny model with pytorch_model.bin instead of model.safetensors."""
    model_copy(remove=("model.safetensors",))(ws, paths)
    (ws / "model" / "pytorch_model.bin").write_bytes(b"PK" + bytes(range(256)))


def json_rows(name: str) -> Callable[[Path, Paths], None]:
    """{ws}/<name>: the valid training rows as JSON (a list, or one object a line for .jsonl), not parquet."""

    def make(ws: Path, paths: Paths) -> None:
        import pyarrow.parquet as pq

        rows = pq.read_table(paths.train).to_pylist()
        text = "".join(json.dumps(row) + "\n" for row in rows) if name.endswith(".jsonl") else json.dumps(rows)
        (ws / name).write_text(text)

    return make


def _roles_renamed(rows: list[dict]) -> None:
    """Every message's role as ShareGPT names it (human) while the keys are role/content."""
    for row in rows:
        row["prompt"] = [{"role": "human", "content": m["content"]} for m in row["prompt"]]


def _prompts_json_encoded(rows: list[dict]) -> None:
    """The prompt column written as json.dumps of the chat list (a string)."""
    for row in rows:
        row["prompt"] = json.dumps(row["prompt"])


def config_key_removed(name: str) -> Callable[[Path, Paths], None]:
    """{ws}/model: the tiny model with one config.json field removed."""

    def make(ws: Path, paths: Paths) -> None:
        model_copy()(ws, paths)
        config = json.loads((ws / "model" / "config.json").read_text())
        config.pop(name)
        (ws / "model" / "config.json").write_text(json.dumps(config))

    return make


def world(n: int) -> tuple[str, ...]:
    return (f"trainer.n_gpus_per_node={n}",)


# ---- file makers: data and model files, teachers, critics, checkpoint markers, links, tool configs ----------------
def _messages(change: Callable[[dict], dict]) -> Callable[[list[dict]], None]:
    """Every row's prompt messages rewritten by `change`."""

    def apply(rows: list[dict]) -> None:
        for row in rows:
            row["prompt"] = [change(m) for m in row["prompt"]]

    return apply


def duplicate_prompt_column(ws: Path, paths: Paths) -> None:
    """{ws}/bad.parquet: the training rows with the prompt column written twice."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(paths.train)
    pq.write_table(
        pa.Table.from_arrays([*table.columns, table.column("prompt")], names=[*table.column_names, "prompt"]),
        ws / "bad.parquet",
    )


def content_as_bytes(ws: Path, paths: Paths) -> None:
    """{ws}/bad.parquet: every message's content stored as latin-1 bytes (a binary column), not UTF-8 text."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = pq.read_table(paths.train).to_pylist()
    for row in rows:
        row["prompt"] = [
            {"role": m["role"], "content": m["content"].encode("latin-1") + b"\xe9"} for m in row["prompt"]
        ]
    pq.write_table(pa.Table.from_pylist(rows), ws / "bad.parquet")


def feather_named_parquet(ws: Path, paths: Paths) -> None:
    import pyarrow.feather as feather
    import pyarrow.parquet as pq

    feather.write_feather(pq.read_table(paths.train), ws / "bad.parquet")


def val_without_column(name: str) -> Callable[[Path, Paths], None]:
    def make(ws: Path, paths: Paths) -> None:
        import pyarrow.parquet as pq

        pq.write_table(pq.read_table(paths.train).drop_columns([name]), ws / "val.parquet")

    return make


def model_file_text(name: str, text: str) -> Callable[[Path, Paths], None]:
    """{ws}/model: the tiny model with one file's text replaced (None: cut to its first third)."""

    def make(ws: Path, paths: Paths) -> None:
        model_copy()(ws, paths)
        target = ws / "model" / name
        target.write_text(text if text is not None else target.read_text()[: len(target.read_text()) // 3])

    return make


def teacher_with_swapped_tokens(ws: Path, paths: Paths) -> None:
    """{ws}/teacher: the tiny model whose tokenizer gives two tokens each other's ids."""
    shutil.copytree(paths.model, ws / "teacher")
    tokenizer = json.loads((ws / "teacher" / "tokenizer.json").read_text())
    vocab = tokenizer["model"]["vocab"]
    vocab["a"], vocab["b"] = vocab["b"], vocab["a"]
    (ws / "teacher" / "tokenizer.json").write_text(json.dumps(tokenizer))


def teacher_with_vocab(size: int) -> Callable[[Path, Paths], None]:
    def make(ws: Path, paths: Paths) -> None:
        model_copy(patch={"vocab_size": size})(ws, paths)
        shutil.move(ws / "model", ws / "teacher")

    return make


def critic_with_other_vocab(ws: Path, paths: Paths) -> None:
    model_copy(patch={"vocab_size": 800})(ws, paths)
    shutil.move(ws / "model", ws / "critic")


def in_checkpoints(change: Callable[[Path], None]) -> Callable[[Path, Paths], None]:
    """A change to trainer.default_local_dir ({ckpt}), which holds a complete global_step_2."""

    def make(ws: Path, paths: Paths) -> None:
        change(paths.ckpt)

    return make


def _marker_cut(root: Path) -> None:
    (root / "global_step_2" / "dagrl_checkpoint.json").write_text('{"global_step": ')


def _marker_without_actor(root: Path) -> None:
    (root / "global_step_4").mkdir()
    (root / "global_step_4" / "dagrl_checkpoint.json").write_text(json.dumps({"global_step": 4}))


def _marker_other_step(root: Path) -> None:
    shutil.copytree(root / "global_step_2", root / "global_step_6")
    (root / "global_step_6" / "dagrl_checkpoint.json").write_text(json.dumps({"global_step": 3}))


def symlink(name: str, target: str) -> Callable[[Path, Paths], None]:
    def make(ws: Path, paths: Paths) -> None:
        import os

        os.symlink(ws / target, ws / name)

    return make


def latin1_file(name: str, text: str) -> Callable[[Path, Paths], None]:
    def make(ws: Path, paths: Paths) -> None:
        (ws / name).write_bytes(text.encode("latin-1"))

    return make


def reward_package(ws: Path, paths: Paths) -> None:
    (ws / "my_reward").mkdir()
    (ws / "my_reward" / "__init__.py").write_text("")
    (ws / "my_reward" / "math_reward.py").write_text(REWARD_NO_KWARGS)


SIG = "(data_source, solution_str, ground_truth, extra_info=None, **kwargs)"
CALC_SCHEMA = (
    "tool_schema: {type: function, function: {name: calculator, description: calc, parameters: "
    "{type: object, properties: {expression: {type: string}}, required: [expression]}}}"
)
CALC = "  - class_name: dagrl.agent.calculator.CalculatorTool\n    " + CALC_SCHEMA + "\n"
MT_TOOLS = (MULTI_TURN, "actor_rollout_ref.rollout.multi_turn.tool_config_path={ws}/tools.yaml")


# ---- file makers: other vocabularies, GGUF files, critics, damaged checkpoints, symlink loops, file lists ---------
def model_of_vocab(size: int) -> Callable[[Path, Paths], None]:
    """{ws}/model: the tiny model's tokenizer with a model whose embedding (config.json and weights alike) has `size`
    rows (another model's tokenizer, not an edited config.json: config_vocab_not_weights is that)."""

    def make(ws: Path, paths: Paths) -> None:
        from tests.engine.tiny_models import make_model_dir

        model_copy()(ws, paths)
        make_model_dir(ws / "model", num_layers=2, vocab_size=size)

    return make


def gguf_only_dir(ws: Path, paths: Paths) -> None:
    """{ws}/model: a directory holding only a llama.cpp GGUF file."""
    (ws / "model").mkdir()
    (ws / "model" / "model-q4_k_m.gguf").write_bytes(b"GGUF" + bytes(64))


def critic_with_positions(limit: int) -> Callable[[Path, Paths], None]:
    """{ws}/critic: the tiny model with max_position_embeddings=limit."""

    def make(ws: Path, paths: Paths) -> None:
        model_copy(patch={"max_position_embeddings": limit})(ws, paths)
        shutil.move(ws / "model", ws / "critic")

    return make


def _actor_without_metadata(root: Path) -> None:
    """global_step_4: dagrl's marker and data.pt, and an actor/ without Megatron's metadata.json."""
    (root / "global_step_4" / "actor").mkdir(parents=True)
    (root / "global_step_4" / "data.pt").write_bytes(b"x" * 64)
    (root / "global_step_4" / "dagrl_checkpoint.json").write_text(json.dumps({"global_step": 4}))


def _tracker_directory(root: Path) -> None:
    (root / "latest_checkpointed_iteration.txt").unlink()
    (root / "latest_checkpointed_iteration.txt").mkdir()


def symlink_loop(name: str) -> Callable[[Path, Paths], None]:
    def make(ws: Path, paths: Paths) -> None:
        import os

        os.symlink(ws / name, ws / name)

    return make


def file_list_txt(ws: Path, paths: Paths) -> None:
    """{ws}/files.txt: the training file's path twice, one a line (a list of files, not data)."""
    (ws / "files.txt").write_text(f"{paths.train}\n{paths.train}\n")


# ---- file makers: files from other tools (Spark, datasets, the hub cache, verl's Megatron checkpoints) ------------
INTERACTION_CONFIG = TOOL_CONFIG.with_name("interaction_config.yaml")
RUN_YAML = "data:\n  train_batch_size: 8\ntrainer:\n  total_epochs: 2\n"
REWARD_OK = "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n    return 0.0\n"


def partitioned_parquet(ws: Path, paths: Paths) -> None:
    """{ws}/train.parquet/: a directory of part files, as Spark or pandas (partition_cols) write one dataset."""
    target = ws / "train.parquet"
    target.mkdir()
    for part in ("part-00000-abc.snappy.parquet", "part-00001-abc.snappy.parquet"):
        shutil.copy(paths.train, target / part)
    (target / "_SUCCESS").write_text("")


def datasets_saved_to_disk(ws: Path, paths: Paths) -> None:
    """{ws}/gsm8k_saved: what datasets' save_to_disk writes (an Arrow stream shard, dataset_info.json, state.json)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    target = ws / "gsm8k_saved"
    target.mkdir()
    table = pq.read_table(paths.train)
    with (
        pa.OSFile(str(target / "data-00000-of-00001.arrow"), "wb") as sink,
        pa.ipc.new_stream(sink, table.schema) as writer,
    ):
        writer.write_table(table)
    (target / "dataset_info.json").write_text("{}")
    (target / "state.json").write_text(json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}]}))


def _extra_info_as_json(rows: list[dict]) -> None:
    for row in rows:
        row["extra_info"] = json.dumps(row["extra_info"])


def _interaction_judge(rows: list[dict]) -> None:
    for row in rows:
        row["extra_info"]["interaction_kwargs"] = {"name": "judge"}


def hub_cache_folder(ws: Path, paths: Paths) -> None:
    """{ws}/hub/models--org--tiny: the hub cache's layout (the model's files under snapshots/<revision>/)."""
    repo = ws / "hub" / "models--org--tiny"
    shutil.copytree(paths.model, repo / "snapshots" / "0123abcd")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")


def megatron_actor_dir(ws: Path, paths: Paths) -> None:
    """{ws}/global_step_10/actor: verl's Megatron checkpoint, the HF config and tokenizer in huggingface/."""
    actor = ws / "global_step_10" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    (actor / "metadata.json").write_text("{}")
    (actor / "__0_0.distcp").write_bytes(bytes(64))
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(paths.model / name, actor / "huggingface" / name)


def without_lm_head(ws: Path, paths: Paths) -> None:
    """{ws}/model: the tiny (untied) model's weights saved without lm_head.weight."""
    from safetensors.numpy import load_file, save_file

    model_copy()(ws, paths)
    weights = load_file(str(paths.model / "model.safetensors"))
    weights.pop("lm_head.weight")
    save_file(weights, str(ws / "model" / "model.safetensors"), metadata={"format": "pt"})


def eos_beyond_vocab(ws: Path, paths: Paths) -> None:
    model_copy(patch={"eos_token_id": 50000})(ws, paths)


PPO_GAE = ("dag=ppo", "algorithm.adv_estimator=gae")


CASES: tuple[Case, ...] = (
    # ---- the command line ----
    Case(
        "unknown_key",
        "a misspelt key: `trainer.totl_epochs=2`",
        ("trainer.totl_epochs=2",),
        ("trainer.totl_epochs", "did you mean 'trainer.total_epochs'"),
    ),
    Case(
        "plus_key_outside_free_maps",
        "`+trainer.new_key=1` (adding a key where none may be added)",
        ("+trainer.new_key=1",),
        ("trainer.new_key", "'+' adds keys only under"),
    ),
    Case(
        "free_map_key_without_plus",
        "`custom_reward_function.reward_kwargs.scale=2` without the `+`",
        ("custom_reward_function.reward_kwargs.scale=2",),
        ("+custom_reward_function.reward_kwargs.scale",),
    ),
    Case(
        "unparsable_override",
        "`data.train_batch_size=[` (not a value)",
        ("data.train_batch_size=[",),
        ("cannot parse the command line", "'['"),
    ),
    Case(
        "key_without_section_prefix",
        "`actor.optim.lr=1e-6` (the actor_rollout_ref. prefix left out)",
        ("actor.optim.lr=1e-6",),
        ("did you mean 'actor_rollout_ref.actor.optim.lr'?",),
    ),
    Case(
        "key_cut_short",
        "`reward_model.overlong_buffer.penalty=0.5`",
        ("reward_model.overlong_buffer.penalty=0.5",),
        ("did you mean 'reward_model.overlong_buffer.penalty_factor'?",),
    ),
    Case(
        "key_without_near_name",
        "`rollout.val_kwargs.greedy=true`",
        ("actor_rollout_ref.rollout.val_kwargs.greedy=true",),
        ("actor_rollout_ref.rollout.val_kwargs has: n, do_sample",),
    ),
    Case(
        "unknown_key_lists_its_section",
        "`dag.workflow_path=...` (no near key: the section's keys are listed)",
        ("dag.workflow_path={ws}/workflow.yaml",),
        ("unknown config key 'dag.workflow_path'", "dag has: custom_pipeline_fn, nodes"),
    ),
    Case(
        "transformer_override_unknown_field",
        "`+...override_transformer_config.recompute_everything=true` (not a TransformerConfig field)",
        (f"+{MEGATRON}.override_transformer_config.recompute_everything=true",),
        (
            "override_transformer_config.recompute_everything is not a field of megatron.core's TransformerConfig",
            "did you mean",
        ),
    ),
    # ---- what Hydra itself would refuse, in its own many lines ----
    Case(
        "override_without_equals",
        "`trainer.total_epochs` (no `=value`)",
        ("trainer.total_epochs",),
        ("'trainer.total_epochs'", "write trainer.total_epochs=<value>"),
    ),
    Case(
        "delete_required_section",
        "`~trainer` (deleting a section the code reads)",
        ("~trainer",),
        ("'~trainer'", "cannot be deleted", "trainer.<key>="),
    ),
    Case(
        "plus_on_existing_key",
        "`+trainer.nnodes=2` (`+` on a key that exists)",
        ("+trainer.nnodes=2",),
        ("'+trainer.nnodes=2'", "drop the '+': trainer.nnodes=2"),
    ),
    Case(
        "unknown_group_option",
        "`dag=nope` (no conf/dag/nope.yaml)",
        ("dag=nope",),
        ("'dag=nope'", "choose one of dapo, grpo, opd, ppo"),
    ),
    Case(
        "unknown_single_option_group",
        "`actor_rollout_ref=nope` (a section set as a whole)",
        ("actor_rollout_ref=nope",),
        ("'actor_rollout_ref=nope'", "actor_rollout_ref.<key>="),
    ),
    Case(
        "missing_interpolation",
        "`trainer.project_name=${trainer.experimnt_name}` (a misspelt key)",
        ("trainer.project_name=${{trainer.experimnt_name}}",),
        ("trainer.project_name=", "did you mean ${trainer.experiment_name}"),
    ),
    Case(
        "list_without_brackets",
        "`trainer.logger=console,tensorboard` (verl's list syntax: a sweep to Hydra)",
        ("trainer.logger=console,tensorboard",),
        ("trainer.logger='[console,tensorboard]'",),
    ),
    Case(
        "list_index_out_of_range",
        "`trainer.logger.2=jsonl` (the list has 2 items: 0..1)",
        ("trainer.logger.2=jsonl",),
        ("trainer.logger has 2 items", "trainer.logger=[...]"),
    ),
    Case(
        "path_list_without_brackets",
        "`data.train_files=a.parquet,b.parquet` (verl's list syntax for files)",
        ("data.train_files={train},{train}",),
        ("a list needs brackets", "data.train_files='["),
    ),
    # ---- types and ranges ----
    Case(
        "wrong_type_batch",
        "`data.train_batch_size=abc`",
        ("data.train_batch_size=abc",),
        ("data.train_batch_size", "positive integer"),
    ),
    Case(
        "wrong_type_epochs",
        "`trainer.total_epochs=two`",
        ("trainer.total_epochs=two",),
        ("trainer.total_epochs", "positive integer"),
    ),
    Case(
        "negative_total_steps",
        "`trainer.total_training_steps=-3`",
        ("trainer.total_training_steps=-3",),
        ("trainer.total_training_steps", "null", "positive integer"),
    ),
    Case(
        "zero_max_prompt_length",
        "`data.max_prompt_length=0`",
        ("data.max_prompt_length=0",),
        ("data.max_prompt_length", "positive integer"),
    ),
    Case(
        "negative_lr",
        "`actor_rollout_ref.actor.optim.lr=-1e-3`",
        ("actor_rollout_ref.actor.optim.lr=-1e-3",),
        ("actor_rollout_ref.actor.optim.lr", "must be > 0"),
    ),
    Case(
        "zero_temperature",
        "`actor_rollout_ref.rollout.temperature=0` (log-probs divide by it)",
        ("actor_rollout_ref.rollout.temperature=0",),
        ("actor_rollout_ref.rollout.temperature", "> 0"),
    ),
    Case(
        "greedy_training_groups",
        "`actor_rollout_ref.rollout.do_sample=false` with grpo (a group of identical responses: every advantage 0)",
        ("actor_rollout_ref.rollout.do_sample=false",),
        ("actor_rollout_ref.rollout.do_sample", "do_sample=true"),
    ),
    Case(
        "reward_name_without_path",
        "`custom_reward_function.name=my_score` with no path (the name would be ignored)",
        ("custom_reward_function.name=my_score",),
        ("custom_reward_function.name", "custom_reward_function.path"),
    ),
    Case(
        "dual_clip_below_one",
        "`actor_rollout_ref.actor.clip_ratio_c=0.5`",
        ("actor_rollout_ref.actor.clip_ratio_c=0.5",),
        ("actor_rollout_ref.actor.clip_ratio_c", "must be > 1"),
    ),
    Case(
        "zero_reward_timeout",
        "`reward_model.timeout_s=0`",
        ("reward_model.timeout_s=0",),
        ("reward_model.timeout_s", "> 0"),
    ),
    Case(
        "negative_skip_limit",
        "`trainer.max_consecutive_skips=-1`",
        ("trainer.max_consecutive_skips=-1",),
        ("trainer.max_consecutive_skips", ">= 0"),
    ),
    Case(
        "bad_logger",
        "`trainer.logger=[console,swanlab]`",
        ("trainer.logger=[console,swanlab]",),
        ("trainer.logger", "'swanlab'", "valid: console, tensorboard, jsonl, wandb, mlflow"),
    ),
    Case(
        "bad_choice",
        "`actor_rollout_ref.rollout.name=sglang`",
        ("actor_rollout_ref.rollout.name=sglang",),
        ("actor_rollout_ref.rollout.name", "is not one of"),
    ),
    Case(
        "alias_conflict",
        "`actor_rollout_ref.rollout.response_length=8` while data.max_response_length=6",
        ("actor_rollout_ref.rollout.response_length=8",),
        ("actor_rollout_ref.rollout.response_length", "set only data.max_response_length"),
    ),
    Case(
        "trainable_layers_out_of_range",
        "`actor_rollout_ref.model.trainable_top_layers=5` (the model has 2)",
        ("actor_rollout_ref.model.trainable_top_layers=5",),
        ("actor_rollout_ref.model.trainable_top_layers", "1..2"),
    ),
    Case(
        "lr_zero",
        "`optim.lr=0` (nothing would train)",
        ("actor_rollout_ref.actor.optim.lr=0",),
        ("actor_rollout_ref.actor.optim.lr=0 must be > 0", "nothing would train"),
    ),
    Case(
        "lr_above_one",
        "`actor_rollout_ref.actor.optim.lr=1e6` (the exponent's minus forgotten)",
        ("actor_rollout_ref.actor.optim.lr=1e6",),
        ("actor_rollout_ref.actor.optim.lr", "<= 1"),
    ),
    Case(
        "min_lr_above_lr",
        "`optim.min_lr=0.01` above `optim.lr=1e-3` with cosine decay (Megatron's scheduler "
        "asserted once the models were built)",
        ("actor_rollout_ref.actor.optim.lr_decay_style=cosine", "actor_rollout_ref.actor.optim.min_lr=0.01"),
        ("actor_rollout_ref.actor.optim.min_lr=0.01 is above actor_rollout_ref.actor.optim.lr=0.001", "min_lr <= lr"),
    ),
    Case(
        "min_lr_above_lr_constant",
        "`optim.min_lr` above `optim.lr` under the constant schedule",
        ("actor_rollout_ref.actor.optim.min_lr=0.05",),
        ("min_lr=0.05 is above actor_rollout_ref.actor.optim.lr", "set min_lr <= lr"),
    ),
    Case(
        "clip_ratio_as_percent",
        "`actor_rollout_ref.actor.clip_ratio=20` (a percentage: the lower clip bound 1 - 20 clips nothing)",
        ("actor_rollout_ref.actor.clip_ratio=20",),
        ("actor_rollout_ref.actor.clip_ratio=20", "[0, 1)"),
    ),
    Case(
        "clip_ratio_low_above_one",
        "`actor_rollout_ref.actor.clip_ratio_low=1.2`",
        ("actor_rollout_ref.actor.clip_ratio_low=1.2",),
        ("actor_rollout_ref.actor.clip_ratio_low=1.2", "[0, 1)"),
    ),
    Case(
        "temperature_negative",
        "`actor_rollout_ref.rollout.temperature=-1`",
        ("actor_rollout_ref.rollout.temperature=-1",),
        ("actor_rollout_ref.rollout.temperature=-1", "> 0"),
    ),
    Case(
        "val_temperature_negative",
        "`rollout.val_kwargs.temperature=-0.5`",
        ("actor_rollout_ref.rollout.val_kwargs.temperature=-0.5",),
        ("val_kwargs.temperature=-0.5", ">= 0"),
    ),
    Case(
        "response_length_zero",
        "`data.max_response_length=0`",
        ("data.max_response_length=0",),
        ("data.max_response_length=0", "positive integer"),
    ),
    Case(
        "max_model_len_too_small",
        "`rollout.max_model_len=16` below prompt + response (38)",
        ("actor_rollout_ref.rollout.max_model_len=16",),
        ("actor_rollout_ref.rollout.max_model_len=16", "= 38"),
    ),
    Case(
        "rollout_n_zero",
        "`actor_rollout_ref.rollout.n=0`",
        ("actor_rollout_ref.rollout.n=0",),
        ("actor_rollout_ref.rollout.n=0", "positive integer"),
    ),
    Case(
        "total_epochs_zero",
        "`trainer.total_epochs=0`",
        ("trainer.total_epochs=0",),
        ("trainer.total_epochs=0", "positive integer"),
    ),
    Case(
        "save_freq_zero",
        "`trainer.save_freq=0` (verl's habit for never)",
        ("trainer.save_freq=0",),
        ("trainer.save_freq=0", "-1 or an integer >= 1", "-1 = never"),
    ),
    Case(
        "test_freq_zero",
        "`trainer.test_freq=0`",
        ("trainer.test_freq=0",),
        ("trainer.test_freq=0", "-1 or an integer >= 1"),
    ),
    Case(
        "max_num_seqs_zero",
        "`rollout.max_num_seqs=0`",
        ("actor_rollout_ref.rollout.max_num_seqs=0",),
        ("actor_rollout_ref.rollout.max_num_seqs=0", "positive integer"),
    ),
    Case(
        "weight_bucket_zero",
        "`rollout.update_weights_bucket_megabytes=0`",
        ("actor_rollout_ref.rollout.update_weights_bucket_megabytes=0",),
        ("update_weights_bucket_megabytes=0", "positive integer"),
    ),
    Case(
        "startup_hang_timeout_negative",
        "`trainer.hang_startup_timeout_s=-5`",
        ("trainer.hang_startup_timeout_s=-5",),
        ("trainer.hang_startup_timeout_s=-5", "> 0"),
    ),
    # ---- batching, packing, checkpoints ----
    Case(
        "token_budget_too_small",
        "`actor.use_dynamic_bsz=true` with a budget below one prompt + response",
        ("actor_rollout_ref.actor.use_dynamic_bsz=true", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=4"),
        ("actor_rollout_ref.actor.ppo_max_token_len_per_gpu=4", "max_prompt_length + max_response_length"),
    ),
    Case(
        "cp_without_packing",
        "`context_parallel_size=2` without `model.use_remove_padding`",
        (f"{MEGATRON}.context_parallel_size=2",),
        ("actor_rollout_ref.model.use_remove_padding=true",),
    ),
    Case(
        "cp_in_fp32",
        "`context_parallel_size=2` with fp32 parameters (TE's THD attention has no fp32 kernel)",
        (
            f"{MEGATRON}.context_parallel_size=2",
            "actor_rollout_ref.model.use_remove_padding=true",
            f"{MEGATRON}.param_dtype=float32",
        ),
        (f"{MEGATRON}.param_dtype=bfloat16",),
    ),
    Case(
        "dist_checkpoint_missing",
        "`megatron.use_dist_checkpointing=true` with a path that does not exist",
        (f"{MEGATRON}.use_dist_checkpointing=true", f"{MEGATRON}.dist_checkpointing_path={{ws}}/no_ckpt"),
        (f"{MEGATRON}.dist_checkpointing_path", "no_ckpt"),
    ),
    Case(
        "save_contents_unknown",
        "`actor.checkpoint.save_contents=[model,weights]` (an unknown part)",
        ("actor_rollout_ref.actor.checkpoint.save_contents=[model,weights]",),
        ("actor_rollout_ref.actor.checkpoint.save_contents", "weights"),
    ),
    Case(
        "save_contents_without_model",
        "`checkpoint.save_contents=[optimizer,extra]`",
        ("actor_rollout_ref.actor.checkpoint.save_contents=[optimizer,extra]",),
        ("must include model",),
    ),
    Case(
        "load_contents_not_saved",
        "`checkpoint.load_contents=[model,optimizer]` with save_contents=[model] (the "
        "run's own checkpoints could not be resumed)",
        (
            "actor_rollout_ref.actor.checkpoint.save_contents=[model]",
            "actor_rollout_ref.actor.checkpoint.load_contents=[model,optimizer]",
        ),
        (
            "load_contents restores ['optimizer']",
            "add ['optimizer'] to actor_rollout_ref.actor.checkpoint.save_contents",
        ),
    ),
    # ---- the model ----
    Case(
        "model_dir_missing",
        "model directory does not exist",
        (f"{MODEL_KEY}={{ws}}/no_such_model",),
        (f"{MODEL_KEY}", "no_such_model", "does not exist"),
    ),
    Case(
        "model_config_missing",
        "model directory without config.json",
        (f"{MODEL_KEY}={{ws}}/model",),
        ("config.json", "must be an HF model directory"),
        make=model_copy(remove=("config.json",)),
    ),
    Case(
        "model_config_not_json",
        "config.json is not JSON",
        (f"{MODEL_KEY}={{ws}}/model",),
        ("config.json", "not valid JSON", MODEL_KEY),
        make=model_copy(config_text="{model_type: llama"),
    ),
    Case(
        "model_family_unsupported",
        "config.json says model_type gpt2",
        (f"{MODEL_KEY}={{ws}}/model",),
        ("'gpt2'", "supported: llama"),
        make=model_copy(patch={"model_type": "gpt2"}),
    ),
    Case(
        "model_feature_unsupported",
        "a llama with YaRN rope scaling",
        (f"{MODEL_KEY}={{ws}}/model",),
        ("<tmp>/model", "rope_type='yarn'"),
        make=model_copy(patch={"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 5000.0}}),
    ),
    Case(
        "tokenizer_missing",
        "model directory without tokenizer files",
        (f"{MODEL_KEY}={{ws}}/model",),
        (MODEL_KEY, "no tokenizer"),
        make=model_copy(remove=("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")),
    ),
    Case(
        "chat_template_missing",
        "a tokenizer without a chat template (a base model)",
        (f"{MODEL_KEY}={{ws}}/model",),
        (MODEL_KEY, "no chat template", "instruct"),
        make=model_copy(remove=("chat_template.jinja",)),
    ),
    Case(
        "model_config_is_list",
        "config.json holds a JSON list",
        (f"{MODEL_KEY}={{ws}}/model",),
        ("config.json holds a JSON list", MODEL_KEY),
        make=model_copy(config_text="[]"),
    ),
    Case(
        "model_config_without_type",
        "config.json without model_type",
        (f"{MODEL_KEY}={{ws}}/model",),
        ("config.json has no model_type", MODEL_KEY),
        make=model_copy(patch={"model_type": None}),
    ),
    Case(
        "model_heads_as_string",
        'config.json `num_attention_heads: "4"` (a string)',
        (f"{MODEL_KEY}={{ws}}/model",),
        ("<tmp>/model/config.json has num_attention_heads='4'", MODEL_KEY),
        make=model_copy(patch={"num_attention_heads": "4"}),
    ),
    Case(
        "model_hidden_size_missing",
        "config.json without hidden_size",
        (f"{MODEL_KEY}={{ws}}/model",),
        ("<tmp>/model/config.json has no hidden_size", MODEL_KEY),
        make=config_key_removed("hidden_size"),
    ),
    Case(
        "model_vocab_size_null",
        "config.json `vocab_size: null`",
        (f"{MODEL_KEY}={{ws}}/model",),
        ("<tmp>/model/config.json has vocab_size=None", MODEL_KEY),
        make=model_copy(patch={"vocab_size": None}),
    ),
    Case(
        "model_without_layers",
        "config.json `num_hidden_layers: 0`",
        (f"{MODEL_KEY}={{ws}}/model",),
        ("<tmp>/model/config.json has num_hidden_layers=0",),
        make=model_copy(patch={"num_hidden_layers": 0}),
    ),
    Case(
        "kv_heads_above_heads",
        "config.json num_key_value_heads=8 with 4 attention heads",
        (f"{MODEL_KEY}={{ws}}/model",),
        ("num_key_value_heads=8", "a multiple of the key/value heads"),
        make=model_copy(patch={"num_key_value_heads": 8}),
    ),
    Case(
        "config_hidden_size_not_weights",
        "config.json hidden_size=128 while the weights were saved at 64",
        (f"{MODEL_KEY}={{ws}}/model",),
        ("model.embed_tokens.weight of shape [400, 64]", "hidden_size=128"),
        make=model_copy(patch={"hidden_size": 128, "head_dim": 32}),
    ),
    Case(
        "config_vocab_not_weights",
        "config.json vocab_size=512 while the embedding has 400 rows",
        (f"{MODEL_KEY}={{ws}}/model",),
        ("needs [512, 64]", "vocab_size=512"),
        make=model_copy(patch={"vocab_size": 512}),
    ),
    Case(
        "config_layers_not_weights",
        "config.json num_hidden_layers=3 while the weights hold 2 layers",
        (f"{MODEL_KEY}={{ws}}/model",),
        ("weights of 2 decoder layers", "num_hidden_layers=3"),
        make=model_copy(patch={"num_hidden_layers": 3}),
    ),
    Case(
        "tokenizer_json_cut_short",
        "tokenizer.json cut short by an interrupted download",
        (f"{MODEL_KEY}={{ws}}/model",),
        ("<tmp>/model/tokenizer.json is not valid JSON", "re-download it"),
        make=model_file_text("tokenizer.json", None),
    ),
    Case(
        "generation_config_not_json",
        "generation_config.json is not JSON",
        (f"{MODEL_KEY}={{ws}}/model",),
        ("<tmp>/model/generation_config.json is not valid JSON",),
        make=model_file_text("generation_config.json", '{"do_sample": true,,}'),
    ),
    Case(
        "chat_template_syntax_error",
        "a chat template with an unclosed {% for %}",
        (f"{MODEL_KEY}={{ws}}/model",),
        ("<tmp>/model/chat_template.jinja has a Jinja syntax error", "line 1"),
        make=model_file_text("chat_template.jinja", "{% for m in messages %}{{ m['content'] }}"),
    ),
    # ---- model directories: what actor_rollout_ref.model.path names ----
    Case(
        "model_path_config_file",
        "actor_rollout_ref.model.path names the model's config.json",
        (f"{MODEL_KEY}={{model}}/config.json",),
        (MODEL_KEY, "is a file (config.json)", "e.g. <model>"),
    ),
    Case(
        "model_path_gguf_file",
        "actor_rollout_ref.model.path names a GGUF file",
        (f"{MODEL_KEY}={{ws}}/model.gguf",),
        (MODEL_KEY, "GGUF file", "HF model directory"),
        make=text_file("model.gguf", "GGUF"),
    ),
    Case(
        "model_dir_holds_gguf",
        "a model directory holding only a .gguf file",
        (f"{MODEL_KEY}={{ws}}/model",),
        ("<tmp>/model holds model-q4_k_m.gguf, a GGUF file", "save_pretrained"),
        make=gguf_only_dir,
    ),
    Case(
        "model_bin_weights_only",
        "a model directory with pytorch_model.bin and no safetensors",
        (f"{MODEL_KEY}={{ws}}/model",),
        ("no *.safetensors weights", "safe_serialization=True"),
        make=bin_weights_only,
    ),
    Case(
        "model_path_tokenizer_only",
        "actor_rollout_ref.model.path names a tokenizer-only directory",
        (f"{MODEL_KEY}={{ws}}/tok",),
        ("<tmp>/tok/config.json", "is missing", MODEL_KEY),
        make=tokenizer_only,
    ),
    Case(
        "model_path_hub_id",
        "`actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct` (a hub id, not downloaded)",
        (f"{MODEL_KEY}=Qwen/Qwen2.5-0.5B-Instruct",),
        ("Qwen/Qwen2.5-0.5B-Instruct", "does not exist", MODEL_KEY),
    ),
    Case(
        "model_path_hub_id_qwen3",
        "`model.path=Qwen/Qwen3-0.6B` (a hub id)",
        ("actor_rollout_ref.model.path=Qwen/Qwen3-0.6B",),
        ("looks like a Hugging Face hub id", "huggingface-cli download Qwen/Qwen3-0.6B"),
    ),
    Case(
        "model_path_trailing_space",
        "`model.path='<dir> '` (a space inside the quotes)",
        ("actor_rollout_ref.model.path='{model} '",),
        ("actor_rollout_ref.model.path", "has a trailing space"),
    ),
    # ---- parallel layout and batch sizes ----
    Case(
        "heads_not_divisible_by_tp",
        "TP=3 with 4 attention heads (3 processes)",
        (*world(3), f"{MEGATRON}.tensor_model_parallel_size=3"),
        (f"{MEGATRON}.tensor_model_parallel_size=3", "num_attention_heads=4", "pick a divisor"),
        env={"WORLD_SIZE": "3"},
    ),
    Case(
        "kv_heads_not_divisible_by_tp",
        "TP=4 with 2 KV heads (4 processes)",
        (*world(4), f"{MEGATRON}.tensor_model_parallel_size=4"),
        (f"{MEGATRON}.tensor_model_parallel_size=4", "num_key_value_heads=2"),
        env={"WORLD_SIZE": "4"},
    ),
    Case(
        "layers_not_divisible_by_pp_vpp",
        "PP=2 x VPP=2 with 2 layers",
        (*world(2), f"{MEGATRON}.pipeline_model_parallel_size=2", f"{MEGATRON}.virtual_pipeline_model_parallel_size=2"),
        ("pipeline_model_parallel_size=2 x virtual_pipeline_model_parallel_size=2", "num_hidden_layers=2"),
        env=WORLD,
    ),
    Case(
        "vpp_without_pp",
        "VPP=2 with PP=1",
        (f"{MEGATRON}.virtual_pipeline_model_parallel_size=2",),
        ("virtual_pipeline_model_parallel_size=2", "pipeline_model_parallel_size>1"),
    ),
    Case(
        "world_not_divisible_by_tp",
        "TP=2 on a 1-process launch",
        (f"{MEGATRON}.tensor_model_parallel_size=2",),
        (f"{MEGATRON}.tensor_model_parallel_size", "not divisible by 2"),
    ),
    Case(
        "world_not_divisible_by_pp",
        "PP=3 on a 1-process launch (the message names the key that was set)",
        (f"{MEGATRON}.pipeline_model_parallel_size=3",),
        ("(1 x 3 x 1): 1 is not divisible by 3", f"change {MEGATRON}.pipeline_model_parallel_size"),
    ),
    Case(
        "world_size_mismatch",
        "trainer.n_gpus_per_node=2 but one process started",
        world(2),
        ("trainer.n_gpus_per_node", "torchrun --nproc-per-node 2"),
    ),
    Case(
        "batch_not_divisible_by_dp",
        "train_batch_size=3 over 2 data-parallel ranks",
        (*world(2), "data.train_batch_size=3"),
        ("data.train_batch_size", "3 is not divisible by 2"),
        env=WORLD,
    ),
    Case(
        "batch_times_n_not_divisible_by_dp",
        "ppo_mini_batch_size x rollout.n = 1 over 2 data-parallel ranks",
        (
            *world(2),
            "actor_rollout_ref.rollout.n=1",
            "algorithm.adv_estimator=reinforce_plus_plus",
            "actor_rollout_ref.actor.ppo_mini_batch_size=1",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
        ),
        ("actor_rollout_ref.actor.ppo_mini_batch_size", "1 is not divisible by 2"),
        env=WORLD,
    ),
    Case(
        "mini_batch_not_dividing_batch",
        "ppo_mini_batch_size=3 with train_batch_size=4",
        ("actor_rollout_ref.actor.ppo_mini_batch_size=3",),
        ("actor_rollout_ref.actor.ppo_mini_batch_size", "not divisible by 3"),
    ),
    Case(
        "micro_batch_not_dividing",
        "ppo_micro_batch_size_per_gpu=3 with 4 responses per mini-batch",
        ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3",),
        ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "not divisible by 3"),
    ),
    Case(
        "batch_larger_than_data",
        "train_batch_size=64 with 32 training rows",
        ("data.train_batch_size=64", "actor_rollout_ref.actor.ppo_mini_batch_size=64"),
        ("data.train_batch_size=64", "32 training rows"),
    ),
    Case(
        "micro_larger_than_mini",
        "`ppo_micro_batch_size_per_gpu=8` with 4 responses per mini-batch",
        ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",),
        ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "4 is not divisible by 8"),
    ),
    Case(
        "mini_larger_than_batch",
        "`ppo_mini_batch_size=8` with train_batch_size=4",
        ("actor_rollout_ref.actor.ppo_mini_batch_size=8",),
        ("actor_rollout_ref.actor.ppo_mini_batch_size", "4 is not divisible by 8"),
    ),
    Case(
        "pp_more_than_layers",
        "PP=4 (4 processes) for a model with 2 layers",
        (*world(4), f"{MEGATRON}.pipeline_model_parallel_size=4"),
        (f"{MEGATRON}.pipeline_model_parallel_size=4", "num_hidden_layers=2"),
        env={"WORLD_SIZE": "4"},
    ),
    Case(
        "expert_parallel_on_dense_model",
        "`expert_model_parallel_size=2` for a model without experts",
        (*world(2), f"{MEGATRON}.expert_model_parallel_size=2"),
        (f"{MEGATRON}.expert_model_parallel_size=2", "no experts"),
        env=WORLD,
    ),
    Case(
        "expert_tp_zero",
        "`megatron.expert_tensor_parallel_size=0`",
        (f"{MEGATRON}.expert_tensor_parallel_size=0",),
        ("expert_tensor_parallel_size=0", "null or a positive integer"),
    ),
    Case(
        "rollout_tp_with_hf",
        "`actor_rollout_ref.rollout.tensor_model_parallel_size=2` with the hf rollout",
        ("actor_rollout_ref.rollout.tensor_model_parallel_size=2",),
        ("actor_rollout_ref.rollout.tensor_model_parallel_size=1", "rollout.name=vllm"),
    ),
    # ---- launchers and clusters (trainer.launcher, trainer.nnodes, the launch's processes) ----
    Case(
        "launcher_capitalised",
        "`trainer.launcher=Ray`",
        ("trainer.launcher=Ray",),
        ("trainer.launcher='Ray'", "local, ray"),
    ),
    Case("nnodes_fraction", "`trainer.nnodes=1.5`", ("trainer.nnodes=1.5",), ("trainer.nnodes=1.5",)),
    Case(
        "gpus_per_node_negative",
        "`trainer.n_gpus_per_node=-1`",
        ("trainer.n_gpus_per_node=-1",),
        ("trainer.n_gpus_per_node=-1",),
    ),
    Case(
        "world_larger_than_n_gpus",
        "a 2-process launch with trainer.n_gpus_per_node=1",
        (),
        ("this launch has 2 process(es)", "set trainer.n_gpus_per_node=2"),
        env=WORLD,
    ),
    Case(
        "world_size_exported_by_hand",
        "`export WORLD_SIZE=2` and one process started without torchrun",
        (*world(2), "trainer.default_local_dir={ws}/run"),
        ("WORLD_SIZE=2 is set but RANK, MASTER_ADDR, MASTER_PORT are not", "torchrun --nproc-per-node 2"),
        env=WORLD,
    ),
    Case(
        "nnodes_without_processes",
        "`trainer.nnodes=2` on a one-process launch",
        ("trainer.nnodes=2",),
        ("trainer.nnodes=2", "torchrun --nnodes 2", "set trainer.nnodes=1"),
    ),
    Case(
        "nnodes_two_on_one_node",
        "`trainer.nnodes=2 trainer.n_gpus_per_node=2` on a 2-process (one node) launch",
        ("trainer.nnodes=2", *world(2)),
        (
            "trainer.nnodes=2 x trainer.n_gpus_per_node=2 = 4",
            "2 process(es)",
            "set trainer.nnodes=1 or trainer.n_gpus_per_node=1",
        ),
        env=WORLD,
    ),
    Case(
        "local_world_not_gpus_per_node",
        "`trainer.nnodes=2` while the launch puts both processes on one node (LOCAL_WORLD_SIZE=2)",
        ("trainer.nnodes=2",),
        ("LOCAL_WORLD_SIZE=2 process(es) on each node", "set trainer.nnodes=1 trainer.n_gpus_per_node=2"),
        env={"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"},
    ),
    Case(
        "ray_address_with_local_launcher",
        "`trainer.ray_address=...` with trainer.launcher=local (ignored)",
        ("trainer.ray_address=127.0.0.1:6379",),
        ("trainer.ray_address is set", "set trainer.launcher=ray"),
    ),
    Case(
        "ray_two_nodes_without_cluster",
        "`trainer.launcher=ray trainer.nnodes=2` with no Ray cluster running",
        ("trainer.launcher=ray", "trainer.nnodes=2", "trainer.default_local_dir={ws}/run"),
        ("trainer.nnodes=2", "needs a running Ray cluster", "ray start --head"),
    ),
    # ---- environment variables ----
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
    # ---- data files ----
    Case(
        "parquet_missing",
        "data.train_files names no file",
        ("data.train_files={ws}/missing.parquet",),
        ("<tmp>/missing.parquet", "does not exist", "data.train_files"),
    ),
    Case(
        "parquet_corrupt",
        "a data file that is not parquet",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet", "not a readable parquet file", "regenerate"),
        make=parquet("corrupt"),
    ),
    Case(
        "parquet_empty",
        "a data file with no rows",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet", "no rows"),
        make=parquet("empty"),
    ),
    Case(
        "parquet_missing_column",
        "a data file without the reward_model column",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet", "'reward_model'", "regenerate"),
        make=parquet("no_column"),
    ),
    Case(
        "parquet_is_directory",
        "data.train_files names a directory",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet", "is a directory"),
        make=parquet("dir"),
    ),
    Case(
        "val_parquet_missing",
        "data.val_files names no file",
        ("data.val_files={ws}/missing_val.parquet",),
        ("<tmp>/missing_val.parquet", "data.val_files"),
    ),
    Case(
        "prompt_key_wrong",
        "`data.prompt_key=question` (no such column)",
        ("data.prompt_key=question",),
        ("'question'", "set data.prompt_key"),
    ),
    Case(
        "prompt_key_empty",
        "`data.prompt_key=` (empty)",
        ("data.prompt_key=",),
        ("lacks the required column ''", "set data.prompt_key"),
    ),
    Case(
        "prompt_column_renamed",
        "the prompt column is called `messages`",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet", "'messages'", "set data.prompt_key"),
        make=rows_changed(lambda rows: [row.update(messages=row.pop("prompt")) for row in rows]),
    ),
    Case(
        "val_file_without_data_source",
        "a validation file without the data_source column",
        ("data.val_files={ws}/val.parquet",),
        ("<tmp>/val.parquet' lacks the required column 'data_source'",),
        make=val_without_column("data_source"),
    ),
    Case(
        "val_files_directory",
        "data.val_files names a directory",
        ("data.val_files={ws}/val",),
        ("<tmp>/val", "is a directory"),
        make=lambda ws, paths: (ws / "val").mkdir(),
    ),
    Case(
        "train_file_zero_bytes",
        "data.train_files names an empty (0-byte) file",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet", "0 bytes"),
        make=text_file("bad.parquet", ""),
    ),
    Case(
        "train_file_broken_symlink",
        "data.train_files is a symlink to a file that is gone",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet' is a broken symlink", "<tmp>/gone.parquet"),
        make=symlink("bad.parquet", "gone.parquet"),
    ),
    Case(
        "train_file_feather",
        "a Feather/Arrow IPC file named .parquet",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet' is not a readable parquet file",),
        make=feather_named_parquet,
    ),
    Case(
        "duplicate_prompt_column",
        "a data file with the prompt column twice",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet", "column name(s) twice ('prompt')", "write each column once"),
        make=duplicate_prompt_column,
    ),
    Case(
        "train_file_json",
        "data.train_files names a JSON file",
        ("data.train_files={ws}/train.json",),
        ("<tmp>/train.json", "parquet files only", "read_json"),
        make=json_rows("train.json"),
    ),
    Case(
        "train_files_mixing_parquet_and_jsonl",
        "`data.train_files=[train.parquet,train.jsonl]`",
        ("data.train_files=[{train},{ws}/train.jsonl]",),
        ("<tmp>/train.jsonl", "lines=True"),
        make=json_rows("train.jsonl"),
    ),
    Case(
        "train_file_csv",
        "data.train_files names a CSV file",
        ("data.train_files={ws}/train.csv",),
        ("<tmp>/train.csv", "parquet files only", "read_csv"),
        make=text_file("train.csv", "data_source,prompt\n"),
    ),
    Case(
        "train_file_lists_files",
        "data.train_files names a .txt listing the parquet files",
        ("data.train_files={ws}/files.txt",),
        ("<tmp>/files.txt' is a text file listing data files", "data.train_files='["),
        make=file_list_txt,
    ),
    # ---- rows of a data file: prompts, messages, data_source, ground truth ----
    Case(
        "prompt_role_human",
        "prompts whose messages have role `human` (a ShareGPT name under the role key)",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet", "row 0", "role 'human'", "human -> user"),
        make=rows_changed(_roles_renamed),
    ),
    Case(
        "prompt_json_encoded",
        "the prompt column holds json.dumps of the chat list (a string)",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet", "row 0", "JSON string of a chat list", "json.loads"),
        make=rows_changed(_prompts_json_encoded),
    ),
    Case(
        "prompt_list_of_strings",
        "prompts as lists of strings, not messages",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet' row 0", "(str)"),
        make=rows_changed(_messages(lambda m: m["content"])),
    ),
    Case(
        "message_without_content",
        "chat messages with a role and no content",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet' row 0", "without role and content"),
        make=rows_changed(_messages(lambda m: {"role": m["role"]})),
    ),
    Case(
        "prompt_content_null",
        "a training row whose message content is null",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet", "row 4", "content is NoneType"),
        make=rows_changed(_set(4, "prompt", [{"role": "user", "content": None}])),
    ),
    Case(
        "content_as_parts",
        "OpenAI content parts ([{type: text, text: ...}]) as message content",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet' row 0", "content is list, not a string"),
        make=rows_changed(
            _messages(lambda m: {"role": m["role"], "content": [{"type": "text", "text": m["content"]}]})
        ),
    ),
    Case(
        "content_bytes",
        "message content stored as bytes (not UTF-8 text)",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet' row 0", "content is bytes"),
        make=content_as_bytes,
    ),
    Case(
        "content_empty_string",
        "a row whose only message has empty content",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet' row 3", "only empty messages"),
        make=rows_changed(_set(3, "prompt", [{"role": "user", "content": ""}])),
    ),
    Case(
        "prompt_only_system",
        "a row whose prompt has only a system message",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet' row 5", "no user message (only system)"),
        make=rows_changed(_set(5, "prompt", [{"role": "system", "content": "You are a helpful assistant."}])),
    ),
    Case(
        "prompt_ends_with_the_answer",
        "SFT conversations as prompts: each ends with the assistant's answer",
        ("data.train_files={ws}/bad.parquet",),
        ("row 0", "ends with an assistant message"),
        make=rows_changed(_ends_with_the_answer),
    ),
    Case(
        "data_source_integer",
        "data_source written as an integer",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet' has data_source 7",),
        make=rows_changed(_set(None, "data_source", 7)),
    ),
    Case(
        "reward_model_not_a_struct",
        "a data file whose reward_model column holds plain strings (the answer)",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet", "not a struct", "ground_truth"),
        make=rows_changed(_set(None, "reward_model", "7")),
    ),
    Case(
        "ground_truth_list",
        "reward_model.ground_truth as a list of answers with the built-in scorers (every response would score 0)",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet", "ground_truth of type list<element: string>", "ground_truth[0]"),
        make=rows_changed(
            lambda rows: [
                row.update(reward_model={"style": "rule", "ground_truth": [row["reward_model"]["ground_truth"]]})
                for row in rows
            ]
        ),
    ),
    Case(
        "ground_truth_not_a_number",
        "ground_truth written as a word ('seven') for the arithmetic scorer (every "
        "response scored 0, the run exited 0)",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet' row 0 has reward_model.ground_truth 'seven'", "needs an integer"),
        make=rows_changed(_set(None, "reward_model.ground_truth", "seven")),
    ),
    # ---- custom reward ----
    Case(
        "reward_file_missing",
        "custom_reward_function.path names no file",
        ("custom_reward_function.path={ws}/no_reward.py",),
        ("<tmp>/no_reward.py", "custom_reward_function.path"),
    ),
    Case(
        "reward_function_missing",
        "the reward file has no compute_score",
        ("custom_reward_function.path={ws}/reward.py",),
        ("<tmp>/reward.py", "no function 'compute_score'", "['score']", "custom_reward_function.name"),
        make=text_file("reward.py", REWARD_OTHER_NAME),
    ),
    Case(
        "reward_file_broken",
        "the reward file fails to import",
        ("custom_reward_function.path={ws}/reward.py",),
        ("<tmp>/reward.py", "failed to import", "ModuleNotFoundError"),
        make=text_file("reward.py", "import no_such_module_for_dagrl\n"),
    ),
    Case(
        "reward_file_not_python",
        "custom_reward_function.path is not a .py file",
        ("custom_reward_function.path={ws}/reward.txt",),
        ("<tmp>/reward.txt", "not a .py file"),
        make=text_file("reward.txt", REWARD_RAISES),
    ),
    Case(
        "reward_path_directory",
        "custom_reward_function.path names a directory",
        ("custom_reward_function.path={ws}",),
        ("custom_reward_function.path=<tmp>", "is a directory", ".py file"),
    ),
    Case(
        "reward_path_as_module",
        "`custom_reward_function.path=my_reward.math_reward` (a module name)",
        ("custom_reward_function.path=my_reward.math_reward",),
        ("'my_reward.math_reward'", "give the file: my_reward/math_reward.py"),
        make=reward_package,
    ),
    Case(
        "reward_file_syntax_error",
        "the reward file has a syntax error",
        ("custom_reward_function.path={ws}/reward.py",),
        ("<tmp>/reward.py", "SyntaxError"),
        make=text_file("reward.py", "def compute_score(data_source, solution_str, ground_truth)\n    return 0\n"),
    ),
    Case(
        "reward_indentation_error",
        "the reward file mixes indentation",
        ("custom_reward_function.path={ws}/reward.py",),
        ("IndentationError",),
        make=text_file("reward.py", f"def compute_score{SIG}:\n  x = 1\n    return 0.0\n"),
    ),
    Case(
        "reward_argparse_at_import",
        "the reward file parses arguments at import (argparse exits)",
        ("custom_reward_function.path={ws}/reward.py",),
        ("<tmp>/reward.py' called sys.exit(2) while being imported", "required: --answers", "__main__"),
        make=text_file(
            "reward.py",
            "import argparse\nparser = argparse.ArgumentParser()\nparser.add_argument("
            "'--answers', required=True)\nargs = parser.parse_args()\n",
        ),
    ),
    Case(
        "reward_reads_missing_file",
        "the reward file opens answers.json at import",
        ("custom_reward_function.path={ws}/reward.py",),
        ("<tmp>/reward.py' failed to import", "answers.json"),
        make=text_file("reward.py", "import json\nANSWERS = json.load(open('answers.json'))\n"),
    ),
    Case(
        "reward_not_callable",
        "`compute_score = 1.0` in the reward file",
        ("custom_reward_function.path={ws}/reward.py",),
        ("<tmp>/reward.py", "is a float, not a function"),
        make=text_file("reward.py", "compute_score = 1.0\n"),
    ),
    Case(
        "reward_is_a_class",
        "compute_score is a class",
        ("custom_reward_function.path={ws}/reward.py",),
        ("<tmp>/reward.py' is a class",),
        make=text_file("reward.py", "class compute_score:\n    def __init__(self, *args, **kwargs):\n        pass\n"),
    ),
    Case(
        "reward_async_def",
        "the reward function is `async def` (a coroutine is no score)",
        ("custom_reward_function.path={ws}/reward.py",),
        ("<tmp>/reward.py' is an async def", "a plain def"),
        make=text_file("reward.py", f"async def compute_score{SIG}:\n    return 0.0\n"),
    ),
    Case(
        "reward_generator",
        "compute_score yields its score",
        ("custom_reward_function.path={ws}/reward.py",),
        ("<tmp>/reward.py' is a generator function", "return, not yield"),
        make=text_file("reward.py", f"def compute_score{SIG}:\n    yield 1.0\n"),
    ),
    Case(
        "reward_keyword_only_argument",
        "compute_score needs a keyword-only `tokenizer`",
        ("custom_reward_function.path={ws}/reward.py",),
        ("*, tokenizer)", "cannot take the trainer's call"),
        make=text_file(
            "reward.py",
            "def compute_score(data_source, solution_str, ground_truth, extra_info=None, "
            "*, tokenizer):\n    return 0.0\n",
        ),
    ),
    Case(
        "reward_name_with_parentheses",
        "`custom_reward_function.name=compute_score()`",
        ("custom_reward_function.path={ws}/reward.py", "custom_reward_function.name=compute_score()"),
        ("custom_reward_function.name=compute_score()", "quote the value"),
        make=text_file("reward.py", REWARD_NO_KWARGS),
    ),
    Case(
        "reward_kwargs_to_builtin_scorer",
        "`+custom_reward_function.reward_kwargs.scale=2` with the built-in "
        "arithmetic scorer (a TypeError on every sample)",
        ("+custom_reward_function.reward_kwargs.scale=2",),
        ("custom_reward_function.reward_kwargs has scale", "arithmetic.compute_score(solution_str, ground_truth)"),
    ),
    # ---- the reward manager (reward_model.*) and the overlong buffer ----
    Case(
        "reward_on_error_ignore",
        "`reward_model.on_error=ignore`",
        ("reward_model.on_error=ignore",),
        ("reward_model.on_error='ignore'", "zero, raise"),
    ),
    Case(
        "overlong_buffer_with_naive_manager",
        "`reward_model.overlong_buffer.enable=true` with the naive reward "
        "manager (the penalty would silently not apply)",
        ("reward_model.overlong_buffer.enable=true", "reward_model.overlong_buffer.len=4"),
        ("reward_model.overlong_buffer.enable=true", "reward_manager=naive", "reward_model.reward_manager=dapo"),
    ),
    Case(
        "overlong_buffer_longer_than_response",
        "`overlong_buffer.len=10` with data.max_response_length=6",
        (
            "reward_model.reward_manager=dapo",
            "reward_model.overlong_buffer.enable=true",
            "reward_model.overlong_buffer.len=10",
        ),
        ("reward_model.overlong_buffer.len=10", "1..5"),
    ),
    Case(
        "overlong_buffer_len_negative",
        "`overlong_buffer.len=-4` (dapo manager)",
        (
            "reward_model.reward_manager=dapo",
            "reward_model.overlong_buffer.enable=true",
            "reward_model.overlong_buffer.len=-4",
        ),
        ("reward_model.overlong_buffer.len=-4", ">= 0"),
    ),
    Case(
        "async_reward_with_dynamic_sampling",
        "`reward_model.launch_reward_fn_async=true` with dag=dapo's filter",
        ("dag=dapo", "reward_model.launch_reward_fn_async=true"),
        (
            "reward_model.launch_reward_fn_async=true scores behind the reshard node",
            "filter_groups.enable=true) filters on the scores before it",
        ),
    ),
    Case(
        "async_reward_without_a_waiter",
        "`reward_model.launch_reward_fn_async=true` with the KL-in-reward node no longer depending on `score`",
        ("reward_model.launch_reward_fn_async=true", "dag.nodes.reward.deps=[ref_log_prob]"),
        (
            "reward_model.launch_reward_fn_async=true scores in the background behind the reshard node",
            "no node after it depends on 'score' to wait for the scores",
            "set reward_model.launch_reward_fn_async=false",
        ),
    ),
    Case(
        "async_reward_without_a_reshard",
        "`reward_model.launch_reward_fn_async=true` on a graph without the reshard node (one process)",
        (
            "reward_model.launch_reward_fn_async=true",
            "dag.nodes.to_actor_layout=null",
            "dag.nodes.old_log_prob.deps=[score]",
        ),
        (
            "reward_model.launch_reward_fn_async=true scores in the background behind the reshard node",
            "the graph has no reshard node (dagrl.nodes.layout:to_actor_layout) to score behind",
            "set reward_model.launch_reward_fn_async=false",
        ),
    ),
    # ---- user modules ----
    Case(
        "plugin_file_name",
        "`trainer.plugins=[my_algos.py]` (a file name for a module)",
        ("trainer.plugins=[my_algos.py]",),
        ("trainer.plugins: 'my_algos.py' is not a module name", "trainer.plugins=[my_algos]"),
    ),
    Case(
        "plugin_missing",
        "`trainer.plugins=[no_such_plugin]`",
        ("trainer.plugins=[no_such_plugin]",),
        ("importing 'no_such_plugin' failed (ModuleNotFoundError", "PYTHONPATH"),
    ),
    # ---- the graph ----
    Case(
        "pipeline_fn_missing",
        "`dag.custom_pipeline_fn=no_such_pkg.graphs:build`",
        ("dag.custom_pipeline_fn=no_such_pkg.graphs:build",),
        ("dag.custom_pipeline_fn", "cannot import module"),
    ),
    Case(
        "builtin_node_fn_misspelt",
        "`dag.nodes.score.fn=dagrl.nodes.rollout:no_such_fn` (found in pre-flight, without importing the module)",
        ("dag.nodes.score.fn=dagrl.nodes.rollout:no_such_fn",),
        ("dag.nodes[score].fn", "has no function 'no_such_fn'", "generate"),
    ),
    Case(
        "dag_fn_with_dot",
        "`dag.nodes.old_log_prob.fn=dagrl.nodes.log_prob.old_log_prob` (a dot for the colon)",
        ("dag.nodes.old_log_prob.fn=dagrl.nodes.log_prob.old_log_prob",),
        ("dag.nodes[old_log_prob].fn", "must look like 'package.module:function'"),
    ),
    Case(
        "dag_dep_misspelt",
        "`dag.nodes.score.deps=[rolout]`",
        ("dag.nodes.score.deps=[rolout]",),
        ("depends on unknown node 'rolout'", "known: weight_sync, rollout"),
    ),
    Case(
        "dag_rollout_without_weight_sync",
        "`dag.nodes.weight_sync=null dag.nodes.rollout.deps=[]` (a graph whose rollout node has no weight sync)",
        ("dag.nodes.weight_sync=null", "dag.nodes.rollout.deps=[]"),
        (
            "dag.nodes: node 'rollout' (role rollout) has no node with role weight_sync before it",
            "add weight_sync: {role: weight_sync, fn: dagrl.nodes.rollout:weight_sync, deps: []}",
            "make 'rollout' depend on it",
        ),
    ),
    Case(
        "dag_deps_as_string",
        "`dag.nodes.old_log_prob.deps=rollout`",
        ("dag.nodes.old_log_prob.deps=rollout",),
        ("has deps='rollout', not a list of node ids", "[rollout]"),
    ),
    Case(
        "dag_role_unknown",
        "`dag.nodes.rollout.role=generator`",
        ("dag.nodes.rollout.role=generator",),
        ("role 'generator'", "valid roles"),
    ),
    Case(
        "dag_node_id_field",
        "`+dag.nodes.score.id=rollout` (a node's id is its key in the map)",
        ("+dag.nodes.score.id=rollout",),
        ("unknown config key 'dag.nodes.score.id'", "dag.nodes.score has: role"),
    ),
    Case(
        "dag_cycle",
        "`dag.nodes.score.deps=[actor_update]` (a cycle)",
        ("dag.nodes.score.deps=[actor_update]",),
        ("the graph has a cycle",),
    ),
    Case(
        "dag_node_as_string",
        "`dag.nodes.score=rollout`",
        ("dag.nodes.score=rollout",),
        ("dag.nodes[2] must be a mapping", "got 'rollout'"),
    ),
    Case("dag_nodes_empty", "`dag.nodes=[]`", ("dag.nodes=[]",), ("dag.nodes is a section", "dag.nodes.weight_sync=")),
    Case(
        "pipeline_fn_with_dot",
        "`dag.custom_pipeline_fn=my_graphs.build`",
        ("dag.custom_pipeline_fn=my_graphs.build",),
        ("dag.custom_pipeline_fn='my_graphs.build' must look like 'package.module:function'",),
    ),
    Case(
        "pipeline_fn_not_a_function",
        "`dag.custom_pipeline_fn` naming a dict",
        ("dag.custom_pipeline_fn=dagrl.config.schema.spec:NOUNS",),
        ("NOUNS", "is a dict, not a function"),
    ),
    Case(
        "pipeline_fn_returns_empty",
        "`dag.custom_pipeline_fn=builtins:list` (returns [])",
        ("dag.custom_pipeline_fn=builtins:list",),
        ("dag.custom_pipeline_fn is empty",),
    ),
    # ---- user code that does not fit the trainer's call ----
    Case(
        "node_fn_wrong_signature",
        "a node function `def node(batch)` in dag.nodes (the trainer calls fn(ctx, batch))",
        (f"dag.nodes.score.fn={USER_CODE}:node_without_ctx",),
        ("dag.nodes[score].fn", "node_without_ctx(batch)", "fn(ctx, batch)", "def fn(ctx, batch)"),
    ),
    Case(
        "pipeline_fn_needs_arguments",
        "a custom_pipeline_fn that takes an argument (the trainer calls it with none)",
        (f"dag.custom_pipeline_fn={USER_CODE}:pipeline_with_args",),
        ("dag.custom_pipeline_fn", "pipeline_with_args(model_size)", "no arguments", "list of node dicts"),
    ),
    Case(
        "pipeline_fn_exits",
        "a custom_pipeline_fn that calls `sys.exit(0)` (would end the run with exit 0)",
        (f"dag.custom_pipeline_fn={USER_CODE}:pipeline_that_exits",),
        ("dag.custom_pipeline_fn", "pipeline_that_exits", "sys.exit(0)", "not exit"),
    ),
    Case(
        "pipeline_fn_returns_none",
        "a custom_pipeline_fn that forgets its `return`",
        (f"dag.custom_pipeline_fn={USER_CODE}:pipeline_returning_none",),
        ("dag.custom_pipeline_fn", "pipeline_returning_none", "returned NoneType", "return one of them"),
    ),
    Case(
        "tool_execute_wrong_arity",
        "a tool class whose `execute(self, instance_id)` lacks the parameters argument",
        (MULTI_TURN, "actor_rollout_ref.rollout.multi_turn.tool_config_path={ws}/tools.yaml"),
        (
            "tools.yaml",
            "tools[0]",
            "ToolWithoutParameters.execute(instance_id)",
            "execute(instance_id, parameters)",
            "**kwargs",
        ),
        make=text_file("tools.yaml", TOOL_WRONG_ARITY),
    ),
    Case(
        "interaction_wrong_arity",
        "an interaction class whose `generate_response(self, instance_id)` lacks the messages argument",
        (MULTI_TURN, "actor_rollout_ref.rollout.multi_turn.interaction_config_path={ws}/interactions.yaml"),
        ("interactions.yaml", "interaction[0]", "generate_response(instance_id, messages)", "BaseInteraction"),
        make=text_file("interactions.yaml", INTERACTION_WRONG_ARITY),
    ),
    Case(
        "chat_template_raises_on_a_later_row",
        "a chat template that raises only on training row 20 (row 0 renders)",
        (f"{MODEL_KEY}={{ws}}/model", "data.train_files={ws}/bad.parquet"),
        ("chat template", "row 20 of '<tmp>/bad.parquet'", "refuses the word forbidden", "fix the template"),
        make=template_and_rows(
            TEMPLATE_RAISES_ON_A_WORD, _set(20, "prompt", [{"role": "user", "content": "A forbidden sum: 3 + 4?"}])
        ),
        found=STARTUP,
    ),
    # ---- checkpoints ----
    Case(
        "checkpoint_dir_not_writable",
        "trainer.default_local_dir on a read-only file system (/proc/sys)",
        ("trainer.default_local_dir=/proc/sys/dagrl_checkpoints",),
        ("trainer.default_local_dir", "/proc/sys/dagrl_checkpoints", "not writable"),
    ),
    Case(
        "checkpoint_dir_under_a_file",
        "trainer.default_local_dir inside a regular file",
        ("trainer.default_local_dir={ws}/a_file/checkpoints",),
        ("trainer.default_local_dir", "<tmp>/a_file", "not a directory"),
        make=text_file("a_file", ""),
    ),
    Case(
        "resume_path_partial",
        "resume_from_path is a partial checkpoint (killed save)",
        ("trainer.resume_mode=resume_path", "trainer.resume_from_path={ckpt}/.tmp_global_step_3"),
        ("trainer.resume_from_path", ".tmp_global_step_3", "not a complete dagrl checkpoint"),
    ),
    Case(
        "resume_path_missing",
        "resume_from_path names no directory",
        ("trainer.resume_mode=resume_path", "trainer.resume_from_path={ckpt}/global_step_9"),
        ("trainer.resume_from_path", "global_step_9", "no such directory"),
    ),
    Case(
        "resume_path_unset",
        "resume_mode=resume_path without resume_from_path",
        ("trainer.resume_mode=resume_path",),
        ("trainer.resume_from_path", "global_step_N"),
    ),
    Case(
        "resume_path_without_mode",
        "resume_from_path set while resume_mode=auto",
        ("trainer.resume_from_path={ckpt}/global_step_2",),
        ("trainer.resume_from_path", "resume_mode=resume_path"),
    ),
    Case(
        "resume_disabled_over_checkpoints",
        "resume_mode=disable on a directory that holds checkpoints",
        ("trainer.resume_mode=disable",),
        ("trainer.resume_mode=disable", "global_step_2", "resume_mode=auto"),
    ),
    Case(
        "foreign_step_dir",
        "a `global_step_1/` that dagrl did not write (another trainer's, a user's) in trainer.default_local_dir",
        ("trainer.default_local_dir={ws}/other",),
        ("trainer.default_local_dir", "global_step_1", "not written by dagrl", "move it away"),
        make=step_dir("global_step_1", complete=False),
    ),
    Case(
        "foreign_tmp_dir",
        "a `.tmp_global_step_1/` without dagrl's partial-save marker",
        ("trainer.default_local_dir={ws}/other", "trainer.resume_mode=disable"),
        ("trainer.default_local_dir", ".tmp_global_step_1", "not written by dagrl"),
        make=step_dir(".tmp_global_step_1", complete=False),
    ),
    Case(
        "resume_older_over_newer",
        "resume_from_path=global_step_1 of a branch while default_local_dir holds global_step_2",
        ("trainer.resume_mode=resume_path", "trainer.resume_from_path={ws}/other/global_step_1"),
        ("trainer.resume_from_path", "global_step_1", "global_step_2", "new directory"),
        make=step_dir("global_step_1", complete=True),
    ),
    Case(
        "empty_checkpoint_dir",
        "`trainer.default_local_dir=` (empty: would write into the current directory)",
        ("trainer.default_local_dir=",),
        ("trainer.default_local_dir", "current directory"),
    ),
    Case(
        "checkpoint_dir_is_a_file",
        "trainer.default_local_dir names an existing file",
        ("trainer.default_local_dir={ws}/a_file",),
        ("<tmp>/a_file is not a directory", "trainer.default_local_dir"),
        make=text_file("a_file", "x"),
    ),
    Case(
        "checkpoint_dir_is_the_model",
        "`trainer.default_local_dir` = the HF model directory (swapped paths)",
        ("trainer.default_local_dir={ws}/model",),
        ("holds config.json", "a model directory", "actor_rollout_ref.model.path"),
        make=model_copy(),
    ),
    Case(
        "checkpoint_dir_is_the_data_dir",
        "`trainer.default_local_dir` = the directory of train.parquet",
        ("trainer.default_local_dir={ws}/data",),
        ("holds train.parquet", "a data directory"),
        make=_data_dir,
    ),
    Case(
        "checkpoint_dir_symlink_loop",
        "trainer.default_local_dir is a symlink to itself",
        ("trainer.default_local_dir={ws}/loop",),
        ("<tmp>/loop is a symlink that leads nowhere (a loop)", "trainer.default_local_dir"),
        make=symlink_loop("loop"),
    ),
    Case(
        "resume_path_is_the_root",
        "resume_from_path names trainer.default_local_dir, not a global_step_N in it",
        ("trainer.resume_mode=resume_path", "trainer.resume_from_path={ckpt}"),
        ("trainer.resume_from_path", "global_step_N"),
    ),
    Case(
        "resume_path_actor_subdir",
        "resume_from_path names global_step_2/actor, not global_step_2",
        ("trainer.resume_mode=resume_path", "trainer.resume_from_path={ckpt}/global_step_2/actor"),
        ("trainer.resume_from_path", "global_step_2/actor", "point it at a global_step_N"),
    ),
    Case(
        "resume_path_relative",
        "`resume_from_path=global_step_2` (relative to the current directory)",
        ("trainer.resume_mode=resume_path", "trainer.resume_from_path=global_step_2"),
        ("trainer.resume_from_path=global_step_2: no such directory", "a relative path", "<tmp>/ckpt/global_step_N"),
    ),
    Case(
        "resume_path_none_string",
        "`resume_from_path=None` (Python's spelling: a string)",
        ("trainer.resume_mode=resume_path", "trainer.resume_from_path=None"),
        ("trainer.resume_from_path=None", "null is written trainer.resume_from_path=null"),
    ),
    Case(
        "resume_disabled_with_path",
        "`resume_mode=disable` with a resume_from_path",
        ("trainer.resume_mode=disable", "trainer.resume_from_path={ckpt}/global_step_2"),
        ("trainer.resume_from_path is set but trainer.resume_mode=disable",),
    ),
    Case(
        "checkpoint_marker_cut",
        "a complete checkpoint's dagrl_checkpoint.json cut short",
        (),
        ("<tmp>/ckpt/global_step_2 in trainer.default_local_dir is damaged", "not the JSON"),
        make=in_checkpoints(_marker_cut),
    ),
    Case(
        "checkpoint_marker_other_step",
        "global_step_6 whose marker records step 3 (a copied directory)",
        (),
        ("<tmp>/ckpt/global_step_6", "records global_step 3"),
        make=in_checkpoints(_marker_other_step),
    ),
    Case(
        "checkpoint_without_actor",
        "a global_step_4 with dagrl's marker and no actor/",
        (),
        ("<tmp>/ckpt/global_step_4", "no actor/ directory", "move it out"),
        make=in_checkpoints(_marker_without_actor),
    ),
    Case(
        "checkpoint_actor_without_metadata",
        "the newest checkpoint's actor/ has no metadata.json (megatron was imported to find it)",
        (),
        ("<tmp>/ckpt/global_step_4/actor is not a Megatron dist checkpoint", "move it out of <tmp>/ckpt"),
        make=in_checkpoints(_actor_without_metadata),
    ),
    Case(
        "checkpoint_without_data_pt",
        "a complete checkpoint whose data.pt was deleted",
        (),
        ("<tmp>/ckpt/global_step_2 in trainer.default_local_dir is damaged: it has no data.pt",),
        make=in_checkpoints(lambda root: (root / "global_step_2" / "data.pt").unlink()),
    ),
    Case(
        "checkpoint_name_is_a_file",
        "a regular file named global_step_5 in trainer.default_local_dir",
        (),
        ("holds global_step_5, not written by dagrl",),
        make=in_checkpoints(lambda root: (root / "global_step_5").write_text("x")),
    ),
    Case(
        "tracker_names_a_missing_step",
        "latest_checkpointed_iteration.txt says 7, no global_step_7",
        ("trainer.default_local_dir={ws}/run",),
        ("names step 7", "remove the tracker file"),
        make=_tracker_only,
    ),
    Case(
        "tracker_holds_text",
        "latest_checkpointed_iteration.txt holds `global_step_2`",
        ("trainer.default_local_dir={ws}/run",),
        ("holds 'global_step_2', not a step number", "write the step number", "remove the file"),
        make=_tracker_text,
    ),
    Case(
        "tracker_is_a_directory",
        "latest_checkpointed_iteration.txt is a directory (the first save would fail after its step trained)",
        (),
        ("latest_checkpointed_iteration.txt in trainer.default_local_dir is not a file",),
        make=in_checkpoints(_tracker_directory),
    ),
    # ---- output directories (tensorboard, rollout and validation dumps, the data cache) ----
    Case(
        "tensorboard_dir_is_a_file",
        "`trainer.tensorboard_dir` names a file (tensorboard not in trainer.logger)",
        ("trainer.tensorboard_dir={ws}/a_file",),
        ("<tmp>/a_file is not a directory", "fix trainer.tensorboard_dir"),
        make=text_file("a_file", "x"),
    ),
    Case(
        "validation_dir_is_a_file",
        "`trainer.validation_data_dir` names a file",
        ("trainer.validation_data_dir={ws}/a_file",),
        ("<tmp>/a_file is not a directory", "fix trainer.validation_data_dir"),
        make=text_file("a_file", "x"),
    ),
    Case(
        "validation_dir_in_proc",
        "`trainer.validation_data_dir=/proc/val_dump`",
        ("trainer.validation_data_dir=/proc/val_dump",),
        ("trainer.validation_data_dir", "is not writable"),
    ),
    Case(
        "rollout_data_dir_under_a_file",
        "`trainer.rollout_data_dir` under a regular file",
        ("trainer.rollout_data_dir={ws}/a_file/rollouts",),
        ("<tmp>/a_file is not a directory", "fix trainer.rollout_data_dir"),
        make=text_file("a_file", "x"),
    ),
    Case(
        "rollout_dir_in_proc",
        "`trainer.rollout_data_dir=/proc/rollouts`",
        ("trainer.rollout_data_dir=/proc/rollouts",),
        ("trainer.rollout_data_dir", "is not writable"),
    ),
    Case(
        "data_cache_dir_is_a_file",
        "`data.cache_dir` names a regular file",
        ("data.cache_dir={ws}/a_file",),
        ("data.cache_dir=<tmp>/a_file", "fix data.cache_dir"),
        make=text_file("a_file", "x"),
    ),
    # ---- non-finite numbers ----
    Case(
        "inf_lr",
        "`actor_rollout_ref.actor.optim.lr=inf`",
        ("actor_rollout_ref.actor.optim.lr=inf",),
        ("actor_rollout_ref.actor.optim.lr=inf", "finite"),
    ),
    Case(
        "nan_entropy_coeff",
        "`actor_rollout_ref.actor.entropy_coeff=nan`",
        ("actor_rollout_ref.actor.entropy_coeff=nan",),
        ("actor_rollout_ref.actor.entropy_coeff=nan", "finite"),
    ),
    Case(
        "inf_temperature",
        "`actor_rollout_ref.rollout.temperature=inf`",
        ("actor_rollout_ref.rollout.temperature=inf",),
        ("actor_rollout_ref.rollout.temperature=inf", "finite"),
    ),
    Case(
        "lr_beyond_float32",
        "`actor_rollout_ref.actor.optim.lr=1e39` (no fp32 optimizer can hold it)",
        ("actor_rollout_ref.actor.optim.lr=1e39",),
        ("actor_rollout_ref.actor.optim.lr", "float32"),
    ),
    # ---- runs that would train nothing ----
    Case(
        "grpo_with_one_sample",
        "GRPO (the default estimator) with `actor_rollout_ref.rollout.n=1`: no group to compare against",
        ("actor_rollout_ref.rollout.n=1",),
        ("actor_rollout_ref.rollout.n=1", "algorithm.adv_estimator=grpo", "2 or more"),
    ),
    Case(
        "rloo_with_one_sample",
        "RLOO with `rollout.n=1`",
        ("actor_rollout_ref.rollout.n=1", "algorithm.adv_estimator=rloo"),
        ("actor_rollout_ref.rollout.n=1", "algorithm.adv_estimator=rloo"),
    ),
    Case(
        "dynamic_sampling_with_one_sample",
        "DAPO dynamic sampling with `rollout.n=1` (no group ever varies)",
        (
            "actor_rollout_ref.rollout.n=1",
            "algorithm.adv_estimator=reinforce_plus_plus",
            "dag=dapo",
            "algorithm.filter_groups.enable=true",
        ),
        ("actor_rollout_ref.rollout.n=1", "filter_groups.enable=true"),
    ),
    Case(
        "val_only_without_val_files",
        "`trainer.val_only=true` with data.val_files=null (nothing to validate)",
        ("trainer.val_only=true", "data.val_files=null"),
        ("trainer.val_only=true", "set data.val_files"),
    ),
    # ---- the critic, the advantage estimator and algorithm.* ----
    Case(
        "gae_without_critic",
        "`algorithm.adv_estimator=gae` on the GRPO graph (no critic)",
        ("algorithm.adv_estimator=gae",),
        ("algorithm.adv_estimator=gae", "dag=ppo"),
    ),
    Case(
        "critic_warmup_without_critic",
        "`trainer.critic_warmup=2` on the GRPO graph (the actor would not learn)",
        ("trainer.critic_warmup=2",),
        ("trainer.critic_warmup=2", "dag=ppo"),
    ),
    Case(
        "critic_warmup_whole_run",
        "`trainer.critic_warmup=5` in a 2-step PPO run (the actor never trained)",
        (*PPO_GAE, "trainer.critic_warmup=5"),
        ("trainer.critic_warmup=5", "this run has 2 step(s)", "below 2"),
    ),
    Case(
        "critic_lr_above_one",
        "`critic.optim.lr=2` (dag=ppo)",
        ("dag=ppo", "algorithm.adv_estimator=gae", "critic.optim.lr=2"),
        ("critic.optim.lr=2", "<= 1"),
    ),
    Case(
        "critic_forward_micro_zero",
        "`critic.forward_micro_batch_size_per_gpu=0`",
        ("dag=ppo", "algorithm.adv_estimator=gae", "critic.forward_micro_batch_size_per_gpu=0"),
        ("critic.forward_micro_batch_size_per_gpu=0",),
    ),
    Case(
        "critic_token_budget_word",
        "`critic.ppo_max_token_len_per_gpu=lots`",
        ("dag=ppo", "algorithm.adv_estimator=gae", "critic.ppo_max_token_len_per_gpu=lots"),
        ("critic.ppo_max_token_len_per_gpu='lots'", "critic.forward_max_token_len_per_gpu takes the value"),
    ),
    Case(
        "critic_model_other_vocab",
        "critic.model.path with another vocabulary than the actor's",
        ("dag=ppo", "algorithm.adv_estimator=gae", "critic.model.path={ws}/critic"),
        ("critic.model.path has vocab_size 800", "same tokenizer"),
        make=critic_with_other_vocab,
    ),
    Case(
        "critic_positions_too_short",
        "critic.model.path with max_position_embeddings=32 < prompt + response 38",
        (*PPO_GAE, "critic.model.path={ws}/critic"),
        ("critic's max_position_embeddings=32", "critic.model.path"),
        make=critic_with_positions(32),
    ),
    Case(
        "target_kl_negative",
        "`algorithm.kl_ctrl.target_kl=-0.1` with the adaptive controller",
        ("algorithm.use_kl_in_reward=true", "algorithm.kl_ctrl.type=adaptive", "algorithm.kl_ctrl.target_kl=-0.1"),
        ("algorithm.kl_ctrl.target_kl=-0.1", ">= 0"),
    ),
    Case(
        "max_gen_batches_word",
        "`filter_groups.max_num_gen_batches=ten`",
        ("algorithm.filter_groups.max_num_gen_batches=ten",),
        ("max_num_gen_batches='ten'", "an integer"),
    ),
    Case(
        "max_gen_batches_negative",
        "`algorithm.filter_groups.max_num_gen_batches=-2`",
        ("dag=dapo", "algorithm.filter_groups.max_num_gen_batches=-2"),
        ("max_num_gen_batches=-2", "an integer >= 0", "0 = no limit"),
    ),
    # ---- asynchronous training ----
    Case(
        "oversample_without_partial",
        "`async_training.oversample_ratio=2` with partial_rollout off",
        ("async_training.oversample_ratio=2",),
        ("async_training.oversample_ratio", "partial_rollout=true"),
    ),
    Case(
        "oversample_below_one",
        "`async_training.oversample_ratio=0.5`",
        ("async_training.partial_rollout=true", "async_training.oversample_ratio=0.5"),
        ("async_training.oversample_ratio", ">= 1"),
    ),
    Case(
        "negative_staleness",
        "`async_training.max_staleness=-1`",
        ("async_training.max_staleness=-1",),
        ("async_training.max_staleness", "integer >= 0"),
    ),
    Case(
        "partial_rollout_not_bool",
        "`async_training.partial_rollout=maybe`",
        ("async_training.partial_rollout=maybe",),
        ("async_training.partial_rollout", "true or false"),
    ),
    Case(
        "partial_rollout_with_dynamic_sampling",
        "partial rollout with DAPO's dynamic sampling",
        ("async_training.partial_rollout=true", "dag=dapo", "algorithm.filter_groups.enable=true"),
        ("async_training.partial_rollout", "filter_groups.enable"),
    ),
    Case(
        "verl_staleness_threshold",
        "verl's `async_training.staleness_threshold=0.5`",
        ("async_training.staleness_threshold=0.5",),
        ("async_training.staleness_threshold", "max_staleness=K"),
    ),
    Case(
        "verl_require_batches",
        "verl's `async_training.require_batches=2`",
        ("async_training.require_batches=2",),
        ("async_training.require_batches", "oversample_ratio"),
    ),
    Case(
        "sync_step_deadlock",
        "`trigger_parameter_sync_step=3` with `max_staleness=1` (separate pools)",
        (
            "actor_rollout_ref.hybrid_engine=false",
            "async_training.trigger_parameter_sync_step=3",
            "async_training.max_staleness=1",
        ),
        ("trigger_parameter_sync_step=3", "deadlock", "max_staleness >= 2"),
        env=WORLD,
    ),
    Case(
        "sync_step_colocated",
        "`trigger_parameter_sync_step=2` on a colocated run",
        ("async_training.trigger_parameter_sync_step=2",),
        ("trigger_parameter_sync_step=2", "set it to 1"),
    ),
    Case(
        "max_restarts_under_torchrun",
        "`trainer.max_restarts=2` without the Ray launcher",
        ("trainer.max_restarts=2",),
        ("trainer.max_restarts=2", "--max-restarts=2"),
    ),
    Case(
        "pools_one_process",
        "separate pools (`actor_rollout_ref.hybrid_engine=false`) launched as one process",
        ("actor_rollout_ref.hybrid_engine=false",),
        ("rollout.n_gpus_per_node", "need 2", "--nproc-per-node 2"),
    ),
    Case(
        "sync_step_on_colocated_run",
        "`trigger_parameter_sync_step=4` on a colocated run",
        ("async_training.trigger_parameter_sync_step=4",),
        ("a colocated run syncs", "set it to 1"),
    ),
    Case(
        "rollout_pool_size_colocated",
        "`rollout.n_gpus_per_node=4` on a colocated run (it sizes separate pools only)",
        ("rollout.n_gpus_per_node=4",),
        ("rollout.n_gpus_per_node=4", "actor_rollout_ref.hybrid_engine=false"),
    ),
    Case(
        "rollout_pool_zero",
        "`rollout.n_gpus_per_node=0` with separate pools",
        ("actor_rollout_ref.hybrid_engine=false", "rollout.n_gpus_per_node=0"),
        ("rollout.n_gpus_per_node=0",),
    ),
    # ---- the per-step profiler (global_profiler.*, verl's names) ----
    Case(
        "profiler_tool_unsupported",
        "verl's `global_profiler.tool=nsys`",
        ("global_profiler.tool=nsys", "global_profiler.steps=[1]"),
        ("global_profiler.tool", "'nsys' is not supported", "use torch or null"),
    ),
    Case(
        "profiler_steps_without_tool",
        "`global_profiler.steps=[2]` with the tool left null (would profile nothing)",
        ("global_profiler.steps=[2]",),
        ("global_profiler.steps", "global_profiler.tool is null", "set global_profiler.tool=torch"),
    ),
    Case(
        "profiler_tool_without_steps",
        "`global_profiler.tool=torch` without steps",
        ("global_profiler.tool=torch",),
        ("global_profiler.steps", "set global_profiler.steps=[N,...]"),
    ),
    Case(
        "profiler_step_zero",
        "`global_profiler.steps=[0,2]` (global steps count from 1)",
        ("global_profiler.tool=torch", "global_profiler.steps=[0,2]"),
        ("global_profiler.steps=[0, 2]", "list of positive integers"),
    ),
    Case(
        "profiler_rank_outside_launch",
        "`global_profiler.ranks=[0,3]` on a one-process launch",
        ("global_profiler.tool=torch", "global_profiler.steps=[1]", "global_profiler.ranks=[0,3]"),
        ("global_profiler.ranks", "rank(s) 3 not in this launch of 1 process(es)", "drop them"),
    ),
    Case(
        "profiler_step_beyond_run",
        "`global_profiler.steps=[5]` in a 2-step run (profiles nothing)",
        ("global_profiler.tool=torch", "global_profiler.steps=[5]"),
        ("global_profiler.steps=[5]", "beyond this run's 2 step(s)", "pick steps in 1..2"),
    ),
    Case(
        "profiler_trace_without_tool",
        "`global_profiler.with_trace=true` with the tool left null (traced nothing)",
        ("global_profiler.with_trace=true",),
        ("global_profiler.with_trace=true", "global_profiler.tool is null"),
    ),
    Case(
        "profiler_save_path_empty",
        "`global_profiler.save_path=` (empty: tables into the current directory)",
        ("global_profiler.tool=torch", "global_profiler.steps=[1]", "global_profiler.save_path="),
        ("global_profiler.save_path=''", "must be a directory path"),
    ),
    Case(
        "profiler_ranks_empty",
        "`global_profiler.ranks=[]`",
        ("global_profiler.tool=torch", "global_profiler.steps=[1]", "global_profiler.ranks=[]"),
        ("global_profiler.ranks=[]", "non-empty list"),
    ),
    Case(
        "verl_profile_steps",
        "verl's `trainer.profile_steps=[1]`",
        ("trainer.profile_steps=[1]",),
        ("'trainer.profile_steps' is verl's", "global_profiler.tool=torch global_profiler.steps=[N,...]"),
    ),
    # ---- types and ranges (schema) ----
    Case(
        "bool_shuffle_no",
        "`data.shuffle=no` (a string to Hydra, truthy: it would still shuffle)",
        ("data.shuffle=no",),
        ("data.shuffle='no'", "must be true or false"),
    ),
    Case(
        "bool_kl_loss_maybe",
        "`actor_rollout_ref.actor.use_kl_loss=maybe`",
        ("actor_rollout_ref.actor.use_kl_loss=maybe",),
        ("actor_rollout_ref.actor.use_kl_loss='maybe'", "true or false"),
    ),
    Case(
        "bool_as_integer",
        "`actor_rollout_ref.rollout.do_sample=1`",
        ("actor_rollout_ref.rollout.do_sample=1",),
        ("actor_rollout_ref.rollout.do_sample=1", "must be true or false"),
    ),
    Case(
        "int_as_fraction",
        "`actor_rollout_ref.rollout.n=2.5`",
        ("actor_rollout_ref.rollout.n=2.5",),
        ("actor_rollout_ref.rollout.n=2.5", "positive integer"),
    ),
    Case(
        "null_batch_size",
        "`data.train_batch_size=null`",
        ("data.train_batch_size=null",),
        ("data.train_batch_size=null", "positive integer"),
    ),
    Case(
        "number_as_word",
        "`actor_rollout_ref.actor.clip_ratio=high`",
        ("actor_rollout_ref.actor.clip_ratio=high",),
        ("actor_rollout_ref.actor.clip_ratio='high'", "a number >= 0"),
    ),
    Case(
        "string_as_number",
        "`trainer.experiment_name=2024` (Hydra reads an integer)",
        ("trainer.experiment_name=2024",),
        ("trainer.experiment_name=2024", "must be a string"),
    ),
    Case(
        "choice_as_bool",
        "`data.truncation=true`",
        ("data.truncation=true",),
        ("data.truncation=true", "is not one of: error, left, right, middle"),
    ),
    Case(
        "logger_as_number",
        "`trainer.logger=3`",
        ("trainer.logger=3",),
        ("trainer.logger=3", "a string or a list of strings"),
    ),
    Case(
        "betas_as_scalar",
        "`actor_rollout_ref.actor.optim.betas=0.9` (two are needed)",
        ("actor_rollout_ref.actor.optim.betas=0.9",),
        ("actor_rollout_ref.actor.optim.betas=0.9", "two numbers in [0, 1)"),
    ),
    Case(
        "graph_nodes_as_string",
        "`dag.nodes=rollout`",
        ("dag.nodes=rollout",),
        ("dag.nodes='rollout'", "a map of node id to node"),
    ),
    Case(
        "top_p_above_one",
        "`actor_rollout_ref.rollout.top_p=5` (a percentage?)",
        ("actor_rollout_ref.rollout.top_p=5",),
        ("actor_rollout_ref.rollout.top_p=5", "must be in (0, 1]"),
    ),
    Case(
        "top_p_zero",
        "`actor_rollout_ref.rollout.top_p=0`",
        ("actor_rollout_ref.rollout.top_p=0",),
        ("actor_rollout_ref.rollout.top_p=0", "must be in (0, 1]"),
    ),
    Case(
        "top_k_zero",
        "`actor_rollout_ref.rollout.top_k=0` (off is -1)",
        ("actor_rollout_ref.rollout.top_k=0",),
        ("actor_rollout_ref.rollout.top_k=0", "-1 (off) or an integer >= 1"),
    ),
    Case(
        "negative_clip_ratio",
        "`actor_rollout_ref.actor.clip_ratio=-0.1`",
        ("actor_rollout_ref.actor.clip_ratio=-0.1",),
        ("actor_rollout_ref.actor.clip_ratio=-0.1", "must be >= 0"),
    ),
    Case(
        "negative_entropy_coeff",
        "`actor_rollout_ref.actor.entropy_coeff=-0.01`",
        ("actor_rollout_ref.actor.entropy_coeff=-0.01",),
        ("actor_rollout_ref.actor.entropy_coeff=-0.01", ">= 0"),
    ),
    Case(
        "negative_kl_loss_coef",
        "`actor_rollout_ref.actor.kl_loss_coef=-1`",
        ("actor_rollout_ref.actor.kl_loss_coef=-1",),
        ("actor_rollout_ref.actor.kl_loss_coef=-1", ">= 0"),
    ),
    Case("gamma_above_one", "`algorithm.gamma=1.5`", ("algorithm.gamma=1.5",), ("algorithm.gamma=1.5", "in [0, 1]")),
    Case(
        "warmup_ratio_above_one",
        "`actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=10` (steps, not a ratio)",
        ("actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=10",),
        ("lr_warmup_steps_ratio=10", "in [0, 1]"),
    ),
    Case(
        "gpu_memory_as_percent",
        "`actor_rollout_ref.rollout.gpu_memory_utilization=90`",
        ("actor_rollout_ref.rollout.gpu_memory_utilization=90",),
        ("gpu_memory_utilization=90", "in (0, 1)"),
    ),
    Case("negative_seed", "`data.seed=-1`", ("data.seed=-1",), ("data.seed=-1", "an integer >= 0")),
    Case("zero_nodes", "`trainer.nnodes=0`", ("trainer.nnodes=0",), ("trainer.nnodes=0", "positive integer")),
    Case(
        "zero_tool_timeout",
        "`actor_rollout_ref.rollout.multi_turn.tool_timeout_s=0`",
        ("actor_rollout_ref.rollout.multi_turn.tool_timeout_s=0",),
        ("tool_timeout_s=0", "must be > 0"),
    ),
    Case(
        "negative_overlong_penalty",
        "`reward_model.overlong_buffer.penalty_factor=-1`",
        ("reward_model.overlong_buffer.penalty_factor=-1",),
        ("reward_model.overlong_buffer.penalty_factor=-1", ">= 0"),
    ),
    Case(
        "val_sampling_at_zero_temperature",
        "`val_kwargs.do_sample=true` with val_kwargs.temperature=0 (the default)",
        ("actor_rollout_ref.rollout.val_kwargs.do_sample=true",),
        ("val_kwargs.temperature=0", "do_sample=true", "do_sample=false"),
    ),
    Case(
        "length_beyond_positions",
        "prompt + response (38) longer than the model's max_position_embeddings=32",
        (f"{MODEL_KEY}={{ws}}/model",),
        ("= 38", "max_position_embeddings=32", "data.max_prompt_length"),
        make=model_copy(patch={"max_position_embeddings": 32}),
    ),
    Case(
        "checkpoint_dir_empty",
        "`trainer.default_local_dir=''` (checkpoints into the current directory)",
        ("trainer.default_local_dir=''",),
        ("trainer.default_local_dir=''", "must be a directory path"),
    ),
    Case(
        "lr_quoted",
        '`actor_rollout_ref.actor.optim.lr="1e-6"` (quoted: a string to Hydra)',
        ('actor_rollout_ref.actor.optim.lr="1e-6"',),
        ("actor_rollout_ref.actor.optim.lr='1e-6'", "a number"),
    ),
    Case(
        "number_quoted_as_text",
        "`critic.optim.lr='1e-5'` (quoted: a string)",
        ("dag=ppo", "algorithm.adv_estimator=gae", "critic.optim.lr='1e-5'"),
        ("critic.optim.lr='1e-5'", "not text", "write critic.optim.lr=1e-5 unquoted"),
    ),
    Case(
        "bool_as_yes",
        "`actor_rollout_ref.rollout.do_sample=yes`",
        ("actor_rollout_ref.rollout.do_sample=yes",),
        ("actor_rollout_ref.rollout.do_sample='yes'", "true or false"),
    ),
    Case(
        "val_do_sample_word",
        "`val_kwargs.do_sample=sometimes`",
        ("actor_rollout_ref.rollout.val_kwargs.do_sample=sometimes",),
        ("val_kwargs.do_sample='sometimes' must be true or false",),
    ),
    Case(
        "filter_overlong_as_one",
        "`data.filter_overlong_prompts=1`",
        ("data.filter_overlong_prompts=1",),
        ("data.filter_overlong_prompts=1 must be true or false",),
    ),
    Case("val_only_word", "`trainer.val_only=yes`", ("trainer.val_only=yes",), ("trainer.val_only='yes'",)),
    Case(
        "steps_in_scientific_notation",
        "`trainer.total_training_steps=1e3` (a float to Hydra)",
        ("trainer.total_training_steps=1e3",),
        ("trainer.total_training_steps=1000.0", "positive integer"),
    ),
    Case("data_seed_fraction", "`data.seed=1.5`", ("data.seed=1.5",), ("data.seed=1.5", "integer >= 0")),
    Case(
        "nccl_timeout_with_unit",
        "`actor_rollout_ref.nccl_timeout=10m`",
        ("actor_rollout_ref.nccl_timeout=10m",),
        ("actor_rollout_ref.nccl_timeout='10m'", "a number > 0"),
    ),
    Case(
        "project_name_null",
        "`trainer.project_name=null` (names the checkpoint path)",
        ("trainer.project_name=null",),
        ("trainer.project_name=null must be a string",),
    ),
    Case(
        "transformer_overrides_as_string",
        "`megatron.override_transformer_config=recompute`",
        (f"{MEGATRON}.override_transformer_config=recompute",),
        ("override_transformer_config='recompute'", "a map"),
    ),
    Case(
        "choice_with_underscore",
        "`actor_rollout_ref.actor.loss_agg_mode=token_mean`",
        ("actor_rollout_ref.actor.loss_agg_mode=token_mean",),
        ("actor_rollout_ref.actor.loss_agg_mode='token_mean'", "token-mean"),
    ),
    Case(
        "adv_estimator_upper_case",
        "`algorithm.adv_estimator=GRPO`",
        ("algorithm.adv_estimator=GRPO",),
        ("algorithm.adv_estimator='GRPO'", "grpo, rloo"),
    ),
    Case(
        "truncation_capitalised",
        "`data.truncation=Left`",
        ("data.truncation=Left",),
        ("data.truncation='Left'", "error, left, right, middle"),
    ),
    Case(
        "resume_mode_capitalised",
        "`trainer.resume_mode=Auto`",
        ("trainer.resume_mode=Auto",),
        ("trainer.resume_mode='Auto'", "auto, disable, resume_path"),
    ),
    # ---- off-policy correction ----
    Case(
        "off_policy_unknown",
        "`actor_rollout_ref.actor.policy_loss.off_policy=areal`",
        ("actor_rollout_ref.actor.policy_loss.off_policy=areal",),
        ("actor_rollout_ref.actor.policy_loss.off_policy", "none, decoupled"),
    ),
    Case(
        "decoupled_without_behaviour_log_probs",
        "decoupled PPO without the rollout's log-probs",
        (DECOUPLED,),
        ("policy_loss.off_policy=decoupled", "calculate_log_probs=true"),
    ),
    Case(
        "behaviour_weight_cap_not_above_one",
        "decoupled PPO with `policy_loss.behav_imp_weight_cap=1`",
        (DECOUPLED, LOG_PROBS, "actor_rollout_ref.actor.policy_loss.behav_imp_weight_cap=1"),
        ("actor_rollout_ref.actor.policy_loss.behav_imp_weight_cap", "> 1"),
    ),
    Case(
        "decoupled_with_tis",
        "decoupled PPO and truncated importance sampling together (the weight applied twice)",
        (DECOUPLED, LOG_PROBS, "actor_rollout_ref.actor.tis_imp_ratio_cap=2"),
        ("tis_imp_ratio_cap=-1",),
    ),
    Case(
        "sequence_mask_without_behaviour_log_probs",
        "`actor.mis_ratio_high=2` without the rollout's log-probs",
        ("actor_rollout_ref.actor.mis_ratio_high=2",),
        ("actor_rollout_ref.actor.mis_ratio_high", "calculate_log_probs=true"),
    ),
    Case(
        "sequence_mask_band_without_one",
        "`actor.mis_ratio_low=1.5` (the band would drop on-policy sequences)",
        (LOG_PROBS, "actor_rollout_ref.actor.mis_ratio_low=1.5"),
        ("actor_rollout_ref.actor.mis_ratio_low=1.5", "(0, 1)"),
    ),
    # ---- multi-turn (agentic) rollouts ----
    Case(
        "multi_turn_without_tools_or_interactions",
        "`rollout.multi_turn.enable=true` with neither tools nor an interaction",
        (MULTI_TURN,),
        ("multi_turn.tool_config_path", "interaction_config_path"),
    ),
    Case(
        "multi_turn_with_ignore_eos",
        "`rollout.ignore_eos=true` with multi-turn rollouts (a turn ends at eos)",
        (MULTI_TURN, "actor_rollout_ref.rollout.ignore_eos=true"),
        ("ignore_eos=true", "set ignore_eos=false"),
    ),
    Case(
        "tool_config_missing",
        "`multi_turn.tool_config_path` names a file that does not exist",
        (MULTI_TURN, "actor_rollout_ref.rollout.multi_turn.tool_config_path={ws}/tools.yaml"),
        ("multi_turn.tool_config_path", "no such file"),
    ),
    Case(
        "tool_class_missing",
        "a tool config whose class_name does not import",
        (MULTI_TURN, "actor_rollout_ref.rollout.multi_turn.tool_config_path={ws}/tools.yaml"),
        ("tools.yaml", "tools[0]", "cannot import"),
        make=text_file("tools.yaml", TOOL_NOT_IMPORTING),
    ),
    Case(
        "tool_schema_invalid",
        "a tool schema whose `required` names a parameter it does not have",
        (MULTI_TURN, "actor_rollout_ref.rollout.multi_turn.tool_config_path={ws}/tools.yaml"),
        ("tools.yaml", "tools[0]", "required"),
        make=text_file("tools.yaml", TOOL_BAD_SCHEMA),
    ),
    Case(
        "interaction_class_missing",
        "an interaction config whose class has no generate_response",
        (MULTI_TURN, "actor_rollout_ref.rollout.multi_turn.interaction_config_path={ws}/interactions.yaml"),
        ("interactions.yaml", "interaction[0]"),
        make=text_file("interactions.yaml", INTERACTION_NOT_ONE),
    ),
    Case(
        "multi_turn_truncate_side",
        "`multi_turn.tool_response_truncate_side=top`",
        ("actor_rollout_ref.rollout.multi_turn.tool_response_truncate_side=top",),
        ("tool_response_truncate_side", "left, middle, right"),
    ),
    Case(
        "tool_config_without_multi_turn",
        "`multi_turn.tool_config_path` set but multi_turn.enable left false (the tools would be ignored)",
        ("actor_rollout_ref.rollout.multi_turn.tool_config_path={ws}/tools.yaml",),
        (
            "actor_rollout_ref.rollout.multi_turn.tool_config_path is set but "
            "actor_rollout_ref.rollout.multi_turn.enable=false",
            "set actor_rollout_ref.rollout.multi_turn.enable=true",
        ),
        make=text_file("tools.yaml", "tools: []\n"),
    ),
    Case(
        "tool_config_bare_list",
        "a tools.yaml that is a bare list, not `tools: [...]`",
        (MULTI_TURN, "actor_rollout_ref.rollout.multi_turn.tool_config_path={ws}/tools.yaml"),
        ("<tmp>/tools.yaml must hold a non-empty 'tools' list",),
        make=text_file("tools.yaml", "- class_name: dagrl.agent.calculator.CalculatorTool\n"),
    ),
    Case(
        "tool_config_as_list",
        "a tool's `config:` written as a list",
        MT_TOOLS,
        ("config must be a mapping, got list",),
        make=text_file(
            "tools.yaml", "tools:\n" + CALC.replace("    tool_schema", "    config: [type, native]\n    tool_schema")
        ),
    ),
    Case(
        "tool_yaml_latin1",
        "tools.yaml saved as latin-1",
        MT_TOOLS,
        ("<tmp>/tools.yaml is not UTF-8", "line 2", "save it as UTF-8"),
        make=latin1_file("tools.yaml", "tools:\n  # r\xe9sum\xe9 of the calculator\n" + CALC),
    ),
    Case(
        "tool_yaml_with_a_tab",
        "the tool YAML indented with a tab",
        (MULTI_TURN, "actor_rollout_ref.rollout.multi_turn.tool_config_path={ws}/tools.yaml"),
        ("tools.yaml is not valid YAML", "line 2", "never tabs"),
        make=text_file("tools.yaml", TOOL_YAML_WITH_TAB),
    ),
    Case(
        "tool_class_without_module",
        "`class_name: CalculatorTool` (no module)",
        MT_TOOLS,
        ("class_name 'CalculatorTool' must be package.module.ClassName",),
        make=text_file("tools.yaml", "tools:\n" + CALC.replace("dagrl.agent.calculator.", "")),
    ),
    Case(
        "tool_class_is_a_function",
        "a tool's class_name naming a function",
        (MULTI_TURN, "actor_rollout_ref.rollout.multi_turn.tool_config_path={ws}/tools.yaml"),
        ("dagrl.config.schema.spec.hinted is a function, not a class",),
        make=text_file("tools.yaml", TOOL_IS_A_FUNCTION),
    ),
    Case(
        "tool_without_name",
        "a tool_schema without function.name",
        MT_TOOLS,
        ("tool_schema.function.name",),
        make=text_file(
            "tools.yaml",
            "tools:\n  - class_name: dagrl.agent.calculator.CalculatorTool\n    tool_schema: "
            "{type: function, function: {description: calc, parameters: {type: object, "
            "properties: {}}}}\n",
        ),
    ),
    Case(
        "tool_schema_as_string",
        "`tool_schema: calculator`",
        MT_TOOLS,
        ("tool_schema must be a mapping",),
        make=text_file(
            "tools.yaml", "tools:\n  - class_name: dagrl.agent.calculator.CalculatorTool\n    tool_schema: calculator\n"
        ),
    ),
    Case(
        "tool_listed_twice",
        "the same tool twice in tools.yaml",
        MT_TOOLS,
        ("duplicate tool name 'calculator'",),
        make=text_file("tools.yaml", "tools:\n" + CALC + CALC),
    ),
    Case(
        "interaction_config_directory",
        "`multi_turn.interaction_config_path` names a directory",
        (MULTI_TURN, "actor_rollout_ref.rollout.multi_turn.interaction_config_path={ws}"),
        ("actor_rollout_ref.rollout.multi_turn.interaction_config_path='<tmp>' is a directory",),
    ),
    Case(
        "interaction_key_plural",
        "`interactions:` instead of verl's `interaction:`",
        (MULTI_TURN, "actor_rollout_ref.rollout.multi_turn.interaction_config_path={ws}/inter.yaml"),
        ("<tmp>/inter.yaml must hold a non-empty 'interaction' list",),
        make=text_file(
            "inter.yaml",
            "interactions:\n  - name: judge\n    class_name: dagrl.agent.interaction.TryAgainInteraction\n",
        ),
    ),
    Case(
        "parallel_tool_calls_zero",
        "`multi_turn.max_parallel_calls=0`",
        ("actor_rollout_ref.rollout.multi_turn.max_parallel_calls=0",),
        ("max_parallel_calls=0", "positive integer"),
    ),
    Case(
        "tool_overlap_negative",
        "`multi_turn.tool_overlap_steps=-1`",
        ("actor_rollout_ref.rollout.multi_turn.tool_overlap_steps=-1",),
        ("tool_overlap_steps=-1", ">= 0"),
    ),
    # ---- runs that train nothing, wrong key ----
    Case(
        "data_source_without_scorer",
        "training rows whose data_source (`my_org/arith`) has no built-in scorer, and no custom_reward_function.path",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet", "'my_org/arith'", "custom_reward_function.path", "built-in: "),
        make=rows_changed(_set(None, "data_source", "my_org/arith")),
    ),
    Case(
        "data_source_typo_in_one_row",
        "one training row with data_source `openai/GSM8K` (a typo of a built-in name)",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet", "'openai/GSM8K'", "row 17"),
        make=rows_changed(_set(17, "data_source", "openai/GSM8K")),
    ),
    Case(
        "val_data_source_without_scorer",
        "validation rows whose data_source has no built-in scorer",
        ("data.val_files={ws}/val.parquet",),
        ("<tmp>/val.parquet", "'my_org/arith'", "custom_reward_function.path"),
        make=rows_changed(_set(None, "data_source", "my_org/arith"), name="val.parquet"),
    ),
    Case(
        "data_source_null",
        "a training row whose data_source is null",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet", "data_source None", "row 0"),
        make=rows_changed(_set(0, "data_source", None)),
    ),
    Case(
        "ground_truth_null",
        "a training row whose reward_model.ground_truth is null",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet", "reward_model.ground_truth", "row 3"),
        make=rows_changed(_set(3, "reward_model.ground_truth", None)),
    ),
    Case(
        "ground_truth_renamed",
        "a data file whose reward_model has `answer` instead of `ground_truth`",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet", "no reward_model.ground_truth", "regenerate"),
        make=rows_changed(_rename_ground_truth),
    ),
    Case(
        "val_ground_truth_null",
        "a validation row whose reward_model.ground_truth is null",
        ("data.val_files={ws}/val.parquet",),
        ("<tmp>/val.parquet", "reward_model.ground_truth", "row 5"),
        make=rows_changed(_set(5, "reward_model.ground_truth", None), name="val.parquet"),
    ),
    Case(
        "reward_signature_two_args",
        "a custom compute_score(solution_str, ground_truth) (cannot take the trainer's 4 arguments)",
        ("custom_reward_function.path={ws}/reward.py",),
        (
            "<tmp>/reward.py",
            "compute_score(solution_str, ground_truth)",
            "cannot take the trainer's call",
            "extra_info=None, **kwargs",
        ),
        make=text_file("reward.py", REWARD_TWO_ARGS),
    ),
    Case(
        "reward_signature_no_extra_info",
        "a custom compute_score(data_source, solution_str, ground_truth) without extra_info",
        ("custom_reward_function.path={ws}/reward.py",),
        ("<tmp>/reward.py", "too many positional arguments", "extra_info=None"),
        make=text_file("reward.py", REWARD_NO_EXTRA_INFO),
    ),
    Case(
        "reward_signature_rejects_kwargs",
        "`+custom_reward_function.reward_kwargs.scale=2` to a compute_score without **kwargs",
        ("custom_reward_function.path={ws}/reward.py", "+custom_reward_function.reward_kwargs.scale=2"),
        ("<tmp>/reward.py", "'scale'", "custom_reward_function.reward_kwargs"),
        make=text_file("reward.py", REWARD_NO_KWARGS),
    ),
    Case(
        "prompt_too_long",
        "a prompt longer than data.max_prompt_length=8 with data.truncation=error (found before "
        "the first step, not when its row is drawn)",
        ("data.max_prompt_length=8",),
        ("data.max_prompt_length=8", "row 0", "data.truncation=left|right|middle", "filter_overlong_prompts=True"),
        found=STARTUP,
    ),
    Case(
        "prompt_too_long_in_last_row",
        "only the last training row is longer than data.max_prompt_length "
        "(truncation=error: it would stop the run when drawn, maybe epochs in)",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet", "row 31", "data.max_prompt_length=32", "filter_overlong_prompts=True"),
        make=rows_changed(_set(31, "prompt", LONG_QUESTION)),
        found=STARTUP,
    ),
    Case(
        "val_prompt_too_long",
        "a validation prompt longer than data.max_prompt_length (truncation=error)",
        ("data.val_files={ws}/val.parquet",),
        ("<tmp>/val.parquet", "row 2", "data.max_prompt_length=32"),
        make=rows_changed(_set(2, "prompt", LONG_QUESTION), name="val.parquet"),
        found=STARTUP,
    ),
    Case(
        "actor_seed_not_int",
        "`actor_rollout_ref.actor.megatron.seed=abc` (the critic's seed interpolates it)",
        (f"{MEGATRON}.seed=abc",),
        (f"{MEGATRON}.seed='abc'", "must be an integer"),
    ),
    Case(
        "actor_shuffle_not_bool",
        "`actor_rollout_ref.actor.shuffle=maybe` (critic.shuffle interpolates it)",
        ("actor_rollout_ref.actor.shuffle=maybe",),
        ("actor_rollout_ref.actor.shuffle='maybe'", "true or false"),
    ),
    Case(
        "gradient_checkpointing_not_bool",
        "`actor_rollout_ref.model.enable_gradient_checkpointing=yes`",
        ("actor_rollout_ref.model.enable_gradient_checkpointing=yes",),
        ("actor_rollout_ref.model.enable_gradient_checkpointing='yes'", "true or false"),
    ),
    # ---- found before the first step, not when a row is drawn or a save attempted ----
    Case(
        "tensorboard_dir_not_writable",
        "`trainer.tensorboard_dir` under a regular file (with the tensorboard logger)",
        ("trainer.logger=[console,tensorboard]", "trainer.tensorboard_dir={ws}/a_file/tb"),
        ("trainer.tensorboard_dir", "<tmp>/a_file", "not a directory"),
        make=text_file("a_file", ""),
    ),
    Case(
        "validation_data_dir_not_writable",
        "`trainer.validation_data_dir` under a regular file",
        ("trainer.validation_data_dir={ws}/a_file/generations",),
        ("trainer.validation_data_dir", "<tmp>/a_file", "not a directory"),
        make=text_file("a_file", ""),
    ),
    Case(
        "save_freq_as_word",
        "`trainer.save_freq=often`",
        ("trainer.save_freq=often",),
        ("trainer.save_freq='often'", "integer"),
    ),
    Case(
        "test_freq_as_fraction",
        "`trainer.test_freq=2.5`",
        ("trainer.test_freq=2.5",),
        ("trainer.test_freq=2.5", "integer"),
    ),
    Case(
        "prompt_plain_string",
        "the prompt column holds plain strings, not chat lists",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet", "row 0", "plain string", "'content'"),
        make=rows_changed(_set(None, "prompt", "What is 3 + 4?")),
    ),
    Case(
        "prompt_sharegpt",
        "the prompt column holds ShareGPT `{from, value}` messages",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet", "row 0", "ShareGPT", "{role, content}"),
        make=rows_changed(_set(None, "prompt", [{"from": "human", "value": "What is 3 + 4?"}])),
    ),
    Case(
        "prompt_empty_list",
        "a validation row whose prompt is an empty list",
        ("data.val_files={ws}/val.parquet",),
        ("<tmp>/val.parquet", "row 1", "empty list", "fix the file"),
        make=rows_changed(_set(1, "prompt", []), name="val.parquet"),
    ),
    Case(
        "vocab_smaller_than_tokenizer",
        "config.json vocab_size=256 while the tokenizer has ids up to 399",
        (f"{MODEL_KEY}={{ws}}/model",),
        ("token ids up to 399", "vocab_size=256", MODEL_KEY),
        make=model_of_vocab(256),
    ),
    Case(
        "weights_shard_missing",
        "model.safetensors.index.json names a shard the directory lacks",
        (f"{MODEL_KEY}={{ws}}/model",),
        ("model.safetensors.index.json", "model-00002-of-00002.safetensors", "re-download"),
        make=model_weights("missing_shard"),
    ),
    Case(
        "weights_truncated",
        "a safetensors file cut to half its size (an interrupted download)",
        (f"{MODEL_KEY}={{ws}}/model",),
        ("<tmp>/model/model.safetensors", "truncated", "re-download"),
        make=model_weights("truncated"),
    ),
    Case(
        "chat_template_raises",
        "a chat template that raises on the first prompt",
        (f"{MODEL_KEY}={{ws}}/model",),
        (MODEL_KEY, "chat template", "row 0", "roles must alternate"),
        make=chat_template(TEMPLATE_RAISES),
        found=STARTUP,
    ),
    Case(
        "every_prompt_filtered",
        "`data.filter_overlong_prompts=true` with a max_prompt_length no prompt fits",
        ("data.filter_overlong_prompts=true", "data.max_prompt_length=4"),
        ("data.max_prompt_length=4", "filter_overlong_prompts=True left none"),
        found=STARTUP,
    ),
    # ---- inputs that would wait forever ----
    Case(
        "data_file_is_fifo",
        "data.train_files names a FIFO (reading it would wait for a writer forever)",
        ("data.train_files={ws}/bad.parquet",),
        ("<tmp>/bad.parquet", "FIFO", "not a regular file"),
        make=fifo(),
    ),
    Case(
        "ray_address_unreachable",
        "`trainer.ray_address` where no Ray head listens (ray.init retries for minutes)",
        ("trainer.launcher=ray", "trainer.ray_address=127.0.0.1:1", "trainer.default_local_dir={ws}/run"),
        ("trainer.ray_address=127.0.0.1:1", "no Ray head reachable", "within 5 s"),
    ),
    # ---- several independent mistakes: one line each, in check order ----
    Case(
        "two_mistakes_type_and_data",
        "`trainer.total_epochs=two` and a data.train_files that names no file",
        ("trainer.total_epochs=two", "data.train_files={ws}/missing.parquet"),
        ("trainer.total_epochs='two'", "positive integer"),
        also=(("<tmp>/missing.parquet", "does not exist", "data.train_files"),),
    ),
    Case(
        "three_mistakes_layout_and_values",
        "`temperature=0`, TP=2 on a 1-process launch and `reward_model.timeout_s=0`",
        (
            "actor_rollout_ref.rollout.temperature=0",
            f"{MEGATRON}.tensor_model_parallel_size=2",
            "reward_model.timeout_s=0",
        ),
        ("actor_rollout_ref.rollout.temperature=0", "> 0"),
        also=(
            ("reward_model.timeout_s=0", "> 0"),
            ("1 is not divisible by 2", f"change {MEGATRON}.tensor_model_parallel_size"),
        ),
    ),
    # ---- verl and siiRL keys and values ----
    Case(
        "verl_return_raw_chat",
        "verl's `data.return_raw_chat=true`",
        ("data.return_raw_chat=true",),
        ("'data.return_raw_chat' is verl's", "drop the key"),
    ),
    Case(
        "verl_dataloader_num_workers",
        "verl's `data.dataloader_num_workers=0`",
        ("data.dataloader_num_workers=0",),
        ("'data.dataloader_num_workers' is verl's",),
    ),
    Case(
        "verl_filter_overlong_workers",
        "verl's `data.filter_overlong_prompts_workers=8`",
        ("data.filter_overlong_prompts_workers=8",),
        ("'data.filter_overlong_prompts_workers' is verl's", "data.filter_overlong_prompts=true"),
    ),
    Case(
        "verl_lora_rank",
        "verl's `model.lora_rank=32`",
        ("actor_rollout_ref.model.lora_rank=32",),
        ("'actor_rollout_ref.model.lora_rank' is verl's", "LoRA is not supported"),
    ),
    Case(
        "verl_use_shm",
        "verl's `model.use_shm=true`",
        ("actor_rollout_ref.model.use_shm=true",),
        ("'actor_rollout_ref.model.use_shm' is verl's", "drop the key"),
    ),
    Case(
        "verl_ulysses_sequence_parallel",
        "verl's `actor.ulysses_sequence_parallel_size=2`",
        ("actor_rollout_ref.actor.ulysses_sequence_parallel_size=2",),
        ("is verl's", f"{MEGATRON}.context_parallel_size"),
    ),
    Case(
        "verl_use_mbridge",
        "verl's `megatron.use_mbridge=true`",
        (f"{MEGATRON}.use_mbridge=true",),
        ("'actor_rollout_ref.actor.megatron.use_mbridge' is verl's", "drop the key"),
    ),
    Case(
        "verl_del_local_ckpt_after_load",
        "verl's `trainer.del_local_ckpt_after_load=true`",
        ("trainer.del_local_ckpt_after_load=true",),
        ("is verl's", "max_actor_ckpt_to_keep"),
    ),
    Case(
        "verl_multi_turn_max_turns",
        "verl's `multi_turn.max_turns=3`",
        ("actor_rollout_ref.rollout.multi_turn.max_turns=3",),
        (
            "'actor_rollout_ref.rollout.multi_turn.max_turns' is verl's",
            "actor_rollout_ref.rollout.multi_turn.max_assistant_turns",
        ),
    ),
    Case(
        "verl_agent_num_workers",
        "verl's `rollout.agent.num_workers=8`",
        ("actor_rollout_ref.rollout.agent.num_workers=8",),
        ("is verl's", "multi_turn"),
    ),
    Case(
        "verl_use_rollout_log_probs",
        "verl's `async_training.use_rollout_log_probs=true`",
        ("async_training.use_rollout_log_probs=true",),
        ("'async_training.use_rollout_log_probs' is verl's", "calculate_log_probs=true"),
    ),
    Case(
        "verl_compute_prox_log_prob",
        "verl's `async_training.compute_prox_log_prob=true`",
        ("async_training.compute_prox_log_prob=true",),
        ("is verl's", "off_policy=decoupled"),
    ),
    # ---- options of other trainers (TRL, OpenRLHF, NeMo-RL) ----
    Case(
        "trl_learning_rate",
        "TRL's `learning_rate=1e-6`",
        ("learning_rate=1e-6",),
        ("'learning_rate' is not a dagrl key", "write actor_rollout_ref.actor.optim.lr=1e-6"),
    ),
    Case(
        "trl_num_generations",
        "TRL's `num_generations=8`",
        ("num_generations=8",),
        ("'num_generations'", "write actor_rollout_ref.rollout.n=8"),
    ),
    Case(
        "trl_beta",
        "TRL GRPO's KL weight `beta=0.04`",
        ("beta=0.04",),
        ("'beta'", "actor_rollout_ref.actor.kl_loss_coef (with actor_rollout_ref.actor.use_kl_loss=true)"),
    ),
    Case(
        "trl_max_completion_length",
        "TRL's `max_completion_length=256`",
        ("max_completion_length=256",),
        ("'max_completion_length'", "write data.max_response_length=256"),
    ),
    Case(
        "trl_per_device_batch",
        "TRL's `per_device_train_batch_size=4`",
        ("per_device_train_batch_size=4",),
        ("'per_device_train_batch_size'", "write actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4"),
    ),
    Case(
        "trl_use_vllm",
        "TRL's `use_vllm=true`",
        ("use_vllm=true",),
        ("'use_vllm'", "actor_rollout_ref.rollout.name=vllm"),
    ),
    Case(
        "openrlhf_n_samples",
        "OpenRLHF's `n_samples_per_prompt=8`",
        ("n_samples_per_prompt=8",),
        ("'n_samples_per_prompt'", "write actor_rollout_ref.rollout.n=8"),
    ),
    Case(
        "openrlhf_init_kl_coef",
        "OpenRLHF's `init_kl_coef=0.01`",
        ("init_kl_coef=0.01",),
        (
            "'init_kl_coef'",
            "algorithm.kl_ctrl.kl_coef (with algorithm.use_kl_in_reward=true)",
            "actor_rollout_ref.actor.kl_loss_coef",
        ),
    ),
    Case(
        "openrlhf_actor_learning_rate",
        "OpenRLHF's `actor_learning_rate=5e-7`",
        ("actor_learning_rate=5e-7",),
        ("'actor_learning_rate'", "write actor_rollout_ref.actor.optim.lr=5e-7"),
    ),
    Case(
        "nemo_num_generations",
        "NeMo-RL's `grpo.num_generations_per_prompt=8`",
        ("grpo.num_generations_per_prompt=8",),
        ("'grpo.num_generations_per_prompt'", "write actor_rollout_ref.rollout.n=8"),
    ),
    Case(
        "nemo_policy_model_name",
        "NeMo-RL's `policy.model_name=<dir>`",
        ("policy.model_name={model}",),
        ("'policy.model_name'", "write actor_rollout_ref.model.path=<model>"),
    ),
    # ---- config files and arguments passed the wrong way ----
    Case(
        "plus_whole_section",
        "`+data={train_batch_size: 8}`",
        ("+data={{train_batch_size: 8}}",),
        ("data is a config group", "data.train_batch_size=8"),
    ),
    Case(
        "config_dir_is_a_file",
        "`--config-dir=my_run.yaml` (a file)",
        ("--config-dir={ws}/my_run.yaml",),
        ("--config-dir=<tmp>/my_run.yaml is a file", "key=value overrides"),
        make=text_file("my_run.yaml", RUN_YAML),
    ),
    Case(
        "yaml_file_as_argument",
        "a config file as an argument",
        ("{ws}/my_run.yaml",),
        ("'<tmp>/my_run.yaml' is a config file", "key=value overrides"),
        make=text_file("my_run.yaml", RUN_YAML),
    ),
    Case(
        "torchrun_flag_after_module",
        "`--nproc_per_node=2` after `-m dagrl.main_dag`",
        ("--nproc_per_node=2",),
        ("torchrun's option", "torchrun --nproc_per_node=2 -m"),
    ),
    Case(
        "shell_comment_words",
        "`trainer.total_epochs=1 # one epoch` reaching the command (zsh)",
        ("trainer.total_epochs=1", "#", "one", "epoch"),
        ("'#' starts a comment", "move the comment"),
    ),
    Case(
        "backslash_space_argument",
        "a lone ' ' argument (`\\` with a space after it)",
        (" ",),
        ("only whitespace", "remove the space after the"),
    ),
    Case(
        "config_name_flag",
        "verl's `--config-name=ppo_megatron_trainer`",
        ("--config-name=ppo_megatron_trainer",),
        ("--config-name=ppo_megatron_trainer", "conf/dagrl.yaml", "drop --config-name"),
    ),
    Case(
        "override_with_dashes",
        "`--data.train_batch_size=8` (argparse style)",
        ("--data.train_batch_size=8",),
        ("'--data.train_batch_size=8' is not an option", "write data.train_batch_size=8"),
    ),
    Case(
        "override_yaml_colon",
        "`data.train_batch_size: 8` (YAML's colon, split by the shell)",
        ("data.train_batch_size:", "8"),
        ("write data.train_batch_size=8", "not YAML's key: value"),
    ),
    Case(
        "override_spaces_around_equals",
        "`optim.lr = 1e-6` (three words)",
        ("actor_rollout_ref.actor.optim.lr", "=", "1e-6"),
        ("write actor_rollout_ref.actor.optim.lr=<value>",),
    ),
    Case(
        "space_after_equals",
        "`trainer.total_epochs= 2` (the shell splits it in two)",
        ("trainer.total_epochs=", "2"),
        ("'trainer.total_epochs=' has no value and '2' follows it", "write trainer.total_epochs=2"),
    ),
    Case(
        "logger_split_by_space",
        "`trainer.logger=console tensorboard` (the shell splits the value)",
        ("trainer.logger=console", "tensorboard"),
        ("'tensorboard' follows 'trainer.logger=console'", "trainer.logger='[console,tensorboard]'"),
    ),
    # ---- what Hydra's grammar refuses, with the fix for the key or the characters ----
    Case(
        "key_trailing_dot",
        "`trainer.=2`",
        ("trainer.=2",),
        ("the key 'trainer.' has an empty part", "trainer.<name>=2"),
    ),
    Case(
        "list_negative_index",
        "`trainer.logger.-1=jsonl`",
        ("trainer.logger.-1=jsonl",),
        ("no negative index", "trainer.logger.<index>=jsonl"),
    ),
    Case(
        "list_append_plus_equals",
        "`trainer.logger+=[wandb]` (Python's +=)",
        ("trainer.logger+=[wandb]",),
        ("Hydra has no '+='", "trainer.logger=[console,tensorboard,wandb]"),
    ),
    Case(
        "lr_unicode_minus",
        "`optim.lr=1e−6` (a Unicode minus)",
        ("actor_rollout_ref.actor.optim.lr=1e\u22126",),
        ("U+2212", "actor_rollout_ref.actor.optim.lr=1e-6"),
    ),
    Case(
        "train_files_smart_quotes",
        "`data.train_files=\u201c...\u201d` (curly quotes from a document)",
        ("data.train_files=\u201c{train}\u201d",),
        ("U+201C", "data.train_files=<data>/train.parquet"),
    ),
    Case(
        "tilde_other_user",
        "`model.path=~alice/models/qwen`",
        ("actor_rollout_ref.model.path=~alice/models/qwen",),
        ("'~alice'", "/models/qwen"),
    ),
    Case(
        "vllm_engine_kwargs_string",
        "`rollout.engine_kwargs.vllm=swap_space=4`",
        ("actor_rollout_ref.rollout.engine_kwargs.vllm=swap_space=4",),
        ("is a map", "+actor_rollout_ref.rollout.engine_kwargs.vllm.swap_space=4"),
    ),
    Case(
        "lr_trailing_comma",
        "`actor_rollout_ref.actor.optim.lr=1e-6,` (a trailing comma)",
        ("actor_rollout_ref.actor.optim.lr=1e-6,",),
        ("override 'actor_rollout_ref.actor.optim.lr=1e-6,'", "drop the trailing comma"),
    ),
    Case(
        "number_with_decimal_comma",
        "`actor.clip_ratio=0,2` (a decimal comma)",
        ("actor_rollout_ref.actor.clip_ratio=0,2",),
        ("a decimal point, not a comma", "actor_rollout_ref.actor.clip_ratio=0.2"),
    ),
    Case(
        "number_with_thousands_separator",
        "`data.train_batch_size=1,024`",
        ("data.train_batch_size=1,024",),
        ("no thousands separator", "data.train_batch_size=1024"),
    ),
    Case(
        "number_with_pasted_backslash",
        "`optim.lr=3e-6\\` (a line continuation pasted into the value)",
        ("actor_rollout_ref.actor.optim.lr=3e-6\\",),
        ("ends with a backslash", "actor_rollout_ref.actor.optim.lr=3e-6"),
    ),
    Case(
        "number_with_pasted_semicolon",
        "`optim.lr=1e-6;`",
        ("actor_rollout_ref.actor.optim.lr=1e-6;",),
        ("takes a number", "drop what follows it (';')", "actor_rollout_ref.actor.optim.lr=1e-6"),
    ),
    Case(
        "override_double_equals",
        "`data.train_batch_size==8`",
        ("data.train_batch_size==8",),
        ("one '=' goes between key and value", "data.train_batch_size=8"),
    ),
    Case(
        "logger_list_in_quotes",
        '`trainer.logger="[console,jsonl]"` (a quoted list: one string)',
        ('trainer.logger="[console,jsonl]"',),
        ("trainer.logger='[console,jsonl]' is one string (a list inside quotes)", "'trainer.logger=[console,jsonl]'"),
    ),
    Case(
        "list_lost_its_open_bracket",
        "`trainer.logger=console,jsonl]`",
        ("trainer.logger=console,jsonl]",),
        ("a list opens with '['", "trainer.logger=[console,jsonl]"),
    ),
    Case(
        "list_as_tuple",
        "`optim.betas=(0.9,0.999)` (Python's tuple)",
        ("actor_rollout_ref.actor.optim.betas=(0.9,0.999)",),
        ("a list is written in brackets", "actor_rollout_ref.actor.optim.betas=[0.9,0.999]"),
    ),
    Case(
        "list_index_in_brackets",
        "`trainer.logger[1]=jsonl` (Python's index)",
        ("trainer.logger[1]=jsonl",),
        ("write trainer.logger.1=jsonl",),
    ),
    Case(
        "map_as_json",
        '`reward_kwargs={"scale": 2}` (JSON\'s quoted keys)',
        ('custom_reward_function.reward_kwargs={{"scale": 2}}',),
        ("without quotes around its keys", "+custom_reward_function.reward_kwargs.scale=2"),
    ),
    # ---- interpolations and shapes OmegaConf refuses while composing ----
    Case(
        "dollar_brace_home",
        "`data.train_files='${HOME}/data/train.parquet'` (the shell's syntax)",
        ("data.train_files=${{HOME}}/data/train.parquet",),
        ("${HOME} is read as a config key", "${oc.env:HOME}"),
    ),
    Case(
        "env_resolver_old_name",
        "`default_local_dir=${env:HOME}/ckpts` (OmegaConf 1's resolver)",
        ("trainer.default_local_dir=${{env:HOME}}/ckpts",),
        ("no interpolation resolver 'env'", "oc.env"),
    ),
    Case(
        "logger_as_map",
        "`trainer.logger={console: true}`",
        ("trainer.logger={{console: true}}",),
        ("trainer.logger is a list, not a map", "trainer.logger=["),
    ),
    Case(
        "dag_node_removed_with_readers",
        "`dag.nodes.rollout=null` (a node removed that others depend on)",
        ("dag.nodes.rollout=null",),
        ("depends on unknown node 'rollout'",),
    ),
    Case(
        "reward_kwargs_as_list",
        "`custom_reward_function.reward_kwargs=[scale,2]`",
        ("custom_reward_function.reward_kwargs=[scale,2]",),
        ("is a map, not a list", "+custom_reward_function.reward_kwargs.<name>=<value>"),
    ),
    Case(
        "interpolation_unclosed",
        "`${...` without its closing brace",
        ("actor_rollout_ref.rollout.n=${{data.train_batch_size",),
        ("close the interpolation", "actor_rollout_ref.rollout.n=${data.train_batch_size}"),
    ),
    # ---- paths and user code named the way another tool names them ----
    Case(
        "train_files_unexpanded_var",
        "`data.train_files=$DATA_DIR/train.parquet`",
        ("data.train_files=$DATA_DIR/train.parquet",),
        ("holds $DATA_DIR", "${oc.env:DATA_DIR}"),
    ),
    Case(
        "reward_path_with_name",
        "`custom_reward_function.path=reward.py:compute_score`",
        ("custom_reward_function.path={ws}/reward.py:compute_score",),
        ("custom_reward_function.path=<tmp>/reward.py custom_reward_function.name=compute_score",),
        make=text_file("reward.py", REWARD_OK),
    ),
    Case(
        "pipeline_fn_file_path",
        "`dag.custom_pipeline_fn=graphs.py:build` (a file path)",
        ("dag.custom_pipeline_fn={ws}/graphs.py:build",),
        ("not a file path", "PYTHONPATH", "graphs:build"),
        make=text_file("graphs.py", "def build():\n    return []\n"),
    ),
    Case(
        "default_local_dir_is_a_checkpoint",
        "`trainer.default_local_dir=<root>/global_step_2`",
        ("trainer.default_local_dir={ckpt}/global_step_2",),
        ("is a checkpoint, not a checkpoint root", "trainer.resume_from_path=<tmp>/ckpt/global_step_2"),
    ),
    Case(
        "path_with_unexpanded_tilde",
        "`data.train_files=~/data/train.parquet` (the shell expands `~` only at the start of a word)",
        ("data.train_files=~/data/train.parquet",),
        ("override 'data.train_files=~/data/train.parquet'", "write the full path"),
    ),
    Case(
        "checkpoint_dir_tilde",
        "`trainer.default_local_dir=~/ckpts`",
        ("trainer.default_local_dir=~/dagrl_ckpts",),
        ("trainer.default_local_dir=~/dagrl_ckpts", "write the full path"),
    ),
    Case(
        "shell_variable_in_path",
        "`trainer.default_local_dir=$CKPT/run` that the shell did not expand (single quotes)",
        ("trainer.default_local_dir=$DAGRL_CKPT/run",),
        ("trainer.default_local_dir", "$DAGRL_CKPT", "not expanded", "${oc.env:DAGRL_CKPT}"),
    ),
    Case(
        "train_files_shell_pattern",
        "`data.train_files=.../*.parquet` unexpanded",
        ("data.train_files={ws}/shards/*.parquet",),
        ("is a shell pattern", "does not expand", "list the files"),
        make=lambda ws, paths: (ws / "shards").mkdir(),
    ),
    Case(
        "train_files_url",
        "`data.train_files=s3://bucket/train.parquet`",
        ("data.train_files=s3://bucket/train.parquet",),
        ("data.train_files", "is a URL (s3://)", "local"),
    ),
    Case(
        "checkpoint_dir_url",
        "`trainer.default_local_dir=hdfs://...` (verl's HDFS habit)",
        ("trainer.default_local_dir=hdfs://namenode/user/me/ckpt",),
        ("trainer.default_local_dir", "is a URL (hdfs://)"),
    ),
    # ---- data files from other tools, and rows the first step would refuse ----
    Case(
        "train_files_spark_dir",
        "data.train_files names a directory of parquet part files",
        ("data.train_files={ws}/train.parquet",),
        ("2 parquet part file(s)", "part-00000"),
        make=partitioned_parquet,
    ),
    Case(
        "hf_saved_dataset_dir",
        "data.train_files names a datasets save_to_disk folder",
        ("data.train_files={ws}/gsm8k_saved",),
        ("save_to_disk", "load_from_disk", ".to_parquet("),
        make=datasets_saved_to_disk,
    ),
    Case(
        "extra_info_max_len_string",
        "extra_info.max_response_length written as a string",
        ("data.train_files={ws}/bad.parquet",),
        ("extra_info.max_response_length of type string", "token count"),
        make=rows_changed(_set(None, "extra_info.max_response_length", "4")),
    ),
    Case(
        "extra_info_json_string",
        "the extra_info column as json.dumps strings",
        ("data.train_files={ws}/bad.parquet",),
        ("extra_info column of strings", "json.loads"),
        make=rows_changed(_extra_info_as_json),
    ),
    Case(
        "interaction_name_unknown",
        "rows name interaction 'judge' that the interaction config lacks",
        (
            "data.train_files={ws}/bad.parquet",
            "actor_rollout_ref.rollout.multi_turn.enable=true",
            f"actor_rollout_ref.rollout.multi_turn.interaction_config_path={INTERACTION_CONFIG}",
        ),
        ("names the interaction 'judge'", "['try_again']"),
        make=rows_changed(_interaction_judge),
    ),
    # ---- model directories from other tools ----
    Case(
        "model_path_hf_cache_repo",
        "model.path names the hub cache's models--org--tiny folder",
        ("actor_rollout_ref.model.path={ws}/hub/models--org--tiny",),
        ("snapshots/0123abcd",),
        make=hub_cache_folder,
    ),
    Case(
        "model_path_verl_actor_dir",
        "model.path names verl's global_step_10/actor (a Megatron checkpoint)",
        ("actor_rollout_ref.model.path={ws}/global_step_10/actor",),
        (
            "is a Megatron checkpoint",
            "use_dist_checkpointing=true",
            "dist_checkpointing_path=<tmp>/global_step_10/actor",
        ),
        make=megatron_actor_dir,
    ),
    Case(
        "chat_template_jinja_empty",
        "chat_template.jinja is an empty file",
        ("actor_rollout_ref.model.path={ws}/model",),
        ("chat_template.jinja is empty",),
        make=chat_template(""),
    ),
    Case(
        "lm_head_missing_untied",
        "weights without lm_head.weight, tie_word_embeddings false",
        ("actor_rollout_ref.model.path={ws}/model",),
        ("no lm_head.weight", "re-save"),
        make=without_lm_head,
    ),
    Case(
        "eos_id_beyond_vocab",
        "config.json eos_token_id=50000 with vocab_size 400",
        ("actor_rollout_ref.model.path={ws}/model",),
        ("eos_token_id=50000", "vocab_size=400"),
        make=eos_beyond_vocab,
    ),
    Case(
        "model_path_hf_cache_unfinished",
        "`model.path` at a hub cache folder whose snapshot holds nothing",
        ("actor_rollout_ref.model.path={ws}/models--Qwen--Qwen3-0.6B",),
        ("hub cache's folder", "did not finish", "download the model again", "snapshots/<revision>"),
        make=_hf_cache_unfinished,
    ),
    # ---- on-policy distillation (distillation.*, dag=opd) ----
    Case(
        "distillation_enabled_on_grpo",
        "`distillation.enabled=true` on the GRPO graph (no teacher node)",
        ("distillation.enabled=true", "distillation.teacher_model.model_path={model}"),
        ("distillation.enabled=true but the graph has no teacher node", "run dag=opd"),
    ),
    Case(
        "opd_without_teacher",
        "dag=opd without distillation.teacher_model.model_path",
        ("dag=opd",),
        ("distillation.teacher_model.model_path is not set", "the student's tokenizer"),
    ),
    Case(
        "opd_teacher_other_tokenizer",
        "a teacher whose tokenizer gives tokens other ids than the student's",
        ("dag=opd", "distillation.teacher_model.model_path={ws}/teacher"),
        (
            "the teacher's tokenizer (<tmp>/teacher) differs from the student's",
            "2 tokens have other ids",
            "use a teacher with the student's tokenizer",
        ),
        make=teacher_with_swapped_tokens,
    ),
    Case(
        "opd_teacher_small_vocabulary",
        "a teacher whose embedding has fewer rows than the student's token ids",
        ("dag=opd", "distillation.teacher_model.model_path={ws}/teacher"),
        ("the teacher's vocab_size=100", "has no row for the student's token id"),
        make=teacher_with_vocab(100),
    ),
    Case(
        "opd_supervised_distillation",
        "`distillation.distillation_loss.use_policy_gradient=false` (verl's supervised KL loss)",
        (
            "dag=opd",
            "distillation.teacher_model.model_path={model}",
            "distillation.distillation_loss.use_policy_gradient=false",
        ),
        ("use_policy_gradient=false", "set it true"),
    ),
    Case(
        "distillation_key_without_opd",
        "`distillation.distillation_loss.loss_mode=k3` on the GRPO graph",
        ("distillation.distillation_loss.loss_mode=k3",),
        ("has no effect", "distillation.enabled=false", "dag=opd"),
    ),
    # ---- settings another key switches off (they would be silently ignored) ----
    Case(
        "critic_model_path_on_grpo",
        "`critic.model.path=...` on dag=grpo (no critic)",
        ("critic.model.path={model}",),
        ("critic.model.path='<model>' has no effect", "dag=ppo"),
    ),
    Case(
        "kl_loss_coef_without_kl_loss",
        "`actor.kl_loss_coef=0.01` with use_kl_loss=false",
        ("actor_rollout_ref.actor.kl_loss_coef=0.01",),
        ("has no effect", "set actor_rollout_ref.actor.use_kl_loss=true"),
    ),
    Case(
        "adaptive_kl_without_kl_in_reward",
        "`algorithm.kl_ctrl.type=adaptive` with use_kl_in_reward=false",
        ("algorithm.kl_ctrl.type=adaptive",),
        ("has no effect", "set algorithm.use_kl_in_reward=true"),
    ),
    Case(
        "min_lr_with_constant_schedule",
        "`optim.min_lr=1e-7` with lr_decay_style=constant",
        ("actor_rollout_ref.actor.optim.min_lr=1e-7",),
        ("has no effect", "lr_decay_style=cosine or linear"),
    ),
    Case(
        "loss_scale_factor_without_mode",
        "`actor.loss_scale_factor=512` with loss_agg_mode=token-mean",
        ("actor_rollout_ref.actor.loss_scale_factor=512",),
        ("has no effect", "loss_agg_mode=seq-mean-token-sum-norm"),
    ),
    Case(
        "warmup_steps_and_ratio",
        "`optim.lr_warmup_steps=10` and `lr_warmup_steps_ratio=0.1` (the ratio ignored)",
        ("actor_rollout_ref.actor.optim.lr_warmup_steps=10", "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.1"),
        ("lr_warmup_steps_ratio=0.1 has no effect", "lr_warmup_steps=-1"),
    ),
    Case(
        "gamma_with_grpo",
        "`algorithm.gamma=0.99` with adv_estimator=grpo",
        ("algorithm.gamma=0.99",),
        ("has no effect", "algorithm.adv_estimator=grpo does not discount"),
    ),
    Case(
        "val_temperature_without_sampling",
        "`val_kwargs.temperature=0.6` with val_kwargs.do_sample=false",
        ("actor_rollout_ref.rollout.val_kwargs.temperature=0.6",),
        ("has no effect", "val_kwargs.do_sample=true"),
    ),
    Case(
        "clip_cov_ratio_with_vanilla",
        "`policy_loss.clip_cov_ratio=0.01` with loss_mode=vanilla",
        ("actor_rollout_ref.actor.policy_loss.clip_cov_ratio=0.01",),
        ("has no effect", "set actor_rollout_ref.actor.policy_loss.loss_mode=clip_cov"),
    ),
    Case(
        "loss_agg_mode_with_sapo",
        "`actor.loss_agg_mode=token-sum` with loss_mode=sapo (which fixes its own)",
        ("actor_rollout_ref.actor.policy_loss.loss_mode=sapo", "actor_rollout_ref.actor.loss_agg_mode=token-sum"),
        ("loss_agg_mode='token-sum' has no effect", "aggregates with seq-mean-token-mean"),
    ),
    Case(
        "remax_with_partial_rollout",
        "`algorithm.adv_estimator=remax` with partial rollout (its greedy baseline "
        "is made for single-turn batches only)",
        ("algorithm.adv_estimator=remax", "async_training.partial_rollout=true"),
        (
            "algorithm.adv_estimator=remax takes its baseline from one greedy response per prompt",
            "partial rollout",
            "set async_training.partial_rollout=false",
        ),
    ),
    Case(
        "passk_with_one_sample",
        "`algorithm.adv_estimator=grpo_passk` with `rollout.n=1`",
        ("actor_rollout_ref.rollout.n=1", "algorithm.adv_estimator=grpo_passk"),
        ("actor_rollout_ref.rollout.n=1", "second best", "2 or more"),
    ),
    Case(
        "test_freq_without_val_files",
        "`data.val_files=[]` with `trainer.test_freq=1` (no validation to run)",
        ("data.val_files=[]", "trainer.test_freq=1"),
        ("trainer.test_freq=1 has no effect", "data.val_files"),
    ),
    # ---- found only when a step runs (slow suite) ----
    Case(
        "reward_raises",
        "the reward function raises, reward_model.on_error=raise",
        ("custom_reward_function.path={ws}/reward.py", "reward_model.on_error=raise"),
        ("ZeroDivisionError", "reward_model.on_error=zero", "custom_reward_function"),
        make=text_file("reward.py", REWARD_RAISES),
        code=1,
        found=RUNTIME,
    ),
    Case(
        "reward_hangs",
        "the reward function hangs (reward_model.timeout_s=1, on_error=raise)",
        ("custom_reward_function.path={ws}/reward.py", "reward_model.on_error=raise", "reward_model.timeout_s=1"),
        ("timed out after 1 s", "reward_model.timeout_s"),
        make=text_file("reward.py", REWARD_HANGS),
        code=1,
        found=RUNTIME,
    ),
    Case(
        "reward_not_finite",
        "the reward function returns NaN, reward_model.on_error=raise",
        ("custom_reward_function.path={ws}/reward.py", "reward_model.on_error=raise"),
        ("non-finite score nan", "reward_model.on_error=zero"),
        make=text_file("reward.py", REWARD_NAN),
        code=1,
        found=RUNTIME,
    ),
    Case(
        "reward_exits",
        "the reward function calls `sys.exit(0)` (reward_model.on_error=zero: an exit is never scored 0)",
        ("custom_reward_function.path={ws}/reward.py",),
        ("compute_score in '<tmp>/reward.py'", "sys.exit(0)", "sample 0", "remove the sys.exit"),
        make=text_file("reward.py", REWARD_EXITS),
        code=1,
        found=RUNTIME,
    ),
    Case(
        "reward_fails_on_every_sample",
        "the reward function returns None for every response (reward_model.on_error=zero)",
        ("custom_reward_function.path={ws}/reward.py",),
        (
            "compute_score in '<tmp>/reward.py'",
            "failed on all",
            "of step 2",
            "returned None (a NoneType)",
            "fix the scorer",
        ),
        make=text_file("reward.py", REWARD_RETURNS_NONE),
        code=1,
        found=RUNTIME,
    ),
    Case(
        "reward_dict_without_score",
        "the reward function returns a dict without a `score` key (reward_model.on_error=raise)",
        ("custom_reward_function.path={ws}/reward.py", "reward_model.on_error=raise"),
        ("compute_score in '<tmp>/reward.py'", "sample 0", "without a 'score' key", "['acc', 'reward']"),
        make=text_file("reward.py", REWARD_DICT_WITHOUT_SCORE),
        code=1,
        found=RUNTIME,
    ),
)
