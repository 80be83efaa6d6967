import sys
import warnings
from pathlib import Path


sys.path.insert(0, str(Path(__file__).parent))  # tiny_models, engine_helpers


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: multi-process or long engine tests")
    # megatron warns at import about missing Apex/TE on CPU.
    warnings.filterwarnings("ignore", message=".*(Apex|Transformer Engine).*")
