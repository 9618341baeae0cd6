"""Run a cactus_bench acceptance rule inside vLLM, in place of vLLM's rejection sampler.

Pure torch: this module imports without vLLM, so everything here is tested on CPU.

vLLM has no plugin API for acceptance rules, so `install_rule(module, rule)` swaps the module
global `rejection_sample` of the vLLM module that calls it (both model runners call it through
their own module namespace) for a bridge that converts vLLM's flattened ragged layout to this
project's padded contract (docs/architecture.md):

    rule.verify(draft_token_ids [1, n], draft_probs [1, n, V], target_probs [1, n + 1, V])

and back. Two vLLM layouts exist (read from vLLM's source, main branch; see the docs section
"vLLM adapter"):

  runner V1  vllm/v1/sample/rejection_sampler.py
             rejection_sample(draft_token_ids [N], num_draft_tokens list[B], max_spec_len,
                              cu_num_draft_tokens [B], draft_probs [N, V] | None,
                              target_probs [N, V], bonus_token_ids [B, 1], sampling_metadata)
             -> output_token_ids [B, max_spec_len + 1] int32, -1 (PLACEHOLDER_TOKEN_ID) padded
  runner V2  vllm/v1/worker/gpu/spec_decode/rejection_sampler.py (imports it from
             rejection_sampler_utils.py)
             rejection_sample(target_logits [L, V], draft_logits [R_max, K, V] | None,
                              draft_sampled [L], cu_num_logits [B + 1], pos [L],
                              idx_mapping [B], expanded_idx_mapping [L], expanded_local_pos [L],
                              temperature [R_max], seed [R_max], num_speculative_steps, ...)
             -> (sampled [B, K + 1] int64, num_sampled [B] int32 = accepted + 1)

Greedy requests (temperature 0) are verified as vLLM does (accept while the draft equals the
verifier's argmax, then emit the argmax), whatever the rule. Requests with zero drafts emit the
bonus token only. Without draft probabilities (vLLM's greedy drafts: the V1 runner always passes
None, V2 passes None unless draft_sample_method="probabilistic") only rules that never read the
drafter's law can run (greedy, tas); any other rule raises one line naming the fix.

The rule reaches vLLM's worker processes through the environment: `RULE_ENV` holds JSON such as
{"name": "cactus", "delta": 0.75}, and `register()` (the `vllm.general_plugins` entry point in
pyproject.toml, called by vLLM in every process it starts) installs it; without the variable it
does nothing.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from cactus_bench.samplers import SAMPLER_NAMES, AcceptanceRule, make_sampler

PLACEHOLDER_TOKEN_ID = -1  # vLLM's id for rejected / unused output slots (both runners)
RULE_ENV = "CACTUS_BENCH_VLLM_RULE"
# The vLLM modules whose global `rejection_sample` the plugin replaces, when importable.
PATCH_TARGETS = (
    "vllm.v1.sample.rejection_sampler",  # runner V1
    "vllm.v1.worker.gpu.spec_decode.rejection_sampler",  # runner V2 (the default)
)
FIX_GREEDY_DRAFTS = (
    'set speculative_config draft_sample_method="probabilistic" with the V2 model runner '
    "(VLLM_USE_V2_MODEL_RUNNER unset or 1), or use sampler=greedy/tas"
)


class RuleSpecError(ValueError):
    """A bad CACTUS_BENCH_VLLM_RULE value; the message is one line."""


# ---- the rule, from the environment -------------------------------------------------------------
def parse_rule_spec(text: str) -> AcceptanceRule:
    """'{"name": "cactus", "delta": 0.75}' -> the rule; RuleSpecError (one line) when bad."""
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as error:
        raise RuleSpecError(f"{RULE_ENV} is not valid JSON ({error.msg}): {text!r}") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
        raise RuleSpecError(
            f'{RULE_ENV} must be a JSON object with a "name", e.g. '
            f'{{"name": "cactus", "delta": 0.75}}; got {text!r}'
        )
    params = {key: value for key, value in spec.items() if key != "name"}
    name = spec["name"]
    if name not in SAMPLER_NAMES:
        raise RuleSpecError(
            f"{RULE_ENV}: unknown rule {name!r}; choose one of {', '.join(SAMPLER_NAMES)}"
        )
    delta = params.get("delta")
    if isinstance(delta, int | float) and not isinstance(delta, bool) and delta < 0:
        raise RuleSpecError(f"{RULE_ENV}: delta must be >= 0 (got {delta})")
    try:
        return make_sampler(name, **params)
    except (TypeError, ValueError) as error:
        raise RuleSpecError(f"{RULE_ENV}: {' '.join(str(error).split())}") from None


def rule_spec(name: str, params: Mapping | None = None) -> str:
    """The RULE_ENV value for a rule name and its parameters (None values dropped)."""
    values = {k: v for k, v in dict(params or {}).items() if v is not None}
    return json.dumps({"name": name, **values}, sort_keys=True)


def rule_from_env(environ: Mapping[str, str] | None = None) -> AcceptanceRule | None:
    """The rule named by RULE_ENV, or None when the variable is unset or empty."""
    text = (os.environ if environ is None else environ).get(RULE_ENV, "").strip()
    return parse_rule_spec(text) if text else None


def needs_draft_probs(rule: AcceptanceRule) -> bool:
    """False only for rules that never read the drafter's law (greedy, tas)."""
    return not (rule.deterministic_accept and rule.recovery_is_argmax)


