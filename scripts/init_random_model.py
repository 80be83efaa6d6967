"""Saves a randomly initialised model of a supported family and size as a plain HF directory.

For tests, benchmarks and `python3 -m dagrl.plan` without downloading a checkpoint:

    python3 scripts/init_random_model.py --family qwen3 --size 1.7b --out ~/models/random-qwen3-1.7b \
        --tokenizer ~/models/SmolLM2-135M-Instruct --dtype bf16
    python3 scripts/init_random_model.py --family qwen3_moe --size 30b-a3b --out /tmp/q30b --config-only

Sizes copy the shapes of real checkpoints (dagrl/plan/presets.py: Qwen3-0.6B ... 32B, Qwen2.5-0.5B, Qwen3-30B-A3B,
Qwen3-235B-A22B; "tiny" is the test suite's model). With --tokenizer the tokenizer (and generation_config.json, if
there is one) is copied and the vocabulary sized to it; without it the directory has no tokenizer, which is enough
for dagrl.plan and engine benchmarks but not for training. --config-only writes config.json without weights.
--peak scales the logits (presets.peak_logits) for numerics checks that decode greedily: a random init's are
near-uniform.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # dagrl from a checkout

from dagrl.plan import presets
from dagrl.plan.model import ModelShape

logger = logging.getLogger("init_random_model")
DTYPES = {"bf16": "bfloat16", "bfloat16": "bfloat16", "fp32": "float32", "float32": "float32"}


def tokenizer_settings(tokenizer_dir: str) -> dict:
    """vocab_size and special token ids from the tokenizer in `tokenizer_dir`."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    settings = {"vocab_size": len(tokenizer)}
    for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
        value = getattr(tokenizer, name)
        if value is not None:
            settings[name] = value
    return settings


def save_tokenizer(tokenizer_dir: str, out: str) -> None:
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(tokenizer_dir).save_pretrained(out)
    generation = os.path.join(tokenizer_dir, "generation_config.json")
    if os.path.isfile(generation):
        shutil.copy(generation, os.path.join(out, "generation_config.json"))


def build(
    family: str,
    size: str,
    out: str,
    *,
    num_layers: int | None = None,
    seed: int = 0,
    tokenizer: str | None = None,
    dtype: str = "bf16",
    config_only: bool = False,
    device: str = "cpu",
    peak: float = 1.0,
) -> int:
    """Write the model directory; returns the parameter count."""
    overrides: dict = {"num_layers": num_layers}
    special: dict = {}
    if tokenizer:
        special = tokenizer_settings(tokenizer)
        overrides["vocab_size"] = special.pop("vocab_size")
    os.makedirs(out, exist_ok=True)
    torch_dtype = DTYPES[dtype]
    if config_only:
        config = presets.hf_config(family, size, **overrides)
        for name, value in special.items():
            setattr(config, name, value)
        config.dtype = torch_dtype
        # what save_pretrained of the model would record; vLLM picks its model class (and runner) from it
        config.architectures = [type(config).__name__.replace("Config", "ForCausalLM")]
        config.save_pretrained(out)
        count = ModelShape.from_hf(config.to_dict()).total_params()
    else:
        import torch

        with torch.device(device):  # the random init of a multi-billion model takes minutes on CPU, seconds on GPU
            model = presets.random_model(family, size, seed=seed, dtype=torch_dtype, **overrides)
        if peak != 1.0:
            presets.peak_logits(model, peak)
        for name, value in special.items():
            setattr(model.config, name, value)
        model.save_pretrained(out, safe_serialization=True)
        count = sum(p.numel() for p in model.parameters())
    if tokenizer:
        save_tokenizer(tokenizer, out)
    return count


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", required=True, choices=presets.FAMILIES)
    parser.add_argument(
        "--size",
        required=True,
        help="tiny | "
        + " | ".join(sorted({s for table in (presets.DENSE_SIZES, presets.MOE_SIZES) for s in table} - {"tiny"})),
    )
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--num-layers", type=int, default=None, help="override the preset's layer count")
    parser.add_argument("--seed", type=int, default=0, help="torch seed of the random init")
    parser.add_argument("--tokenizer", default=None, help="copy this HF tokenizer and size the vocabulary to it")
    parser.add_argument("--dtype", default="bf16", choices=sorted(DTYPES), help="saved weight dtype")
    parser.add_argument("--config-only", action="store_true", help="write config.json only, no weights")
    parser.add_argument("--device", default="cpu", help="where to initialise the weights (cpu, cuda)")
    parser.add_argument(
        "--peak",
        type=float,
        default=1.0,
        metavar="FACTOR",
        help="scale the logits by FACTOR (default 1: the random init's, near-uniform): an untied output head is "
        "scaled; with tied embeddings the final norm's gain is, so the embedding and the tie stay as they are",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        presets.config_fields(args.family, args.size)
    except ValueError as err:
        parser.error(str(err))
    if args.num_layers is not None and args.num_layers < 1:
        parser.error("--num-layers must be >= 1")
    if not args.peak > 0:
        parser.error(f"--peak {args.peak}: the logits' scale must be > 0 (1: as initialised)")
    if args.config_only and args.peak != 1.0:
        parser.error("--peak scales weights and --config-only writes none: drop one of them")
    if not args.config_only and args.device != "cpu":
        import torch

        try:
            device = torch.device(args.device)
        except RuntimeError as err:
            parser.error(f"--device {args.device}: {err}")
        if device.type == "cuda" and not torch.cuda.is_available():
            parser.error(f"--device {args.device}: no CUDA device on this machine; use --device cpu")
    out = os.path.expanduser(args.out)
    tokenizer = os.path.expanduser(args.tokenizer) if args.tokenizer else None
    count = build(
        args.family,
        args.size,
        out,
        num_layers=args.num_layers,
        seed=args.seed,
        tokenizer=tokenizer,
        dtype=args.dtype,
        config_only=args.config_only,
        device=args.device,
        peak=args.peak,
    )
    logger.info(
        "wrote %s %s (%.3fB parameters%s%s) to %s",
        args.family,
        args.size,
        count / 1e9,
        ", config only" if args.config_only else "",
        f", logits x{args.peak:g}" if args.peak != 1.0 else "",
        out,
    )


if __name__ == "__main__":
    main()
