"""Sparse upcycling: a dense Llama model directory into a Mixtral mixture-of-experts directory of the same dims.

    python3 scripts/upcycle_moe.py ~/models/SmolLM2-135M-Instruct /tmp/smollm2_moe --experts 8 --top-k 2

Every expert of a layer is a copy of that layer's MLP (gate_proj -> w1, up_proj -> w3, down_proj -> w2) and each
layer gets a router of small random weights (normal, --router-std, seeded by --seed). Mixtral renormalises the
top-k router weights to sum to 1, so while the experts are equal the MoE computes the dense model's function up to
float rounding; training then lets the experts drift apart. Attention, norms, embeddings and the LM head are copied
unchanged, as are the tokenizer and generation files; config.json is a MixtralConfig with the dense model's dims,
RoPE and embedding tying. Weights keep the source dtype and are written shard by shard (at most --shard-gb each).
DST is never overwritten: it must not exist or be empty.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # dagrl from a checkout

from dagrl.models.families import FAMILIES
from dagrl.plan.model import ModelShape

MOE = FAMILIES["mixtral"]
# Llama config fields a MixtralConfig has with the same meaning; the rest of a Llama config has no Mixtral field.
CARRIED = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "hidden_act",
    "max_position_embeddings",
    "initializer_range",
    "rms_norm_eps",
    "rope_parameters",
    "rope_theta",
    "attention_dropout",
    "tie_word_embeddings",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "use_cache",
    "dtype",
)
DENSE_MLP = dict(zip(("gate_proj", "up_proj", "down_proj"), MOE.expert_names))  # -> Mixtral's w1, w3, w2
NOT_COPIED = ("config.json", "README.md", ".gitattributes")  # besides the weights


class BadInput(Exception):
    """One line naming the argument and the fix."""


def read_source(src: Path) -> tuple[dict, list[Path]]:
    """SRC's config.json and its safetensors files; BadInput unless SRC is a Llama model this converter copies."""
    config_file = src / "config.json"
    if not config_file.is_file():
        raise BadInput(f"SRC {src}: no config.json there; give a Llama model directory (config.json + safetensors)")
    try:
        config = json.loads(config_file.read_text())
    except ValueError as err:
        raise BadInput(f"SRC {src}: config.json is not valid JSON ({err}); restore the model's config.json") from err
    if not isinstance(config, dict) or config.get("model_type") != "llama":
        model_type = config.get("model_type") if isinstance(config, dict) else None
        raise BadInput(f"SRC {src}: model_type is {model_type!r}, not 'llama'; give a Llama model directory")
    for flag in ("attention_bias", "mlp_bias"):
        if config.get(flag):
            raise BadInput(
                f"SRC {src}: config.json has {flag}=true, which Mixtral has not; give a Llama without biases"
            )
    index = src / "model.safetensors.index.json"
    if index.is_file():
        files = sorted({src / name for name in json.loads(index.read_text())["weight_map"].values()})
    else:
        files = sorted(src.glob("*.safetensors"))
    if not files or not all(f.is_file() for f in files):
        raise BadInput(f"SRC {src}: no safetensors weights; save the model with safe_serialization=True first")
    return config, files


def check_destination(dst: Path) -> None:
    if dst.exists() and (not dst.is_dir() or any(dst.iterdir())):
        raise BadInput(f"DST {dst} exists and is not an empty directory; give a new path (nothing is overwritten)")


def mixtral_config(dense: dict, experts: int, top_k: int) -> dict:
    fields = {key: dense[key] for key in CARRIED if key in dense}
    fields.update(num_local_experts=experts, num_experts_per_tok=top_k, sliding_window=None)
    fields.update(output_router_logits=False, router_aux_loss_coef=0.0, router_jitter_noise=0.0)
    return fields


def expert_names(name: str, experts: int) -> list[str] | None:
    """The expert tensors that dense MLP tensor `name` becomes, or None for a tensor copied as it is."""
    parts = name.split(".")
    if len(parts) == 6 and parts[:2] == ["model", "layers"] and parts[3] == "mlp" and parts[4] in DENSE_MLP:
        layer = ".".join(parts[:3])
        return [f"{layer}.{MOE.moe_block}.experts.{e}.{DENSE_MLP[parts[4]]}.weight" for e in range(experts)]
    return None


