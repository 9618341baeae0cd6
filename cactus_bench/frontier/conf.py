"""The frontier's configuration: one dataclass, its checks, and the rule grid it spans.

`FrontierConf` is the frontier program's own configuration, apart from a task run's `RunConf`:
the module CLI's options (`python -m cactus_bench.frontier --help`), and what `python run.py
experiment=frontier` builds from the run's shared settings (`from_run`: pair, dtype, data,
sampling, seed, device, results folder). Sampling defaults are the paper's (`cactus_bench.paper`).
Imports no torch: a bad value fails in milliseconds with one line naming the fix.

Contexts are held out from the drafter's training by default (the demo prompts, GSM8K test,
IFEval); GSM8K train, the embedded drafter's own training source, is a second set that is
labelled as such (`prompt_set_label`) and written to its own CSV.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from cactus_bench.paper import PAPER
from cactus_bench.samplers.catalogue import RULES
from cactus_bench.samplers.params import DIVERGENCE_NAMES, GUARD_DEFAULTS, GUARDS

PROMPT_SOURCES = ("demo", "gsm8k_test", "ifeval", "gsm8k_train")
HELD_OUT = ("demo", "gsm8k_test", "ifeval")  # not in the embedded drafter's training data
# Every rule of the catalogue with a per-position law (aliases run as their rule; FLy's window
# has none), in the catalogue's order: a new rule file reaches the frontier without an edit here.
RULE_FAMILIES = tuple(
    name for name, info in RULES.items() if info.alias_of is None and info.per_position_law
)
# Budgets from 0.01 to 8 nats, roughly log-spaced (at most a factor 2 apart) on round values
# that include the paper's and the demo's (0.25, 0.5, 0.75, 1, 2).
DEFAULT_DELTAS = (0.01, 0.02, 0.03, 0.05, 0.1, 0.15, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 8.0)

# The guards with a per-position law (strict_first and relax_in depend on the answer's offset and
# think state, which a teacher-forced position of the frontier does not model).
POSITION_FREE_GUARDS = ("stop", "near_top")

# c of the out-of-head mass: a token is out of q_t's head where q_t(x) < c max q_t (the 0.2 of
# others' traces of lossy rules, where such commits came with longer answers).
HEAD_FRACTION = 0.2


class FrontierConfigError(ValueError):
    """A bad frontier setting; the message is one line that names the fix."""


@dataclass
class FrontierConf:
    """Every setting of one frontier measurement (defaults: the embedded pair, paper sampling)."""

    pair: str = "smollm2_135m"  # a registered model pair (configs/model/<name>.yaml)
    prompts: list[str] = field(default_factory=lambda: list(HELD_OUT))  # sources, in order
    num_demo: int = 20  # first prompts of the demo task (20 ship with the package)
    num_gsm8k: int = 60  # first GSM8K questions of each GSM8K split named in `prompts`
    num_ifeval: int = 40  # first IFEval prompts
    data_dir: str | None = None  # folder laid out like shared/data (GSM8K); env CACTUS_BENCH_DATA
    max_new_tokens: int = 256  # tokens the verifier samples per prompt (stops at EOS)
    batch_size: int = 64  # rows per batched generation
    temperature: float = PAPER.temperature
    top_p: float = PAPER.top_p
    top_k: int | None = PAPER.top_k  # None or 0: off
    seed: int = PAPER.seed
    device: str = "cpu"  # cpu | cuda | auto
    dtype: str | None = "float32"  # None: the pair's own dtype (bf16 for the paper's pairs)
    threads: int | None = 1  # torch CPU threads (None: torch's default)
    rules: list[str] = field(  # every family but greedy (temperature 0 only)
        default_factory=lambda: [rule for rule in RULE_FAMILIES if rule != "greedy"]
    )
    deltas: list[float] = field(default_factory=lambda: list(DEFAULT_DELTAS))  # cactus rules
    divergences: list[str] = field(default_factory=lambda: list(DIVERGENCE_NAMES))
    tas_thresholds: list[float] = field(
        default_factory=lambda: [0.01, 0.03, 0.05, 0.09, 0.15, 0.3, 0.5]
    )
    topk_ks: list[int] = field(default_factory=lambda: [1, 2, 3, 5, 10])
    interp_alphas: list[float] = field(default_factory=lambda: [0.1, 0.25, 0.5, 0.75, 0.9])
    lenience_ls: list[float] = field(default_factory=lambda: [0.9, 0.7, 0.5, 0.3, 0.1])
    cascade_alphas: list[float] = field(default_factory=lambda: [0.1, 0.3, 0.5, 0.7, 0.9])
    fsd_thresholds: list[float] = field(default_factory=lambda: [0.05, 0.1, 0.2, 0.4, 0.8])
    bild_taus: list[float] = field(default_factory=lambda: [1.0, 2.0, 3.0, 5.0])
    # 2026's rules (docs/rules.md, F7-F9): the near-top band alpha (the source ran <= 0.2), the
    # gated cascade's head band beta at OPT's alpha = 0.5 (beta = 1: plain OPT), vLLM's additive
    # t (0: SpS) and the greedy margin K (1: argmax q only)
    topband_alphas: list[float] = field(default_factory=lambda: [0.05, 0.1, 0.2, 0.3, 0.5])
    topband_betas: list[float] = field(default_factory=lambda: [0.1, 0.2, 0.5, 0.8])
    additive_thresholds: list[float] = field(default_factory=lambda: [0.05, 0.1, 0.2, 0.5, 1.0])
    greedy_margins: list[float] = field(default_factory=lambda: [0.1, 0.2, 0.3, 0.5, 0.8])
    # Cactus with one guard each (`name=value`, stop or near_top), at these deltas
    guards: list[str] = field(default_factory=lambda: ["stop=exact", "near_top=0.2"])
    guard_deltas: list[float] = field(default_factory=lambda: [1.0])
    al_max_m: int = 20  # predicted AL(m) for m = 1..al_max_m
    entropy_edges: list[float] = field(
        default_factory=lambda: [0.0, 0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0]
    )
    head_fraction: float = HEAD_FRACTION
    bootstrap: int = 1000  # resamples of the sequences for every 95 % interval
    chunk_elements: int = 2_000_000  # positions x grid x support per exact-statistics chunk
    engine_check: int = 0  # positions re-decoded by the engine (sps, cactus delta=1); 0 = skip
    engine_check_seeds: int = 1  # engine decodes per checked position and rule
    out_dir: str = "results/frontier"
    cache_dir: str | None = None  # contexts cache; None = <out_dir>/contexts (git-ignored)
    figures: bool = True
    progress: bool = True

    @classmethod
    def from_run(cls, run: Any) -> FrontierConf:
        """The frontier of a run configuration's pair, data, sampling, seed and device (what
        `python run.py experiment=frontier model=... data_dir=...` says); the rest default.
        Without a data folder the contexts are the demo prompts only; `limit` caps the prompts
        taken from each source."""
        sizes = {}
        if run.limit is not None:
            sizes = {"num_demo": run.limit, "num_gsm8k": run.limit, "num_ifeval": run.limit}
        return cls(
            pair=run.model.name,
            prompts=list(HELD_OUT) if run.data_dir else ["demo"],
            dtype=run.model.dtype,
            data_dir=run.data_dir,
            temperature=run.temperature,
            top_p=run.top_p,
            top_k=run.top_k,
            seed=run.seed,
            device=run.device,
            out_dir=f"{run.results_dir}/frontier",
            **sizes,
        )

    def check(self) -> None:
        """Raise FrontierConfigError (one line) for the first bad value."""
        _check_names("frontier.prompts", self.prompts, PROMPT_SOURCES)
        _check_names("frontier.rules", self.rules, RULE_FAMILIES)
        _check_names("frontier.divergences", self.divergences, DIVERGENCE_NAMES)
        integers = {
            "num_demo": 0,
            "num_gsm8k": 0,
            "num_ifeval": 0,
            "max_new_tokens": 1,
            "batch_size": 1,
            "al_max_m": 1,
            "bootstrap": 10,
            "chunk_elements": 1,
            "engine_check": 0,
            "engine_check_seeds": 1,
            "seed": 0,
        }
        for name, lower in integers.items():
            value = getattr(self, name)
            if isinstance(value, bool) or int(value) != value or value < lower:
                _fail(f"frontier.{name} must be an integer >= {lower} (got {value!r})")
        if sum(self.source_sizes().values()) == 0:
            _fail("frontier.prompts selects no prompt: raise num_demo / num_gsm8k or add a source")
        if not (math.isfinite(self.temperature) and self.temperature > 0):
            _fail(
                f"frontier.temperature must be > 0 (got {self.temperature}): at temperature 0 "
                "every rule is greedy and there is no frontier"
            )
        if not 0 < self.top_p <= 1:
            _fail(f"frontier.top_p must be in (0, 1] (got {self.top_p})")
        if not 0 < self.head_fraction <= 1:
            _fail(f"frontier.head_fraction must be in (0, 1] (got {self.head_fraction})")
        if self.top_k is None:
            self.top_k = 0
        if self.top_k < 0:
            _fail(f"frontier.top_k must be >= 0 (got {self.top_k}); 0 disables it")
        if self.threads is not None and self.threads < 1:
            _fail(f"frontier.threads must be >= 1 or null (got {self.threads})")
        grids = {
            "cactus": ("deltas", self.deltas, lambda v: v >= 0, ">= 0 (0 is SpS)"),
            "cactus_exact": ("deltas", self.deltas, lambda v: v >= 0, ">= 0 (0 is SpS)"),
            "tas": ("tas_thresholds", self.tas_thresholds, lambda v: 0 < v <= 1, "in (0, 1]"),
            "topk": ("topk_ks", self.topk_ks, lambda v: int(v) == v and v >= 1, "integers >= 1"),
            "interp": ("interp_alphas", self.interp_alphas, lambda v: 0 <= v <= 1, "in [0, 1]"),
            "mentored": ("deltas", self.deltas, lambda v: v >= 0, ">= 0 (0 is SpS)"),
            "lenience": ("lenience_ls", self.lenience_ls, lambda v: 0 < v <= 1, "in (0, 1]"),
            **{
                rule: ("cascade_alphas", self.cascade_alphas, lambda v: 0 <= v <= 1, "in [0, 1]")
                for rule in ("chow", "diff", "opt", "tokenv1", "tokenv2", "tokenv3")
            },
            **{
                rule: ("fsd_thresholds", self.fsd_thresholds, lambda v: v >= 0, ">= 0")
                for rule in ("fsd", "fsd_reducible", "fsd_unsmoothed")
            },
            "bild": ("bild_taus", self.bild_taus, lambda v: v >= 0, ">= 0"),
            "topband": ("topband_alphas", self.topband_alphas, lambda v: 0 <= v <= 1, "in [0, 1]"),
            "topband_cascade": (
                "topband_betas",
                self.topband_betas,
                lambda v: 0 <= v <= 1,
                "in [0, 1]",
            ),
            "additive": ("additive_thresholds", self.additive_thresholds, lambda v: v >= 0, ">= 0"),
            "greedy_margin": (
                "greedy_margins",
                self.greedy_margins,
                lambda v: 0 < v <= 1,
                "in (0, 1]",
            ),
        }
        for rule in self.rules:
            if rule not in grids:
                continue
            key, values, valid, rule_text = grids[rule]
            if not values:
                _fail(f"frontier.{key} is empty: give at least one value or drop {rule!r}")
            bad = [v for v in values if not (isinstance(v, int | float) and valid(v))]
            if bad:
                _fail(f"frontier.{key} must hold values {rule_text} (got {bad[0]!r})")
        for guard in self.guards:
            parse_guard(guard)
        if self.guards and any(
            not (isinstance(d, int | float) and d >= 0) for d in self.guard_deltas
        ):
            _fail(f"frontier.guard_deltas must hold values >= 0 (got {self.guard_deltas})")
        if "cactus_exact" in self.rules and not self.divergences:
            _fail("frontier.divergences is empty: give at least one or drop 'cactus_exact'")
        edges = self.entropy_edges
        if len(edges) < 2 or any(b <= a for a, b in zip(edges, edges[1:], strict=False)):
            _fail(f"frontier.entropy_edges must be >= 2 increasing values (got {edges})")
        if self.dtype not in (None, "float32", "bfloat16", "float16", "auto"):
            _fail(f"frontier.dtype must be float32, bfloat16, float16, auto or null ({self.dtype})")
        if not self.out_dir:
            _fail("frontier.out_dir is empty; give a folder for the CSV and figures")

    def source_sizes(self) -> dict[str, int]:
        """Prompts taken from each source, in the order of `prompts`."""
        sizes = {
            "demo": self.num_demo,
            "gsm8k_train": self.num_gsm8k,
            "gsm8k_test": self.num_gsm8k,
            "ifeval": self.num_ifeval,
        }
        return {source: sizes[source] for source in self.prompts}

    @property
    def prompt_set_label(self) -> str:
        """held_out when no prompt comes from the drafter's training data, else drafter_train."""
        return "held_out" if set(self.prompts) <= set(HELD_OUT) else "drafter_train"

    def csv_name(self) -> str:
        """<pair>.csv for held-out contexts, <pair>__drafter_train.csv for the second set."""
        label = "" if self.prompt_set_label == "held_out" else f"__{self.prompt_set_label}"
        return f"{self.pair}{label}.csv"

    def prompt_set_name(self) -> str:
        """`held_out:demo20+gsm8k_test60+ifeval40`: the CSV's prompt-set column."""
        sizes = "+".join(f"{source}{size}" for source, size in self.source_sizes().items() if size)
        return f"{self.prompt_set_label}:{sizes}"


def parse_guard(text: str) -> tuple[str, object]:
    """`stop=exact` -> ("stop", "exact"), `near_top=0.2` -> ("near_top", 0.2), typed and checked
    as the samplers check them; a positional guard, an unknown one or its default fails in one
    line."""
    name, _, raw = str(text).partition("=")
    param = next((p for p in GUARDS if p.name == name), None)
    if param is None or name not in POSITION_FREE_GUARDS:
        _fail(
            f"frontier.guards entry {text!r}: give name=value with name one of "
            f"{', '.join(POSITION_FREE_GUARDS)} (strict_first and relax_in depend on the answer's "
            "position, which the frontier does not model)"
        )
    try:
        value = param.coerce("cactus", raw if param.kind is str else float(raw))
    except ValueError as error:
        _fail(f"frontier.guards entry {text!r}: {error}")
    if value == GUARD_DEFAULTS[name]:
        _fail(f"frontier.guards entry {text!r} is the default (no guard): drop it")
    return name, value


def _check_names(key: str, values, known) -> None:
    unknown = [value for value in values if value not in known]
    if unknown:
        _fail(f"unknown {key} entry {unknown[0]!r}; choose from {', '.join(known)}")


def _fail(message: str) -> None:
    raise FrontierConfigError(message)
