"""The install checked against dagrl/doctor/versions.py: what is installed (read from package metadata, nothing
heavy imported), each known-bad combination found as one line `problem: fix`, and where the install differs from
every tested pin, a note (untested is not broken)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import platform
import shutil
import subprocess

from dagrl.doctor.versions import KNOWN_BAD, PACKAGES, Env
from dagrl.utils.pins import PINS

# pip name -> the module whose import proves the compiled extension loads against this torch
_EXTENSIONS = {"flash-attn": "flash_attn_2_cuda"}


def installed(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def nvidia_driver() -> str | None:
    """The driver version nvidia-smi reports (None without one: a CPU machine)."""
    if shutil.which("nvidia-smi") is None:
        return None
    done = subprocess.run(
        ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True
    )
    lines = done.stdout.split()
    return lines[0] if done.returncode == 0 and lines else None


def broken_extensions(versions: dict[str, str | None]) -> dict[str, str]:
    """Installed packages whose compiled extension does not import (built for another torch or CUDA)."""
    broken = {}
    for package, module in _EXTENSIONS.items():
        if versions.get(package) and importlib.util.find_spec(module.split(".")[0]) is not None:
            try:
                __import__(module)
            except ImportError as error:  # the message is the finding: reported, not swallowed
                broken[package] = str(error).splitlines()[0]
    return broken


def current() -> Env:
    """This process's install."""
    import torch

    versions = {package: installed(package) for package in PACKAGES}
    versions["torch"] = torch.__version__
    gpu = capability = None
    if torch.cuda.is_available():
        gpu = torch.cuda.get_device_name()
        capability = torch.cuda.get_device_capability()
    return Env(
        versions=versions,
        python=platform.python_version(),
        cuda=torch.version.cuda,
        driver=nvidia_driver(),
        gpu=gpu,
        capability=capability,
        broken=broken_extensions(versions),
    )


def problems(env: Env, needs: set[str]) -> list[str]:
    """One line per known-bad combination in `env` for a run that uses `needs` ("vllm", "bf16")."""
    fields = {
        **{name: value or "(not installed)" for name, value in env.versions.items()},
        "python": env.python,
        "cuda": env.cuda,
        "driver": env.driver,
        "gpu": env.gpu,
        "capability": ".".join(map(str, env.capability)) if env.capability else None,
    }
    lines = [f"environment: {rule.problem.format(**fields)}: {rule.fix}" for rule in KNOWN_BAD if rule.when(env, needs)]
    for package, why in (env.broken or {}).items():
        lines.append(
            f"environment: {package} {env.versions[package]} does not import ({why}): reinstall it built for "
            f"torch {env.versions['torch']} (pip install --no-build-isolation --force-reinstall {package})"
        )
    return lines


def untested(env: Env) -> list[str]:
    """Packages whose version matches no tested pin: a note each, with the pins."""
    notes = []
    for package in ("torch", "megatron-core", "transformer-engine", "vllm", "transformers"):
        have = env.versions.get(package)
        pins = {kit: pin[package] for kit, pin in PINS.items() if package in pin}
        if have is None or any(have.split("+")[0].startswith(pin) for pin in pins.values()):
            continue
        tested = ", ".join(f"{pin} ({kit})" for kit, pin in pins.items())
        notes.append(f"{package} {have} is untested here (tested: {tested})")
    return notes


def describe(env: Env) -> list[str]:
    """The install, one line per component."""
    lines = [f"python {env.python}"]
    lines += [f"{package} {env.versions.get(package) or '-'}" for package in PACKAGES]
    lines.append(f"cuda {env.cuda or '- (CPU build of torch)'}, driver {env.driver or '-'}")
    if env.gpu:
        lines.append(f"gpu {env.gpu} (compute capability {'.'.join(map(str, env.capability or ()))})")
    return lines
