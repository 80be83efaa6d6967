"""Pre-flight checks of the data files: each file's footer (rows, columns), its first rows' prompts, and the columns
the reward reads. Every failure is a one-line ValueError naming the file and the fix (pre-flight files it under
data.train_files or data.val_files; opening a file is parquet_file.py's). Reads parquet footers and single columns
only; imports neither torch nor transformers.
"""

from __future__ import annotations

import json
import os
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dagrl.data.parquet_file import PREPROCESS, column_batches, corrupt, open_parquet

# Rows whose prompts pre-flight checks for the chat shape (the first of each file: a file written with the wrong
# shape has it in every row; a full scan is the startup length check's job).
PROMPT_ROWS_CHECKED = 16


def required_columns(prompt_key: str) -> tuple[str, ...]:
    """Columns every data file must have: the prompt, and what the reward needs to score it."""
    return (prompt_key, "data_source", "reward_model")


def check_schema(path: str, schema: pa.Schema, num_rows: int, prompt_key: str) -> None:
    if num_rows == 0:
        raise ValueError(
            f"data file {path!r} has no rows; regenerate it or remove it from data.train_files / data.val_files"
        )
    repeated = sorted({name for name in schema.names if schema.names.count(name) > 1})
    if repeated:
        raise ValueError(
            f"data file {path!r} has {len(repeated)} column name(s) twice "
            f"({', '.join(map(repr, repeated))}"
            f"): a reader cannot tell which one holds the data; write each column once (e.g. "
            f"df.loc[:, ~df.columns.duplicated()].to_parquet(...))"
        )
    for column in required_columns(prompt_key):
        if column not in schema.names:
            fix = (
                "set data.prompt_key to the prompt column"
                if column == prompt_key
                else f"regenerate it with {PREPROCESS}"
            )
            raise ValueError(f"data file {path!r} lacks the required column {column!r} (it has {schema.names}); {fix}")


def prompt_shape_problem(prompt: Any) -> str | None:
    """What is wrong with one row's prompt for a chat template (None: a non-empty list of {role, content})."""
    if isinstance(prompt, str):
        if _json_chat(prompt):
            return (
                "holds a JSON string of a chat list, not the list itself: write the decoded list "
                "(json.loads of each value) into the file"
            )
        return "holds a plain string, not a chat list: wrap it as [{'role': 'user', 'content': <text>}]"
    if prompt is None:
        return "is null"
    if not isinstance(prompt, list):
        return f"holds a {type(prompt).__name__}, not a chat list of {{role, content}} messages"
    if not prompt:
        return "is an empty list (no message to prompt with)"
    for message in prompt:
        if (
            isinstance(message, dict)
            and message.get("from") is not None
            and message.get("value") is not None
            and message.get("role") is None
        ):
            return (
                "holds ShareGPT messages ({from, value}): convert them to {role, content} (from human -> role "
                "user, gpt -> assistant, system -> system)"
            )
        if not isinstance(message, dict) or not isinstance(message.get("role"), str) or "content" not in message:
            keys = sorted(message) if isinstance(message, dict) else type(message).__name__
            return f"holds a message without role and content ({keys}), not a chat list of {{role, content}}"
        if message["role"] not in ROLES:
            return (
                f"holds a message with role {message['role']!r}: a chat template knows {', '.join(ROLES)} "
                f"(human -> user, gpt -> assistant)"
            )
        if not isinstance(message["content"], str):
            return (
                f"holds a {message['role']} message whose content is {type(message['content']).__name__}, not a string"
            )
    if not any(message["content"].strip() for message in prompt):
        return "holds only empty messages (no text to prompt with): drop the row or fill in its content"
    if not any(message["role"] == "user" for message in prompt):
        roles = sorted({message["role"] for message in prompt})
        return f"holds no user message (only {', '.join(roles)}): add the question as a {{'role': 'user'}} message"
    if prompt[-1]["role"] == "assistant":  # SFT conversations: the answer is in the prompt, the model answers again
        return (
            "ends with an assistant message (a conversation with its answer, as SFT data holds): an RL prompt "
            "ends with the user's turn and the model writes the reply; drop the trailing assistant message"
        )
    return None


ROLES = ("system", "user", "assistant", "tool")


