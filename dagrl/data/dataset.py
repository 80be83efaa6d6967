"""Prompt datasets in the verl/siiRL parquet schema.

Each row holds `data_source` (str), `prompt` (a chat list of {role, content}), `ability`,
`reward_model` {style, ground_truth} and `extra_info` {split, index, ...}.

Every rank sees the whole dataset, but pays only for its own rows: with a `cache_dir`, the columns a run reads are
copied once (per machine, under a file lock) into an uncompressed Arrow file that each rank memory-maps, so
startup reads parquet footers only and a rank's memory holds just the pages of the rows it took (parquet itself
cannot fetch single rows without decoding whole row groups). `PromptDataset.rows(indices)` turns only the
requested rows into Python objects and tokenizes only them. `filter_overlong_prompts` needs every prompt's
length: each of the `world_size` ranks tokenizes its own contiguous share and the keep-masks are all-gathered.

The pre-flight checks of the files (check_data_files, check_reward_inputs) live in dagrl/data/checks.py; this
module imports torch lazily (inside `rows`).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dagrl.config.errors import ConfigError
from dagrl.data.checks import check_schema, required_columns
from dagrl.data.parquet_file import corrupt, first_line, open_parquet

if TYPE_CHECKING:
    from dagrl.data.batch import Batch

logger = logging.getLogger(__name__)

TRUNCATION_MODES = ("error", "left", "right", "middle")
# Columns passed through to the batch untouched; `ability` and `extra_info` may be absent from a file.
OPTIONAL_COLUMNS = ("ability", "extra_info")
# Rows tokenized per call when scanning a whole file (filter_overlong_prompts), and rows per record batch when
# copying a parquet file to Arrow: both bound peak memory.
_SCAN_CHUNK_ROWS = 1024


def _read_columns(path: str, parquet: pq.ParquetFile, columns: list[str], cache_dir: str | None) -> pa.Table:
    """The file's `columns`: memory-mapped from an Arrow copy in `cache_dir` (made on first use), or read into
    memory when `cache_dir` is None."""
    if cache_dir is not None:
        return pa.ipc.open_file(pa.memory_map(str(_arrow_copy(path, parquet, columns, cache_dir)))).read_all()
    try:
        return parquet.read(columns=columns)
    except (pa.ArrowException, OSError) as error:
        raise corrupt(path, error) from error


def _arrow_copy(path: str, parquet: pq.ParquetFile, columns: list[str], cache_dir: str) -> Path:
    """An uncompressed Arrow IPC copy of `columns` of `path`, named by the file's identity (path, size, mtime)."""
    stat = os.stat(path)
    identity = json.dumps([os.path.abspath(path), stat.st_size, stat.st_mtime_ns, columns])
    directory = Path(os.path.expanduser(cache_dir))
    target = directory / f"{Path(path).stem}-{hashlib.sha1(identity.encode()).hexdigest()[:16]}.arrow"
    if target.is_file():
        return target
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with open(directory / f"{target.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # the ranks of a machine (or of a shared filesystem) copy once
            if not target.is_file():
                _write_arrow(path, parquet, columns, partial)
                os.replace(partial, target)
                logger.info(
                    "copied the %d rows of %s to %s (memory-mapped by every rank)",
                    parquet.metadata.num_rows,
                    path,
                    target,
                )
    except OSError as error:
        raise ConfigError(
            "data.cache_dir",
            f"cannot write the Arrow copy of {path!r} to {str(directory)!r} "
            f"({first_line(error)}); set data.cache_dir to a writable directory",
        ) from error
    finally:
        if partial.is_file():  # left only by a failed copy
            partial.unlink()
    return target


def _write_arrow(path: str, parquet: pq.ParquetFile, columns: list[str], destination: Path) -> None:
    """Streams `columns` of the parquet file into an Arrow IPC file, a record batch at a time. A parquet read
    error means a corrupt data file (ValueError); a write error is left to the caller (OSError)."""
    batches = parquet.iter_batches(batch_size=_SCAN_CHUNK_ROWS, columns=columns)
    schema = pa.schema([parquet.schema_arrow.field(name) for name in columns])
    with pa.OSFile(str(destination), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
        while True:
            try:
                batch = next(batches, None)
            except (pa.ArrowException, OSError) as error:
                raise corrupt(path, error) from error
            if batch is None:
                return
            writer.write_batch(batch)


def _truncate(ids: list[int], max_length: int, mode: str) -> list[int]:
    if mode == "left":  # keep the end of the prompt, where the question usually is
        return ids[-max_length:]
    if mode == "right":
        return ids[:max_length]
    if mode == "middle":
        head = max_length // 2
        tail = max_length - head
        return ids[:head] + (ids[-tail:] if tail else [])
    raise ValueError(f"unknown truncation mode {mode!r}; data.truncation must be one of {TRUNCATION_MODES}")


class PromptDataset:
    """Rows of one or more parquet files; `rows(indices)` returns a left-padded, tokenized `Batch`.

    `rank`, `world_size` and `all_gather` (every rank's array, in rank order) share the overlong-prompt scan;
    `cache_dir` (see the module docstring) keeps the rows out of each rank's memory."""

    def __init__(
        self,
        files: Sequence[str],
        tokenizer: Any,
        max_prompt_length: int,
        truncation: str = "error",
        filter_overlong_prompts: bool = False,
        prompt_key: str = "prompt",
        cache_dir: str | None = None,
        rank: int = 0,
        world_size: int = 1,
        all_gather: Callable[[np.ndarray], list[np.ndarray]] | None = None,
        tools: list[dict] | None = None,
        check_overlong: bool = False,
    ) -> None:
        if isinstance(files, str):
            files = [files]
        if truncation not in TRUNCATION_MODES:
            raise ValueError(f"data.truncation={truncation!r} is not one of {TRUNCATION_MODES}")
        if max_prompt_length <= 0:
            raise ValueError(f"data.max_prompt_length must be positive, got {max_prompt_length}")
        if getattr(tokenizer, "chat_template", None) is None:
            raise ValueError(
                f"tokenizer {getattr(tokenizer, 'name_or_path', '')!r} has no chat template; "
                f"use an instruct/chat model or a tokenizer directory with chat_template set"
            )
        self.files = [os.path.expanduser(path) for path in files]
        self.tokenizer = tokenizer
        self.max_prompt_length = int(max_prompt_length)
        self.truncation = truncation
        self.prompt_key = prompt_key
        self.tools = list(tools or [])  # multi-turn: the tool schemas every prompt offers (dagrl/agent/prompting.py)
        if self.tools:
            from dagrl.agent.prompting import template_takes_tools

            self.template_renders_tools = template_takes_tools(tokenizer)
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        if pad_id is None:
            raise ValueError(
                f"tokenizer {getattr(tokenizer, 'name_or_path', '')!r} has neither a pad nor an eos "
                f"token; cannot left-pad prompts"
            )
        self.pad_token_id = int(pad_id)

        if not self.files:
            raise ValueError("no data files given; set data.train_files / data.val_files")
        self._tables: list[pa.Table] = []
        for path in self.files:
            parquet = open_parquet(path)
            check_schema(path, parquet.schema_arrow, parquet.metadata.num_rows, prompt_key)
            wanted = [c for c in (*required_columns(prompt_key), *OPTIONAL_COLUMNS) if c in parquet.schema_arrow.names]
            self._tables.append(_read_columns(path, parquet, wanted, cache_dir))
        # Dataset position -> (file number, row in that file); filtering removes positions.
        self._file_of = np.concatenate([np.full(t.num_rows, i, dtype=np.int64) for i, t in enumerate(self._tables)])
        self._row_of = np.concatenate([np.arange(t.num_rows, dtype=np.int64) for t in self._tables])
        if check_overlong:  # the trainer's start-up checks (a dataset built elsewhere tokenizes nothing up front)
            self._check_template()
        if filter_overlong_prompts:
            if world_size > 1 and all_gather is None:
                raise ValueError("filter_overlong_prompts over several ranks needs all_gather")
            self._drop_overlong_rows(rank, world_size, all_gather)
        elif check_overlong and truncation == "error":
            self._refuse_overlong_rows(rank, world_size, all_gather)

    # ---- public API ------------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self._row_of.shape[0])

    def rows(self, indices: Sequence[int] | np.ndarray) -> "Batch":
        """The rows at dataset positions `indices`, tokenized and left-padded to `max_prompt_length`."""
        import torch

        from dagrl.data.batch import Batch

        positions = np.asarray(indices, dtype=np.int64).reshape(-1)
        if positions.size and (positions.min() < 0 or positions.max() >= len(self)):
            raise IndexError(
                f"row index out of range: dataset has {len(self)} rows, asked for "
                f"{int(positions.min())}..{int(positions.max())}"
            )
        records = self._records(positions)
        chats = [self._chat(record, p) for record, p in zip(records, positions)]
        token_ids = self._tokenize(chats, positions)
        width = self.max_prompt_length
        input_ids = torch.full((len(records), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(records), width), dtype=torch.long)
        for i, (ids, position) in enumerate(zip(token_ids, positions)):
            if len(ids) > width:
                if self.truncation == "error":  # found when the row is first used: the CLI's one line, exit 2
                    raise ConfigError("data.max_prompt_length", self._overlong_message(int(position), len(ids)))
                ids = _truncate(ids, width, self.truncation)
            if ids:
                input_ids[i, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
                attention_mask[i, width - len(ids) :] = 1
        position_ids = (attention_mask.cumsum(dim=-1) - 1).clamp(min=0)
        return Batch(
            tensors={"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids},
            columns={
                "data_source": [r["data_source"] for r in records],
                "reward_model": [r["reward_model"] for r in records],
                "extra_info": [r.get("extra_info") or {} for r in records],
                "ability": [r.get("ability") for r in records],
                "raw_prompt": chats,
                "index": positions.tolist(),
            },
        )

    def prompt_lengths(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """Untruncated token counts of the chat-templated prompts at `indices`."""
        positions = np.asarray(indices, dtype=np.int64).reshape(-1)
        records = self._records(positions, columns=[self.prompt_key])
        ids = self._tokenize([self._chat(record, p) for record, p in zip(records, positions)], positions)
        return np.array([len(x) for x in ids], dtype=np.int64)

    # ---- internals -------------------------------------------------------------------------------
    def _records(self, positions: np.ndarray, columns: list[str] | None = None) -> list[dict]:
        """Python dicts for the rows at `positions` (all columns, or `columns`), in that order, reading each file's
        rows in one take."""
        records: list[dict | None] = [None] * len(positions)
        files = self._file_of[positions]
        for file_number in np.unique(files):
            slots = np.nonzero(files == file_number)[0]
            table = self._tables[file_number]
            table = table if columns is None else table.select(columns)
            taken = table.take(pa.array(self._row_of[positions[slots]]))
            for slot, record in zip(slots, taken.to_pylist()):
                records[slot] = record
        return records  # type: ignore[return-value]

    def _where(self, position: int) -> str:
        return f"row {int(self._row_of[position])} of {self.files[self._file_of[position]]!r}"

    def _chat(self, record: dict, position: int) -> list[dict]:
        chat = record[self.prompt_key]
        if not isinstance(chat, list) or not all(isinstance(m, dict) and "role" in m and "content" in m for m in chat):
            raise ValueError(
                f"{self._where(position)}: column {self.prompt_key!r} must be a chat list of "
                f"{{role, content}}, got {type(chat).__name__}; fix data.prompt_key or the file"
            )
        return chat

    def _tokenize(self, chats: list[list[dict]], positions: Sequence[int] | np.ndarray) -> list[list[int]]:
        """Token ids of the chat-templated prompts at dataset `positions`."""
        if not chats:
            return []
        offered = [({}, chat) for chat in chats]
        if self.tools:
            from dagrl.agent.prompting import with_tools

            offered = [
                (kwargs, chat)
                for chat, kwargs in (with_tools(chat, self.tools, self.template_renders_tools) for chat in chats)
            ]
        texts = [self._render(chat, int(position), kwargs) for (kwargs, chat), position in zip(offered, positions)]
        # The chat template already holds any BOS the model wants: no special tokens added on top.
        return list(self.tokenizer(texts, add_special_tokens=False)["input_ids"])

    def _render(self, chat: list[dict], position: int, kwargs: dict) -> str:
        """One prompt through the chat template. A template may raise on one row only (a raise_exception() for a
        role order that row has, a jinja error on its content), found by the start-up scan of every row or, with
        data.truncation other than error, when the row is drawn: either way one line naming the row and file."""
        try:
            return self.tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False, **kwargs)
        except Exception as error:  # noqa: BLE001 - jinja2's TemplateError, a KeyError or TypeError in the template
            name = getattr(self.tokenizer, "name_or_path", "")
            raise ConfigError(
                "actor_rollout_ref.model.path",
                f"the chat template of {name!r} fails on the prompt at "
                f"{self._where(position)} ({type(error).__name__}: {first_line(error)}); fix the "
                f"template (chat_template.jinja or tokenizer_config.json of "
                f"actor_rollout_ref.model.path) or that prompt",
            ) from error

    def _check_template(self) -> None:
        """The chat template renders the first prompt: one that raises stops here, before any model is built,
        not at the first step (the overlong-prompt scan renders the others)."""
        self._tokenize([self._chat(self._records(np.zeros(1, dtype=np.int64), columns=[self.prompt_key])[0], 0)], [0])

    def _overlong_message(self, position: int, length: int) -> str:
        return (
            f"prompt at {self._where(position)} is {length} tokens, longer than "
            f"data.max_prompt_length={self.max_prompt_length}; raise data.max_prompt_length, set "
            f"data.truncation=left|right|middle, or set data.filter_overlong_prompts=True"
        )

    def _refuse_overlong_rows(
        self, rank: int, world_size: int, all_gather: Callable[[np.ndarray], list[np.ndarray]] | None
    ) -> None:
        """data.truncation=error without filtering: a prompt that does not fit would stop the run when its row is
        first drawn, possibly epochs in; find it now (`check_overlong`). Each rank scans its contiguous share, as
        `_drop_overlong_rows` does, and every rank raises the same ConfigError naming the first such row."""
        if all_gather is None:  # no collective: this process scans every row
            rank, world_size = 0, 1
        share = np.array_split(np.arange(len(self)), world_size)[rank]
        found = np.array([-1, 0], dtype=np.int64)  # (position, length) of this share's first overlong prompt
        for start in range(0, len(share), _SCAN_CHUNK_ROWS):
            chunk = share[start : start + _SCAN_CHUNK_ROWS]
            lengths = self.prompt_lengths(chunk)
            over = np.flatnonzero(lengths > self.max_prompt_length)
            if over.size:
                found = np.array([chunk[over[0]], lengths[over[0]]], dtype=np.int64)
                break
        if world_size > 1:  # shares are in rank order: the first rank that found one has the first row
            found = next((part for part in all_gather(found) if part[0] >= 0), found)
        if found[0] >= 0:
            raise ConfigError("data.max_prompt_length", self._overlong_message(int(found[0]), int(found[1])))

    def _drop_overlong_rows(
        self, rank: int, world_size: int, all_gather: Callable[[np.ndarray], list[np.ndarray]] | None
    ) -> None:
        """Keeps the prompts that fit. Each rank tokenizes a contiguous 1/world_size of them (contiguous: it reads
        only those pages); the keep-masks are gathered in rank order, so every rank keeps the same rows."""
        share = np.array_split(np.arange(len(self)), world_size)[rank]
        keep = np.ones(len(share), dtype=bool)
        for start in range(0, len(share), _SCAN_CHUNK_ROWS):
            chunk = share[start : start + _SCAN_CHUNK_ROWS]
            keep[start : start + len(chunk)] = self.prompt_lengths(chunk) <= self.max_prompt_length
        if world_size > 1:
            keep = np.concatenate(all_gather(keep))
        dropped = int((~keep).sum())
        if dropped == len(self):  # a run with no prompts: found now, not when the sampler has nothing to draw
            raise ConfigError(
                "data.max_prompt_length",
                f"every prompt of {', '.join(map(repr, self.files))} is longer "
                f"than data.max_prompt_length={self.max_prompt_length}, so "
                f"data.filter_overlong_prompts=True left none; raise data.max_prompt_length",
            )
        self._file_of, self._row_of = self._file_of[keep], self._row_of[keep]
        logger.info(
            "filter_overlong_prompts: dropped %d of %d prompts longer than %d tokens (%s)",
            dropped,
            dropped + len(self),
            self.max_prompt_length,
            ", ".join(self.files),
        )
