"""The second part of the settings table: how a run ran. Its options (who decides acceptance, the
draft length, the sampling, seeds and repeats, the baseline, the batch, the device and threads,
where data and results live) and how its engine drew and computed.

table.py puts this part after what_ran.py's; what a line holds: setting.py.
"""

from __future__ import annotations

import re
from typing import Any

from cactus_bench.paper import PAPER
from cactus_bench.run_settings.setting import Check, Option, Setting, at_least, one_of
from cactus_bench.tasks.specs import THINK_FILTERS

BASELINE_MODES = ("interleave", "cached", "none")
# Who decides which drafts survive: the run's rule (on vLLM, installed in its rejection sampler,
# drafts from the processed law), or vLLM's own speculative sampling as it ships (its rejection
# sampler and drafter law: sampled drafts from softmax(logits / T), or its default argmax drafts).
ACCEPTANCE_MODES = ("rule", "vllm", "vllm_greedy")
DEVICE_PATTERN = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")
# The out-of-head diagnostic's default c, the engine's (engine/commit_stats.py OUT_OF_HEAD_C;
# the engine layer sits beside this one, so a test holds the two equal)
OUT_OF_HEAD_C = 0.2


def _opt(kind: Any, default: Any, check: Check | None = None, key: str = "") -> Option:
    return Option(kind, default, check, key)


