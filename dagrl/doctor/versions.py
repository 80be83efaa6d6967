"""The software stack dagrl is tested on and the combinations known to fail, as data the doctor checks an
install against (dagrl/doctor/environment.py); the pins themselves are dagrl.utils.pins.PINS. megatron-core's
supported range is compat.SUPPORTED, the one place its version differences live."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from packaging.version import Version

from dagrl.utils.pins import PINS

# The distributions the doctor reports, by their pip names (the CUDA runtime, driver and GPU come from torch and
# nvidia-smi).
PACKAGES = ("torch", "megatron-core", "transformer-engine", "vllm", "transformers", "flash-attn", "compressed-tensors")


@dataclass(frozen=True)
class Env:
    """An install as the doctor sees it: package -> version (None: not installed) plus the CUDA side."""

    versions: dict[str, str | None]
    python: str
    cuda: str | None = None  # torch's CUDA runtime (None: a CPU build)
    driver: str | None = None  # the NVIDIA driver (nvidia-smi)
    gpu: str | None = None
    capability: tuple[int, int] | None = None  # the GPU's compute capability
    broken: dict[str, str] | None = None  # package -> why it does not import (an ABI mismatch)

    def version(self, package: str) -> Version | None:
        value = self.versions.get(package)
        return Version(value.split("+")[0]) if value else None


@dataclass(frozen=True)
class Incompatible:
    """A combination known to fail: `when(env, needs)` is true for it (`needs`: the packages the run uses)."""

    when: Callable[[Env, set[str]], bool]
    problem: str  # formatted with the env's versions: {torch}, {vllm}, {transformers}, {cuda}, {driver}, ...
    fix: str


def _series(version: Version | None, series: str) -> bool:
    return version is not None and version.release[: len(Version(series).release)] == Version(series).release


def _below(version: Version | None, bound: str) -> bool:
    return version is not None and version < Version(bound)


FP8_OFF = "set actor_rollout_ref.rollout.quantization=null"


def _without_fp8_cores(env: Env, needs: set[str]) -> bool:
    from dagrl.config.preflight.fp8 import MIN_CAPABILITY

    return "fp8" in needs and env.capability is not None and env.capability < MIN_CAPABILITY


def _megatron_unsupported(env: Env, needs: set[str]) -> bool:
    from dagrl.engine.megatron.compat import SUPPORTED

    version = env.version("megatron-core")
    return version is None or not SUPPORTED[0] <= version < SUPPORTED[1]


KNOWN_BAD = (
    Incompatible(
        lambda env, needs: _below(Version(env.python), "3.11"),
        "Python {python} is older than dagrl supports (>=3.11)",
        "use Python 3.11 or 3.12 (the CI and GPU kit versions)",
    ),
    Incompatible(
        _megatron_unsupported,
        "megatron-core {megatron-core} is outside the supported range (compat.SUPPORTED)",
        'pip install "megatron-core==0.19.2" (GPU kit) or "megatron-core==0.16.1" (CPU CI)',
    ),
    Incompatible(
        lambda env, needs: _below(env.version("transformers"), "5"),
        "transformers {transformers} predates 5.x, whose fused MoE experts and config names dagrl maps",
        'pip install "transformers>=5,<6"',
    ),
    Incompatible(
        lambda env, needs: (
            "vllm" in needs and _series(env.version("vllm"), "0.26") and not _series(env.version("torch"), "2.11")
        ),
        "vLLM {vllm} is built against torch 2.11, found torch {torch}: its compiled kernels fail to load",
        'pip install "torch==2.11.*" from the CUDA index of your driver (the GPU kit), or a vLLM built for this torch',
    ),
    Incompatible(
        lambda env, needs: (
            "vllm" in needs and _series(env.version("vllm"), "0.26") and _below(env.version("transformers"), "5.5.3")
        ),
        "vLLM {vllm} needs transformers>=5.5.3, found {transformers}",
        'pip install "transformers>=5.5.3,<6"',
    ),
    Incompatible(
        lambda env, needs: env.version("transformer-engine") is not None and env.cuda is None,
        "TransformerEngine {transformer-engine} is installed beside a CPU build of torch {torch}",
        "install a CUDA build of torch, or uninstall transformer-engine on a CPU machine",
    ),
    Incompatible(
        lambda env, needs: (
            env.cuda is not None
            and env.driver is not None
            and _series(Version(env.cuda), "13")
            and _below(Version(env.driver), "580")
        ),
        "torch's CUDA {cuda} runtime needs an NVIDIA driver >= 580, found {driver}",
        "upgrade the driver, or install a torch built for CUDA 12.x",
    ),
    Incompatible(
        lambda env, needs: "bf16" in needs and env.capability is not None and env.capability < (8, 0),
        "the {gpu} (compute capability {capability}) has no bfloat16 tensor cores",
        "set actor_rollout_ref.actor.megatron.param_dtype=float32 and actor_rollout_ref.rollout.dtype=float32, "
        "or use an Ampere or newer GPU",
    ),
    Incompatible(
        lambda env, needs: "fp8" in needs and env.versions.get("compressed-tensors") is None,
        "an FP8 rollout runs vLLM's FP8 path, which imports compressed-tensors, and it is not installed",
        f'pip install "compressed-tensors=={PINS["GPU kit"]["compressed-tensors"]}" (the GPU kit), or {FP8_OFF}',
    ),
    Incompatible(
        lambda env, needs: "fp8" in needs and env.capability is None,
        "an FP8 rollout runs vLLM's FP8 kernels on a GPU of compute capability >= 8.9 and this machine has none",
        f"run on an Ada, Hopper or newer GPU, or {FP8_OFF}",
    ),
    Incompatible(
        _without_fp8_cores,
        "the {gpu} (compute capability {capability}) has no FP8 tensor cores (8.9 or newer: Ada, Hopper, Blackwell)",
        f"{FP8_OFF} on this GPU, or use an Ada, Hopper or newer GPU",
    ),
)
