"""The session's own home and temporary directory (nothing written outside them), and shared fixtures: a tiny chat
model directory (random Llama + a trained BPE tokenizer) and arithmetic data."""

from __future__ import annotations

import multiprocessing.util
import os
import random
import shutil
import signal
import tempfile
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from tests.helpers import make_row, make_tiny_tokenizer, write_parquet

# The user's cache, read before the session points HOME elsewhere: the one file a test reads from it is one the user
# fetched by hand for an opt-in slow test (the converter's wheel); nothing is written there.
USER_CACHE = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
SESSION_HOME = pytest.StashKey[Path]()
_HOME_KEYS = (
    "HOME",
    "XDG_CACHE_HOME",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_STATE_HOME",
    "HF_HOME",
    "TRITON_CACHE_DIR",
    "CUDA_CACHE_PATH",
    "HF_HUB_OFFLINE",
    "RAY_AUTH_TOKEN_PATH",
    "RUSTUP_HOME",
    "CARGO_HOME",
)
_saved_home_env: dict[str, str | None] = {}


def pytest_configure(config) -> None:
    """The session and every process it starts get a home of their own, set before any test module imports a
    library that reads it (huggingface_hub reads HF_HOME at import): the XDG directories, Hugging Face's HF_HOME and
    Ray's auth token (ray.init writes a new one to ~/.ray/auth_token unless RAY_AUTH_TOKEN_PATH names an existing
    file) each point into one temporary directory, and HOME at an empty one inside it. So the tests write nothing
    into the user's home, and read nothing the user keeps there (~/models, ~/.netrc, wandb's settings): they run
    the same on a fresh machine. The hub is offline: every model a test loads is built on the spot."""
    root = Path(tempfile.mkdtemp(prefix="dagrl-tests-home-"))
    (root / "home").mkdir()
    token = root / "ray_auth_token"
    token.write_text(uuid.uuid4().hex)
    config.stash[SESSION_HOME] = root
    _saved_home_env.update({key: os.environ.get(key) for key in _HOME_KEYS})
    os.environ.update(
        {
            "HOME": str(root / "home"),
            "XDG_CACHE_HOME": str(root / "cache"),
            "XDG_CONFIG_HOME": str(root / "config"),
            "XDG_DATA_HOME": str(root / "data"),
            "XDG_STATE_HOME": str(root / "state"),
            "HF_HOME": str(root / "huggingface"),
            "HF_HUB_OFFLINE": "1",
            # Triton's kernel cache and the CUDA driver's JIT cache: an environment that set them to the user's
            # home (a GPU install's activation script does) would have the GPU tests write there
            "TRITON_CACHE_DIR": str(root / "triton"),
            "CUDA_CACHE_PATH": str(root / "nv"),
            "RAY_AUTH_TOKEN_PATH": str(token),
        }
    )
    # A toolchain installed in the user's home stays where it is: the wheel build runs rustup's proxies (on PATH
    # through ~/.cargo/bin), which would set up a fresh rustup home in the empty HOME
    for key, default in (("RUSTUP_HOME", ".rustup"), ("CARGO_HOME", ".cargo")):
        installed = _saved_home_env[key] or os.path.join(_saved_home_env["HOME"] or "/nonexistent", default)
        if os.path.isdir(installed):
            os.environ[key] = installed
    # The Ctrl-C tests send SIGINT as a terminal does. A suite started as a shell's background job (`cmd &` in a
    # script) begins with SIGINT ignored, which its processes would inherit and dagrl honour: take it back here
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_sessionfinish(session, exitstatus) -> None:
    """HOME stays empty: what the tests' libraries keep has a directory of its own above, so a file in HOME is a
    writer that would have written into a user's home; the run fails naming it."""
    root = session.config.stash.get(SESSION_HOME, None)
    written = sorted(str(path.relative_to(root / "home")) for path in (root / "home").rglob("*")) if root else []
    if written:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        session.config.pluginmanager.get_plugin("terminalreporter").write_line(
            f"FAILED: the tests wrote into HOME, which is a user's home outside the suite: {', '.join(written[:20])}; "
            f"point that writer at a temporary directory in tests/conftest.py (pytest_configure)",
            red=True,
        )


