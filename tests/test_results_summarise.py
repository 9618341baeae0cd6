"""summarise() on synthetic records with hand-computed values; baseline cache; W&B mirror."""

import math
from dataclasses import dataclass, field

import pytest

from cactus_bench.store import COLUMNS, BaselineCache, baseline_key, summarise


def spec_records():
    """m = 4. Four steps in all; the third drafts only 2 tokens (near max_new_tokens)."""
    return [
        {
            "num_draft_tokens": 4,
            "drafted_per_step": [4, 4, 2],
            "accepted_per_step": [4, 1, 0],
            "emitted_per_step": [5, 2, 1],
            "output_ids": list(range(8)),
            "draft_time_s": 0.5,
            "verify_time_s": 1.2,
            "sampler_time_s": 0.1,
            "total_time_s": 2.0,
        },
        {
            "num_draft_tokens": 4,
            "drafted_per_step": [4],
            "accepted_per_step": [2],
            "emitted_per_step": [3],
            "output_ids": list(range(3)),
            "draft_time_s": 0.25,
            "verify_time_s": 0.5,
            "sampler_time_s": 0.05,
            "total_time_s": 1.0,
        },
    ]


def ar_record(n_tokens: int, seconds: float) -> dict:
    return {
        "num_draft_tokens": 0,
        "drafted_per_step": [0] * n_tokens,
        "accepted_per_step": [0] * n_tokens,
        "emitted_per_step": [1] * n_tokens,
        "output_ids": list(range(n_tokens)),
        "draft_time_s": 0.0,
        "verify_time_s": seconds,
        "sampler_time_s": 0.0,
        "total_time_s": seconds,
    }


def test_vllm_fallback_steps_become_a_column_and_an_end_of_run_warning():
    from cactus_bench.run.console import RunOutcome, fallback_warning, format_outcome

    hf = summarise(spec_records())
    assert hf["draft_probs_fallbacks"] is None  # the HF engine never falls back: an empty cell
    vllm = [
        dict(record, draft_probs_fallbacks=n)
        for record, n in zip(spec_records(), (2, 1), strict=True)
    ]
    row = summarise(vllm)
    assert row["draft_probs_fallbacks"] == 3 and fallback_warning(row).startswith(
        "warning: 3 of 4 verification steps went to vLLM's own exact sampler"
    )
    assert fallback_warning(summarise([dict(r, draft_probs_fallbacks=0) for r in vllm])) is None
    shown = {**row, "model_pair": "p", "task": "t", "sampler": "cactus", "n_prompts": 2}
    assert format_outcome(RunOutcome("ok", "x.csv", "h", "r", shown)).endswith(
        "raise backend.max_model_len or lower max_new_tokens"
    )
    assert "warning" not in format_outcome(RunOutcome("ok", "x.csv", "h", "r", {**shown, **hf}))


def test_summarise_matches_hand_computed_values():
    # baseline: 10 + 2 = 12 tokens in 4 + 2 = 6 s -> 2.0 tokens/s
    row = summarise(spec_records(), [ar_record(10, 4.0), ar_record(2, 2.0)])
    assert set(row) <= set(COLUMNS)
    assert row["num_steps"] == 4
    assert row["al"] == pytest.approx(7 / 4)  # accepted 4+1+0+2 over 4 steps, no bonus
    assert row["tokens_per_step"] == pytest.approx(11 / 4)  # emitted 5+2+1+3
    assert row["accept_rate"] == pytest.approx(7 / 14)
    assert row["draft_tokens_drafted"] == 14 and row["draft_tokens_rejected"] == 7
    # position j: steps that accepted > j / steps that drafted > j
    assert row["accept_rate_by_pos"] == pytest.approx([3 / 4, 2 / 4, 1 / 3, 1 / 3])
    assert row["generated_tokens"] == 11
    assert row["wall_time_spec_s"] == pytest.approx(3.0)
    assert row["draft_time_s"] == pytest.approx(0.75)
    assert row["tokens_per_s_spec"] == pytest.approx(11 / 3)
    assert row["tokens_per_s_baseline"] == pytest.approx(2.0)
    assert row["baseline_generated_tokens"] == 12
    assert row["speedup_tokens"] == pytest.approx((11 / 3) / 2.0)  # tokens/s ratio
    assert row["speedup_walltime"] == pytest.approx(6.0 / 3.0)  # total time ratio


def test_by_position_rates_sum_to_al_when_every_step_drafts_m():
    records = spec_records()[1:] * 3
    row = summarise(records)
    assert math.fsum(row["accept_rate_by_pos"]) == pytest.approx(row["al"])
    assert row["speedup_tokens"] is None and row["tokens_per_s_baseline"] is None


