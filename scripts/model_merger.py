"""Turn a dagrl actor checkpoint into a Hugging Face model directory (verl's model_merger command line).

    python scripts/model_merger.py merge --backend megatron --local_dir RUN/global_step_N/actor --target_dir OUT
    python scripts/model_merger.py test --backend megatron --local_dir RUN/global_step_N/actor --test_hf_dir DIR

The checkpoint may come from any layout (TP, PP, VPP, DP, EP, distributed optimizer): Megatron dist checkpoints
are keyed by global tensor names, so this script builds the model once at TP=PP=EP=1 in this one process (on GPU 0
when there is one, else on the host through the CPU shim), loads the model part of the checkpoint into it and
writes the engine's HF export (the same tensors a rollout receives) as safetensors, with config.json,
generation_config.json and tokenizer files. `AutoModelForCausalLM.from_pretrained(OUT)` then gives the trained
engine's logits. A checkpoint saved from TransformerEngine layers (GPU runs with transformer-engine) names some
tensors differently from Megatron's local layers, so it merges only where TransformerEngine is usable.

`--hf_model_path` names where config and tokenizer come from; by default the checkpoint's own huggingface/ dir
(saved with checkpoint.save_contents including hf_model), else the model.path the run recorded in the checkpoint.
`test` compares the merged weights with an HF directory (e.g. actor/huggingface) and exits 1 on a difference.
Needs memory for the whole model in the checkpoint's dtype on that one device.

A LoRA checkpoint holds the adapters (and their optimizer state) only, over the base model its run recorded: `merge`
builds no Megatron model for it but reads the adapter and the base's safetensors (`--hf_model_path` if the base has
moved) and writes, by `--lora_format`, the merged HF model (`merged`, the default: W + alpha/r·B·A, the weights a
merged sync gives the rollout) or a PEFT adapter directory (`peft`: `peft.PeftModel.from_pretrained(base, OUT)`, or
vLLM's LoRARequest). `test` compares the merged weights.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import NoReturn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

logger = logging.getLogger("model_merger")

BUCKET_BYTES = 256 << 20


class MergeError(Exception):
    """A bad argument or input: reported as one line, exit code 2."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    operations = parser.add_subparsers(dest="operation", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--backend", required=True, choices=["megatron"], help="checkpoint kind (dagrl: megatron)")
    common.add_argument("--local_dir", required=True, help="RUN/global_step_N/actor (or RUN/global_step_N)")
    common.add_argument(
        "--hf_model_path",
        default=None,
        help="HF dir with config.json and tokenizer; default: the checkpoint's huggingface/ dir or "
        "the model.path recorded in it",
    )
    merge = operations.add_parser("merge", parents=[common], help="write an HF model directory")
    merge.add_argument("--target_dir", required=True, help="where the HF model directory is written")
    merge.add_argument(
        "--lora_format",
        choices=["merged", "peft"],
        default="merged",
        help="a LoRA checkpoint becomes the merged HF model (default) or a PEFT adapter directory over its base",
    )
    test = operations.add_parser("test", parents=[common], help="compare with an HF model directory")
    test.add_argument("--test_hf_dir", required=True, help="HF model directory to compare the merged weights with")
    return parser.parse_args(argv)


def checkpoint_dir(local_dir: str) -> Path:
    """The actor dist-checkpoint directory named by --local_dir (a global_step_N dir means its actor/)."""
    path = Path(os.path.expanduser(local_dir))
    if not path.is_dir():
        raise MergeError(f"--local_dir {local_dir}: no such directory")
    if not (path / "metadata.json").is_file() and (path / "actor" / "metadata.json").is_file():
        path = path / "actor"
    if not (path / "metadata.json").is_file():
        raise MergeError(
            f"--local_dir {local_dir} is not a dagrl checkpoint (no metadata.json): point it at "
            f"<run>/global_step_N/actor"
        )
    return path


def hf_source(args: argparse.Namespace, path: Path, recorded: str | None) -> Path:
    if args.hf_model_path:
        source, flag = Path(os.path.expanduser(args.hf_model_path)), "--hf_model_path"
    elif (path / "huggingface" / "config.json").is_file():
        source, flag = path / "huggingface", "the checkpoint's huggingface/ dir"
    elif recorded:
        source, flag = Path(recorded), "the model.path recorded in the checkpoint"
    else:
        raise MergeError(f"{path} records no model path: pass --hf_model_path <HF dir the run started from>")
    if not (source / "config.json").is_file():
        raise MergeError(f"{source} ({flag}) has no config.json: pass --hf_model_path <HF dir the run started from>")
    return source


def lora_base(args: argparse.Namespace, recorded: str | None) -> Path:
    """The base model a LoRA checkpoint's adapters apply to: its weights, config and tokenizer."""
    source = Path(os.path.expanduser(args.hf_model_path)) if args.hf_model_path else Path(recorded or "")
    flag = "--hf_model_path" if args.hf_model_path else "the base model path recorded in the checkpoint"
    if not (source / "config.json").is_file() or not any(source.glob("*.safetensors")):
        raise MergeError(
            f"{source} ({flag}) is no HF model with safetensors weights: pass --hf_model_path <the base model the "
            f"LoRA run trained on>"
        )
    return source


def merged_lora_weights(adapter, source: Path):
    """The base's tensors, one a bucket, those the adapter adapts merged (W + alpha/r·B·A, as the merged sync)."""
    from safetensors import safe_open

    from dagrl.engine.lora_peft import merged_weight, module_pairs

    pairs = module_pairs(adapter)
    handles = [safe_open(str(path), framework="pt") for path in sorted(source.glob("*.safetensors"))]
    missing = set(pairs) - {name for handle in handles for name in handle.keys()}
    if missing:
        raise MergeError(f"the adapter adapts {sorted(missing)[:3]}, which the base model {source} does not have")

    def buckets():  # checked above, before the caller writes anything
        for handle in handles:
            for name in handle.keys():
                tensor = handle.get_tensor(name)
                yield [(name, merged_weight(tensor, *pairs[name], adapter.scaling) if name in pairs else tensor)]

    return buckets()