class ShardWriter:
    """Safetensors files of at most `limit` bytes each, written as they fill: one shard in memory at a time."""

    def __init__(self, directory: Path, limit: int) -> None:
        self.directory, self.limit = directory, limit
        self.current: dict = {}
        self.size = 0
        self.where: dict[str, int] = {}  # tensor name -> shard number
        self.count = 0

    def add(self, name: str, tensor) -> None:
        nbytes = tensor.numel() * tensor.element_size()
        if self.current and self.size + nbytes > self.limit:
            self.flush()
        self.current[name] = tensor
        self.size += nbytes

    def flush(self) -> None:
        from safetensors.torch import save_file

        self.count += 1
        save_file(self.current, str(self.directory / f"part-{self.count}"), metadata={"format": "pt"})
        self.where.update(dict.fromkeys(self.current, self.count))
        self.current, self.size = {}, 0

    def finish(self) -> None:
        """The last shard, the files' final names, and the index when there is more than one."""
        self.flush()
        final = {i: f"model-{i:05d}-of-{self.count:05d}.safetensors" for i in range(1, self.count + 1)}
        if self.count == 1:
            final = {1: "model.safetensors"}
        for i, name in final.items():
            (self.directory / f"part-{i}").rename(self.directory / name)
        if self.count > 1:
            total = sum((self.directory / name).stat().st_size for name in final.values())
            weight_map = {name: final[i] for name, i in sorted(self.where.items())}
            index = {"metadata": {"total_size": total}, "weight_map": weight_map}
            (self.directory / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


def upcycle(src: Path, dst: Path, experts: int, top_k: int, router_std: float, seed: int, shard_gb: float) -> dict:
    """Write the Mixtral directory; returns its config.json fields."""
    import torch
    from transformers import MixtralConfig

    dense, files = read_source(src)
    config = MixtralConfig(**mixtral_config(dense, experts, top_k))  # refuses what transformers would not load
    config.architectures = ["MixtralForCausalLM"]
    generator = torch.Generator().manual_seed(seed)
    hidden = dense["hidden_size"]
    routers = [torch.randn(experts, hidden, generator=generator) * router_std for _ in range(config.num_hidden_layers)]

    tmp = dst.parent / f".{dst.name}.partial"  # renamed to DST once complete: an interrupted run leaves no DST
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        routed = write_weights(files, tmp, experts, routers, int(shard_gb * 2**30))
        missing = sorted(set(range(config.num_hidden_layers)) - routed)
        if missing:
            raise BadInput(f"SRC {src}: no mlp.down_proj.weight for layers {missing[:5]}; its weights are incomplete")
        config.save_pretrained(tmp)
        for item in sorted(src.iterdir()):  # tokenizer, chat template, generation config
            weights = item.suffix in (".safetensors", ".bin", ".pt", ".pth") or item.name.endswith(".index.json")
            if item.is_file() and not weights and item.name not in NOT_COPIED:
                shutil.copy2(item, tmp / item.name)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if dst.exists():
        dst.rmdir()  # empty (checked): the finished directory takes its place
    tmp.rename(dst)
    return json.loads((dst / "config.json").read_text())


def write_weights(files: list[Path], out: Path, experts: int, routers: list, limit: int) -> set[int]:
    """The MoE's safetensors in `out`: each dense MLP tensor as `experts` copies, a router beside each layer's
    down projection, every other tensor as it is. Returns the layers that got a router."""
    from safetensors import safe_open

    writer, routed = ShardWriter(out, limit), set()
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            for name in handle.keys():
                tensor = handle.get_tensor(name)
                names = expert_names(name, experts)
                for out_name in names or [name]:
                    writer.add(out_name, tensor.clone() if names else tensor)  # safetensors refuses shared storage
                if name.endswith(".mlp.down_proj.weight"):  # the layer's router, in the weights' dtype
                    layer = name[: -len(".mlp.down_proj.weight")]
                    index = int(layer.split(".")[2])
                    writer.add(f"{layer}.{MOE.moe_block}.gate.weight", routers[index].to(tensor.dtype))
                    routed.add(index)
    writer.finish()
    return routed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src", metavar="SRC", help="the dense Llama model directory")
    parser.add_argument("dst", metavar="DST", help="the Mixtral directory to write (new or empty)")
    parser.add_argument("--experts", type=int, default=8, help="experts per layer (default 8)")
    parser.add_argument("--top-k", type=int, default=2, help="experts each token is routed to (default 2)")
    parser.add_argument("--router-std", type=float, default=0.02, help="std of the routers' random weights")
    parser.add_argument("--seed", type=int, default=0, help="seed of the routers' random weights")
    parser.add_argument("--shard-gb", type=float, default=5.0, help="largest weight file written, in GiB")
    args = parser.parse_args(argv)
    src, dst = Path(args.src).expanduser(), Path(args.dst).expanduser()
    try:
        if args.experts < 1:
            raise BadInput(f"--experts {args.experts}: give at least 1 expert per layer")
        if not 1 <= args.top_k <= args.experts:
            raise BadInput(f"--top-k {args.top_k}: must be between 1 and --experts {args.experts}; lower --top-k")
        if not args.router_std >= 0:
            raise BadInput(f"--router-std {args.router_std}: must be >= 0 (e.g. 0.02)")
        if not args.shard_gb > 0:
            raise BadInput(f"--shard-gb {args.shard_gb}: must be > 0 (e.g. 5)")
        if not src.is_dir():
            raise BadInput(f"SRC {src}: not a directory; give a Llama model directory (config.json + safetensors)")
        check_destination(dst)
        config = upcycle(src, dst, args.experts, args.top_k, args.router_std, args.seed, args.shard_gb)
    except BadInput as err:
        print(f"upcycle_moe: {err}", file=sys.stderr)
        return 2
    shape = ModelShape.from_hf(config)
    print(
        f"wrote {dst}: Mixtral, {args.experts} experts top-{args.top_k}, {shape.total_params():,} parameters "
        f"({shape.active_params():,} active per token)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