HOW_IT_RAN: tuple[Setting, ...] = (
    # rows written before the setting existed ran the rule: "rule" rows keep their hashes
    Setting(
        "acceptance",
        "who decides acceptance: rule (the sampler's rule; on vLLM installed in its rejection "
        "sampler, drafts from the processed law) | vllm (backend=vllm, sampler=sps: vLLM's own "
        "rejection sampler and drafter law, drafts sampled from softmax(logits / T), no rule or "
        "drafter patch) | vllm_greedy (the same with vLLM's default argmax drafts); empty in "
        "rows before it existed (rule)",
        _opt(str, "rule", one_of(ACCEPTANCE_MODES)),
        unhashed="rule",
        grouped=True,
    ),
    Setting(
        "m",
        "draft length (tokens drafted per step)",
        _opt(int, PAPER.m, at_least(1)),
        grouped=True,
        verifier_value=None,
    ),
    Setting(
        "temperature",
        "sampling temperature (0 = greedy)",
        _opt(float, PAPER.temperature, Check(">= 0", lambda v: v >= 0)),
        baseline="sampling.temperature",
        grouped=True,
    ),
    Setting(
        "top_p",
        "nucleus threshold",
        _opt(
            float,
            PAPER.top_p,
            Check("in (0, 1]; 1 disables nucleus filtering", lambda v: 0 < v <= 1),
        ),
        baseline="sampling.top_p",
        grouped=True,
    ),
    Setting(
        "top_k",
        "top-k filter of the sampling distributions",
        _opt(int | None, PAPER.top_k, at_least(0, "(0: off)")),
        baseline="sampling.top_k",
        grouped=True,
    ),
    Setting("seed", "seed of the run", _opt(int, PAPER.seed, at_least(0)), baseline="seed"),
    # repeats=1 rows keep the hash they had before the setting existed
    Setting(
        "repeats",
        "decodes per prompt, each with its own seeds (both arms); empty in rows before it existed",
        _opt(int, 1, at_least(1, why="1 decodes each prompt once")),
        unhashed=1,
    ),
    Setting(
        "max_new_tokens",
        "generation cap per prompt",
        _opt(int, PAPER.max_new_tokens, at_least(1)),
        baseline="max_new_tokens",
        grouped=True,
    ),
    Setting(
        "baseline",
        "how the verifier-only baseline is decoded: interleave (prompt by prompt, same run) | "
        "cached (decoded once, reused) | none",
        _opt(str, "interleave", one_of(BASELINE_MODES)),
        column="baseline_mode",
        verifier_value="none",
    ),
    # batch=1 rows keep their hashes and baseline keys
    Setting(
        "batch",
        "requests decoded at once, continuous batching (both arms); 1 = one at a time",
        _opt(int, 1, at_least(1)),
        unhashed=1,
        baseline="sampling.batch",
        grouped=True,
    ),
    Setting(
        "delta",
        "shortcut for sampler.delta, set while the config is composed (rules without a "
        "divergence budget ignore it)",
        _opt(float | None, None),
        hashed=False,
        column=None,
    ),
    # The guards' shortcuts (samplers/params.py GUARDS): `stop=exact` sets sampler.stop as delta=
    # sets sampler.delta; the sampler node holds the value, checked and hashed there.
    *(
        Setting(
            guard,
            f"shortcut for sampler.{guard} (docs/rules.md, Guards; refused by rules outside "
            "the target family)",
            _opt(kind | None, None),
            hashed=False,
            column=None,
        )
        for guard, kind in (
            ("stop", str),
            ("strict_first", int),
            ("relax_in", str),
            ("near_top", float),
        )
    ),
    # the out-of-head diagnostic's c (engine/commit_stats.py): 0.2 rows keep their hashes
    Setting(
        "out_of_head_c",
        "c of the out-of-head diagnostic: an accepted draft x with q(x) < c max q is out of "
        "the verifier's head (out_of_head_per_1k); empty in rows before it existed (0.2)",
        _opt(float, OUT_OF_HEAD_C, Check("in (0, 1]", lambda v: 0 < v <= 1)),
        unhashed=OUT_OF_HEAD_C,  # the verifier alone records it too: its hash stays the same
    ),
    Setting(
        "limit",
        "first `limit` prompts of the task; null = all",
        _opt(int | None, None, at_least(1, "for all prompts")),
        column=None,
    ),
    Setting(
        "device",
        "auto (cuda when available, else cpu) | cpu | mps | cuda | cuda:N",
        _opt(
            str,
            "auto",
            Check("auto, cpu, mps, cuda or cuda:N", lambda v: bool(DEVICE_PATTERN.match(v))),
        ),
        column=None,
    ),
    # the HF engine's random draws: sampled rows from before counter draws keep their hashes
    Setting(
        "draws",
        "how the HF engine draws its random numbers (counter: keyed on seed and position)",
        source="draws",
        column=None,
        unhashed=None,
        baseline="sampling.draws",
    ),
    # the forward path changes timings
    Setting("engine", "the HF engine's forward path", source="hashed_engine", column=None),
    Setting(
        "threads",
        "torch CPU threads (null = all cores); 1 keeps CPU timings stable on a shared machine",
        _opt(int | None, None, at_least(1, "")),
        column=None,
    ),
    # how an unfinished <think> block is scored; "paper" rows keep their hashes
    Setting(
        "think_filter",
        "an unfinished <think> block: paper scores its text, tag removed (the reference code); "
        "strict never scores unfinished reasoning",
        _opt(str, "paper", one_of(THINK_FILTERS)),
        column=None,
        unhashed="paper",
    ),
    # the committed drafter's weights and logit scale (hub drafters are pinned by id/revision)
    Setting(
        "drafter_fingerprint",
        "the committed drafter's weights and logit scale",
        source="drafter_fingerprint",
        column=None,
        unhashed=None,
    ),
    Setting(
        "baseline_dir",
        "folder of the reusable verifier-only baselines; null = <results_dir>/baselines",
        _opt(str | None, None),
        hashed=False,
        column=None,
    ),
    Setting(
        "drift_threshold",
        "a row is marked (drift_marked) when an arm's step rate moves by more than this "
        "fraction between the first and second half of its waves",
        _opt(float, 0.1, Check("> 0", lambda v: v > 0)),
        hashed=False,
    ),
    Setting(
        "baseline_max_age_h",
        "baseline=cached: a cached baseline decoded more hours ago than this is refused",
        _opt(float, 24.0, Check("> 0", lambda v: v > 0)),
        hashed=False,
        column=None,
    ),
    Setting(
        "force",
        "rerun even when a finished row with this config hash exists",
        _opt(bool, False),
        hashed=False,
        column=None,
    ),
    Setting(
        "data_dir",
        "offline data folder laid out like shared/data (default: env CACTUS_BENCH_DATA)",
        _opt(str | None, None),
        hashed=False,
        column=None,
    ),
    Setting(
        "results_dir",
        "folder of the results CSV",
        _opt(str, "results", Check("a folder for the results CSV", bool)),
        hashed=False,
        column=None,
    ),
)
