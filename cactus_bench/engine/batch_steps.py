"""The decode steps of a batched run (`batched.generate_batch`): one step over every occupied slot.

Each row follows exactly the batch-1 step of its decoder (speculative.py, autoregressive.py):
the same forwards (batched), the same `process_logits`, and per row the same random draws from
its own generator in the same order (its m drafts, then the rule's draws, or its one token), so
a row's law is the rule's law and its draws do not depend on its neighbours. The rule is called
per row on slices of the batched probabilities ([1, m_b], [1, m_b, V], [1, m_b + 1, V]): rules
take one generator, and a row's draws must come from its own.

Rows advance raggedly. Row b drafts m_b = min(m, remaining_b - 1) tokens (0: a bonus step, its
one token drawn from q as in `SpeculativeDecoder._bonus_step`); a forward feeds each row its
own number of real tokens (`counts`) padded to the longest, and afterwards each row's caches
are cropped to its own accepted prefix (lengths as in the speculative module docstring).
Token ids move between steps as Python lists: one host sync per drafted or emitted token,
which costs nothing on a CPU.
"""

from __future__ import annotations

import torch

from cactus_bench.engine.batched import Batch, BatchStep, Row, group_by_sampling, record_step
from cactus_bench.engine.sampling import process_logits, sample_token


def _padded(rows: list[Row], inputs: list[list[int]], device, span, width: int):
    """Inputs over the slot span (first, stop): ids [S, width] padded with 0 (the padding is
    never attended to), counts (a host list and [S] on the device; 0 for slots without a row or
    without input)."""
    first, stop = span
    padded = [[0] * width for _ in range(stop - first)]
    counts = [0] * (stop - first)
    for row, tokens in zip(rows, inputs, strict=True):
        padded[row.slot - first][: len(tokens)] = tokens
        counts[row.slot - first] = len(tokens)
    ids = torch.tensor(padded, dtype=torch.long, device=device)
    return ids, counts, torch.tensor(counts, dtype=torch.long, device=device)


def _forward(decoder, batch: Batch, name: str, rows, inputs, all_logits: bool) -> torch.Tensor:
    """One batched forward of model `name` -> restricted logits of the rows [R, n, K].

    Eager: over the span of occupied slots, as wide as the longest input. CUDA graphs: over
    every slot (an empty one is fed nothing), as wide as the smallest captured shape that holds
    the longest input, so that the forward replays one captured graph."""
    width = max(1, max(len(tokens) for tokens in inputs))
    if batch.graphs is not None:
        span = (0, batch.caches[name].lengths.shape[0])
        width = batch.graph_width(name, width, all_logits)
        cache, runner = batch.caches[name], batch.graphs[name]
    else:
        span = (rows[0].slot, rows[-1].slot + 1)
        cache, runner = batch.caches[name].rows(*span), batch.runners[name]
    ids, host_counts, counts = _padded(rows, inputs, decoder.device, span, width)
    logits = runner.forward(ids, counts, cache, all_logits)  # [S, n, V]
    cache.advance(host_counts)
    if span[1] - span[0] != len(rows):  # empty slots inside the span
        index = torch.tensor([row.slot - span[0] for row in rows], device=decoder.device)
        logits = logits[index]
    if decoder.token_map is not None:
        logits = logits.index_select(-1, decoder.token_map)  # [R, n, K] the shared ids only
    return logits


def _process(logits: torch.Tensor, rows: list[Row]) -> torch.Tensor:
    """[R, ..., K] logits -> float32 probabilities, each row under its own sampling settings."""
    groups = group_by_sampling(rows)
    if len(groups) == 1:
        return process_logits(logits, rows[0].params)
    probs = torch.empty(logits.shape, dtype=torch.float32, device=logits.device)
    for params, positions in groups.items():
        index = torch.tensor(positions, device=logits.device)
        probs[index] = process_logits(logits[index], params)
    return probs


def _vocab_ids(decoder, indices: list[int]) -> list[int]:
    """Sampler-space indices -> vocabulary ids (identity without a token_map)."""
    table = decoder._token_list
    return list(indices) if table is None else [table[index] for index in indices]


def autoregressive_step(decoder, batch: Batch, rows: list[Row]) -> list[list[int]]:
    """One token per row from the verifier alone (`AutoregressiveDecoder._step`, batched)."""
    clock = batch.clock
    start = clock()
    inputs = [row.pending["verifier"] for row in rows]
    logits = _forward(decoder, batch, "verifier", rows, inputs, all_logits=False)[:, -1]
    probs = _process(logits, rows)  # [R, K]
    forwarded = clock()
    emitted = []
    for position, row in enumerate(rows):
        token = sample_token(probs[position : position + 1], row.generator, row.params.is_greedy)
        ids = _vocab_ids(decoder, [int(token)])
        row.pending["verifier"] = ids
        row.seq_len += 1
        _count(row.record, drafted=0, accepted=0)
        emitted.append(ids)
    step = BatchStep(
        "decode",
        batch.since(start),
        [row.slot for row in rows],
        [row.index for row in rows],
        fed=[1] * len(rows),
        drafts=[0] * len(rows),
        accepted=[0] * len(rows),
        verify_s=forwarded - start,
        rule_s=clock() - forwarded,
    )
    record_step(batch, rows, step)
    return emitted


