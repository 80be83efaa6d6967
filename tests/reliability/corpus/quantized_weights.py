"""Quantized weights that config.json does not declare: a model directory whose config.json lacks
quantization_config (stripped by a converter, or copied from the full-precision release) over an FP8, GPTQ or AWQ
checkpoint's shards. Pre-flight finds them by tensor name and dtype in the safetensors headers."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Callable

from tests.reliability.corpus.case import MODEL_KEY, Case, Paths
from tests.reliability.corpus.model_makers import model_copy

NUMPY_DTYPES = {"float32": "F32", "float16": "F16", "int32": "I32", "int64": "I64"}
PROJECTIONS = tuple(f"self_attn.{name}_proj.weight" for name in "qkvo") + tuple(
    f"mlp.{name}_proj.weight" for name in ("gate", "up", "down")
)


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int], bytes]]) -> None:
    """A safetensors file of (dtype, shape, raw bytes) per tensor name, written by hand: numpy has no 8-bit floats."""
    header: dict = {"__metadata__": {"format": "pt"}}
    offset, blobs = 0, []
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(len(text).to_bytes(8, "little") + text + b"".join(blobs))


def quantized(kind: str) -> Callable[[Path, Paths], None]:
    """{ws}/model: the tiny model's layer projections as a quantized release stores them, config.json unchanged (no
    quantization_config): "fp8" (F8_E4M3 weights with 128x128-block weight_scale_inv, as Qwen3-8B-FP8), "gptq"
    (int32 qweight/qzeros and float16 scales in place of each weight)."""

    def make(ws: Path, paths: Paths) -> None:
        from safetensors.numpy import load_file

        model_copy()(ws, paths)
        tensors: dict[str, tuple[str, list[int], bytes]] = {}
        for name, array in load_file(str(paths.model / "model.safetensors")).items():
            shape = list(array.shape)
            if not name.endswith(PROJECTIONS):
                tensors[name] = (NUMPY_DTYPES[str(array.dtype)], shape, array.tobytes())
            elif kind == "fp8":
                tensors[name] = ("F8_E4M3", shape, bytes(math.prod(shape)))
                blocks = [math.ceil(size / 128) for size in shape]
                tensors[name + "_scale_inv"] = ("F32", blocks, bytes(4 * math.prod(blocks)))
            else:  # 4-bit GPTQ: eight values per int32 along the input dimension, groups of 128 inputs
                rows, columns = shape[1], shape[0]
                base = name.removesuffix(".weight")
                groups = math.ceil(rows / 128)
                tensors[base + ".qweight"] = ("I32", [rows // 8, columns], bytes(4 * rows // 8 * columns))
                tensors[base + ".qzeros"] = ("I32", [groups, columns // 8], bytes(4 * groups * (columns // 8)))
                tensors[base + ".scales"] = ("F16", [groups, columns], bytes(2 * groups * columns))
        write_safetensors(ws / "model" / "model.safetensors", tensors)

    return make


TOPIC = "Quantized weights config.json does not declare"
CASES: tuple[Case, ...] = (
    Case(
        "fp8_weights_without_quantization_config",
        "an FP8 release's shards (F8_E4M3 weights, weight_scale_inv) under a config.json without quantization_config",
        (f"{MODEL_KEY}={{ws}}/model",),
        (
            "<tmp>/model/model.safetensors holds model.layers.0.mlp.down_proj.weight (dtype F8_E4M3",
            "no quantization_config",
            "full-precision (bf16) checkpoint",
            MODEL_KEY,
        ),
        make=quantized("fp8"),
    ),
    Case(
        "gptq_weights_without_quantization_config",
        "a GPTQ/AWQ release's shards (qweight, qzeros, scales) under a config.json without quantization_config",
        (f"{MODEL_KEY}={{ws}}/model",),
        ("holds model.layers.0.mlp.down_proj.qweight", "only quantized checkpoints hold", "bf16"),
        make=quantized("gptq"),
    ),
)
