"""One line for any error a run or its configuration can raise.

Hydra and OmegaConf report composition errors over several lines (and submitit relays a job's
error with its traceback); `one_line_error` keeps what names the fix, with a "did you mean" where
a key or a config choice is close to a known one. `error_text` is the `error` column of a failed
run's row.
"""

from __future__ import annotations

import dataclasses
import re

from cactus_bench.run.conf import SUBCONFS, RunConf
from cactus_bench.samplers.catalogue import RULES
from cactus_bench.samplers.params import did_you_mean


def one_line_error(error: BaseException) -> str:
    """Flatten a Hydra/OmegaConf/ConfigError message into one line that names the fix."""
    message = str(error).strip() or type(error).__name__
    cause = error.__cause__
    if cause is not None and str(cause).strip() and "full_key" in str(cause):
        message = f"{message}\n{cause}"
    for line in (_missing_config_line(message), _not_in_struct_line(message)):
        if line:
            return line
    if "Traceback (most recent call last)" in message:
        # A job's error relayed with its traceback (submitit): keep the final "XError: ..." line.
        finals = re.findall(r"^(\w[\w.]*(?:Error|Exception|Interrupt)\b.*)$", message, re.M)
        if finals:
            return finals[-1].strip()
    lines = [part.strip() for part in message.splitlines() if part.strip()]
    full_key = next((p.split(":", 1)[1].strip() for p in lines if p.startswith("full_key:")), "")
    lines = [p for p in lines if not re.match(r"(full_key|object_type|reference_type)[:=]", p)]
    text = ": ".join([lines[0], " ".join(lines[1:])]) if len(lines) > 1 else " ".join(lines)
    if full_key and full_key not in text:
        text = f"{full_key}: {text}"
    return text


def error_text(error: BaseException) -> str:
    """`TypeName: one-line message` for a failed run's `error` column."""
    name = type(error).__name__
    if str(error).strip():
        return f"{name}: {one_line_error(error)}"
    return f"{name}: interrupted" if isinstance(error, KeyboardInterrupt) else name


def _missing_config_line(message: str) -> str:
    # Hydra: "In 'config': Could not find 'sampler/cactis'\n\nAvailable options in 'sampler':..."
    found = re.search(r"Could not find '([^']+)'", message)
    options = re.findall(r"^\t(\S+)$", message, flags=re.MULTILINE)
    if not found:
        return ""
    group, _, choice = found.group(1).rpartition("/")
    line = f"unknown {group or 'config'} {choice!r}{did_you_mean(choice, options)}"
    if options:
        line += f"; available: {', '.join(options)}"
    return line


def _not_in_struct_line(message: str) -> str:
    # OmegaConf: "Key 'detla' is not in struct\n    full_key: detla" or Hydra's
    # "Could not override 'detla'.\nTo append to your config use +detla=1\nKey 'detla' ..."
    key = re.search(r"Key '([^']+)' not in '\w+'|Key '([^']+)' is not in struct", message)
    if not key:
        return ""
    name = key.group(1) or key.group(2)
    full = re.search(r"full_key: (\S+)", message)
    full_key = full.group(1) if full else name
    parent = full_key.rpartition(".")[0]
    keys = _schema_keys().get(parent, ())
    dotted = re.search(r"Could not override '([^']+)'", message)
    if dotted and dotted.group(1).replace(".", "_") in _schema_keys()[""]:
        # `data.dir=/x` for `data_dir=/x`: the dotted spelling of a top-level key
        wanted = dotted.group(1)
        return f"unknown config key {wanted!r} (did you mean {wanted.replace('.', '_')!r}?)"
    if parent == "sampler" and name in keys:  # a real parameter, of another rule
        return (
            f"the chosen sampler takes no {name!r} (configs/sampler/<name>.yaml lists a rule's "
            f"parameters); to set it anyway use +sampler.{name}=..."
        )
    return f"unknown config key {full_key!r}{did_you_mean(name, keys)}; check the spelling"


def _schema_keys() -> dict[str, tuple[str, ...]]:
    keys = {"": tuple(f.name for f in dataclasses.fields(RunConf))}
    for name, schema in SUBCONFS.items():
        keys[name] = tuple(f.name for f in dataclasses.fields(schema))
    keys["sampler"] = ("name", *dict.fromkeys(p.name for r in RULES.values() for p in r.params))
    return keys
