"""Drafter training: prompt mix, batched teacher generation, losses, the resumable loop."""

from __future__ import annotations

import json

import pytest
import torch

from cactus_bench.engine.sampling import process_logits
from cactus_bench.models import make_tiny_pair
from cactus_bench.models.drafter import load_drafter
from training.distill import (
    CALIBRATION_SCALES,
    DistillSettings,
    acceptance_terms,
    calibrate_logit_scale,
    choose_subset,
    distill_loss,
    processed_student,
)
from training.prompts import (
    check_no_overlap,
    drafter_prompts,
    instruction_prompts,
)
from training.shards import load_shards
from training.teacher import (
    TeacherSettings,
    generate_batch,
    generate_shards,
    plan_batches,
)
from training.train import calibrate, distill

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture(scope="module")
def verifier_and_tokenizer():
    _, verifier, tokenizer = make_tiny_pair(seed=3, arch="llama")
    verifier.requires_grad_(False)
    return verifier, tokenizer


def fake_data_dir(tmp_path, test_question="What is 6 times 7 in the test split, exactly?"):
    (tmp_path / "gsm8k").mkdir()
    rows = [
        {"question": f"Train question {i}: add {i} and {i + 1}.", "answer": f"#### {2 * i + 1}"}
        for i in range(30)
    ]
    (tmp_path / "gsm8k" / "train.jsonl").write_text("\n".join(map(json.dumps, rows)) + "\n")
    test = json.dumps({"question": test_question, "answer": "#### 42"})
    (tmp_path / "gsm8k" / "test.jsonl").write_text(test + "\n")
    return tmp_path


def test_prompt_mix_is_deterministic_and_uses_training_data_only(tmp_path):
    data = fake_data_dir(tmp_path)
    mix = drafter_prompts(data, 40, seed=1)
    assert mix == drafter_prompts(data, 40, seed=1) and mix != drafter_prompts(data, 40, seed=2)
    assert {source for source, _ in mix} == {"math", "instruction"}
    assert sum(source == "math" for source, _ in mix) == 30  # every train question once
    assert len(set(instruction_prompts(200, seed=0))) == 200
    assert not any("{" in text for text in instruction_prompts(500, seed=0))  # slots filled
    check_no_overlap([text for _, text in mix], data)
    leaked = ["Question: What is 6 times 7 in the test split, exactly?\nAnswer:"]
    with pytest.raises(ValueError, match="contains an evaluation prompt"):
        check_no_overlap(leaked, data)


def test_the_kept_top_logits_give_the_engine_law_over_the_whole_vocabulary():
    """Distillation processes the teacher's `keep` largest logits: with top_k <= keep that is
    the engine's processed law over the full vocabulary, restricted to the ids it can draw."""
    logits = torch.randn(6, 300, generator=torch.Generator().manual_seed(0)) * 3  # [N, V]
    settings = DistillSettings(None, None)
    full = process_logits(logits, settings.sampling)  # [N, V]
    values, ids = logits.topk(TeacherSettings().keep, dim=-1)  # [N, keep]
    kept = process_logits(values, settings.sampling)  # [N, keep]
    assert torch.allclose(full.gather(-1, ids), kept, atol=1e-6)
    assert torch.allclose(kept.sum(-1), torch.ones(6)) and (kept > 0).sum(-1).max() <= 20
    with pytest.raises(ValueError, match="keep"):
        TeacherSettings(keep=16, top_k=20)


def test_subset_ranks_teacher_mass_and_blends_in_the_training_texts_prior():
    vals = torch.tensor([[5.0, 4.0, 0.0]]).repeat(10, 1)  # [G, k] raw logits, ids 1, 2, 3
    records = [{"top_vals": vals, "top_idx": torch.tensor([[1, 2, 3]]).repeat(10, 1)}]
    prior = torch.zeros(8, dtype=torch.float64)
    prior[6] = 100.0  # a word the training texts use often, absent from the teacher's answers
    plain = DistillSettings(None, None, subset_size=3, prior_share=0.0, top_k=3)
    ids, share = choose_subset(records, prior, plain, always=[7])
    assert ids.tolist() == [1, 2, 7] and share == pytest.approx(1.0)
    blended = DistillSettings(None, None, subset_size=3, prior_share=0.5, top_k=3)
    ids, share = choose_subset(records, prior, blended, always=[7])
    assert ids.tolist() == [1, 6, 7] and share < 1.0


