"""The software stack dagrl is tested on: what CI and the GPU runs install, versions seen working together end to
end. Data only, so that the doctor (which checks an install against it) and an engine (which names the version a
refusal should install) both read it without depending on each other. megatron-core's supported range is
dagrl.engine.megatron.compat.SUPPORTED; setup.py's `gpu` extra carries the same GPU pins (tests/doctor checks they
agree)."""

PINS = {
    "CPU CI": {"python": "3.11", "torch": "2.13.0", "megatron-core": "0.16.1", "transformers": "5"},
    "GPU kit": {
        "python": "3.12",
        "torch": "2.11",
        "cuda": "13.0",
        "megatron-core": "0.19.2",
        "transformer-engine": "2.17.1",
        "vllm": "0.26.0",
        "compressed-tensors": "0.17.0",  # vLLM's FP8 path imports it (benchmarks/device/lock.txt)
        "transformers": "5",
    },
}
