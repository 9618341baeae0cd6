"""The guards (samplers/guards.py; docs/rules.md, Guards) against laws measured through verify.

`verify_law` reads, by bisection on the uniforms verify is handed, each candidate draft's
acceptance probability and the CDF of its replacement token: what verify does, to ~1e-15, with
nothing taken from the package's own formulas. The laws each guard states are then built here
from those per-candidate pieces (the rule's and SpS's) and compared exactly:

    stop: exact     law = q on S, the unguarded rule's law rescaled to 1 - q(S) off S
    near_top: c     a draft n with q(n) >= c max q takes the rule's (a, r), any other SpS's
    relax [B, m]    True: the rule's per-candidate law; False: SpS's
"""

from __future__ import annotations

import pytest
import torch

from cactus_bench.bench.op_count import compiles_fullgraph, count_ops
from cactus_bench.samplers import make_sampler
from cactus_bench.samplers.catalogue import RULES, TARGET_FAMILY, parse_sampler
from cactus_bench.samplers.guards import Guards, relax_mask, think_after, think_states

pytestmark = pytest.mark.usefixtures("single_thread")

VOCAB = 6
STOP = torch.tensor([0, 4])  # the stop set S of these tests
FAMILY = [
    ("sps", {}),
    ("cactus", {"delta": 1.0}),
    ("cactus_exact", {"delta": 0.3}),
    ("interp", {"alpha": 0.4}),
    ("mentored", {"delta": 0.2}),
    ("lenience", {"l": 0.4}),
    ("opt", {"alpha": 0.5, "test_law": "processed"}),
    ("tokenv3", {"alpha": 0.5, "test_law": "processed"}),
    ("fsd_reducible", {"threshold": 0.3, "test_law": "processed"}),
    ("topband", {"alpha": 0.2}),
    ("topband_cascade", {"alpha": 0.5, "beta": 0.8}),
    ("additive", {"acceptance_threshold": 0.2}),
]
IDS = [name for name, _ in FAMILY]


def laws(seed: int):
    """p, q [V] float64 with zeros on both sides (truncation), q putting mass on S."""
    gen = torch.Generator().manual_seed(seed)
    p = (torch.randn(VOCAB, generator=gen, dtype=torch.float64) * 1.5).softmax(-1)
    q = (torch.randn(VOCAB, generator=gen, dtype=torch.float64) * 1.5).softmax(-1)
    p[int(torch.randint(VOCAB, (1,), generator=gen))] = 0.0
    q[1] = 0.0
    return p / p.sum(), q / q.sum()


def verify_law(rule, p, q, relax=None):
    """(a [V], r [V, V]): candidate n's acceptance and replacement law, read off verify."""
    ids = torch.arange(VOCAB).unsqueeze(1)  # [V, 1]: row n drafts n
    draft, target = p.expand(VOCAB, 1, VOCAB), q.expand(VOCAB, 2, VOCAB)
    kwargs = {} if relax is None else {"relax": torch.full((VOCAB, 1), relax)}

    def run(u_accept, u_last):
        uniforms = torch.stack([u_accept, u_last], dim=1)
        return rule.verify(ids, draft, target, uniforms=uniforms, check=False, **kwargs)

    low, high = torch.zeros(VOCAB, dtype=torch.float64), torch.ones(VOCAB, dtype=torch.float64)
    half = torch.full((VOCAB,), 0.5, dtype=torch.float64)
    for _ in range(60):  # accepted iff u < a(n): bisect the boundary
        middle = (low + high) / 2
        accepted = run(middle, half).num_accepted == 1
        low, high = torch.where(accepted, middle, low), torch.where(accepted, high, middle)
    accept = torch.where(high >= 1 - 1e-15, torch.ones_like(high), high)
    never = torch.full((VOCAB,), 1 - 1e-16, dtype=torch.float64)  # rejects unless a(n) = 1
    cdf = torch.ones(VOCAB, VOCAB, dtype=torch.float64)
    for k in range(VOCAB - 1):  # P(replacement <= k): the largest u_last giving a token <= k
        low, high = torch.zeros_like(low), torch.ones_like(high)
        for _ in range(60):
            middle = (low + high) / 2
            below = run(never, middle).token_ids[:, 0] <= k
            low, high = torch.where(below, middle, low), torch.where(below, high, middle)
        cdf[:, k] = high
    residual = torch.diff(cdf, dim=1, prepend=torch.zeros(VOCAB, 1, dtype=torch.float64))
    return accept, residual


