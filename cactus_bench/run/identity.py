"""What a run is, stated once: the config hash, the CSV identity columns, the one-line
description, the W&B config and the baseline-cache key all come from one `RunIdentity`, whose
settings are the table `cactus_bench.run_settings.RUN_SETTINGS`.

It is built from the validated configuration (device already resolved) and the rule's typed
parameters that `validate` parsed (`RuleParams`: the rule is built from them, and they say what
it runs with), so a new rule parameter reaches the hash, the row (`sampler_params`, and its own
column where the catalogue gives it one) and W&B without an edit here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from cactus_bench.models.hub import hub_commit
from cactus_bench.models.registry import SMOLLM2_DRAFTER_ID, PairSpec
from cactus_bench.run.conf import RunConf
from cactus_bench.run.launch import resolve_path
from cactus_bench.run_settings import baseline_values, column_values, hashed_values
from cactus_bench.samplers.catalogue import NO_RULE, param_columns
from cactus_bench.samplers.params import RuleParams
from cactus_bench.store.baseline_cache import baseline_key
from cactus_bench.store.metadata import config_hash


@dataclass(frozen=True)
class RunIdentity:
    conf: RunConf  # validated, device resolved
    rule_params: RuleParams  # what validate() parsed; NO_RULE for the verifier alone

    @property
    def speculative(self) -> bool:
        return self.rule_params != NO_RULE

    @property
    def sampler(self) -> str:
        """A rule name, or "verifier" for the verifier alone."""
        return self.rule_params.rule

    @property
    def sampler_params(self) -> dict[str, Any]:
        """What the rule runs with, as its params() gives them; {} for the verifier."""
        return self.rule_params.runs_with()

    @cached_property
    def hash_fields(self) -> dict[str, Any]:
        """Every setting that changes what a run measures, and nothing else (the hashed rows of
        `cactus_bench.run_settings.RUN_SETTINGS`).

        Resume keys on config_hash(hash_fields). Parameters a rule does not take never appear
        (so `sampler=sps delta=0.5` and `sampler=sps delta=1.0` are one run), nor does m for
        the verifier-only run. Paths, logger and `force` never change a measurement.
        """
        return hashed_values(self)

    # ---- values the settings table reads that are not plain config fields ----
    @property
    def hashed_backend(self) -> str | dict[str, Any]:
        """hf: the bare name; vllm: every option (they change timings)."""
        backend = self.conf.backend
        return backend.name if backend.name == "hf" else dataclasses.asdict(backend)

    @property
    def draws(self) -> str | None:
        """How the HF engine draws: "counter" (keyed on seed and position, engine/draws.py)
        where it samples at all; None for greedy runs and vLLM, whose tokens it never changed,
        so their rows keep their hashes while sampled HF rows (drawn from per-request
        generators before) get new ones."""
        sampled = self.conf.temperature > 0
        return "counter" if sampled and self.conf.backend.name == "hf" else None

    @property
    def hashed_engine(self) -> dict[str, Any]:
        """The engine node; `cuda_graphs` only where graphs run (a CUDA device, not "off"), so
        CPU rows and rows from before the setting keep their hashes."""
        engine = dataclasses.asdict(self.conf.engine)
        if engine["cuda_graphs"] == "off" or not str(self.conf.device).startswith("cuda"):
            engine.pop("cuda_graphs")
        return engine

    @property
    def auto_dtype(self) -> str | None:
        """The resolved dtype when the config says `auto`; None when it names one."""
        return self.dtype if self.conf.model.dtype == "auto" else None

    @cached_property
    def drafter_fingerprint(self) -> str | None:
        """The committed drafter's fingerprint when a speculative run uses it: its weights and
        logit scale live in the package, so a retrained or recalibrated drafter is a new run
        (hub drafters are pinned by their id and revision instead). On vLLM the export's format
        is part of it: rows of an export with another head law are another run."""
        if not (self.speculative and self.conf.model.drafter == SMOLLM2_DRAFTER_ID):
            return None
        from cactus_bench.models.drafter import drafter_fingerprint  # lazy: keeps torch out

        if self.conf.backend.name == "vllm":
            from cactus_bench.vllm.export import EXPORT_FORMAT  # lazy: the vLLM backend's layout

            return f"{drafter_fingerprint()}+{EXPORT_FORMAT}"
        return drafter_fingerprint()

    @cached_property
    def verifier_commit(self) -> str | None:
        """The cached commit the verifier's revision resolves to (None: embedded, not cached)."""
        return hub_commit(self.conf.model.verifier, self.conf.model.verifier_revision) or None

    @cached_property
    def dtype(self) -> str:
        """The dtype the HF engine loads both models in, `auto` resolved for this device (bf16
        for the embedded pair on a CPU with hardware bf16); "auto" stays for a hub pair on CUDA
        and for vLLM, which take the checkpoint's dtype."""
        conf = self.conf
        if conf.backend.name != "hf" or conf.model.dtype != "auto":
            return conf.model.dtype
        from cactus_bench.models.loading import resolve_pair_dtype  # lazy: keeps torch out

        resolved = resolve_pair_dtype(PairSpec(**dataclasses.asdict(conf.model)), conf.device)
        return resolved if isinstance(resolved, str) else str(resolved).removeprefix("torch.")

    @cached_property
    def config_hash(self) -> str:
        return config_hash(self.hash_fields)

    @property
    def csv_name(self) -> str:
        return f"{self.conf.experiment_name or 'runs'}.csv"

    def columns(self, run_id: str) -> dict[str, Any]:
        """The row's columns that say which run it is (known before anything runs)."""
        return {
            "run_id": run_id,
            "config_hash": self.config_hash,
            **column_values(self),
            **param_columns(self.rule_params),
        }

    @property
    def description(self) -> str:
        """`smollm2_135m / demo / cactus delta=1.0 m=10` (a log line, a W&B run's title);
        vLLM's own sampler adds `acceptance=vllm`."""
        params = " ".join(f"{k}={v}" for k, v in self.sampler_params.items())
        spec = f" m={self.conf.m}" if self.speculative else ""
        if self.conf.acceptance != "rule":
            spec += f" acceptance={self.conf.acceptance}"
        head = f"{self.conf.model.name} / {self.conf.task.name} / {self.sampler}"
        return f"{head}{' ' + params if params else ''}{spec}"

    def wandb_config(self, run_id: str) -> dict[str, Any]:
        return {**self.hash_fields, "run_id": run_id, "config_hash": self.config_hash}

    def baseline_key(self, prompts: list, device_name: str) -> str:
        """Key of the verifier-only decode of `prompts` that any run of this setting may reuse:
        verifier, prompts as token ids, sampling, dtype, budget, seed and the device timed on."""
        fields = baseline_values(self)
        return baseline_key(prompts=prompts, device_name=device_name, **fields)

    @property
    def results_csv(self) -> Path:
        """<results_dir>/<experiment_name or runs>.csv, results_dir against the launch folder."""
        return Path(resolve_path(self.conf.results_dir)) / self.csv_name
