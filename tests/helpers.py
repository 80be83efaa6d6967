"""Test helpers shared by test packages: a tiny real tokenizer (trained in ~1 s, no hub), tiny parquet files, and
running `python -m dagrl.main_dag` in its own session and reading its metrics."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import IO, Any, Callable, Iterator


# ChatML, the template family of SmolLM2 and Qwen: enough structure to test templating and generation prompts.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|pad|>", "<|im_start|>", "<|im_end|>"]
_CORPUS = [
    "What is 7 + 12? The answer is 19.",
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May.",
    'Let\'s think step by step and output the final answer after "####". #### 72',
    "Answer with only the final number. system user assistant",
    "The quick brown fox jumps over the lazy dog 0123456789 + - * / = $ , .",
]


def make_tiny_tokenizer(directory: str, with_pad: bool = True) -> Any:
    """A byte-level BPE tokenizer with a ChatML template, saved to `directory` and loaded with AutoTokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_CORPUS * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|endoftext|>",
        pad_token="<|pad|>" if with_pad else None,
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
        chat_template=CHAT_TEMPLATE,
    )
    fast.save_pretrained(directory)
    return AutoTokenizer.from_pretrained(directory)


def chat(question: str, system: str | None = None) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": system}] if system else []
    return messages + [{"role": "user", "content": question}]


def make_row(
    index: int, question: str, answer: str, data_source: str = "dagrl/arithmetic", split: str = "train"
) -> dict[str, Any]:
    return {
        "data_source": data_source,
        "prompt": chat(question),
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": {"split": split, "index": index, "answer": answer, "question": question},
    }


def write_parquet(path: str, rows: list[dict[str, Any]]) -> str:
    import pyarrow as pa  # imported here: the GPU image runs tests/gpu without pyarrow
    import pyarrow.parquet as pq

    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@contextlib.contextmanager
def session_process(command: list[str], env: dict | None = None) -> Iterator[tuple[subprocess.Popen, IO[str]]]:
    """Start `command` in its own session, stdout discarded and stderr in a temporary file; yields (process, that
    file). On exit whatever is left of the session is killed, as a preemption would (dist-checkpointing's helper
    processes included), so nothing holds our pipes open."""
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=err, env={**os.environ, **(env or {})}, start_new_session=True
        )
        try:
            yield proc, err
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def run_in_session(command: list[str], env: dict | None = None, timeout: float = 600) -> tuple[int, str]:
    """Run `command` in its own session (see session_process); returns (exit code, stderr)."""
    with session_process(command, env) as (proc, err):
        code = proc.wait(timeout=timeout)
        err.seek(0)
        return code, err.read()


def run_concurrently(runs: list[tuple[list[str], dict]], timeout: float = 600) -> list[tuple[int, str]]:
    """Each (command, env) started at once, each in its own session (see session_process); (exit code, stderr) of
    each, in order."""
    with contextlib.ExitStack() as stack:
        started = [stack.enter_context(session_process(command, env)) for command, env in runs]
        results = []
        for proc, err in started:
            code = proc.wait(timeout=timeout)
            err.seek(0)
            results.append((code, err.read()))
    return results


def straight_and_resumed(
    args: Callable[[Path], list[str]],
    root: Path,
    fault: str = "actor_update:3",
    launch: Callable[[list[str]], list[str]] | None = None,
) -> tuple[Path, Path]:
    """Two `dagrl.main_dag` runs of `args(dir)`: one uninterrupted (root/straight), one killed by the fault point
    `fault` and relaunched to the end (root/resumed); both must finish. The first two go side by side, each on one
    thread (so that two fit the two cores; the relaunch too, as every run compared must compute alike). `launch`
    makes the command line of a run's overrides (one process by default; torchrun's for several, whose every rank
    kills itself at the fault point and torchrun reports the failure)."""
    import sys

    command = launch or (lambda overrides: [sys.executable, "-m", "dagrl.main_dag", *overrides])
    straight, resumed = root / "straight", root / "resumed"
    one_thread = {"OMP_NUM_THREADS": "1"}
    (code, stderr), (killed, killed_stderr) = run_concurrently(
        [
            (command(args(straight)), one_thread),
            (command(args(resumed)), {**one_thread, "DAGRL_FAULT": fault}),
        ]
    )
    assert code == 0, stderr[-3000:]
    if launch is None:
        assert killed == -9
    else:
        assert killed != 0 and "DAGRL_FAULT: killing this process" in killed_stderr, killed_stderr[-3000:]
    code, stderr = run_in_session(command(args(resumed)), one_thread)
    assert code == 0, stderr[-3000:]
    return straight, resumed


def metrics_by_step(root: Path) -> dict[int, dict]:
    """Each step's metrics from <root>/metrics.jsonl without timings, later records winning (a resumed run
    validates at its start step and logs the steps after its checkpoint again)."""
    records: dict[int, dict] = {}
    for line in (root / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        records.setdefault(record["step"], {}).update(
            {k: v for k, v in record.items() if not k.startswith(("timing_s", "perf/")) and k != "time"}
        )
    return records


METRICS_DOC = Path(__file__).resolve().parent.parent / "docs" / "metrics.md"


def undocumented_metrics(*roots: Path) -> list[str]:
    """The metric keys in <root>/metrics.jsonl that no name in docs/metrics.md matches: every metric the trainer
    logs is documented once. Names there may hold placeholders (`<data_source>`, `mean@N`, `{a,b}`, `/*`)."""
    import re

    def pattern(name: str) -> re.Pattern:
        text = re.escape(name).replace(r"\*", ".+").replace("@N", r"@\d+")
        text = re.sub(r"<[^>]*>", ".+", text)
        text = re.sub(
            r"\\\{([^}]*)\\\}", lambda m: "(?:" + "|".join(m.group(1).replace("\\", "").split(",")) + ")", text
        )
        return re.compile(text + "$")

    patterns = [pattern(name) for name in set(re.findall(r"`([^`\s]+/[^`\s]*)`", METRICS_DOC.read_text()))]
    keys = {
        key for root in roots for line in (root / "metrics.jsonl").read_text().splitlines() for key in json.loads(line)
    } - {"step", "time"}
    return sorted(key for key in keys if not any(p.match(key) for p in patterns))


def node_context(cfg, layout=None, **fields):
    """A StepContext for calling one node directly on one rank: `layout` (a WorldLayout, one rank by default) as the
    shape's, no engines but those given in `fields` (actor=..., critic=..., kl_ctrl=..., step=...)."""
    from types import SimpleNamespace

    from dagrl.nodes.context import StepContext, WeightVersions
    from dagrl.placement import WorldLayout

    shape = SimpleNamespace(
        layout=layout or WorldLayout(1), response_length=fields.pop("response_length", None), train_rows=None
    )
    engines = {
        "actor": None,
        "rollout": None,
        "reference": None,
        "reward_fn": None,
        "tokenizer": None,
        "kl_ctrl": None,
        "versions": WeightVersions(actor=0),
    }
    return StepContext(cfg=cfg, shape=shape, **{**engines, **fields})