def test_batched_generation_with_finished_rows_leaving_matches_a_full_forward(
    verifier_and_tokenizer,
):
    verifier, tokenizer = verifier_and_tokenizer
    eos = tokenizer.eos_token_id
    prompts = [[5, 6, 7], [8, 9, 10, 11, 12, 13], [14, 15], [16, 17, 18, 19]]
    settings = TeacherSettings(max_new_tokens=30, keep=16, temperature=1.5, top_k=16)
    # EOS is rare in this random model: with seed 9 the second row draws it after 10 tokens
    records = generate_batch(verifier, prompts, eos, settings, seed=9)
    lengths = [len(r["top_idx"]) for r in records]
    assert len(set(lengths)) > 1, "some rows should stop early (at EOS) and leave the batch"
    again = generate_batch(verifier, prompts, eos, settings, seed=9)
    assert all(torch.equal(a["ids"], b["ids"]) for a, b in zip(records, again, strict=True))
    for prompt, record in zip(prompts, records, strict=True):
        assert record["ids"][: len(prompt)].tolist() == prompt
        generated = record["ids"][len(prompt) :]
        assert eos not in generated[:-1].tolist()
        with torch.no_grad():
            logits = verifier(input_ids=record["ids"][None].long()).logits[0]
        targets = logits[len(prompt) - 1 : len(prompt) - 1 + len(generated)]  # [G, V]
        vals, idx = targets.topk(16, dim=-1)
        assert torch.allclose(record["top_vals"].float(), vals, atol=1e-2)
        assert torch.equal(record["top_idx"][:, :4].long(), idx[:, :4])
        assert (record["top_idx"].long() == generated[:, None].long()).any(-1).all()


def test_processed_student_and_acceptance_equal_one_for_the_teacher_itself():
    settings = DistillSettings(weights=None, config=None, top_k=3, top_p=0.9)
    torch.manual_seed(0)
    logits = torch.randn(6, 10)  # [N, K] over a subset that is the whole vocabulary here
    q = processed_student(logits, settings)
    assert torch.allclose(q.sum(-1), torch.ones(6)) and ((q > 0).sum(-1) <= 3).all()
    vals, ids = logits.topk(8, dim=-1)
    batch = {"teacher_vals": vals, "teacher_sub_idx": ids}
    assert torch.allclose(acceptance_terms(logits, batch, settings), torch.ones(6), atol=1e-6)
    other = acceptance_terms(torch.randn(6, 10), batch, settings)
    assert (other < 1 - 1e-3).all()
    outside = {"teacher_vals": vals, "teacher_sub_idx": torch.where(ids == ids[:, :1], -1, ids)}
    assert (acceptance_terms(logits, outside, settings) < 1 - 1e-3).all()  # top id unproposable
    for loss in ("kl", "tv", "kl+tv"):
        student = torch.randn(6, 10, requires_grad=True)
        value = distill_loss(student, batch, DistillSettings(None, None, loss=loss, top_k=3))
        value.backward()
        assert value.item() > 0 and student.grad.abs().sum() > 0


def test_batches_sort_prompts_by_length_within_windows_and_skip_long_ones(verifier_and_tokenizer):
    _, tokenizer = verifier_and_tokenizer
    prompts = [("math", "x" * (40 - i)) for i in range(8)] + [("math", "long " * 200)]
    settings = TeacherSettings(batch_size=2, sort_window=2, max_prompt_tokens=120)
    batches = plan_batches(tokenizer, prompts, settings)
    assert batches == [[3, 2], [1, 0], [7, 6], [5, 4]]  # the 1000-character prompt is skipped


