from __future__ import annotations

from tests.reliability.corpus.case import MODEL_KEY, Case
from tests.reliability.corpus.file_makers import text_file
from tests.reliability.corpus.model_makers import (
    _hf_cache_unfinished,
    bin_weights_only,
    gguf_only_dir,
    hub_cache_folder,
    megatron_actor_dir,
    tokenizer_only,
)

TOPIC = "Model directories: what actor_rollout_ref.model.path names"
CASES: tuple[Case, ...] = (
    Case(
        "model_path_config_file",
        "actor_rollout_ref.model.path names the model's config.json",
        (f"{MODEL_KEY}={{model}}/config.json",),
        (MODEL_KEY, "is a file (config.json)", "e.g. <model>"),
    ),
    Case(
        "model_path_gguf_file",
        "actor_rollout_ref.model.path names a GGUF file",
        (f"{MODEL_KEY}={{ws}}/model.gguf",),
        (MODEL_KEY, "GGUF file", "HF model directory"),
        make=text_file("model.gguf", "GGUF"),
    ),
    Case(
        "model_dir_holds_gguf",
        "a model directory holding only a .gguf file",
        (f"{MODEL_KEY}={{ws}}/model",),
        ("<tmp>/model holds model-q4_k_m.gguf, a GGUF file", "save_pretrained"),
        make=gguf_only_dir,
    ),
    Case(
        "model_bin_weights_only",
        "a model directory with pytorch_model.bin and no safetensors",
        (f"{MODEL_KEY}={{ws}}/model",),
        ("no *.safetensors weights", "safe_serialization=True"),
        make=bin_weights_only,
    ),
    Case(
        "model_path_tokenizer_only",
        "actor_rollout_ref.model.path names a tokenizer-only directory",
        (f"{MODEL_KEY}={{ws}}/tok",),
        ("<tmp>/tok/config.json", "is missing", MODEL_KEY),
        make=tokenizer_only,
    ),
    Case(
        "model_path_hub_id",
        "`actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct` (a hub id, not downloaded)",
        (f"{MODEL_KEY}=Qwen/Qwen2.5-0.5B-Instruct",),
        ("Qwen/Qwen2.5-0.5B-Instruct", "does not exist", MODEL_KEY),
    ),
    Case(
        "model_path_hub_id_qwen3",
        "`model.path=Qwen/Qwen3-0.6B` (a hub id)",
        ("actor_rollout_ref.model.path=Qwen/Qwen3-0.6B",),
        ("looks like a Hugging Face hub id", "huggingface-cli download Qwen/Qwen3-0.6B"),
    ),
    Case(
        "model_path_trailing_space",
        "`model.path='<dir> '` (a space inside the quotes)",
        ("actor_rollout_ref.model.path='{model} '",),
        ("actor_rollout_ref.model.path", "has a trailing space"),
    ),
    Case(
        "model_path_hf_cache_repo",
        "model.path names the hub cache's models--org--tiny folder",
        ("actor_rollout_ref.model.path={ws}/hub/models--org--tiny",),
        ("snapshots/0123abcd",),
        make=hub_cache_folder,
    ),
    Case(
        "model_path_verl_actor_dir",
        "model.path names verl's global_step_10/actor (a Megatron checkpoint)",
        ("actor_rollout_ref.model.path={ws}/global_step_10/actor",),
        (
            "is a Megatron checkpoint",
            "use_dist_checkpointing=true",
            "dist_checkpointing_path=<tmp>/global_step_10/actor",
        ),
        make=megatron_actor_dir,
    ),
    Case(
        "model_path_hf_cache_unfinished",
        "`model.path` at a hub cache folder whose snapshot holds nothing",
        ("actor_rollout_ref.model.path={ws}/models--Qwen--Qwen3-0.6B",),
        ("hub cache's folder", "did not finish", "download the model again", "snapshots/<revision>"),
        make=_hf_cache_unfinished,
    ),
)