def speculative_step(decoder, batch: Batch, rows: list[Row]) -> list[list[int]]:
    """One draft-verify step per row (`SpeculativeDecoder._step`, batched)."""
    clock = batch.clock
    wanted = [min(decoder.num_draft_tokens, row.tracker.remaining - 1) for row in rows]
    rules = [decoder.greedy_sampler if row.params.is_greedy else decoder.sampler for row in rows]
    # Rules whose test reads the temperature-1 untruncated laws get them too (speculative.py).
    unscaled = [getattr(rule, "reads_unscaled", False) for rule in rules]
    drafts: list[list[int]] = [[] for _ in rows]  # sampler-space indices
    draft_probs: list[list[torch.Tensor]] = [[] for _ in rows]  # [K] each
    unscaled_draft: list[list[torch.Tensor]] = [[] for _ in rows]

    start = clock()
    inputs = [
        row.pending["drafter"] if count else [] for row, count in zip(rows, wanted, strict=True)
    ]
    for j in range(max(wanted)):
        logits = _forward(decoder, batch, "drafter", rows, inputs, all_logits=False)[:, -1]
        probs = _process(logits, rows)  # [R, K]: each drafting row's p_j
        inputs = []
        for position, row in enumerate(rows):
            if wanted[position] <= j:
                inputs.append([])  # done drafting: fed nothing, its cache stays
                continue
            law = probs[position : position + 1]  # [1, K]
            token = int(sample_token(law, row.generator, row.params.is_greedy))  # n_j ~ p_j
            drafts[position].append(token)
            draft_probs[position].append(law[0])
            if unscaled[position]:
                unscaled_draft[position].append(logits[position].float().softmax(-1))
            inputs.append(_vocab_ids(decoder, [token]))
    drafted = clock()

    inputs = [
        row.pending["verifier"] + _vocab_ids(decoder, d)
        for row, d in zip(rows, drafts, strict=True)
    ]
    logits = _forward(decoder, batch, "verifier", rows, inputs, all_logits=True)  # [R, n, K]
    target = _process(logits, rows)  # [R, n, K]: each row's q_1..q_{m_b + 1} (then padding)
    verified = clock()

    emitted = []
    bonus_is_argmax = getattr(decoder.sampler, "bonus_is_argmax", False)
    for position, row in enumerate(rows):
        count = wanted[position]
        if count == 0:  # one token left: the verifier's token is the bonus, drawn from q
            greedy = row.params.is_greedy or bonus_is_argmax
            indices = [int(sample_token(target[position, :1], row.generator, greedy))]
        else:
            laws = (draft_probs[position], target[position, : count + 1])
            if unscaled[position]:  # for the temperature-1 untruncated laws
                laws += (unscaled_draft[position], logits[position, : count + 1])
            indices = _verify_row(decoder, rules[position], row, drafts[position], *laws)
        tokens = _vocab_ids(decoder, indices)
        _roll_back(batch, row, count, tokens)
        emitted.append(tokens)
    step = BatchStep(
        "decode",
        batch.since(start),
        [row.slot for row in rows],
        [row.index for row in rows],
        fed=[len(tokens) for tokens in inputs],
        drafts=wanted,
        accepted=[row.record.accepted_per_step[-1] for row in rows],
        draft_s=drafted - start,
        verify_s=verified - drafted,
        rule_s=clock() - verified,
    )
    record_step(batch, rows, step)
    return emitted


def _verify_row(decoder, rule, row, drafts, draft_probs, target, *unscaled) -> list[int]:
    """The rule on one row: drafts (m_b indices), draft_probs (m_b x [K]), target [m_b + 1, K]
    and, for rules that read them, the drafter's temperature-1 laws (m_b x [K]) and the
    verifier's logits [m_b + 1, K]; -> the emitted indices (accepted drafts, then one more)."""
    if draft_probs[0].shape[-1] != target.shape[-1]:
        raise ValueError(
            f"drafter gives {draft_probs[0].shape[-1]} probabilities, verifier "
            f"{target.shape[-1]}: pass a token_map of the ids both models share"
        )
    extra = {}
    if unscaled:
        draft_laws, target_logits = unscaled
        extra["unscaled_draft_probs"] = torch.stack(draft_laws)[None]  # [1, m_b, K]
        extra["unscaled_target_probs"] = target_logits.float().softmax(-1)[None]
    out = rule.verify(
        torch.tensor([drafts], dtype=torch.long, device=decoder.device),  # [1, m_b]
        torch.stack(draft_probs)[None],  # [1, m_b, K]
        target[None],  # [1, m_b + 1, K]
        generator=row.generator,
        **extra,
    )
    return [token for token in out.token_ids[0].tolist() if token >= 0]  # -1: unused tail


def _roll_back(batch: Batch, row: Row, num_drafts: int, tokens: list[int]) -> None:
    """Crops the row's caches to its accepted prefix and sets what each model reads next
    (lengths: speculative.py's docstring, with L = row.seq_len before the step)."""
    accepted = len(tokens) - 1
    batch.caches["verifier"].crop(row.slot, row.seq_len + accepted)
    if num_drafts:
        kept = min(accepted, num_drafts - 1)
        batch.caches["drafter"].crop(row.slot, row.seq_len + kept)
        row.pending["drafter"] = tokens[kept:]
    else:  # a bonus step never ran the drafter: it still has its pending tokens to read
        row.pending["drafter"] = row.pending["drafter"] + tokens
    row.pending["verifier"] = tokens[-1:]
    row.seq_len += accepted + 1
    _count(row.record, drafted=num_drafts, accepted=accepted)


def _count(record, drafted: int, accepted: int) -> None:
    record.drafted_per_step.append(drafted)
    record.accepted_per_step.append(accepted)
    record.emitted_per_step.append(accepted + 1)
