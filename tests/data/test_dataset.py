from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from dagrl.data.checks import check_data_files
from dagrl.data.dataset import PromptDataset
from tests.helpers import make_row, write_parquet

QUESTIONS = [
    "What is 1 + 2?",
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many.",
    "What is 7 + 12?",
]


def template_ids(tokenizer, question: str) -> list[int]:
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=False
    )
    return tokenizer(text, add_special_tokens=False)["input_ids"]


@pytest.fixture()
def data_file(tmp_path):
    rows = [make_row(i, q, str(i)) for i, q in enumerate(QUESTIONS)]
    return write_parquet(str(tmp_path / "train.parquet"), rows)


def test_rows_left_pad_mask_and_positions_exact(tokenizer, data_file):
    lengths = [len(template_ids(tokenizer, q)) for q in QUESTIONS]
    width = max(lengths) + 3
    dataset = PromptDataset(
        [data_file], tokenizer, max_prompt_length=width, truncation="error", filter_overlong_prompts=False
    )
    assert len(dataset) == 3
    batch = dataset.rows([2, 0])
    assert batch["input_ids"].shape == (2, width) and batch["input_ids"].dtype == torch.long
    for row, question_index in enumerate([2, 0]):
        ids = template_ids(tokenizer, QUESTIONS[question_index])
        pad = width - len(ids)
        assert batch["input_ids"][row].tolist() == [tokenizer.pad_token_id] * pad + ids
        assert batch["attention_mask"][row].tolist() == [0] * pad + [1] * len(ids)
        assert batch["position_ids"][row].tolist() == [0] * pad + list(range(len(ids)))
    assert list(batch["index"]) == [2, 0]
    assert batch["reward_model"][0]["ground_truth"] == "2"
    assert batch["data_source"][1] == "dagrl/arithmetic"
    assert batch["extra_info"][0]["index"] == 2
    assert batch["raw_prompt"][1] == [{"role": "user", "content": QUESTIONS[0]}]
    assert batch["ability"][0] == "math"


def test_pads_with_eos_when_tokenizer_has_no_pad(tokenizer_without_pad, data_file):
    width = 200
    batch = PromptDataset([data_file], tokenizer_without_pad, width, "error", False).rows([0])
    pads = width - int(batch["attention_mask"][0].sum())
    assert pads > 0
    assert batch["input_ids"][0, :pads].tolist() == [tokenizer_without_pad.eos_token_id] * pads


@pytest.mark.parametrize("mode", ["left", "right", "middle"])
def test_truncation_modes_keep_the_right_tokens(tokenizer, data_file, mode):
    ids = template_ids(tokenizer, QUESTIONS[1])
    width = 11
    assert len(ids) > width
    batch = PromptDataset([data_file], tokenizer, width, mode, False).rows([1])
    expected = {"left": ids[-width:], "right": ids[:width], "middle": ids[:5] + ids[-6:]}[mode]
    assert batch["input_ids"][0].tolist() == expected
    assert batch["attention_mask"][0].tolist() == [1] * width
    assert batch["position_ids"][0].tolist() == list(range(width))


def test_truncation_error_names_file_row_and_fix(tokenizer, data_file):
    length = len(template_ids(tokenizer, QUESTIONS[1]))
    width = len(template_ids(tokenizer, QUESTIONS[0]))
    assert length > width
    dataset = PromptDataset([data_file], tokenizer, width, "error", False)
    dataset.rows([0])  # short rows are fine; only the overlong row fails, and only when asked for
    with pytest.raises(ValueError) as caught:
        dataset.rows([0, 1])
    message = str(caught.value)
    assert "\n" not in message
    for part in (data_file, "row 1", f"{length} tokens", "data.max_prompt_length", "data.truncation"):
        assert part in message


def test_filter_overlong_prompts_drops_rows(tokenizer, data_file):
    width = max(len(template_ids(tokenizer, q)) for q in (QUESTIONS[0], QUESTIONS[2]))
    dataset = PromptDataset([data_file], tokenizer, width, "error", filter_overlong_prompts=True)
    assert len(dataset) == 2
    batch = dataset.rows([0, 1])
    assert [e["index"] for e in batch["extra_info"]] == [0, 2]
    assert list(batch["index"]) == [0, 1]


def test_multiple_files_map_positions_to_rows(tokenizer, tmp_path):
    first = write_parquet(str(tmp_path / "a.parquet"), [make_row(i, f"What is {i} + 1?", str(i + 1)) for i in range(2)])
    second = write_parquet(
        str(tmp_path / "b.parquet"), [make_row(i, f"What is {i} + 5?", str(i + 5)) for i in range(3)]
    )
    dataset = PromptDataset([first, second], tokenizer, 64, "error", False)
    assert len(dataset) == 5
    batch = dataset.rows(np.array([4, 0, 2]))
    assert [r["ground_truth"] for r in batch["reward_model"]] == ["7", "1", "5"]
    assert check_data_files([first, second], "prompt") == 5