def _json_chat(text: str) -> bool:
    """`text` is a JSON-encoded chat list (a json.dumps of the prompt column)."""
    if not text.lstrip().startswith(("[", "{")):
        return False
    try:
        value = json.loads(text)
    except ValueError:
        return False
    return isinstance(value, (list, dict))


def check_prompt_shapes(path: str, parquet: pq.ParquetFile, prompt_key: str, rows: int = PROMPT_ROWS_CHECKED) -> None:
    """The first `rows` prompts of a data file are chat lists of {role, content} (only their pages are read)."""
    try:
        batch = next(parquet.iter_batches(batch_size=rows, columns=[prompt_key]), None)
    except (pa.ArrowException, OSError) as error:
        raise corrupt(path, error) from error
    for row, prompt in enumerate(batch.column(0).to_pylist() if batch is not None else []):
        problem = prompt_shape_problem(prompt)
        if problem:
            raise ValueError(
                f"data file {path!r} row {row}: column {prompt_key!r} {problem}; fix the file (see "
                f"{PREPROCESS}) or set data.prompt_key to the column that holds the chat"
            )


def check_data_files(files: Sequence[str], prompt_key: str = "prompt") -> int:
    """Validates data files from their parquet footer and first prompts; returns the total row count.

    Raises a one-line ValueError naming the file for a missing, unreadable, empty or incomplete file, or one whose
    prompts are not chat lists.
    """
    if isinstance(files, str):
        files = [files]
    if not files:
        raise ValueError("no data files given; set data.train_files / data.val_files")
    total = 0
    for path in files:
        path = os.path.expanduser(path)
        parquet = open_parquet(path)
        num_rows = parquet.metadata.num_rows
        check_schema(path, parquet.schema_arrow, num_rows, prompt_key)
        check_prompt_shapes(path, parquet, prompt_key)
        check_extra_info(path, parquet)
        total += num_rows
    return total


def check_extra_info(path: str, parquet: pq.ParquetFile) -> None:
    """extra_info, when a file has it, is a struct (each row's dict; the rollout reads its max_response_length,
    the agent loop its interaction_kwargs and tools_kwargs) and its max_response_length a positive integer: both
    were found only at the first step, once the models were built."""
    schema = parquet.schema_arrow
    if "extra_info" not in schema.names:
        return
    kind = schema.field("extra_info").type
    if pa.types.is_null(kind):
        return
    if not pa.types.is_struct(kind):
        what = "strings (JSON text?)" if pa.types.is_string(kind) or pa.types.is_large_string(kind) else str(kind)
        raise ValueError(
            f"data file {path!r} has an extra_info column of {what}, not a struct of each row's "
            f"fields: write the dicts themselves (e.g. json.loads of each value) into the file"
        )
    if kind.get_field_index("max_response_length") < 0:
        return
    field = kind.field("max_response_length").type
    if not (pa.types.is_integer(field) or pa.types.is_null(field)):
        raise ValueError(
            f"data file {path!r} has extra_info.max_response_length of type {field}, not an integer: "
            f"write each row's response limit as a token count (an int), or drop the field"
        )
    offset = 0
    for batch in column_batches(path, "extra_info.max_response_length"):
        values = batch.column(0).field("max_response_length").to_numpy(zero_copy_only=False)
        low = [i for i, v in enumerate(values) if v is not None and v == v and v < 1]
        if low:
            raise ValueError(
                f"data file {path!r} row {offset + low[0]} has extra_info.max_response_length="
                f"{values[low[0]]:g}, not a positive integer: set a token count >= 1 (capped at "
                f"data.max_response_length) or drop it"
            )
        offset += batch.num_rows


def nested_values(path: str, dotted: str) -> dict[Any, int]:
    """The distinct non-null values of a nested field (extra_info.interaction_kwargs.name) of a data file, each with
    the first row that has it; {} when the file has no such field. Reads that field's pages only."""
    path = os.path.expanduser(path)
    kind: Any = open_parquet(path).schema_arrow
    for part in dotted.split("."):
        names = (
            kind.names
            if isinstance(kind, pa.Schema)
            else [kind.field(i).name for i in range(kind.num_fields)]
            if pa.types.is_struct(kind)
            else []
        )
        if part not in names:
            return {}
        kind = kind.field(part).type
    first: dict[Any, int] = {}
    offset = 0
    for batch in column_batches(path, dotted):
        column = batch.column(0)
        for part in dotted.split(".")[1:]:
            column = column.field(part)
        for row, value in enumerate(column.to_pylist()):
            if value is not None and value not in first:
                first[value] = offset + row
        offset += batch.num_rows
    return first