def test_teacher_shards_resume_and_distillation_improves_held_out_acceptance(
    tmp_path, verifier_and_tokenizer
):
    verifier, tokenizer = verifier_and_tokenizer
    prompts = [("math" if i % 2 else "instruction", f"prompt {i} about {i * 7}") for i in range(24)]
    settings = TeacherSettings(max_new_tokens=16, batch_size=6, keep=32)
    generate_shards(verifier, tokenizer, prompts, tmp_path, settings, 40, 10.0, lambda m: None)
    first, totals = load_shards(tmp_path)
    assert totals["shards"] == 1 and len(first) == 6  # stopped at the token target
    generate_shards(verifier, tokenizer, prompts, tmp_path, settings, 10**6, 10.0, lambda m: None)
    records, totals = load_shards(tmp_path)
    assert totals["shards"] == 4 and sorted(r["index"] for r in records) == list(range(24))
    assert torch.equal(records[0]["ids"], first[0]["ids"])  # the first shard was kept
    distil = DistillSettings(
        weights=tmp_path / "d.safetensors",
        config=tmp_path / "d.json",
        train_minutes=0.05,
        init_layers=(0, 2),
        subset_size=96,
        val_every=4,
        ckpt_minutes=0.02,
        lr=3e-3,
    )
    distill(verifier, tokenizer, tmp_path, distil, lambda m: None)
    curve = (tmp_path / "curve.csv").read_text().splitlines()
    assert curve[0].startswith("step,") and len(curve) >= 3
    accept = [float(line.split(",")[5]) for line in curve[1:]]
    assert max(accept[1:]) > accept[0] + 0.01  # training beats the untrained start
    meta = json.loads(distil.config.read_text())
    assert meta["held_out_acceptance"] == pytest.approx(max(accept), abs=1e-4)
    assert meta["num_layers"] == 2 and meta["subset_size"] == 96
    steps = int(curve[-1].split(",")[0])
    longer = DistillSettings(**{**distil.__dict__, "train_minutes": 0.08})
    distill(verifier, tokenizer, tmp_path, longer, lambda m: None)  # resumes from the checkpoint
    resumed = (tmp_path / "curve.csv").read_text().splitlines()
    assert resumed[: len(curve)] == curve and int(resumed[-1].split(",")[0]) > steps

    # Phase 3: the scale is fitted on the same held-out records and read back at load.
    before = json.loads(distil.config.read_text())
    scale = calibrate(verifier, tmp_path, longer, lambda m: None)
    meta = json.loads(distil.config.read_text())
    assert meta["logit_scale"] == scale and str(scale) in meta["logit_scale_grid"]
    assert meta["held_out_acceptance"] == max(meta["logit_scale_grid"].values())
    assert meta["held_out_acceptance_unscaled"] == pytest.approx(
        before["held_out_acceptance"], abs=1e-3
    )
    assert load_drafter(verifier, distil.weights, distil.config).lm_head.logit_scale == scale


def test_calibration_finds_the_scale_that_undoes_a_flattened_student():
    """A student equal to the teacher's logits divided by 2 is best rescaled by 2."""
    torch.manual_seed(0)
    teacher = 3 * torch.randn(40, 12)  # [N, V] raw teacher logits; the subset is the vocabulary
    vals, ids = teacher.topk(12, dim=-1)
    settings = DistillSettings(None, None, top_k=5, top_p=0.95)
    batch = {"teacher_vals": vals, "teacher_sub_idx": ids}
    exact = acceptance_terms(teacher, batch, settings).mean()
    flat = acceptance_terms(teacher / 2, batch, settings).mean()
    assert exact == pytest.approx(1.0) and flat < 0.97

    class Flattened:  # stands in for the drafter: student_logits reads .model and .lm_head
        def model(self, input_ids, attention_mask):
            return type("Out", (), {"last_hidden_state": hidden})()

    hidden = (teacher / 2)[None]  # [1, N, V]: "hidden states" that the head maps to logits
    drafter = Flattened()
    drafter.lm_head = type("Head", (), {"subset_logits": staticmethod(lambda h: h)})()
    records = [
        {
            "ids": torch.arange(41),
            "prompt_len": 1,
            "top_idx": ids,
            "top_vals": vals,
            "source": "math",
            "index": 0,
        }
    ]
    lookup = torch.arange(12)
    scale, means = calibrate_logit_scale(drafter, records, lookup, settings)
    assert scale == 2.0 and means[2.0] == pytest.approx(1.0, abs=1e-6)
    assert means[1.0] == pytest.approx(float(flat), abs=1e-6)
    assert set(means) == set(CALIBRATION_SCALES)
