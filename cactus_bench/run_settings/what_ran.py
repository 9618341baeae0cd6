"""The first part of the settings table: what a run is of. The experiment it belongs to, the
model pair, the backend, the dtype the models ran in, the task and the acceptance rule with its
parameters, most read off the run's identity rather than set on the command line.

table.py puts this part first (its columns lead the results row); what a line holds: setting.py.
"""

from __future__ import annotations

from cactus_bench.run_settings.setting import Option, Setting

WHAT_RAN: tuple[Setting, ...] = (
    Setting(
        "experiment",
        "experiment preset name, e.g. table1_qwen3_14b; the CSV is "
        "<results_dir>/<experiment_name or runs>.csv",
        Option(str | None, None, key="experiment_name"),
        hashed=False,
    ),
    # the pair: the whole model node (ids, revisions, dtype, context, chat kwargs) is hashed
    Setting("model", "the model node (configs/model/)", source="conf.model", column=None),
    Setting(
        "model_pair",
        "pair name from cactus_bench.models.PAIR_NAMES",
        source="conf.model.name",
        kind="str",
        hashed=False,
        grouped=True,
    ),
    Setting(
        "drafter_id",
        "drafter checkpoint id; empty for a verifier-only run",
        source="conf.model.drafter",
        kind="str",
        hashed=False,
        verifier_value=None,
    ),
    Setting(
        "verifier_id",
        "verifier checkpoint id",
        source="conf.model.verifier",
        kind="str",
        hashed=False,
        baseline="verifier_id",
    ),
    Setting(
        "verifier_revision",
        "the verifier's hub revision",
        source="conf.model.verifier_revision",
        hashed=False,
        column=None,
        baseline="sampling.verifier_revision",
    ),
    # the commit an unpinned revision resolved to: after the hub moves main, not reused
    Setting(
        "verifier_commit",
        "the commit the verifier's revision resolved to",
        source="verifier_commit",
        hashed=False,
        column=None,
        unhashed=None,
        baseline="sampling.verifier_commit",
    ),
    # hf: the bare name (older rows keep their hashes); vllm: its options change timings
    Setting("backend", "the backend node", source="hashed_backend", column=None),
    Setting("backend", "hf | vllm", source="conf.backend.name", kind="str", hashed=False),
    # the dtype the models ran in, `auto` resolved for this device
    Setting(
        "dtype",
        "dtype the models ran in",
        source="dtype",
        kind="str",
        hashed=False,
        baseline="sampling.dtype",
    ),
    # dtype=auto is bf16 on one CPU and fp32 on another: hashed as resolved (a set dtype is
    # in `model` already)
    Setting(
        "resolved_dtype",
        "model.dtype=auto as resolved",
        source="auto_dtype",
        column=None,
        unhashed=None,
    ),
    Setting(
        "task",
        "gsm8k | ifeval | gpqa | demo",
        source="conf.task.name",
        kind="str",
        baseline="task",
        grouped=True,
    ),
    Setting(
        "sampler",
        "an acceptance rule of cactus_bench.samplers.SAMPLER_NAMES, or verifier (no drafts)",
        source="sampler",
        kind="str",
        grouped=True,
    ),
    # the rule's params(): {} for the verifier in the hash, an empty cell in the row
    Setting("sampler_params", "the rule's params()", source="sampler_params", column=None),
    Setting(
        "sampler_params",
        "every parameter of the acceptance rule, as its params() gives them (a new parameter "
        "without a column of its own shows here)",
        source="sampler_params",
        kind="json",
        hashed=False,
        grouped=True,
        verifier_value=None,
    ),
)
