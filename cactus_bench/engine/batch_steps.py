"""The decode steps of a batched run (`batched.generate_batch`): one step over every occupied slot,
vectorised over rows, with ONE host read.

A step runs on the device from its inputs to its emitted tokens: the drafter's m forwards (each
drafted token feeds the next forward as a tensor), the verifier's one forward, the rule, and
every random draw. The only value read back is the step's result, each row's emitted tokens
(accepted drafts, then the recovered or bonus token; -1 pads the tail) with a flag for rows
whose laws could not be sampled, in one copy: the host needs them for EOS and stop strings and
for the next step's bookkeeping. On a GPU every other host read is a synchronisation that
idles the device, and a step without them can replay captured graphs back to back.

Draws: each row's uniforms are counter-based (draws.py), keyed on its seed and the sequence
positions of the step, so a row's tokens depend on its own seed alone, never on its neighbours,
the batch size or the schedule (batch 1 draws the same numbers). A row's law is its rule's law:
the drafts are drawn from p by inverting its CDF, the rule's acceptance tests and last token
read the row's own uniforms (`verify(uniforms=...)`).

Rows advance raggedly. Row b drafts m_b = min(m, remaining_b - 1) tokens (0: a bonus step, its
one token drawn from q as in `SpeculativeDecoder._bonus_step`); a forward feeds each row its own
number of real tokens (`counts`) padded to the widest, rows done drafting are fed nothing, and
afterwards each row's caches are set back to its own accepted prefix (lengths as in the
speculative module docstring), all rows in one copy. Rows are grouped by (rule, m_b) for the
rule's call: one call per group, usually one per step.
"""

from __future__ import annotations

import torch

from cactus_bench.engine.batched import BatchRun, BatchStep, Row, group_by_sampling, record_step
from cactus_bench.engine.commit_stats import step_out_of_head
from cactus_bench.engine.draws import ACCEPT, DRAFT, LAST, uniforms
from cactus_bench.engine.sampling import BAD_LAW, bad_rows, draw_tokens, process_logits


class StepDraws:
    """The rows' keys for this step: seeds [R], sequence lengths L [R], greedy [R] (device)."""

    def __init__(self, rows: list[Row], device):
        self.seeds = torch.tensor([row.request.seed for row in rows], device=device)
        self.lengths = torch.tensor([row.seq_len for row in rows], device=device)
        self.greedy = torch.tensor([row.params.is_greedy for row in rows], device=device)

    def at(self, stream: int, offsets: int | torch.Tensor) -> torch.Tensor:
        """[R] (int offset) or [R, k] (offsets [k]) float64 uniforms at positions L + offset."""
        if isinstance(offsets, int):
            return uniforms(self.seeds, self.lengths + offsets, stream)
        return uniforms(self.seeds, self.lengths[:, None] + offsets, stream)


def autoregressive_step(decoder, run: BatchRun, rows: list[Row]) -> list[list[int]]:
    """One token per row from the verifier alone (`AutoregressiveDecoder._step`, batched)."""
    clock = run.clock
    start = clock()
    inputs = [row.pending["verifier"] for row in rows]
    ids, counts = _host_ids(inputs, decoder.device)
    logits = _forward(decoder, run, "verifier", rows, ids, counts, all_logits=False)[:, -1]
    probs = _process(logits, rows)  # [R, K]
    forwarded = clock()
    draws = StepDraws(rows, decoder.device)
    tokens = draw_tokens(probs, draws.at(LAST, 0), draws.greedy)  # [R]
    result = _read(tokens[:, None], bad_rows(probs))
    emitted = []
    for row, (token,) in zip(rows, result, strict=True):
        ids = _vocab_ids(decoder, [token])
        row.pending["verifier"] = ids
        row.seq_len += 1
        _count(row.record, drafted=0, accepted=0)
        emitted.append(ids)
    ones = [1] * len(rows)
    step = BatchStep(
        "decode",
        run.since(start),
        [row.slot for row in rows],
        [row.index for row in rows],
        fed=ones,
        drafts=[0] * len(rows),
        accepted=[0] * len(rows),
        verify_s=forwarded - start,
        rule_s=clock() - forwarded,
    )
    record_step(run, rows, step)
    return emitted


