"""The decode steps of a batched run (`batched.generate_batch`): one step over every occupied slot,
vectorised over rows, with ONE stall: its result's read.

A step runs on the device from its inputs to its emitted tokens: the drafter's m forwards (each
drafted token feeds the next forward as a tensor), the verifier's one forward, the rule, and
every random draw. The only value read back is the step's result, each row's emitted tokens
(accepted drafts, then the recovered or bonus token; -1 pads the tail), its out-of-head
commits (commit_stats.py) and a flag for rows whose laws could not be sampled, in one copy:
the host needs them for EOS and stop strings and for the next step's bookkeeping. On a GPU
every other host read is a synchronisation that idles the device, and a step without them can
replay captured graphs back to back. Nor does a step build a tensor from host data (a blocking
copy on CUDA) or synchronise to time itself: what it needs per row (the guards' answer offset
and think state included) lives in the slots' device buffers (slot_state.py), and its phases
are timed by `Clock.mark` (CUDA events read after the step's read).

The device part is tensor-only (device_step.py): the drafter's loop, then the verify side (the
verifier's forward, the rule with the bonus draw, the roll-back); under CUDA graphs each is one
captured graph (step_graphs.py), so a step is two replays and one read.

Draws: each row's uniforms are counter-based (draws.py), all of a step's in one call, keyed on
its seed and the sequence positions of the step, so a row's tokens depend on its own seed alone,
never on its neighbours, the batch size or the schedule (batch 1 draws the same numbers). A row's
law is its rule's law: the drafts are drawn from p by inverting its CDF, the rule's acceptance
tests and last token read the row's own uniforms (`verify(uniforms=...)`).

Rows advance raggedly. Row b drafts m_b = min(m, remaining_b - 1) tokens (0: a bonus step, its
one token drawn from q as in `SpeculativeDecoder._bonus_step`); a forward feeds each row its own
number of real tokens (`counts`) padded to the widest, rows done drafting and empty slots are
fed nothing, and afterwards each row's caches are set back to its own accepted prefix (lengths
as in the speculative module docstring) on the device. Rows are grouped by (rule, m_b) for the
rule's call: one call per group over the span, masked to its rows, usually one per step.
"""

from __future__ import annotations

import time

import torch

from cactus_bench.engine.batched import BatchRun, BatchStep, Row, group_by_sampling, record_step
from cactus_bench.engine.device_step import draft_loop, verify_side
from cactus_bench.engine.rule_plan import rule_groups_of, rule_plan
from cactus_bench.engine.sampling import BAD_LAW, bad_rows, draw_tokens
from cactus_bench.engine.step_forward import StepForward, processor, span_caches
from cactus_bench.engine.step_graphs import advanced_buffers


def autoregressive_step(decoder, run: BatchRun, rows: list[Row]) -> list[list[int]]:
    """One token per row from the verifier alone (`AutoregressiveDecoder._step`, batched)."""
    clock = run.clock
    first, stop = run.span(rows)
    state = run.slots.view(first, stop)
    started, start = time.perf_counter(), clock.mark()
    active = state.active  # [S']
    forward = StepForward(decoder, run, "verifier", rows, first, stop)
    logits = forward(state.verifier_id[:, None], active.long(), [1] * len(rows), False)
    probs = processor(rows, state)(logits[:, -1])  # [S', K]
    forwarded = clock.mark()
    last_u = state.last_uniforms()  # [S'] LAST at L
    tokens = torch.where(active, draw_tokens(probs, last_u, state.greedy), -1)  # [S']
    state.advance_one(tokens, _to_vocab_fn(decoder))
    ruled = clock.mark()
    result = _read(tokens[:, None], bad_rows(probs) & active)
    emitted = []
    for row in rows:
        ids = _vocab_ids(decoder, result[row.slot - first])
        row.pending["verifier"] = ids
        row.seq_len += 1
        _count(row.record, drafted=0, accepted=0)
        emitted.append(ids)
    ones = [1] * len(rows)
    step = BatchStep(
        "decode",
        run.since(started),
        [row.slot for row in rows],
        [row.index for row in rows],
        fed=ones,
        drafts=[0] * len(rows),
        accepted=[0] * len(rows),
        verify_s=clock.seconds(start, forwarded),
        rule_s=clock.seconds(forwarded, ruled),
        step_s=time.perf_counter() - started,
    )
    record_step(run, rows, step)
    return emitted


