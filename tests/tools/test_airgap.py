"""tools/airgap/airgap.py: a pack of wheels (from a lock list, offline through --find-links), a model cast to bf16,
data, a frozen commit and another folder, cut into parts, taken back a few parts at a time, checked, unpacked and
its wheels installed; a damaged part stops it with one line; a lock list it cannot use is named with its line."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
AIRGAP = ROOT / "tools" / "airgap" / "airgap.py"


def airgap(*args, check=True, cwd=None) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, str(AIRGAP), *map(str, args)], capture_output=True, text=True, cwd=cwd)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def tiny_wheel(folder: Path) -> Path:
    """A pure-Python wheel built by hand (no build backend, no network): tinypkg 0.1 with VALUE = 42."""
    folder.mkdir()
    wheel = folder / "tinypkg-0.1-py3-none-any.whl"
    files = {
        "tinypkg/__init__.py": "VALUE = 42\n",
        "tinypkg-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: tinypkg\nVersion: 0.1\n",
        "tinypkg-0.1.dist-info/WHEEL": "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
        archive.writestr("tinypkg-0.1.dist-info/RECORD", "".join(f"{name},,\n" for name in files) + "RECORD,,\n")
    return wheel


@pytest.fixture
def sources(tmp_path):
    """A lock list pinning the hand-made wheel, a model with fp32 safetensors weights, data, a git checkout."""
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    wheel = tiny_wheel(tmp_path / "wheelhouse")
    (tmp_path / "lock.txt").write_text(f"# pinned\ntinypkg==0.1 {hashlib.sha256(wheel.read_bytes()).hexdigest()}\n")
    model = tmp_path / "model"
    model.mkdir()
    save_file({"w": torch.arange(6000, dtype=torch.float32) / 7}, str(model / "model.safetensors"))
    (model / "config.json").write_text(json.dumps({"torch_dtype": "float32"}))
    (model / "tokenizer.json").write_bytes(os.urandom(30000))  # noise: the parts' bytes do not compress away
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.parquet").write_bytes(os.urandom(20000))
    code = tmp_path / "code"
    (code / "pkg").mkdir(parents=True)
    (code / "pkg" / "run.py").write_text("print('frozen')\n")
    git = ["git", "-C", str(code), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(code)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "one"], check=True)
    (code / "pkg" / "run.py").write_text("print('edited after the commit')\n")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.txt").write_text("note")
    return tmp_path


@pytest.mark.parametrize("xz", [False, True])
def test_a_pack_comes_back_part_by_part_checked_unpacked_and_installed(sources, tmp_path, xz):
    out, dest = tmp_path / "out", tmp_path / "dest"
    packed = airgap(
        "pack", "--out", out, "--name", "run", "--part-mb", 0.02, *(["--xz"] if xz else []),
        "--lock", sources / "lock.txt", "--find-links", sources / "wheelhouse",
        "--model", sources / "model", "--bf16", "--data", sources / "data", "--dir", f"notes={sources / 'notes'}",
        "--commit", "HEAD", cwd=sources / "code",
    )  # fmt: skip
    parts = sorted(out.glob("part*"))
    assert len(parts) >= 3 and [str(p) for p in parts] == packed.stdout.splitlines()[1:]
    manifest = json.loads((parts[0] / "MANIFEST.json").read_text())
    assert manifest["components"] == ["wheels", "model", "data", "commit", "notes"]
    assert all(p["size"] <= 0.02 * 2**20 for p in manifest["parts"])

    first = airgap("unpack", *parts[:2], "--dest", dest)
    assert f"run: 2 of {len(parts)} parts here; still to come: part03" in first.stdout
    assert airgap("status", "--dest", dest, check=False).returncode == 1
    done = airgap("unpack", *parts[2:], "--dest", dest)
    assert "run: unpacked wheels, model, data, commit, notes" in done.stdout and "1 wheel(s) installed" in done.stdout
    assert (
        airgap("status", "--dest", dest).stdout.strip() == "airgap: run: unpacked (wheels, model, data, commit, notes)"
    )
    assert "already unpacked" in airgap("unpack", parts[0], "--dest", dest).stdout

    from safetensors.torch import load_file

    weights = load_file(str(dest / "model" / "model.safetensors"))["w"]
    assert str(weights.dtype) == "torch.bfloat16" and float(weights[700]) == pytest.approx(100.0, rel=1e-2)
    assert json.loads((dest / "model" / "config.json").read_text())["torch_dtype"] == "bfloat16"
    assert (dest / "model" / "tokenizer.json").read_bytes() == (sources / "model" / "tokenizer.json").read_bytes()
    assert (dest / "data" / "train.parquet").read_bytes() == (sources / "data" / "train.parquet").read_bytes()
    assert (dest / "notes" / "a.txt").read_text() == "note"
    # the commit, not the edited checkout; and the installed wheel imports from the site folder
    assert (dest / "commit" / "pkg" / "run.py").read_text() == "print('frozen')\n"
    assert len((dest / "commit" / ".commit").read_text().strip()) >= 7
    env = {**os.environ, "PYTHONPATH": str(dest / "site")}
    imported = subprocess.run([sys.executable, "-c", "import tinypkg; print(tinypkg.VALUE)"], env=env, text=True,
                              capture_output=True)  # fmt: skip
    assert imported.stdout.strip() == "42", imported.stderr


def test_a_damaged_part_stops_unpack_with_one_line_naming_it(sources, tmp_path):
    out = tmp_path / "out"
    airgap("pack", "--out", out, "--part-mb", 0.02, "--data", sources / "data")
    parts = sorted(out.glob("part*"))
    damaged = parts[1] / "payload.02"
    data = bytearray(damaged.read_bytes())
    data[100] ^= 0xFF
    damaged.write_bytes(bytes(data))
    result = airgap("unpack", *parts, "--dest", tmp_path / "dest", check=False)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert f"part 2 of {len(parts)}" in result.stderr and "copy that part again" in result.stderr
    assert not (tmp_path / "dest" / "data").exists()


def test_joined_parts_that_do_not_match_the_whole_sha256_are_refused(sources, tmp_path):
    """Each part can match its own line of a manifest and the whole still be wrong (parts of two packs mixed)."""
    out = tmp_path / "out"
    airgap("pack", "--out", out, "--part-mb", 0.02, "--data", sources / "data")
    parts = sorted(out.glob("part*"))
    manifest = json.loads((parts[0] / "MANIFEST.json").read_text())
    manifest["sha256"] = "0" * 64
    for part in parts:
        (part / "MANIFEST.json").write_text(json.dumps(manifest))
    result = airgap("unpack", *parts, "--dest", tmp_path / "dest", check=False)
    assert result.returncode == 1 and "joined parts' sha256 is not the manifest's" in result.stderr


@pytest.mark.parametrize(
    "lock, message",
    [
        ("a==1 " + "0" * 64 + "\nb==2\n", "some lines have a sha256 and some not"),
        ("a==1 nothex\n", "lock.txt:1: 'nothex' is not a sha256"),
        ("a>=1\n", "lock.txt:1: 'a>=1' is not 'name==version [sha256]'"),
    ],
)
def test_a_lock_list_it_cannot_use_is_named_with_its_line(tmp_path, lock, message):
    (tmp_path / "lock.txt").write_text(lock)
    result = airgap("wheels", "--lock", tmp_path / "lock.txt", "--dest", tmp_path / "w", check=False)
    assert result.returncode == 1 and message in result.stderr and result.stderr.count("\n") == 1


def test_a_pinned_wheel_that_is_nowhere_fails_naming_it(tmp_path):
    tiny_wheel(tmp_path / "wheelhouse")
    (tmp_path / "lock.txt").write_text("tinypkg==0.2\n")
    result = airgap("wheels", "--lock", tmp_path / "lock.txt", "--dest", tmp_path / "w", "--find-links",
                    tmp_path / "wheelhouse", check=False)  # fmt: skip
    assert result.returncode == 1 and "tinypkg==0.2: no wheel for the target and no sdist" in result.stderr
