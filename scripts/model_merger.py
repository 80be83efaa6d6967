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
    weights = {name: tensor for bucket in engine.export_weights(BUCKET_BYTES) for name, tensor in bucket}
    problems = compare(weights, args.test_hf_dir)
    for problem in problems:
        logger.error("%s", problem)
    logger.info("%d of %d tensors match %s", len(weights) - len(problems), len(weights), args.test_hf_dir)
    return 1 if problems else 0


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
