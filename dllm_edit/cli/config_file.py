"""Decoding settings kept in a file: `dllm-edit generate --config FILE.yaml` and `--save-config`.

The file is an `EditGenerationConfig` as a YAML mapping of its fields (JSON works too, so a
`generation_config.json` written by `save_pretrained` loads as it is). Fields the file leaves out
take `EditGenerationConfig`'s defaults (the Quality preset); strategies, schedules and the
`unmasking` rule are written as dicts with their `type`:

```yaml
max_new_tokens: 64
block_length: 32
threshold: {type: Linear, start: 0.9, end: 0.5, num_steps: 8}
editing_threshold: 0.0            # null: editing off
unmasking: {type: eb_sampler, gamma: 0.01}
```
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .checks import check_writable_file

SUFFIXES = (".yaml", ".yml", ".json")


def load_config_file(path: str, option: str = "--config") -> Any:
    """The `EditGenerationConfig` a YAML (or JSON) file describes, validated.

    Raises:
        FileNotFoundError: no file at `path`.
        ValueError: not a YAML mapping, or a field with a bad value (the message names the file).
        TypeError: a key that is no field of `EditGenerationConfig` (with the closest names).
    """
    import yaml

    from dllm_edit.config import EditGenerationConfig

    file = Path(path).expanduser()
    if not file.is_file():
        what = "is a folder" if file.is_dir() else "does not exist"
        raise FileNotFoundError(f"{option} {path!r}: the file {what}; give a YAML file of decoding settings.")
    try:
        data = yaml.safe_load(file.read_text())
    except yaml.YAMLError as err:
        raise ValueError(f"{option} {path!r} is not valid YAML: {' '.join(str(err).split())}") from None
    except UnicodeDecodeError:
        raise ValueError(
            f"{option} {path!r} is not a text file; give a YAML file of decoding settings."
        ) from None
    if not isinstance(data, dict):
        raise ValueError(
            f"{option} {path!r} must hold a mapping of EditGenerationConfig fields (e.g. 'threshold: 0.6'), "
            f"got {type(data).__name__}."
        )
    try:
        return EditGenerationConfig(**{str(key): value for key, value in data.items()})
    except (TypeError, ValueError) as err:
        raise type(err)(f"{option} {path!r}: {err}") from err


def save_config_file(config: Any, path: str) -> None:
    """Write `config` as YAML (JSON for a `.json` path) that `load_config_file` reads back to an
    equal config."""
    import json

    import yaml

    fields = config.to_diff_dict()
    fields.pop("transformers_version", None)
    target = Path(path).expanduser()
    if target.suffix.lower() == ".json":
        target.write_text(json.dumps(fields, indent=2, sort_keys=True) + "\n")
    else:
        target.write_text(yaml.safe_dump(fields, sort_keys=True))


def check_save_path(path: str, option: str = "--save-config") -> None:
    """Refuse, before any work, a `--save-config` path that cannot be written or is not YAML/JSON."""
    check_writable_file(path, option, suffixes=SUFFIXES)