def law_of(p, accept, residual):
    """sum_n p(n) [a(n) 1{n} + (1 - a(n)) r_n] from the per-candidate pieces."""
    return p * accept + ((p * (1 - accept)).unsqueeze(1) * residual).sum(0)


def guarded(name, params, **guards):
    rule = make_sampler(name, **params, **guards)
    rule.stop_ids = STOP
    return rule


@pytest.mark.parametrize(("name", "params"), FAMILY, ids=IDS)
def test_stop_exact_keeps_q_on_the_stop_set_and_the_rule_off_it(name, params):
    for seed in range(4):
        p, q = laws(seed)
        plain = law_of(p, *verify_law(make_sampler(name, **params), p, q))
        law = law_of(p, *verify_law(guarded(name, params, stop="exact"), p, q))
        stop = torch.zeros(VOCAB, dtype=torch.bool).scatter(0, STOP, True)
        off = plain * (~stop)
        expected = torch.where(stop, q, off * (1 - q[stop].sum()) / off.sum())
        torch.testing.assert_close(law, expected, atol=1e-9, rtol=0)


def test_stop_exact_is_sensitive_cactus_alone_moves_the_stop_mass():
    p, q = laws(0)
    plain = law_of(p, *verify_law(make_sampler("cactus", delta=1.0), p, q))
    assert abs(plain[STOP].sum() - q[STOP].sum()) > 1e-3


@pytest.mark.parametrize(("name", "params"), FAMILY, ids=IDS)
def test_near_top_takes_sps_for_drafts_off_the_top(name, params):
    c = 0.4
    for seed in range(3):
        p, q = laws(seed)
        rule_a, rule_r = verify_law(make_sampler(name, **params), p, q)
        sps_a, sps_r = verify_law(make_sampler("sps"), p, q)
        near = q >= c * q.max()
        expected = law_of(
            p, torch.where(near, rule_a, sps_a), torch.where(near[:, None], rule_r, sps_r)
        )
        law = law_of(p, *verify_law(guarded(name, params, near_top=c), p, q))
        torch.testing.assert_close(law, expected, atol=1e-9, rtol=0)


@pytest.mark.parametrize(("name", "params"), FAMILY, ids=IDS)
def test_relax_false_is_sps_and_true_is_the_rule(name, params):
    p, q = laws(5)
    rule = make_sampler(name, **params)
    sps = law_of(p, *verify_law(make_sampler("sps"), p, q))
    torch.testing.assert_close(law_of(p, *verify_law(rule, p, q, relax=False)), sps)
    torch.testing.assert_close(sps, q, atol=1e-9, rtol=0)
    own = law_of(p, *verify_law(rule, p, q))
    torch.testing.assert_close(law_of(p, *verify_law(rule, p, q, relax=True)), own)


def test_stop_exact_composes_with_near_top():
    p, q = laws(2)
    plain_a, plain_r = verify_law(guarded("cactus", {"delta": 1.0}, stop="exact"), p, q)
    sps_a, sps_r = verify_law(make_sampler("sps"), p, q)
    near = q >= 0.3 * q.max()
    expected = law_of(
        p, torch.where(near, plain_a, sps_a), torch.where(near[:, None], plain_r, sps_r)
    )
    both = guarded("cactus", {"delta": 1.0}, stop="exact", near_top=0.3)
    torch.testing.assert_close(law_of(p, *verify_law(both, p, q)), expected, atol=1e-9, rtol=0)


# ---- the mask from each row's state ------------------------------------------------------------
OPEN, CLOSE = 7, 8


def reference_mask(offset, in_think, drafts, strict_first, relax_in):
    row = []
    for j, _ in enumerate(drafts):
        state = in_think
        for token in drafts[:j]:  # the markers drafted before position j
            state = True if token == OPEN else False if token == CLOSE else state
        row.append(offset + j >= strict_first and (relax_in == "all" or state))
    return row