# ---- the core: ragged rows -> padded rule calls -------------------------------------------------
def verify_ragged(
    rule: AcceptanceRule,
    drafts: list[torch.Tensor],  # B tensors [n_b] int: request b's drafted ids (n_b may be 0)
    draft_probs: list[torch.Tensor | None],  # B tensors [n_b, V] (drafter law) or None
    target_probs: list[torch.Tensor],  # B tensors [n_b, V] (verifier law, or logits if greedy)
    bonus: list[torch.Tensor],  # B tensors: [] a bonus id already drawn, or [V] its law
    greedy: list[bool],  # B: temperature-0 request
    generators: list[torch.Generator | None],  # B: a request's own RNG, or None (global RNG)
    width: int,  # columns of the output minus one (max_spec_len / num_speculative_steps)
) -> tuple[torch.Tensor, torch.Tensor]:
    """-> (token_ids [B, width + 1] int64, -1 padded; num_accepted [B] int64)."""
    batch = len(drafts)
    device = target_probs[0].device if batch else torch.device("cpu")
    out = torch.full((batch, width + 1), PLACEHOLDER_TOKEN_ID, dtype=torch.long, device=device)
    num_accepted = torch.zeros(batch, dtype=torch.long, device=device)
    for b in range(batch):
        ids = drafts[b].long()
        n = ids.numel()
        if greedy[b]:
            row, k = _greedy_row(ids, target_probs[b], bonus[b])
        elif n == 0:
            row, k = _bonus_token(bonus[b], generators[b]).view(1), 0
        else:
            law = draft_probs[b]
            if law is None:
                if needs_draft_probs(rule):
                    raise ValueError(
                        f"acceptance rule {rule.name!r} needs the drafter's probabilities but "
                        f"vLLM passed none (greedy drafts); {FIX_GREEDY_DRAFTS}"
                    )
                law = torch.nn.functional.one_hot(ids, target_probs[b].shape[-1]).float()
            last = bonus[b]
            if last.dim() == 0:  # a bonus id drawn by vLLM: the rule "draws" it from a point mass
                last = torch.nn.functional.one_hot(last.long(), target_probs[b].shape[-1])
            target = torch.cat([target_probs[b], last.to(target_probs[b].dtype).view(1, -1)])
            result = rule.verify(
                ids.view(1, n), law.view(1, n, -1), target.view(1, n + 1, -1), generators[b]
            )
            k = int(result.num_accepted[0])
            row = result.token_ids[0, : k + 1]
        out[b, : row.numel()] = row.to(device)
        num_accepted[b] = k
    return out, num_accepted