def speculative_step(decoder, run: BatchRun, rows: list[Row]) -> list[list[int]]:
    """One draft-verify step per row (`SpeculativeDecoder._step`, batched)."""
    clock, device, m = run.clock, decoder.device, decoder.num_draft_tokens
    wanted = [min(m, row.tracker.remaining - 1) for row in rows]
    most = max(wanted)
    rules = [decoder.greedy_sampler if row.params.is_greedy else decoder.sampler for row in rows]
    # Rules whose test reads the temperature-1 untruncated laws get them too (speculative.py).
    unscaled = any(getattr(rule, "reads_unscaled", False) for rule in rules)
    draws = StepDraws(rows, device)
    drafting = torch.tensor(wanted, device=device)  # [R] m_b
    bad = torch.zeros(len(rows), dtype=torch.bool, device=device)

    start = clock()
    draft_ids = torch.zeros((len(rows), most), dtype=torch.long, device=device)  # [R, m']
    draft_probs, draft_unscaled = [], []  # m' x [R, K]
    first_inputs = [
        row.pending["drafter"] if count else [] for row, count in zip(rows, wanted, strict=True)
    ]
    ids, counts = _host_ids(first_inputs, device)  # [R, 1 | 2]: what each drafter has to read
    for j in range(most):
        logits = _forward(decoder, run, "drafter", rows, ids, counts, all_logits=False)[:, -1]
        probs = _process(logits, rows)  # [R, K]: each drafting row's p_j
        token = draw_tokens(probs, draws.at(DRAFT, j), draws.greedy)  # [R] n_j ~ p_j
        bad |= bad_rows(probs) & (drafting > j)
        draft_ids[:, j] = token
        draft_probs.append(probs)
        if unscaled:
            draft_unscaled.append(logits.float().softmax(-1))
        ids = _to_vocab(decoder, token)[:, None]  # [R, 1]: fed to the rows still drafting
        counts = [int(w > j + 1) for w in wanted]
    drafted = clock()

    pending, _ = _host_ids([row.pending["verifier"] for row in rows], device)  # [R, 1]
    ids = torch.cat([pending, _to_vocab(decoder, draft_ids)], dim=1)  # [R, 1 + m']
    counts = [1 + w for w in wanted]
    logits = _forward(decoder, run, "verifier", rows, ids, counts, all_logits=True)
    logits = logits[:, : most + 1]  # [R, m' + 1, K] (a captured forward is wider)
    target = _process(logits, rows)  # [R, m' + 1, K]: each row's q_1..q_{m_b + 1}
    used = torch.arange(most + 1, device=device) <= drafting[:, None]  # [R, m' + 1]
    bad |= (bad_rows(target.flatten(0, 1)).view(used.shape) & used).any(-1)
    verified = clock()

    accept_u = draws.at(ACCEPT, torch.arange(max(most, 1), device=device))  # [R, m']
    last_u = draws.at(LAST, 0)  # [R]
    emitted = torch.full((len(rows), m + 1), -1, dtype=torch.long, device=device)
    groups: dict[tuple, list[int]] = {}
    for position, (rule, count) in enumerate(zip(rules, wanted, strict=True)):
        groups.setdefault((id(rule), count), []).append(position)
    bonus_is_argmax = getattr(decoder.sampler, "bonus_is_argmax", False)
    for (_, count), positions in groups.items():
        index = torch.tensor(positions, device=device)
        rule = rules[positions[0]]
        if count == 0:  # one token left: the verifier's token is the bonus, drawn from q
            greedy = draws.greedy[index] | bonus_is_argmax
            token = draw_tokens(target[index, 0], last_u[index], greedy)
            emitted[index, 0] = token
            continue
        extra = {}
        if getattr(rule, "reads_unscaled", False):
            extra["unscaled_draft_probs"] = torch.stack(draft_unscaled, 1)[index, :count]
            extra["unscaled_target_probs"] = logits[index, : count + 1].float().softmax(-1)
        out = rule.verify(
            draft_ids[index, :count],  # [G, m_b]
            torch.stack(draft_probs, 1)[index, :count],  # [G, m_b, K]
            target[index, : count + 1],  # [G, m_b + 1, K]
            uniforms=torch.cat([accept_u[index, :count], last_u[index, None]], dim=1),
            check=False,
            support_width=_support_width([rows[i] for i in positions]),
            **extra,
        )
        emitted[index, : count + 1] = out.token_ids
    # [R] accepted drafts with q(x) < c max q (commit_stats.py), read with the tokens below
    off_head = step_out_of_head(target, draft_ids, emitted, decoder.out_of_head_c)
    result = _read(torch.cat([emitted, off_head[:, None]], 1), bad)  # the step's one host read

    tokens_by_row = []
    for row, count, (*indices, num_off_head) in zip(rows, wanted, result, strict=True):
        tokens = _vocab_ids(decoder, [index for index in indices if index >= 0])
        _advance(row, count, tokens)
        row.record.out_of_head_per_step.append(num_off_head)
        tokens_by_row.append(tokens)
    _roll_back(run, rows, wanted)
    step = BatchStep(
        "decode",
        run.since(start),
        [row.slot for row in rows],
        [row.index for row in rows],
        fed=counts,
        drafts=wanted,
        accepted=[row.record.accepted_per_step[-1] for row in rows],
        draft_s=drafted - start,
        verify_s=verified - drafted,
        rule_s=clock() - verified,
    )
    record_step(run, rows, step)
    return tokens_by_row