def test_missing_optional_columns_are_filled(tokenizer, tmp_path):
    row = make_row(0, "What is 1 + 1?", "2")
    del row["extra_info"], row["ability"]
    path = write_parquet(str(tmp_path / "minimal.parquet"), [row])
    batch = PromptDataset([path], tokenizer, 64, "error", False).rows([0])
    assert batch["extra_info"][0] == {} and batch["ability"][0] is None


def test_custom_prompt_key(tokenizer, tmp_path):
    row = make_row(0, "What is 1 + 1?", "2")
    row["messages"] = row.pop("prompt")
    path = write_parquet(str(tmp_path / "messages.parquet"), [row])
    with pytest.raises(ValueError, match="data.prompt_key"):
        PromptDataset([path], tokenizer, 64, "error", False)
    batch = PromptDataset([path], tokenizer, 64, "error", False, prompt_key="messages").rows([0])
    assert batch["raw_prompt"][0][0]["content"] == "What is 1 + 1?"


def _corrupt(tmp_path):
    path = tmp_path / "corrupt.parquet"
    path.write_bytes(b"this is not parquet at all")
    return str(path)


def _empty(tmp_path):
    rows = [make_row(0, "q", "1")]
    table = pa.Table.from_pylist(rows).slice(0, 0)
    path = str(tmp_path / "empty.parquet")
    pq.write_table(table, path)
    return path


def _no_reward_model(tmp_path):
    row = make_row(0, "q", "1")
    del row["reward_model"]
    return write_parquet(str(tmp_path / "no_reward.parquet"), [row])


@pytest.mark.parametrize(
    "make_file, expected",
    [
        (lambda tmp: str(tmp / "missing.parquet"), "does not exist"),
        (_corrupt, "not a readable parquet file"),
        (_empty, "has no rows"),
        (_no_reward_model, "'reward_model'"),
        (lambda tmp: str(tmp), "is a directory"),
    ],
)
def test_bad_files_give_one_line_errors(tokenizer, tmp_path, make_file, expected):
    path = make_file(tmp_path)
    for build in (
        lambda: check_data_files([path], "prompt"),
        lambda: PromptDataset([path], tokenizer, 64, "error", False),
    ):
        with pytest.raises(ValueError) as caught:
            build()
        message = str(caught.value)
        assert expected in message and path in message and "\n" not in message


def test_out_of_range_index(tokenizer, data_file):
    with pytest.raises(IndexError):
        PromptDataset([data_file], tokenizer, 64, "error", False).rows([3])