def _greedy_row(ids, target, bonus) -> tuple[torch.Tensor, int]:
    """vLLM's greedy verification: accept while draft == argmax; emit argmax or the bonus."""
    argmax = target.argmax(dim=-1) if ids.numel() else ids
    match = (argmax == ids).long().cumprod(0)
    k = int(match.sum())
    if k < ids.numel():
        return torch.cat([ids[:k], argmax[k : k + 1]]), k
    last = bonus.argmax().view(1) if bonus.dim() == 1 else bonus.long().view(1)
    return torch.cat([ids, last.to(ids.device)]), k


def _bonus_token(bonus, generator) -> torch.Tensor:
    if bonus.dim() == 0:
        return bonus.long()
    weights = bonus.double().clamp(min=0)
    return torch.multinomial(weights, 1, generator=generator)[0]


# ---- runner V1 layout ----------------------------------------------------------------------------
def rejection_sample_v1(
    draft_token_ids: torch.Tensor,  # [N]
    num_draft_tokens: list[int],  # [B]
    max_spec_len: int,
    cu_num_draft_tokens: torch.Tensor,  # [B] cumulative (inclusive) draft counts
    draft_probs: torch.Tensor | None,  # [N, V]
    target_probs: torch.Tensor,  # [N, V] (raw logits when every request is greedy)
    bonus_token_ids: torch.Tensor,  # [B, 1]
    sampling_metadata,  # reads all_greedy, all_random, temperature [B], generators {b: gen}
    *,
    rule: AcceptanceRule,
) -> torch.Tensor:
    """V1 `rejection_sample` with `rule`: -> [B, max_spec_len + 1] int32, -1 padded."""
    counts = [int(n) for n in num_draft_tokens]
    starts = [0]
    for n in counts:
        starts.append(starts[-1] + n)
    if starts[-1] != draft_token_ids.shape[0]:
        raise ValueError(f"num_draft_tokens sum to {starts[-1]}, not {draft_token_ids.shape[0]}")
    spans = [slice(starts[b], starts[b + 1]) for b in range(len(counts))]
    if sampling_metadata.all_greedy:
        greedy = [True] * len(counts)
    elif sampling_metadata.all_random:
        greedy = [False] * len(counts)
    else:  # vLLM marks greedy rows with temperature 0 (older releases: -1)
        greedy = [float(t) <= 0 for t in sampling_metadata.temperature.tolist()]
    generators = getattr(sampling_metadata, "generators", None) or {}
    out, _ = verify_ragged(
        rule,
        drafts=[draft_token_ids[s] for s in spans],
        draft_probs=[None if draft_probs is None else draft_probs[s] for s in spans],
        target_probs=[target_probs[s] for s in spans],
        bonus=[bonus_token_ids.view(-1)[b] for b in range(len(counts))],
        greedy=greedy,
        generators=[generators.get(b) for b in range(len(counts))],
        width=max_spec_len,
    )
    return out.to(torch.int32)