def data_sources(path: str) -> dict[Any, int]:
    """The distinct `data_source` values of a data file, each with the first row that has it (the data_source
    column only is read)."""
    import pyarrow.compute as pc

    first: dict[Any, int] = {}
    offset = 0
    for batch in column_batches(os.path.expanduser(path), "data_source"):
        column = batch.column(0)
        if pa.types.is_dictionary(column.type):  # a categorical column written by pandas
            column = column.dictionary_decode()
        for value in pc.unique(column).to_pylist():
            if value not in first:
                found = (
                    pc.index(column, pa.scalar(value, column.type)).as_py()
                    if value is not None
                    else int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
                )
                first[value] = offset + int(found)
        offset += batch.num_rows
    return first


def first_row_without_ground_truth(path: str) -> int | None:
    """The first row of a data file whose reward_model has no ground_truth (missing or null), or None; reads the
    reward_model.ground_truth field only. -1: reward_model has no ground_truth field at all."""
    path = os.path.expanduser(path)
    field_type = open_parquet(path).schema_arrow.field("reward_model").type
    if not pa.types.is_struct(field_type):  # the reward manager reads reward_model["ground_truth"] of every row
        raise ValueError(
            f"data file {path!r} has a reward_model column of {field_type}, not a struct "
            f"{{style, ground_truth}}: every row's reward is scored against reward_model.ground_truth; "
            f"regenerate it with {PREPROCESS}"
        )
    if field_type.get_field_index("ground_truth") < 0:
        return -1
    offset = 0
    for batch in column_batches(path, "reward_model.ground_truth"):  # that leaf's pages only
        column = batch.column(0)
        missing = column.is_null().to_numpy(zero_copy_only=False) | column.field("ground_truth").is_null().to_numpy(
            zero_copy_only=False
        )
        if missing.any():
            return offset + int(np.flatnonzero(missing)[0])
        offset += batch.num_rows
    return None


def check_ground_truth_type(path: str) -> None:
    """The built-in scorers compare str(ground_truth) with the response's answer: a list or struct never matches."""
    field_type = open_parquet(os.path.expanduser(path)).schema_arrow.field("reward_model").type
    if not pa.types.is_struct(field_type) or field_type.get_field_index("ground_truth") < 0:
        return  # first_row_without_ground_truth says so
    truth_type = field_type.field("ground_truth").type
    if pa.types.is_nested(truth_type):
        raise ValueError(
            f"data file {path!r} has reward_model.ground_truth of type {truth_type}, not a string: the "
            f"built-in scorers compare the response's answer with str(ground_truth), so every response "
            f"would score 0; store the answer itself (e.g. ground_truth[0]), or set "
            f"custom_reward_function.path to a scorer that takes this type"
        )


def check_reward_inputs(files: Sequence[str], known_sources: Sequence[str] | None) -> None:
    """Every row can be scored: its reward_model has a ground_truth, and (built-in scorers, `known_sources` given)
    its data_source has a scorer. Raises a one-line ValueError naming the file, the row and the fix."""
    for path in [files] if isinstance(files, str) else files:
        if known_sources is not None:
            for source, row in data_sources(path).items():
                if source not in known_sources:
                    raise ValueError(
                        f"data file {path!r} has data_source {source!r} (first at row {row}) and no built-in reward "
                        f"scorer takes it (built-in: {', '.join(sorted(known_sources))}): set "
                        f"custom_reward_function.path (and .name) to a file defining compute_score(data_source, "
                        f"solution_str, ground_truth, extra_info), or fix the file's data_source"
                    )
        row = first_row_without_ground_truth(path)
        if known_sources is not None:
            check_ground_truth_type(path)
        if row == -1:
            raise ValueError(
                f"data file {path!r} has no reward_model.ground_truth: every row needs the answer its "
                f"reward is scored against; regenerate it with {PREPROCESS}"
            )
        if row is not None and known_sources is not None:
            raise ValueError(
                f"data file {path!r} has a row without reward_model.ground_truth (first: row {row}): "
                f"the built-in scorers score against it; fill it in or drop such rows, or set "
                f"custom_reward_function.path to a scorer that needs none"
            )