@pytest.mark.parametrize(("strict_first", "relax_in"), [(0, "think"), (3, "all"), (2, "think")])
def test_relax_mask_equals_a_loop_over_each_row(strict_first, relax_in):
    gen = torch.Generator().manual_seed(0)
    drafts = torch.randint(5, 10, (64, 5), generator=gen)  # OPEN and CLOSE drawn often
    offsets = torch.randint(0, 6, (64,), generator=gen)
    in_think = torch.rand(64, generator=gen) < 0.5
    guards = Guards(strict_first=strict_first, relax_in=relax_in)
    mask = relax_mask(offsets, in_think, drafts, guards, OPEN, CLOSE)
    for b in range(64):
        expected = reference_mask(
            int(offsets[b]), bool(in_think[b]), drafts[b].tolist(), strict_first, relax_in
        )
        assert mask[b].tolist() == expected, (b, drafts[b].tolist())


def test_a_drafted_close_makes_the_positions_after_it_exact():
    drafts = torch.tensor([[1, CLOSE, 2, 3], [OPEN, 2, CLOSE, 1]])
    states = think_states(torch.tensor([True, False]), drafts, OPEN, CLOSE)
    assert states.tolist() == [[True, True, False, False], [False, True, True, False]]
    valid = torch.tensor([[True, True, False, False], [True, True, True, True]])
    after = think_after(torch.tensor([True, False]), drafts, valid, OPEN, CLOSE)
    assert after.tolist() == [False, False]  # row 0 emitted </think>; row 1 closed again


def test_relax_in_think_without_think_ids_is_sps_everywhere():
    mask = relax_mask(
        torch.tensor([0]), torch.tensor([True]), torch.tensor([[1, 2]]), Guards(relax_in="think")
    )
    assert not mask.any()


# ---- the family, the refusals, the configuration -------------------------------------------------
def test_family_plans_verify_against_their_own_law():
    """GenSpecSample's form: the residual is positive only where the acceptance is 1."""
    p, q = laws(7)
    for name in sorted(TARGET_FAMILY):
        rule = make_sampler(
            name, **({"test_law": "processed"} if RULES[name].param("test_law") else {})
        )
        if not hasattr(rule, "plan"):
            continue
        accept, residual = rule.plan(p, q)
        assert (accept[residual > 1e-15] >= 1 - 1e-12).all(), name
    accept, residual = make_sampler("fsd", test_law="processed", threshold=0.0).plan(p, q)
    assert not (accept[residual > 1e-15] >= 1 - 1e-12).all()  # as released: outside


@pytest.mark.parametrize("name", ["tas", "topk", "greedy", "bild", "fsd", "fly", "greedy_margin"])
def test_rules_outside_the_family_refuse_the_guards_in_one_line(name):
    with pytest.raises(ValueError, match="verifies against a target pi") as error:
        parse_sampler({"name": name, **RULES_DEFAULTS.get(name, {}), "stop": "exact"})
    assert "\n" not in str(error.value)
    rule = make_sampler(name, **({"window": 1} if name == "fly" else {}))
    with pytest.raises(ValueError, match="does not verify against a target"):
        rule.verify(
            torch.tensor([[0]]),
            torch.full((1, 1, 4), 0.25),
            torch.full((1, 2, 4), 0.25),
            relax=torch.ones(1, 1, dtype=torch.bool),
        )


RULES_DEFAULTS = {
    "tas": {"threshold": 0.09, "alpha": 0.3},
    "topk": {"k": 5},
    "bild": {"tau": 5.0, "test_law": "unscaled"},
    "fsd": {"threshold": 0.4, "div": "js", "test_law": "unscaled"},
    "fly": {"entropy_threshold": 0.3, "window": "auto", "entropy_top_k": 3},
    "greedy_margin": {"margin": 0.5},
}


def test_guards_parse_record_and_hash_only_when_set():
    from cactus_bench.samplers.catalogue import param_columns

    plain = parse_sampler({"name": "cactus", "delta": 1.0})
    guarded_params = parse_sampler(
        {"name": "cactus", "delta": 1.0, "stop": "exact", "near_top": 0.2}
    )
    assert plain.runs_with() == {"delta": 1.0}  # unguarded runs keep their hashes
    assert guarded_params.runs_with() == {"delta": 1.0, "stop": "exact", "near_top": 0.2}
    columns = param_columns(guarded_params)
    assert (columns["stop"], columns["near_top"], columns["relax_in"]) == ("exact", 0.2, "all")
    assert param_columns(parse_sampler({"name": "tas", **RULES_DEFAULTS["tas"]}))["stop"] is None
    with pytest.raises(ValueError, match="near_top must be in"):
        parse_sampler({"name": "cactus", "delta": 1.0, "near_top": 1.5})