def pytest_unconfigure(config) -> None:
    for key, value in _saved_home_env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    root = config.stash.get(SESSION_HOME, None)
    if root:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def private_tmpdir(tmp_path_factory) -> Iterator[Path]:
    """One temporary directory for the whole session, removed at its end: TMPDIR/TEMP/TMP point at it for this
    process and every process the tests start (they inherit os.environ), so what libraries leave in the temp
    directory (multiprocessing's pymp-*, torchelastic_*, Ray's ray/, wandb's tmp*wandb-media, ...), also from the
    processes a test kills, goes with it. Not under pytest's basetemp (kept as it is, for failed tests' files): that
    is 0700 and the sandbox's dropped uid must reach its scratch directory (dagrl.agent.sandbox); the short path also
    keeps Ray's socket paths under the AF_UNIX limit."""
    tmp_path_factory.getbasetemp()  # pytest's own directory stays where it was, under its retention policy
    multiprocessing.util.get_temp_dir()  # this process's, cached: multiprocessing removes it at exit, after us
    root = Path(tempfile.mkdtemp(prefix="dagrl-tests-"))
    root.chmod(0o1777)  # like /tmp: sticky, reachable by the sandbox's uid
    names = ("TMPDIR", "TEMP", "TMP")
    saved = {name: os.environ.get(name) for name in names}
    os.environ.update({name: str(root) for name in names})
    tempfile.tempdir = None  # gettempdir() caches its first answer: make it read TMPDIR again
    try:
        yield root
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        tempfile.tempdir = None
        shutil.rmtree(root, ignore_errors=True)


def make_arithmetic_rows(count: int, split: str, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for index in range(count):
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        rows.append(make_row(index, f"What is {a} + {b}?", str(a + b), split=split))
    return rows


def make_tiny_model_dir(directory: Path, num_layers: int = 2, seed: int = 0, family: str = "llama") -> Path:
    """A random tiny model of `family` (Llama by default) whose vocabulary matches the tiny tokenizer beside it."""
    from tests.engine.tiny_models import make_model_dir

    tokenizer = make_tiny_tokenizer(str(directory))
    make_model_dir(directory, family=family, num_layers=num_layers, seed=seed, vocab_size=len(tokenizer))
    return directory


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    return make_tiny_model_dir(tmp_path_factory.mktemp("tiny_model"))


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("tiny_data")
    return {
        "train": write_parquet(str(root / "train.parquet"), make_arithmetic_rows(32, "train", seed=0)),
        "test": write_parquet(str(root / "test.parquet"), make_arithmetic_rows(8, "test", seed=1)),
    }


def cpu_run_overrides(model: Path, data: dict[str, str], out: Path, **extra) -> list[str]:
    """Overrides for a seconds-long CPU run on the tiny model. float32 throughout, whatever the machine (`auto`
    would choose bf16 on a CPU with bf16 instructions): the same run everywhere, and seconds long on a CPU without
    them, where bf16 is several times slower even at this size. A test about bf16 asks for it."""
    base = {
        "actor_rollout_ref.model.path": str(model),
        "actor_rollout_ref.actor.megatron.param_dtype": "float32",
        "actor_rollout_ref.rollout.dtype": "float32",
        "data.train_files": data["train"],
        "data.val_files": data["test"],
        "data.train_batch_size": 4,
        "data.max_prompt_length": 32,
        "data.max_response_length": 6,
        "actor_rollout_ref.rollout.n": 2,
        "actor_rollout_ref.actor.ppo_mini_batch_size": 2,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 2,
        "actor_rollout_ref.actor.optim.lr": 1e-3,
        "trainer.total_training_steps": 2,
        "trainer.default_local_dir": str(out),
        "trainer.logger": "[console,jsonl]",
    }
    base.update(extra)
    return [f"{k}={v}" for k, v in base.items()]


EOS_SCALE = 8.0


@pytest.fixture(scope="module")
def long_tail_model(tiny_model, tmp_path_factory) -> Path:
    """The tiny model with its eos logit scaled up: responses end anywhere from the first token to the limit."""
    import torch
    from transformers import AutoModelForCausalLM

    path = tmp_path_factory.mktemp("long_tail") / "model"
    shutil.copytree(tiny_model, path)
    model = AutoModelForCausalLM.from_pretrained(path)
    eos = model.generation_config.eos_token_id or model.config.eos_token_id
    with torch.no_grad():
        model.get_output_embeddings().weight[eos] *= EOS_SCALE
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def partial_rollout_args(long_tail_model, tiny_data):
    """`make(out, **extra)`: the overrides of a 4-step colocated partial-rollout run on the long-tail model
    (tests/trainer/test_partial_rollout.py, the prompt ledger's and the response limits' tests)."""

    def make(out: Path, **extra) -> list[str]:
        return cpu_run_overrides(
            long_tail_model,
            tiny_data,
            out,
            **{
                "async_training.partial_rollout": True,
                "async_training.oversample_ratio": 2.0,
                "async_training.max_staleness": 1,
                "trainer.total_training_steps": 4,
                "trainer.save_freq": 2,
                "trainer.test_freq": -1,
                "trainer.val_before_train": False,
                "data.max_response_length": 16,
                **extra,
            },
        )

    return make
