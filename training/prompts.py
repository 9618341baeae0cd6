"""Training prompts for the SmolLM2 drafter: GSM8K *train* questions and instruction prompts.

The instruction prompts are written from the word lists in templates.py (a task, its
subject and zero to two verifiable constraints in the style of IFEval); GSM8K prompts come in
several styles, a share of them with one to three solved *train* examples before the question
(lm-eval's few-shot layout: "Question: ...\\nAnswer: ..." in one user turn). GSM8K test, IFEval
and the demo task are never used; `check_no_overlap` refuses a mix that contains any of them.
The verifier answers every prompt itself (on-policy), which is what maximises acceptance.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from training import templates as words


def _fill(rng: random.Random) -> dict[str, object]:
    """Random values for every slot a task or constraint may name."""
    topic, topic2 = rng.sample(words.TOPICS, k=2)
    return {
        "topic": topic,
        "topic2": topic2,
        "person": rng.choice(words.PEOPLE),
        "product": rng.choice(words.PRODUCTS),
        "place": rng.choice(words.PLACES),
        "event": rng.choice(words.EVENTS),
        "sentence": rng.choice(words.SENTENCES),
        "question": rng.choice(words.QUESTIONS),
        "kw1": rng.choice(words.KEYWORDS),
        "kw2": rng.choice(words.KEYWORDS),
        "n": rng.randint(2, 6),
        "m": rng.choice([30, 50, 80, 100, 150, 200, 300]),
        "letter": rng.choice("aeinorst"),
        "lang": rng.choice(words.LANGUAGES),
    }


def instruction_prompts(count: int, seed: int) -> list[str]:
    """``count`` distinct templated instruction prompts (deterministic in ``seed``)."""
    rng = random.Random(seed)
    seen: set[str] = set()
    ordered: list[str] = []
    while len(ordered) < count:
        constraints = rng.sample(words.CONSTRAINTS, k=rng.choice([0, 1, 1, 1, 2, 2]))
        text = " ".join([rng.choice(words.TASKS), *constraints]).format(**_fill(rng))
        if text not in seen:
            seen.add(text)
            ordered.append(text)
    return ordered


def gsm8k_train(data_dir: Path) -> list[dict[str, str]]:
    """Rows of ``gsm8k/train.jsonl`` (the training split only): question and answer."""
    path = Path(data_dir) / "gsm8k" / "train.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found; pass --data-dir pointing at the shared data")
    with open(path) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def gsm8k_train_questions(data_dir: Path) -> list[str]:
    """Questions from ``gsm8k/train.jsonl`` (the training split only)."""
    return [row["question"] for row in gsm8k_train(data_dir)]


def math_prompts(data_dir: Path, seed: int, few_shot_share: float) -> list[str]:
    """Every GSM8K train question once, in a random style or after 1-3 solved train examples."""
    rng = random.Random(seed)
    rows = gsm8k_train(data_dir)
    prompts = []
    for index, row in enumerate(rows):
        if rng.random() < few_shot_share:
            others = rng.sample(range(len(rows)), k=rng.randint(1, 3) + 1)
            shots = [rows[i] for i in others if i != index][:3]
            blocks = [f"Question: {s['question']}\nAnswer: {s['answer']}" for s in shots]
            prompts.append("\n\n".join([*blocks, f"Question: {row['question']}\nAnswer:"]))
        else:
            prompts.append(rng.choice(words.GSM8K_STYLES).format(q=row["question"]))
    return prompts


def evaluation_texts(data_dir: Path) -> list[str]:
    """Every prompt that evaluates the drafter or the demo: none may appear in training."""
    data_dir = Path(data_dir)
    demo = Path(__file__).parents[1] / "tasks" / "demo_prompts.jsonl"
    sources = [
        (data_dir / "gsm8k" / "test.jsonl", "question"),
        (data_dir / "ifeval" / "input_data.jsonl", "prompt"),
        (demo, "prompt"),
    ]
    texts = []
    for path, key in sources:
        if path.exists():
            with open(path) as fh:
                texts.extend(json.loads(line)[key] for line in fh if line.strip())
    return texts


def check_no_overlap(prompts: list[str], data_dir: Path) -> None:
    """Raise if any training prompt contains an evaluation prompt (exact substring)."""
    held_out = [t.strip() for t in evaluation_texts(data_dir) if len(t.strip()) > 20]
    for prompt in prompts:
        for text in held_out:
            if text in prompt:
                raise ValueError(
                    f"training prompt contains an evaluation prompt ({text[:60]!r}...); "
                    "drafter prompts must come from training splits and templates only"
                )


def drafter_prompts(
    data_dir: Path,
    num_instruction: int,
    seed: int,
    math_share: float = 0.5,
    few_shot_share: float = 0.15,
) -> list[tuple[str, str]]:
    """The shuffled training mix as (source, prompt) pairs, source "math" or "instruction".

    GSM8K train questions are sampled so that about ``math_share`` of the first prompts are
    math; the order is fixed by ``seed``, so a run that stops early used a fair mix.
    """
    rng = random.Random(seed)
    math = math_prompts(data_dir, seed, few_shot_share)
    rng.shuffle(math)
    instructions = instruction_prompts(num_instruction, seed)
    mixed: list[tuple[str, str]] = []
    while math or instructions:
        take_math = math and (not instructions or rng.random() < math_share)
        mixed.append(("math", math.pop()) if take_math else ("instruction", instructions.pop()))
    return mixed