def test_stop_exact_without_stop_ids_names_the_fix():
    rule = make_sampler("cactus", delta=1.0, stop="exact")
    p, q = laws(0)
    with pytest.raises(ValueError, match="set rule.stop_ids"):
        rule.verify(torch.tensor([[2]]), p.expand(1, 1, VOCAB), q.expand(1, 2, VOCAB))


# ---- capturable: no host read, one graph -------------------------------------------------------
CAPTURED = [
    ("cactus", {"delta": 1.0, "stop": "exact", "near_top": 0.2}),
    ("cactus", {"delta": 1.0, "near_top": 0.2, "strict_first": 4}),
    ("mentored", {"delta": 0.2, "stop": "exact", "relax_in": "think"}),
    ("topband", {"alpha": 0.2, "stop": "exact"}),
    ("interp", {"alpha": 0.4, "near_top": 0.3}),
]


@pytest.mark.parametrize(("name", "params"), CAPTURED, ids=[n for n, _ in CAPTURED])
def test_guarded_verify_reads_nothing_from_the_host_and_traces_whole(name, params):
    rule = guarded(
        name,
        {k: v for k, v in params.items() if k not in Guards.__annotations__},
        **{k: v for k, v in params.items() if k in Guards.__annotations__},
    )
    gen = torch.Generator().manual_seed(3)
    batch, m, vocab = 4, 3, 32
    p = (torch.randn(batch, m, vocab, generator=gen) * 2).softmax(-1)
    q = (torch.randn(batch, m + 1, vocab, generator=gen) * 2).softmax(-1)
    ids = torch.multinomial(p.reshape(-1, vocab), 1, generator=gen).reshape(batch, m)
    uniforms = torch.rand(batch, m + 1, dtype=torch.float64, generator=gen)
    offsets, in_think = torch.tensor([0, 2, 5, 9]), torch.tensor([True, False, True, False])

    def call(ids, p, q, uniforms, offsets, in_think):
        relax = relax_mask(offsets, in_think, ids, rule.guards, 5, 6)
        out = rule.verify(ids, p, q, uniforms=uniforms, check=False, relax=relax)
        return out.token_ids, out.num_accepted

    counter, _ = count_ops(call, ids, p, q, uniforms, offsets, in_think)
    assert counter.host_reads == 0, dict(counter.reads_by_op)
    ok, reason = compiles_fullgraph(call, ids, p, q, uniforms, offsets, in_think)
    assert ok, reason


# ---- the engine (batch 1): the mask follows the answer, built on the device ---------------------
def _decoder(tiny_pair, rule, eos=(), **engine):
    """The guard tests' engine: m = 3, temperature 1, top-k 8; no EOS unless `eos` names one."""
    from cactus_bench.engine import SamplingParams, SpeculativeDecoder

    drafter, verifier, tok = tiny_pair
    return SpeculativeDecoder(
        drafter,
        verifier,
        tok,
        rule,
        num_draft_tokens=3,
        sampling=SamplingParams(temperature=1.0, top_k=8),
        eos_token_ids=list(eos) or [verifier.config.vocab_size + 1],
        **engine,
    )


def _decode(tiny_pair, rule, seed, tokens=24, eos=()):
    decoder = _decoder(tiny_pair, rule, eos)
    return decoder.generate([41, 7], max_new_tokens=tokens, seed=seed).output_ids


def test_strict_first_decodes_sps_tokens_for_the_first_l(tiny_pair):
    sps = [_decode(tiny_pair, make_sampler("sps"), seed) for seed in range(6)]
    cactus = [_decode(tiny_pair, make_sampler("cactus", delta=2.0), seed) for seed in range(6)]
    assert sps != cactus  # the rule departs from SpS on these seeds: the check can fail
    strict = make_sampler("cactus", delta=2.0, strict_first=10)
    for seed, expected in enumerate(sps):
        got = _decode(tiny_pair, strict, seed)
        assert got[:10] == expected[:10], seed
    everywhere = make_sampler("cactus", delta=2.0, strict_first=1000)
    assert [_decode(tiny_pair, everywhere, seed) for seed in range(6)] == sps


