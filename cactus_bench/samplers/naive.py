"""A deliberately naive verification path, for benchmarks and cross-checks only.

It does what a straightforward PyTorch implementation (such as the reference code's) does:
normalise every row, materialise the target h and the recovery distribution at EVERY drafted
position ([B, m, V] each), then pick the first rejected position. It is written independently
of the hooks in `base.py` (only the gamma formulas are shared) and draws random numbers in the
same order (torch.rand [B, m], then one uniform per row for the last token), so for one generator it
must return exactly what the fast path returns.
"""

from __future__ import annotations

import torch

from cactus_bench.samplers.base import AcceptanceRule
from cactus_bench.samplers.chain import VerifyOutput, sample_categorical
from cactus_bench.samplers.divergences import exact_gamma, taylor_gamma


@torch.inference_mode()
def naive_verify(
    rule: AcceptanceRule,
    draft_token_ids: torch.Tensor,  # [B, m]
    draft_probs: torch.Tensor,  # [B, m, V]
    target_probs: torch.Tensor,  # [B, m + 1, V]
    generator: torch.Generator | None = None,
) -> VerifyOutput:
    batch, m = draft_token_ids.shape
    ids = draft_token_ids.long()
    p = draft_probs.float() / draft_probs.sum(-1, dtype=torch.float32, keepdim=True)
    q = target_probs.float() / target_probs.sum(-1, dtype=torch.float32, keepdim=True)
    q_n = q[:, :m].gather(-1, ids.unsqueeze(-1)).squeeze(-1).clamp(0, 1)  # [B, m]
    p_n = p.gather(-1, ids.unsqueeze(-1)).squeeze(-1).clamp(0, 1)  # [B, m]
    name = rule.name
    params = rule.params()

    if name in ("sps", "cactus", "cactus_exact", "interp"):
        if name == "sps":
            gamma = q_n
        elif name == "cactus":
            gamma = taylor_gamma(q_n, params["delta"])
        elif name == "cactus_exact":
            gamma = exact_gamma(q_n, params["delta"], params["divergence"])
        else:
            gamma = params["alpha"] * p_n + (1 - params["alpha"]) * q_n
        if name == "interp":
            h = params["alpha"] * p + (1 - params["alpha"]) * q[:, :m]  # [B, m, V]
        else:
            scale = torch.where(q_n < 1, (1 - gamma) / (1 - q_n), torch.zeros_like(gamma))
            h = (q[:, :m] * scale.unsqueeze(-1)).scatter(-1, ids.unsqueeze(-1), gamma.unsqueeze(-1))
        accept = torch.where(p_n > 0, gamma / p_n, (gamma > 0).to(gamma.dtype)).clamp(max=1)
        recovery = (h - p).clamp(min=0)  # [B, m, V]
        empty = recovery.sum(-1, keepdim=True) <= 0
        recovery = torch.where(empty, q[:, :m].to(recovery.dtype), recovery)
        accepted = torch.rand((batch, m), generator=generator, device=ids.device) < accept
    elif name == "tas":
        entropy = -(q[:, :m] * torch.log(q[:, :m] + 1e-5)).sum(-1)
        cutoff = torch.clamp(params["alpha"] * torch.exp(-entropy), max=params["threshold"])
        accepted = q_n > cutoff
        recovery = None
    elif name == "topk":
        k = min(params["k"], q.shape[-1])
        kth = q.topk(k, dim=-1).values[..., -1:]  # [B, m + 1, 1]
        top_set = ((q >= kth) & (q > 0)).float()
        accepted = (q_n >= kth[:, :m, 0]) & (q_n > 0)
        recovery = (top_set[:, :m] - p).clamp(min=0)
        empty = recovery.sum(-1, keepdim=True) <= 0
        recovery = torch.where(empty, top_set[:, :m], recovery)
    elif name == "greedy":
        accepted = q[:, :m].argmax(-1) == ids
        recovery = None
    elif hasattr(rule, "plan"):  # samplers/rules/: the builder's (a, r) at every position
        accept, recovery = rule.plan(draft_probs, target_probs[:, :m])  # [B, m, V] float64
        a_n = accept.gather(-1, ids.unsqueeze(-1)).squeeze(-1)
        accepted = torch.rand((batch, m), generator=generator, device=ids.device) < a_n
    else:
        raise ValueError(f"naive_verify does not know rule {name!r}")

    num_accepted = accepted.long().cumprod(1).sum(1)  # [B]
    rows = torch.arange(batch, device=ids.device)
    rejected = num_accepted < m
    bonus_row = q[:, m]  # [B, V]
    if hasattr(rule, "plan"):  # the kernel draws the bonus from the float64 row as given
        bonus_row = target_probs[:, m].double()
    argmax_at_k = q[rows, num_accepted].argmax(-1)
    if name == "greedy":
        last = argmax_at_k
    elif recovery is None:  # tas: argmax recovery, sampled bonus
        sampled = sample_categorical(q[rows, num_accepted], generator)
        last = torch.where(rejected, argmax_at_k, sampled)
    else:
        chosen = recovery[rows, num_accepted.clamp(max=m - 1)]
        weights = torch.where(rejected.unsqueeze(-1), chosen.to(bonus_row.dtype), bonus_row)
        last = sample_categorical(weights, generator)
    token_ids = torch.full((batch, m + 1), -1, dtype=torch.long, device=ids.device)
    for b in range(batch):
        k = int(num_accepted[b])
        token_ids[b, :k] = ids[b, :k]
        token_ids[b, k] = last[b]
    return VerifyOutput(token_ids=token_ids, num_accepted=num_accepted)
