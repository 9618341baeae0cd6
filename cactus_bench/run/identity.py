"""What a run is, stated once: the config hash, the CSV identity columns, the one-line
description, the W&B config and the baseline-cache key all come from one `RunIdentity`.

It is built from the validated configuration (device already resolved) and the acceptance rule's
own `params()` (what the rule really runs with, defaults included), so a new rule parameter
reaches the hash, the row (`sampler_params`, and its own column where the schema has one) and
W&B without an edit here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from cactus_bench.models.registry import SMOLLM2_DRAFTER_ID
from cactus_bench.results.baseline_cache import baseline_key
from cactus_bench.results.metadata import config_hash
from cactus_bench.run.conf import RunConf
from cactus_bench.run.launch import resolve_path
from cactus_bench.samplers.catalogue import VERIFIER_ONLY, param_columns


@dataclass(frozen=True)
class RunIdentity:
    conf: RunConf  # validated, device resolved
    sampler: str  # a rule name, or "verifier" for the verifier alone
    sampler_params: dict[str, Any]  # the rule's params(); {} for the verifier

    @property
    def speculative(self) -> bool:
        return self.sampler != VERIFIER_ONLY

    @cached_property
    def hash_fields(self) -> dict[str, Any]:
        """Every setting that changes what a run measures, and nothing else.

        Resume keys on config_hash(hash_fields). Parameters a rule does not take never appear
        (so `sampler=sps delta=0.5` and `sampler=sps delta=1.0` are one run), nor does m for
        the verifier-only run. Paths, logger and `force` never change a measurement.
        """
        conf = self.conf
        return {
            "model": dataclasses.asdict(conf.model),
            "task": conf.task.name,
            "limit": conf.limit,
            "seed": conf.seed,
            "sampler": self.sampler,
            "sampler_params": dict(self.sampler_params),
            "m": conf.m if self.speculative else None,
            "temperature": conf.temperature,
            "top_p": conf.top_p,
            "top_k": conf.top_k,
            "max_new_tokens": conf.max_new_tokens,
            "device": conf.device,
            # hf: the bare name (older rows keep their hashes); vllm: its options change timings
            "backend": conf.backend.name
            if conf.backend.name == "hf"
            else dataclasses.asdict(conf.backend),
            "engine": dataclasses.asdict(conf.engine),  # changes timings, so a separate run
            "threads": conf.threads,
            "baseline": conf.baseline if self.speculative else "none",
            # only when set: a repeats=1 run keeps the hash it had before the field existed
            **({"repeats": conf.repeats} if conf.repeats != 1 else {}),
            **({"think_filter": conf.think_filter} if conf.think_filter != "paper" else {}),
            # dtype=auto is bf16 on one CPU and fp32 on another: two different measurements
            **({"resolved_dtype": self.dtype} if conf.model.dtype == "auto" else {}),
            **self._drafter_version,
        }

    @property
    def _drafter_version(self) -> dict[str, str]:
        """The committed drafter's fingerprint when a speculative run uses it: its weights and
        logit scale live in the package, so a retrained or recalibrated drafter is a new run
        (hub drafters are pinned by their id and revision instead)."""
        if not (self.speculative and self.conf.model.drafter == SMOLLM2_DRAFTER_ID):
            return {}
        from cactus_bench.models.drafter import drafter_fingerprint

        return {"drafter_fingerprint": drafter_fingerprint()}

    @cached_property
    def dtype(self) -> str:
        """The dtype the HF engine loads both models in, `auto` resolved for this device (bf16
        for the embedded pair on a CPU with hardware bf16); "auto" stays for a hub pair on CUDA
        and for vLLM, which take the checkpoint's dtype."""
        conf = self.conf
        if conf.backend.name != "hf" or conf.model.dtype != "auto":
            return conf.model.dtype
        from cactus_bench.models import PairSpec
        from cactus_bench.models.loading import resolve_pair_dtype

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
        conf = self.conf
        return {
            "run_id": run_id,
            "config_hash": self.config_hash,
            "experiment": conf.experiment_name,
            "model_pair": conf.model.name,
            "drafter_id": conf.model.drafter if self.speculative else None,
            "verifier_id": conf.model.verifier,
            "backend": conf.backend.name,
            "dtype": self.dtype,
            "task": conf.task.name,
            "sampler": self.sampler,
            **param_columns(self.sampler, self.sampler_params),
            "sampler_params": dict(self.sampler_params) if self.speculative else None,
            "m": conf.m if self.speculative else None,
            "temperature": conf.temperature,
            "top_p": conf.top_p,
            "top_k": conf.top_k,
            "seed": conf.seed,
            "repeats": conf.repeats,
            "max_new_tokens": conf.max_new_tokens,
            "baseline_mode": conf.baseline if self.speculative else "none",
        }

    @property
    def description(self) -> str:
        """`smollm2_135m / demo / cactus delta=1.0 m=10` (a log line, a W&B run's title)."""
        params = " ".join(f"{k}={v}" for k, v in self.sampler_params.items())
        spec = f" m={self.conf.m}" if self.speculative else ""
        head = f"{self.conf.model.name} / {self.conf.task.name} / {self.sampler}"
        return f"{head}{' ' + params if params else ''}{spec}"

    def wandb_config(self, run_id: str) -> dict[str, Any]:
        return {**self.hash_fields, "run_id": run_id, "config_hash": self.config_hash}

    def baseline_key(self, prompts: list, device_name: str) -> str:
        """Key of the verifier-only decode of `prompts` that any run of this setting may reuse:
        verifier, prompts as token ids, sampling, dtype, budget, seed and the device timed on."""
        from cactus_bench.models.hub import hub_commit

        conf = self.conf
        # The commit an unpinned revision resolved to: after the hub moves main, not reused.
        commit = hub_commit(conf.model.verifier, conf.model.verifier_revision)
        return baseline_key(
            verifier_id=conf.model.verifier,
            task=conf.task.name,
            prompts=prompts,
            sampling={
                "temperature": conf.temperature,
                "top_p": conf.top_p,
                "top_k": conf.top_k,
                "dtype": self.dtype,
                "verifier_revision": conf.model.verifier_revision,
                **({"verifier_commit": commit} if commit else {}),
            },
            max_new_tokens=conf.max_new_tokens,
            seed=conf.seed,
            device_name=device_name,
        )

    @property
    def results_csv(self) -> Path:
        """<results_dir>/<experiment_name or runs>.csv, results_dir against the launch folder."""
        return Path(resolve_path(self.conf.results_dir)) / self.csv_name
