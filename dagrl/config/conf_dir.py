"""Where conf/ lives (a source checkout's conf/, or the wheel's dagrl/conf). Imports nothing of dagrl."""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent.parent
# A source checkout keeps conf/ beside the package; an installed wheel ships it as dagrl/conf.
CONF_DIR = next(
    (p for p in (_PACKAGE_DIR.parent / "conf", _PACKAGE_DIR / "conf") if (p / "dagrl.yaml").is_file()),
    _PACKAGE_DIR / "conf",
)
CONFIG_NAME = "dagrl"