def test_relax_in_think_is_sps_where_the_prompt_opened_no_think(tiny_pair):
    from cactus_bench.tasks.stop_set import StopSet

    rule = make_sampler("cactus", delta=2.0, relax_in="think")
    rule.vocab_stop_set = StopSet(stop_ids=(0,), think_open=3, think_close=4)
    sps = [_decode(tiny_pair, make_sampler("sps"), seed) for seed in range(4)]
    got = [_decode(tiny_pair, rule, seed) for seed in range(4)]
    for seed in range(4):  # SpS until the answer's first <think> (id 3), the rule after it
        opened = sps[seed].index(3) + 1 if 3 in sps[seed] else len(sps[seed])
        assert got[seed][:opened] == sps[seed][:opened]
    bare = make_sampler("cactus", delta=2.0, relax_in="think")
    with pytest.raises(ValueError, match="relax_in=think needs"):
        _decode(tiny_pair, bare, 0)


def test_stop_exact_binds_the_engine_stop_ids(tiny_pair):
    rule = make_sampler("cactus", delta=1.0, stop="exact")
    _decode(tiny_pair, rule, 0, tokens=4, eos=(5, 9))
    assert rule.stop_ids.tolist() == [5, 9]


def _guarded_decoder(tiny_pair, **guards):
    from cactus_bench.tasks.stop_set import StopSet

    rule = make_sampler("cactus", delta=2.0, **guards)
    # <think> and </think> stand-ins: ids these answers emit, so the think state moves
    rule.vocab_stop_set = StopSet(stop_ids=(0, 9), think_open=218, think_close=113)
    return _decoder(tiny_pair, rule, fast="on")


BATCHED_GUARDS = [
    {"strict_first": 7},
    {"relax_in": "think"},
    {"strict_first": 4, "relax_in": "think"},
    {"stop": "exact"},
    {"near_top": 0.2},
]


@pytest.mark.parametrize("guards", BATCHED_GUARDS, ids=lambda g: ",".join(g))
def test_batched_steps_apply_the_same_guards_as_batch_one(tiny_pair, guards):
    """generate_batch (batch_steps.py: the rows' guard state in the slots' device buffers)
    decodes what generate decodes, row by row, and the guard changes the unguarded rule's
    tokens, so a batched step that dropped it would fail."""
    prompts = [[41, 7], [41, 218, 9], [5, 218, 113, 8], [218, 12]]  # out, in, closed, in
    # 8 answers of 32 tokens: enough that one crosses a marker between steps (a step that
    # kept the prompt's think state decodes another answer for it)
    requests = [
        {"prompt_ids": prompts[seed % 4], "max_new_tokens": 32, "seed": seed} for seed in range(8)
    ]
    decoder = _guarded_decoder(tiny_pair, **guards)
    batched = [record.output_ids for record in decoder.generate_batch(requests, batch=3)]
    assert batched == [decoder.generate(**request).output_ids for request in requests]
    unguarded = _guarded_decoder(tiny_pair).generate_batch(requests, batch=3)
    assert batched != [record.output_ids for record in unguarded]


@pytest.mark.parametrize(("name", "params"), FAMILY, ids=IDS)
def test_exact_statistics_of_a_guarded_rule_are_what_verify_does(name, params):
    """emitted_law / acceptance_probability (what the frontier reads) under stop and near_top
    equal the law and acceptance read off verify."""
    p, q = laws(3)
    for guards in ({"stop": "exact"}, {"near_top": 0.4}, {"stop": "exact", "near_top": 0.4}):
        rule = guarded(name, params, **guards)
        accept, residual = verify_law(rule, p, q)
        torch.testing.assert_close(
            rule.emitted_law(p, q), law_of(p, accept, residual), atol=1e-9, rtol=0
        )
        beta = (p * accept).sum()
        assert rule.acceptance_probability(p, q).item() == pytest.approx(beta.item(), abs=1e-9)