def test_check_data_files_does_not_import_torch(data_file):
    code = (
        "import sys; from dagrl.data.checks import check_data_files; "
        f"n = check_data_files([{data_file!r}], 'prompt'); assert n == 3, n; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    )
    assert result.returncode == 0, result.stderr


# ---- each rank pays only for its own rows --------------------------------------------------------------------
class RecordingTokenizer:
    """Delegates to a real tokenizer and records the question of every prompt it applies the template to."""

    def __init__(self, inner):
        self.inner = inner
        self.templated: list[str] = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def apply_chat_template(self, chat, **kwargs):
        self.templated.append(chat[-1]["content"])
        return self.inner.apply_chat_template(chat, **kwargs)

    def __call__(self, *args, **kwargs):
        return self.inner(*args, **kwargs)


def arithmetic_file(path, count: int, pad: int = 0) -> str:
    """`count` rows whose question i is unique; question i is padded by `pad * (i % 3)` words (some overlong)."""
    return write_parquet(
        str(path), [make_row(i, f"What is {i} + 1?" + " more" * (pad * (i % 3)), str(i + 1)) for i in range(count)]
    )


def test_two_ranks_read_and_tokenize_only_their_share_of_the_global_batch(tokenizer, tmp_path):
    from dagrl.data.sampler import EpochSampler, rank_share

    path = arithmetic_file(tmp_path / "train.parquet", 40)
    whole = PromptDataset([path], tokenizer, 64, "error", False, cache_dir=str(tmp_path / "cache"))
    sampler = EpochSampler(len(whole), batch_size=8, seed=3)
    sampler.next_batch()  # the second step's batch: not simply the first rows
    _, global_batch = sampler.next_batch()
    expected = whole.rows(global_batch)

    parts, seen = [], []
    for rank in range(2):
        recording = RecordingTokenizer(tokenizer)
        dataset = PromptDataset(
            [path], recording, 64, "error", False, cache_dir=str(tmp_path / "cache"), rank=rank, world_size=2
        )
        assert recording.templated == []  # building the dataset tokenizes nothing
        parts.append(dataset.rows(global_batch[rank_share(len(global_batch), rank, 2)]))
        seen.append(recording.templated)
    assert [len(s) for s in seen] == [4, 4]
    for rank, part in enumerate(parts):  # a rank templated exactly the prompts of its own rows
        assert seen[rank] == [chat[-1]["content"] for chat in part["raw_prompt"]]
    assert torch.equal(torch.cat([p["input_ids"] for p in parts]), expected["input_ids"])
    assert torch.equal(torch.cat([p["attention_mask"] for p in parts]), expected["attention_mask"])
    for column in ("index", "reward_model", "extra_info", "raw_prompt", "data_source"):
        assert list(parts[0][column]) + list(parts[1][column]) == list(expected[column])
    assert list(expected["index"]) == global_batch.tolist()
    assert len(list((tmp_path / "cache").glob("*.arrow"))) == 1  # one copy, memory-mapped by every rank


def test_overlong_scan_is_split_over_ranks_and_gathered(tokenizer, tmp_path):
    import threading

    from transformers import AutoTokenizer

    path = arithmetic_file(tmp_path / "train.parquet", 30, pad=10)
    width = len(template_ids(tokenizer, "What is 10 + 1?" + " more" * 10))  # keeps i % 3 in (0, 1)
    single = PromptDataset([path], tokenizer, width, "error", True, cache_dir=str(tmp_path / "cache"))
    assert len(single) == 20

    barrier, shares = threading.Barrier(2), [None, None]

    def all_gather(rank: int):
        def gather(local):
            shares[rank] = local
            barrier.wait()
            return list(shares)

        return gather

    # a tokenizer each: a fast tokenizer is not meant to be shared between threads
    recorders = [RecordingTokenizer(AutoTokenizer.from_pretrained(tokenizer.name_or_path)) for _ in range(2)]
    built, errors = [None, None], []

    def build(rank: int) -> None:
        try:
            built[rank] = PromptDataset(
                [path],
                recorders[rank],
                width,
                "error",
                True,
                rank=rank,
                world_size=2,
                cache_dir=str(tmp_path / "cache"),
                all_gather=all_gather(rank),
            )
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)
            barrier.abort()

    threads = [threading.Thread(target=build, args=(rank,)) for rank in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    questions = [f"What is {i} + 1?" + " more" * (10 * (i % 3)) for i in range(30)]
    assert recorders[0].templated == questions[:15] and recorders[1].templated == questions[15:]
    everything = np.arange(20)
    for dataset in built:
        assert len(dataset) == 20
        assert torch.equal(dataset.rows(everything)["input_ids"], single.rows(everything)["input_ids"])
        assert [e["index"] for e in dataset.rows(everything)["extra_info"]] == [i for i in range(30) if i % 3 != 2]


def test_a_rank_maps_the_arrow_copy_instead_of_loading_rows(tokenizer, tmp_path):
    path = arithmetic_file(tmp_path / "big.parquet", 4000, pad=40)
    size = pq.read_table(path).nbytes
    assert size > 1_000_000
    PromptDataset([path], tokenizer, 512, "left", False, cache_dir=str(tmp_path / "cache"))  # makes the copy
    before = pa.total_allocated_bytes()
    mapped = PromptDataset([path], tokenizer, 512, "left", False, cache_dir=str(tmp_path / "cache"))
    assert pa.total_allocated_bytes() - before < size / 20
    loaded = PromptDataset([path], tokenizer, 512, "left", False)  # no cache_dir: rows held in memory
    assert pa.total_allocated_bytes() - before > size / 2
    rows = [0, 3999, 1234]
    assert torch.equal(mapped.rows(rows)["input_ids"], loaded.rows(rows)["input_ids"])


def test_arrow_copy_follows_a_rewritten_file(tokenizer, tmp_path):
    path = tmp_path / "train.parquet"
    arithmetic_file(path, 3)
    first = PromptDataset([str(path)], tokenizer, 64, "error", False, cache_dir=str(tmp_path / "cache"))
    assert [r["ground_truth"] for r in first.rows([0, 2])["reward_model"]] == ["1", "3"]
    write_parquet(str(path), [make_row(i, f"What is {i} + 5?", str(i + 5)) for i in range(4)])
    second = PromptDataset([str(path)], tokenizer, 64, "error", False, cache_dir=str(tmp_path / "cache"))
    assert len(second) == 4
    assert [r["ground_truth"] for r in second.rows([0, 2])["reward_model"]] == ["5", "7"]


def test_unwritable_cache_dir_is_a_config_error(tokenizer, data_file, tmp_path):
    from dagrl.config.errors import ConfigError

    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(ConfigError) as caught:
        PromptDataset([data_file], tokenizer, 64, "error", False, cache_dir=str(blocker / "cache"))
    assert caught.value.key == "data.cache_dir" and "\n" not in str(caught.value)


@pytest.mark.parametrize("cached", [True, False], ids=["arrow_copy", "in_memory"])
def test_corrupt_rows_behind_a_valid_footer_name_the_file(tokenizer, tmp_path, cached):
    path = tmp_path / "train.parquet"
    pq.write_table(
        pa.Table.from_pylist([make_row(i, f"What is {i} + 1?", str(i)) for i in range(200)]), path, compression="none"
    )
    data = bytearray(path.read_bytes())
    data[8 : len(data) // 2] = b"\xff" * (len(data) // 2 - 8)  # the column chunks; the footer stays readable
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="is corrupt: its rows cannot be read"):  # the first prompts' pages
        check_data_files([str(path)])
    cache = tmp_path / "cache"
    with pytest.raises(ValueError) as caught:
        PromptDataset([str(path)], tokenizer, 64, "error", False, cache_dir=str(cache) if cached else None)
    assert "is corrupt" in str(caught.value) and str(path) in str(caught.value)
    assert "\n" not in str(caught.value)
    if cached:
        assert sorted(p.suffix for p in cache.iterdir()) == [".lock"]  # no copy, no partial file left


def _scan_worker(rank: int, port: int, path: str, tokenizer_dir: str, width: int, out_dir: str) -> None:
    from types import SimpleNamespace

    import torch.distributed as dist
    from transformers import AutoTokenizer

    from dagrl.config.tree import Cfg
    from dagrl.trainer.build import build_dataset

    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        recorder = RecordingTokenizer(AutoTokenizer.from_pretrained(tokenizer_dir))
        cfg = Cfg(
            {
                "data": {
                    "truncation": "error",
                    "filter_overlong_prompts": True,
                    "prompt_key": "prompt",
                    "cache_dir": None,
                },
                "trainer": {"default_local_dir": out_dir},
            }
        )
        dataset = build_dataset(cfg, path, recorder, SimpleNamespace(prompt_length=width))
        kept = [e["index"] for e in dataset.rows(np.arange(len(dataset)))["extra_info"]]
        torch.save(
            {"first": recorder.templated[0], "scanned": recorder.templated[1:16], "kept": kept},
            os.path.join(out_dir, f"rank{rank}.pt"),
        )
    finally:
        dist.destroy_process_group()


def test_trainer_datasets_share_the_scan_over_gloo_ranks(tokenizer, tmp_path):
    import socket

    import torch.multiprocessing as mp

    path = arithmetic_file(tmp_path / "train.parquet", 30, pad=10)
    width = len(template_ids(tokenizer, "What is 10 + 1?" + " more" * 10))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    mp.spawn(_scan_worker, args=(port, path, tokenizer.name_or_path, width, str(tmp_path)), nprocs=2)
    results = [torch.load(tmp_path / f"rank{rank}.pt") for rank in range(2)]
    questions = [f"What is {i} + 1?" + " more" * (10 * (i % 3)) for i in range(30)]
    assert [r["first"] for r in results] == [questions[0]] * 2  # the start-up check of the chat template
    assert [r["scanned"] for r in results] == [questions[:15], questions[15:]]  # the scan: half each
    assert results[0]["kept"] == results[1]["kept"] == [i for i in range(30) if i % 3 != 2]
    assert len(list((tmp_path / "data_cache").glob("*.arrow"))) == 1  # default: under trainer.default_local_dir


def test_a_chat_template_that_raises_on_a_later_row_names_that_row(tokenizer, tmp_path):
    """Row 0 renders (the start-up check of the template); the scan of every row, or the draw of that row with
    truncation on, names the row and the file in one line instead of a jinja traceback mid-run."""
    from dagrl.config.errors import ConfigError

    path = arithmetic_file(str(tmp_path / "train.parquet"), 6)
    table = pq.read_table(path).to_pylist()
    table[4]["prompt"] = [{"role": "user", "content": "a forbidden question"}]
    pq.write_table(pa.Table.from_pylist(table), path)
    original = tokenizer.chat_template
    tokenizer.chat_template = (
        "{% for m in messages %}{% if 'forbidden' in m['content'] %}{{ raise_exception('no "
        "forbidden words') }}{% endif %}{{ m['content'] }}{% endfor %}"
    )
    try:
        with pytest.raises(
            ConfigError,
            match=rf"fails on the prompt at row 4 of '{path}' \(TemplateError: no "
            rf"forbidden words\)",
        ):
            PromptDataset(path, tokenizer, 64, check_overlong=True)
        dataset = PromptDataset(path, tokenizer, 64, truncation="left", check_overlong=True)
        dataset.rows([0, 1, 2])
        with pytest.raises(ConfigError, match=r"row 4 of .*fix the template"):
            dataset.rows([3, 4])
    finally:
        tokenizer.chat_template = original
