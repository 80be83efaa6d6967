"""An actor's HF export: the `export_weights` stream written as an HF model directory (safetensors shards plus the
config, generation config and tokenizer files of the model it started from), beside the Megatron checkpoint or by
scripts/model_merger.py."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Iterable

import torch

from dagrl.engine.rollout.interface import WeightBucket
from dagrl.utils.watchdog import beat

logger = logging.getLogger(__name__)

HF_DIR = "huggingface"  # <actor checkpoint>/huggingface: the HF export (verl's layout)
# Files of an HF model directory that are not weights: config, generation config, tokenizer.
HF_SIDE_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
    "chat_template.json",
)


class _SafetensorsShards:
    """Writes (name, tensor) pairs into safetensors files of at most `shard_bytes` (HF's sharded layout, with
    model.safetensors.index.json when there is more than one file)."""

    def __init__(self, directory: Path, shard_bytes: int) -> None:
        self.directory, self.shard_bytes = directory, shard_bytes
        self.pending: dict[str, torch.Tensor] = {}
        self.pending_bytes = 0
        self.files: list[tuple[Path, list[str]]] = []
        self.total_bytes = 0

    def add(self, name: str, tensor: torch.Tensor) -> None:
        nbytes = tensor.numel() * tensor.element_size()
        if self.pending and self.pending_bytes + nbytes > self.shard_bytes:
            self._flush()
        self.pending[name] = tensor.detach().to("cpu", copy=True).contiguous()
        self.pending_bytes += nbytes
        self.total_bytes += nbytes

    def _flush(self) -> None:
        from safetensors.torch import save_file

        path = self.directory / f".shard-{len(self.files)}.safetensors"
        save_file(self.pending, str(path), metadata={"format": "pt"})
        self.files.append((path, list(self.pending)))
        self.pending, self.pending_bytes = {}, 0

    def finish(self) -> None:
        import json

        if self.pending or not self.files:
            self._flush()
        if len(self.files) == 1:
            os.replace(self.files[0][0], self.directory / "model.safetensors")
            return
        weight_map = {}
        for number, (path, names) in enumerate(self.files, 1):
            final = f"model-{number:05d}-of-{len(self.files):05d}.safetensors"
            os.replace(path, self.directory / final)
            weight_map.update({name: final for name in names})
        index = {"metadata": {"total_size": self.total_bytes}, "weight_map": weight_map}
        (self.directory / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))


def write_hf_model(
    buckets: Iterable[WeightBucket],
    directory: str | Path,
    source_dir: str | Path,
    write: bool,
    shard_bytes: int = 5 << 30,
) -> None:
    """Consume an engine's `export_weights` stream (collective: every rank iterates it) and, where `write`
    (rank 0), save it as an HF model directory: safetensors shards plus config, generation config and tokenizer
    files copied from `source_dir`."""
    directory = Path(directory)
    shards = None
    if write:
        directory.mkdir(parents=True, exist_ok=True)
        shards = _SafetensorsShards(directory, shard_bytes)
    for bucket in buckets:
        beat("checkpoint: hf_model")  # progress for the hang watchdog, bucket by bucket
        if shards is not None:
            for name, tensor in bucket:
                shards.add(name, tensor)
    if shards is None:
        return
    shards.finish()
    for name in HF_SIDE_FILES:
        if (Path(source_dir) / name).is_file():
            shutil.copyfile(Path(source_dir) / name, directory / name)
    logger.debug("wrote HF model (%.1f MB of weights) to %s", shards.total_bytes / 2**20, directory)
