"""File makers for data files: the training rows changed, and files in other formats or layouts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable

from tests.reliability.corpus.case import Paths
from tests.reliability.corpus.model_makers import chat_template


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


def _data_dir(ws: Path, paths: Paths) -> None:
    (ws / "data").mkdir()
    shutil.copy(paths.train, ws / "data" / "train.parquet")


def _rename_ground_truth(rows: list[dict]) -> None:
    for row in rows:
        row["reward_model"] = {"style": "rule", "answer": row["reward_model"]["ground_truth"]}


def template_and_rows(template: str, change: Callable[[list[dict]], None]) -> Callable[[Path, Paths], None]:
    """{ws}/model with chat_template.jinja replaced, and {ws}/bad.parquet: the training rows changed by `change`."""

    def make(ws: Path, paths: Paths) -> None:
        chat_template(template)(ws, paths)
        rows_changed(change)(ws, paths)

    return make


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


def file_list_txt(ws: Path, paths: Paths) -> None:
    """{ws}/files.txt: the training file's path twice, one a line (a list of files, not data)."""
    (ws / "files.txt").write_text(f"{paths.train}\n{paths.train}\n")


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