def export_lora(adapter, source: Path, target_dir: str, lora_format: str) -> None:
    """Write `adapter` over the base `source` as a PEFT adapter directory or as the merged HF model."""
    from dagrl.engine.lora_peft import write_peft_dir
    from dagrl.engine.megatron.hf_export import write_hf_model

    target = os.path.expanduser(target_dir)
    if lora_format == "peft":
        write_peft_dir(adapter, target, str(source))
    else:
        write_hf_model(merged_lora_weights(adapter, source), target, source, write=True)


def build_engine(path: Path, source: Path, param_dtype: str | None):
    """The checkpoint's model at TP=PP=EP=1 in this process, weights from the dist checkpoint."""
    import torch

    from dagrl.engine.base import MegatronEngineSpec
    from dagrl.engine.megatron.actor import MegatronActorEngine

    if int(os.environ.get("WORLD_SIZE", "1")) != 1:
        raise MergeError("run model_merger.py as one process (not under torchrun): it reshards to TP=PP=EP=1")
    dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32, None: torch.float32}[param_dtype]
    return MegatronActorEngine(
        MegatronEngineSpec(model_path=str(source), param_dtype=dtype, dist_checkpoint_path=str(path))
    )


def te_usable() -> bool:
    """Whether this process builds TransformerEngine layers (the engine does on a GPU with TE installed)."""
    import torch

    from dagrl.engine.megatron import compat

    return torch.cuda.is_available() and compat.transformer_engine_available()


def compare(weights: dict, test_hf_dir: str) -> list[str]:
    """Merged tensors that are missing from `test_hf_dir` or differ from its tensors by more than 1e-6."""
    import torch

    from dagrl.engine.megatron.weights import SafetensorsDir

    reference = SafetensorsDir(os.path.expanduser(test_hf_dir))
    problems = []
    for name in sorted(weights):
        if name not in reference:
            problems.append(f"{name}: not in {test_hf_dir}")
            continue
        want = reference.get(name)
        if want.shape != weights[name].shape or not torch.allclose(
            weights[name].float(), want.float(), rtol=0, atol=1e-6
        ):
            problems.append(f"{name}: differs from {test_hf_dir}")
    return problems


def run(args: argparse.Namespace) -> int:
    path = checkpoint_dir(args.local_dir)  # before the heavy imports: a wrong path fails at once
    from dagrl.engine.megatron.checkpoint import describe
    from dagrl.engine.megatron.hf_export import write_hf_model

    try:
        info = describe(str(path))
    except ValueError as err:
        raise MergeError(f"--local_dir {args.local_dir}: {err}") from None
    if info["role"] not in (None, "actor"):
        raise MergeError(
            f"--local_dir {args.local_dir} holds a {info['role']} checkpoint; only actor checkpoints "
            f"become HF causal LMs"
        )
    if "model" not in info["contents"]:
        raise MergeError(f"--local_dir {args.local_dir} holds no model weights (contents {info['contents']})")
    lora_format = getattr(args, "lora_format", "merged")
    if info.get("lora"):  # adapters only, over the recorded base: no Megatron model needed
        return run_lora(args, path, info, lora_format)
    if lora_format == "peft":
        raise MergeError(
            f"--lora_format peft: --local_dir {args.local_dir} was saved without LoRA (a full model has no "
            f"adapter): drop --lora_format"
        )
    source = hf_source(args, path, info["model_path"])
    if info["layer_spec"] == "transformer_engine" and not te_usable():
        raise MergeError(
            f"--local_dir {args.local_dir} was saved from TransformerEngine layers, whose tensor names "
            f"only a TransformerEngine model reads: run the merger on a GPU machine with "
            f"transformer-engine installed"
        )
    engine = build_engine(path, source, info["param_dtype"])
    if args.operation == "merge":
        write_hf_model(engine.export_weights(BUCKET_BYTES), os.path.expanduser(args.target_dir), source, write=True)
        logger.info("merged %s (saved at layout %s) into %s", path, info["layout"], args.target_dir)
        return 0
    return report(_weights(engine.export_weights(BUCKET_BYTES)), args)


def _weights(buckets) -> dict:
    return {name: tensor for bucket in buckets for name, tensor in bucket}


def report(weights: dict, args: argparse.Namespace) -> int:
    """`test`: log each merged tensor that differs from --test_hf_dir; exit code 1 on any."""
    problems = compare(weights, args.test_hf_dir)
    for problem in problems:
        logger.error("%s", problem)
    logger.info("%d of %d tensors match %s", len(weights) - len(problems), len(weights), args.test_hf_dir)
    return 1 if problems else 0


def run_lora(args: argparse.Namespace, path: Path, info: dict, lora_format: str) -> int:
    from dagrl.engine.megatron.lora import read_adapter

    source = lora_base(args, info["model_path"])
    adapter = read_adapter(str(path))
    if args.operation == "merge":
        export_lora(adapter, source, args.target_dir, lora_format)
        logger.info("wrote the LoRA adapter of %s as %s over %s into %s", path, lora_format, source, args.target_dir)
        return 0
    return report(_weights(merged_lora_weights(adapter, source)), args)


def fail(message: str) -> NoReturn:
    print(f"model_merger: error: {message}", file=sys.stderr)
    sys.exit(2)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    try:
        code = run(args)
    except MergeError as err:
        fail(str(err))
    sys.exit(code)


if __name__ == "__main__":
    main()