def _support_width(rows: list[Row]) -> int | None:
    """Columns a rule may restrict each row to: with top-k on, p and q each keep <= k tokens,
    so their union holds <= 2k; None (full rows) where a row samples without top-k."""
    top_k = [row.params.top_k for row in rows]
    return None if 0 in top_k else 2 * max(top_k)


def _host_ids(inputs: list[list[int]], device) -> tuple[torch.Tensor, list[int]]:
    """Host token lists -> ids [R, width] padded with 0 (never attended to) and counts."""
    width = max(1, max(len(tokens) for tokens in inputs))
    padded = [tokens + [0] * (width - len(tokens)) for tokens in inputs]
    return torch.tensor(padded, dtype=torch.long, device=device), [len(t) for t in inputs]


def _forward(decoder, run: BatchRun, name: str, rows, ids, counts, all_logits: bool):
    """One batched forward of model `name`: ids [R, w] (vocabulary ids, on the device), counts
    (host, real tokens per row) -> restricted logits [R, n, K].

    Eager: over the span of occupied slots. CUDA graphs: over every slot (an empty one is fed
    nothing), as wide as the smallest captured shape that holds w, so the forward replays one
    captured graph."""
    cache = run.caches[name]
    if run.graphs is not None:
        first, stop = 0, cache.lengths.shape[0]
        width = run.graph_width(name, ids.shape[1], all_logits)
        runner = run.graphs[name]
    else:
        first, stop = rows[0].slot, rows[-1].slot + 1
        width = ids.shape[1]
        cache, runner = cache.rows(first, stop), run.runners[name]
    if width > ids.shape[1]:
        ids = torch.nn.functional.pad(ids, (0, width - ids.shape[1]))
    slots = [row.slot - first for row in rows]
    span_counts = [0] * (stop - first)
    for slot, count in zip(slots, counts, strict=True):
        span_counts[slot] = count
    dense = slots == list(range(stop - first))  # every slot of the span holds a row, in order
    index = None if dense else torch.tensor(slots, device=decoder.device)
    if index is not None:
        ids = ids.new_zeros((stop - first, width)).index_copy_(0, index, ids)
    span_counts_t = torch.tensor(span_counts, dtype=torch.long, device=decoder.device)
    if run.graphs is not None:
        logits = runner.forward(ids, span_counts_t, cache, all_logits)  # [S, n, V]
    else:  # the keys any query sees, from the host's lengths: no read of the device
        visible = max(cache.host_lengths[slot] for slot in range(stop - first)) + width
        logits = runner.forward(ids, span_counts_t, cache, all_logits, visible)
    cache.advance(span_counts)
    if index is not None:
        logits = logits.index_select(0, index)
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


def _read(tokens: torch.Tensor, bad: torch.Tensor) -> list[list[int]]:
    """The step's one host read: tokens [R, k] and the rows' bad-law flags [R], in one copy."""
    both = torch.cat([tokens, bad.long()[:, None]], dim=1).tolist()
    if any(row[-1] for row in both):
        raise ValueError(BAD_LAW)
    return [row[:-1] for row in both]


def _to_vocab(decoder, indices: torch.Tensor) -> torch.Tensor:
    """Sampler-space indices -> vocabulary ids, on the device (identity without a token_map)."""
    return indices if decoder.token_map is None else decoder.token_map[indices]


def _vocab_ids(decoder, indices: list[int]) -> list[int]:
    """Sampler-space indices -> vocabulary ids, on the host."""
    table = decoder._token_list
    return list(indices) if table is None else [table[index] for index in indices]


def _advance(row: Row, num_drafts: int, tokens: list[int]) -> None:
    """Sets what each model reads next and the row's length (speculative.py's docstring,
    with L = row.seq_len before the step)."""
    accepted = len(tokens) - 1
    if num_drafts:
        kept = min(accepted, num_drafts - 1)
        row.pending["drafter"] = tokens[kept:]
    else:  # a bonus step never ran the drafter: it still has its pending tokens to read
        row.pending["drafter"] = row.pending["drafter"] + tokens
    row.pending["verifier"] = tokens[-1:]
    row.kept_drafter = row.seq_len + (min(accepted, num_drafts - 1) if num_drafts else 0)
    row.seq_len += accepted + 1
    _count(row.record, drafted=num_drafts, accepted=accepted)


def _roll_back(run: BatchRun, rows: list[Row], wanted: list[int]) -> None:
    """Every row's caches back to its accepted prefix, one copy per cache: the verifier holds
    L + accepted positions, the drafter L + kept (a bonus step left it untouched)."""
    run.caches["verifier"].set_lengths([(row.slot, row.seq_len - 1) for row in rows])
    run.caches["drafter"].set_lengths(
        [(row.slot, row.kept_drafter) for row, count in zip(rows, wanted, strict=True) if count]
    )


def _count(record, drafted: int, accepted: int) -> None:
    record.drafted_per_step.append(drafted)
    record.accepted_per_step.append(accepted)
    record.emitted_per_step.append(accepted + 1)