# ---- runner V2 layout ----------------------------------------------------------------------------
def rejection_sample_v2(
    target_logits: torch.Tensor,  # [L, V] after temperature / top-k / top-p
    draft_logits: torch.Tensor | None,  # [R_max, K, V] raw drafter logits, by request state
    draft_sampled: torch.Tensor,  # [L]: per request [last token, d_1 .. d_n], -1 = no draft
    cu_num_logits: torch.Tensor,  # [B + 1]
    pos: torch.Tensor,  # [L] sequence positions
    idx_mapping: torch.Tensor,  # [B] request -> state row
    expanded_idx_mapping: torch.Tensor,  # [L] (unused: derivable)
    expanded_local_pos: torch.Tensor,  # [L] (unused: derivable)
    temperature: torch.Tensor,  # [R_max]
    seed: torch.Tensor,  # [R_max]
    num_speculative_steps: int,
    synthetic_conditional_rates: torch.Tensor | None = None,
    *,
    rule: AcceptanceRule,
    draft_logits_scaled: bool = False,
    **options,
) -> tuple[torch.Tensor, torch.Tensor]:
    """V2 `rejection_sample` with `rule`: -> (sampled [B, K + 1] int64, num_sampled [B] int32).

    vLLM's kernel divides the drafter's logits by the request temperature on load (main
    branch); `draft_logits_scaled=True` is for releases whose draft logits come pre-scaled.
    """
    if synthetic_conditional_rates is not None or options.get("use_block_verification"):
        raise ValueError(
            "a cactus_bench rule replaces vLLM's acceptance rule; unset "
            "rejection_sample_method (synthetic / block) in speculative_config"
        )
    bounds = cu_num_logits.tolist()
    rows, temps = idx_mapping.tolist(), temperature.tolist()
    drafts, drafter_laws, target_laws, bonus, greedy, generators = [], [], [], [], [], []
    for b, state in enumerate(rows):
        start, end = bounds[b], bounds[b + 1]
        ids = draft_sampled[start + 1 : end].long()
        valid = int((ids != PLACEHOLDER_TOKEN_ID).long().cumprod(0).sum())  # stop at first -1
        ids = ids[:valid]
        is_greedy = float(temps[state]) <= 0
        logits = target_logits[start:end].float()
        laws = logits if is_greedy else torch.softmax(logits, dim=-1)
        drafts.append(ids)
        target_laws.append(laws[:valid])
        bonus.append(laws[valid])
        greedy.append(is_greedy)
        if draft_logits is None or is_greedy:
            drafter_laws.append(None)
        else:
            scale = 1.0 if draft_logits_scaled else float(temps[state])
            drafter_laws.append(torch.softmax(draft_logits[state, :valid].float() / scale, dim=-1))
        # One generator per request and step, seeded from vLLM's request seed and position, so
        # a seeded request is reproducible (not bit-identical to vLLM's Gumbel draws).
        gen = torch.Generator(device=target_logits.device)
        gen.manual_seed((int(seed[state]) * 1_000_003 + int(pos[start])) % (2**63))
        generators.append(gen)
    out, num_accepted = verify_ragged(
        rule, drafts, drafter_laws, target_laws, bonus, greedy, generators, num_speculative_steps
    )
    return out, (num_accepted + 1).to(torch.int32)


# ---- patching ------------------------------------------------------------------------------------
_LAYOUTS = {"draft_token_ids": rejection_sample_v1, "target_logits": rejection_sample_v2}


@dataclass
class InstalledRule:
    """The undo handle `install_rule` returns (also a context manager)."""

    module: object
    original: object
    replacement: object

    def undo(self) -> None:
        if getattr(self.module, "rejection_sample", None) is self.replacement:
            self.module.rejection_sample = self.original

    def __enter__(self) -> InstalledRule:
        return self

    def __exit__(self, *exc) -> None:
        self.undo()


def install_rule(module, rule: AcceptanceRule) -> InstalledRule:
    """Replace `module.rejection_sample` by the bridge for its layout; returns the undo handle."""
    original = getattr(module, "rejection_sample", None)
    if original is None:
        raise ValueError(f"{getattr(module, '__name__', module)} has no rejection_sample to patch")
    first = next(iter(inspect.signature(original).parameters), None)
    bridge = _LAYOUTS.get(first)
    if bridge is None:
        raise ValueError(
            f"unknown rejection_sample layout (first argument {first!r}) in "
            f"{getattr(module, '__name__', module)}; this vLLM release is not supported"
        )

    def replacement(*args, **kwargs):
        return bridge(*args, rule=rule, **kwargs)

    replacement.__wrapped__ = original
    replacement.cactus_rule = rule
    module.rejection_sample = replacement
    return InstalledRule(module, original, replacement)


def register() -> list[InstalledRule]:
    """vLLM general-plugin entry point: install RULE_ENV's rule in every importable target.

    A no-op (returns []) when RULE_ENV is unset, so installing cactus-bench never changes vLLM.
    """
    rule = rule_from_env()
    if rule is None:
        return []
    handles = []
    for name in PATCH_TARGETS:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, "rejection_sample"):
            handles.append(install_rule(module, rule))
    if not handles:
        raise RuntimeError(
            f"{RULE_ENV} is set but no vLLM rejection sampler module was found "
            f"({', '.join(PATCH_TARGETS)}); this vLLM release is not supported"
        )
    return handles
