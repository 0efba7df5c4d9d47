"""Reading a service's settings file: YAML (or JSON by suffix) holding one mapping.

The webhook, the enforcer and the scheduler extender all take the same kind of file and refuse it the
same way; each turns :class:`ConfigFileError` into its own ``ConfigError`` so its CLI prints one line and
exits 2 before anything is served.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml


class ConfigFileError(Exception):
    """The file cannot be read, does not parse, or does not hold a mapping (the message says which)."""


def read_mapping(path: Path) -> dict[str, Any]:
    """The file's top-level mapping with string keys; an empty file is an empty mapping."""
    try:
        text = path.read_text()
    except OSError as err:
        raise ConfigFileError(f"cannot read config file {path}: {err}") from None
    try:
        document = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as err:
        raise ConfigFileError(f"config file {path} does not parse: {err}") from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise ConfigFileError(f"config file {path} must hold a mapping, got {type(document).__name__}")
    return {str(k): v for k, v in document.items()}
