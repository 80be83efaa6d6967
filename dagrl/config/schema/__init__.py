"""The config's schema: a typed declaration a section (`<group>.py`, each key's type, default, range, choices and
doc in one `key(...)`), the whole tree (`root.py`), and the checker pre-flight runs over a composed config
(`check.py`). conf/<group>/default.yaml and docs/config_reference.md are written from the declarations by
scripts/gen_config_reference.py."""