def test_verifier_only_run_leaves_speculation_columns_empty():
    row = summarise([ar_record(5, 1.0)])
    for name in (
        "al",
        "tokens_per_step",
        "accept_rate",
        "accept_rate_by_pos",
        "draft_tokens_rejected",
    ):
        assert row[name] is None, name
    assert row["generated_tokens"] == 5 and row["tokens_per_s_spec"] == pytest.approx(5.0)


@dataclass
class FakeRecord:
    """Stands in for engine.RequestRecord: summarise only uses to_dict()."""

    data: dict = field(default_factory=dict)

    def to_dict(self):
        return self.data


def test_record_objects_and_dicts_give_the_same_summary():
    objects = [FakeRecord(d) for d in spec_records()]
    assert summarise(objects) == summarise(spec_records())


def test_bad_records_give_clear_errors():
    with pytest.raises(ValueError, match="at least one spec record"):
        summarise([])
    broken = spec_records()
    broken[0]["accepted_per_step"] = [5, 1, 0]
    with pytest.raises(ValueError, match="accepted 5 / drafted 4 is impossible"):
        summarise(broken)
    with pytest.raises(ValueError, match="mix draft lengths"):
        summarise(spec_records() + [ar_record(3, 1.0)])
    with pytest.raises(ValueError, match="same prompts"):
        summarise(spec_records(), [ar_record(3, 1.0)])
    with pytest.raises(ValueError, match="verifier-only"):
        summarise(spec_records(), spec_records())
    del broken[1]["total_time_s"]
    with pytest.raises(ValueError, match="lacks \\['total_time_s'\\]"):
        summarise(broken[1:])


def test_real_request_records_summarise():
    engine = pytest.importorskip("cactus_bench.engine")
    if not hasattr(engine, "RequestRecord"):
        pytest.skip("engine.RequestRecord not built yet")
    fields = {k: v for k, v in spec_records()[0].items()}
    record = engine.RequestRecord(prompt_ids=[1, 2], text="", stop_reason="length", **fields)
    assert summarise([record])["al"] == pytest.approx(5 / 3)


def test_baseline_cache_round_trip(tmp_path):
    key = baseline_key(
        verifier_id="Qwen/Qwen3-14B",
        task="gsm8k",
        prompts=[[1, 2], [3]],
        sampling={"temperature": 0.6, "top_p": 0.95, "top_k": 20},
        max_new_tokens=64,
        seed=1234,
        device_name="cpu",
    )
    other = baseline_key(
        verifier_id="Qwen/Qwen3-14B",
        task="gsm8k",
        prompts=[[1, 2], [4]],
        sampling={"temperature": 0.6, "top_p": 0.95, "top_k": 20},
        max_new_tokens=64,
        seed=1234,
        device_name="cpu",
    )
    assert key != other
    cache = BaselineCache(tmp_path / "baselines")
    assert cache.get(key) is None and key not in cache
    cache.put(key, [ar_record(10, 4.0), ar_record(2, 2.0)])
    assert key in cache
    assert cache.totals(key)["tokens_per_s_baseline"] == pytest.approx(2.0)
    row = summarise(spec_records(), cache.get(key))
    assert row["speedup_walltime"] == pytest.approx(2.0)
    with pytest.raises(ValueError, match="verifier-only"):
        cache.put(other, spec_records())
    with pytest.raises(ValueError, match="hex string"):
        cache.get("../etc")


@pytest.mark.parametrize("mode", ["disabled", "offline"])
def test_wandb_mirror(tmp_path, monkeypatch, capsys, mode):
    pytest.importorskip("wandb")
    from cactus_bench.store.wandb_mirror import WandbMirror

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no.netrc"))  # no `wandb login` key either
    monkeypatch.setenv("WANDB_DATA_DIR", str(tmp_path / "wandb-data"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    if mode == "disabled":
        monkeypatch.setenv("WANDB_MODE", "disabled")
    else:
        monkeypatch.delenv("WANDB_MODE", raising=False)  # no key -> offline, said once
    with WandbMirror("cactus-bench-test", "run-0", {"delta": 0.5}, dir=str(tmp_path)) as mirror:
        assert mirror.mode == mode
        mirror.log_row({"task": "demo", "al": 1.75, "score": None, "sampler": "cactus"})
        assert mirror.log_records(spec_records(), {"task": "demo"}) == 4  # steps
    said = capsys.readouterr().out
    if mode == "offline":
        assert said.count("logging offline") == 1
        assert list((tmp_path / "wandb").glob("offline-run-*"))
    else:
        assert "offline" not in said