def speculative_step(decoder, run: BatchRun, rows: list[Row]) -> list[list[int]]:
    """One draft-verify step per row (`SpeculativeDecoder._step`, batched)."""
    clock, m = run.clock, decoder.num_draft_tokens
    first, stop = run.span(rows)
    state = run.slots.view(first, stop)  # [S'] device views of the span's slots
    wanted = [min(m, row.tracker.remaining - 1) for row in rows]  # host m_b (= state.drafts)
    most = max(wanted)
    rules = [decoder.greedy_sampler if row.params.is_greedy else decoder.sampler for row in rows]
    # Rules whose test reads the temperature-1 untruncated laws get them too (speculative.py).
    unscaled = any(getattr(rule, "reads_unscaled", False) for rule in rules)
    to_vocab = _to_vocab_fn(decoder)

    started, start = time.perf_counter(), clock.mark()
    process = processor(rows, state)
    pending = [len(row.pending["drafter"]) if w else 0 for row, w in zip(rows, wanted, strict=True)]
    fed = [pending] + [[int(w > j) for w in wanted] for j in range(1, most)]  # host counts
    drafter = StepForward(decoder, run, "drafter", rows, first, stop)
    width = max(1, max(pending))  # the first forward's input: [S', 1 | 2] what each drafter reads

    def loop(forward):
        drafts = state.drafts(m)  # [S'] m_b
        draws = state.uniforms(m)  # [S', 2m + 1]: every draw of the step, one call
        first_ids, first_counts = state.drafter_ids[:, :width], state.drafter_count * (drafts > 0)
        inputs = (first_ids, first_counts, drafts, draws, state.greedy)
        out = draft_loop(forward, process, to_vocab, *inputs, steps=most, unscaled=unscaled)
        return drafts, draws, out

    graphs, span = run.step_graphs, stop - first
    plan = rule_plan(decoder, rows, rules, wanted, span)  # host: the rule groups' shape
    key = (first, span, most, width, unscaled, tuple(group_by_sampling(rows)))
    captured = None
    if graphs is not None and most:  # the loop as one graph (step_graphs.py)
        lengths = [run.caches["drafter"].lengths]
        captured = graphs.replay(("draft", *key), lambda: loop(_static(drafter)), lengths)
        if captured is not None:
            for counts in fed:
                drafter.follow(counts)
            _replayed(run)
    # The verify side as the second graph: after a replayed loop (it reads the loop's static
    # outputs), or in a bonus step (no drafts: the loop's few tensors are captured with it).
    graphed = graphs is not None and (captured is not None or not most)
    if captured is None and not graphed:
        captured = loop(lambda j, ids, counts: drafter(ids, counts, fed[j], False))
    drafted = clock.mark()

    counts = [1 + w for w in wanted]
    verifier = StepForward(decoder, run, "verifier", rows, first, stop)

    def verify(loop_out, forward, between=None):  # device_step.verify_side on this step
        loop_out = loop_out if loop_out is not None else loop(None)

        def rule_groups(drafts):
            return rule_groups_of(decoder, plan, state, drafts)

        caches = span_caches(run, first, stop)
        inputs = (state, loop_out, rule_groups, m, caches, plan.host, between)
        return verify_side(forward, process, to_vocab, *inputs)

    out = None
    if graphed:
        fn = lambda: verify(captured, lambda ids, c: verifier.static(ids, c, True))  # noqa: E731
        out = graphs.replay(("verify", *key, plan), fn, advanced_buffers(run.slots, run.caches))
    if out is not None:  # the rule ran inside the graph: its time is in verify_s
        verifier.follow(counts)
        _replayed(run)
        emitted, bad, off_head = out
        verified = ruled = clock.mark()
    else:
        marks = []
        eager = (lambda ids, c: verifier(ids, c, counts, True), lambda: marks.append(clock.mark()))
        emitted, bad, off_head = verify(captured, *eager)
        verified, ruled = marks[0], clock.mark()
    result = _read(torch.cat([emitted, off_head[:, None]], dim=1), bad)  # the one host read

    tokens_by_row = []
    for row, count in zip(rows, wanted, strict=True):
        *indices, num_off_head = result[row.slot - first]
        tokens = _vocab_ids(decoder, [index for index in indices if index >= 0])
        _advance(row, count, tokens)
        row.record.out_of_head_per_step.append(num_off_head)
        tokens_by_row.append(tokens)
    _roll_back(run, rows, wanted)
    step = BatchStep(
        "decode",
        run.since(started),
        [row.slot for row in rows],
        [row.index for row in rows],
        fed=counts,
        drafts=wanted,
        accepted=[row.record.accepted_per_step[-1] for row in rows],
        draft_s=clock.seconds(start, drafted),
        verify_s=clock.seconds(drafted, verified),
        rule_s=clock.seconds(verified, ruled),
        step_s=time.perf_counter() - started,
        rule_in_verify=out is not None,
    )
    record_step(run, rows, step)
    return tokens_by_row


def _static(drafter: StepForward):
    return lambda j, ids, counts: drafter.static(ids, counts)


def _replayed(run: BatchRun) -> None:
    run.replays += 1
    run.step_replays += 1


def _read(tokens: torch.Tensor, bad: torch.Tensor) -> list[list[int]]:
    """The step's one host read: tokens [R, k] (a speculative step's: the emitted ids, then the
    out-of-head count) and the rows' bad-law flags [R], in one copy."""
    both = torch.cat([tokens, bad.long()[:, None]], dim=1).tolist()
    if any(row[-1] for row in both):
        raise ValueError(BAD_LAW)
    return [row[:-1] for row in both]


def _to_vocab_fn(decoder):
    """Sampler-space indices -> vocabulary ids, on the device (identity without a token_map)."""
    token_map = decoder.token_map
    return (lambda indices: indices) if token_map is None else (lambda indices: token_map[indices])


def _vocab_ids(decoder, indices: list[int]) -> list[int]:
    """Sampler-space indices -> vocabulary ids, on the host."""
    table = decoder.token_list
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
    """The host's copy of the roll-back the step did on the device (`SlotState.advance`): the
    verifier holds L + accepted positions, the drafter L + kept (a bonus step left it)."""
    run.caches["verifier"].set_host_lengths([(row.slot, row.seq_len - 1) for row in rows])
    run.caches["drafter"].set_host_lengths(
        [(row.slot, row.kept_drafter) for row, count in zip(rows, wanted, strict=True) if count]
    )


def _count(record, drafted: int, accepted: int) -> None:
    record.drafted_per_step.append(drafted)
    record.accepted_per_step.append(accepted)
    record.emitted_per_step.append(accepted + 1)
