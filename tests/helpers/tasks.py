"""The tasks tests' stand-ins: a decoder that answers from a script, test-local caches, and small
hand-written GSM8K and GPQA data (laid out like shared/data)."""

from __future__ import annotations

import json

import nltk

from cactus_bench.engine import RequestRecord
from cactus_bench.tasks import data as task_data


class OneAtATime:
    """The `Decoder` protocol's generate_batch for a test decoder: its generate, request by
    request, each reported to on_finish as it ends."""

    def generate_batch(self, requests, batch=1, on_finish=None):
        records = [self.generate(**vars(request)) for request in requests]
        for index, record in enumerate(records):
            if on_finish is not None:
                on_finish(index, record)
        return records


class ScriptedDecoder(OneAtATime):
    """Answers each prompt with respond(prompt_text); logs its calls (in `log`, shared)."""

    num_draft_tokens = 0  # the rest of the engine's `Decoder` protocol
    sampler_name = None

    def __init__(self, tokenizer, respond, name="spec", log=None):
        self.tokenizer, self.respond, self.name = tokenizer, respond, name
        self.log = [] if log is None else log

    def generate(self, prompt_ids, max_new_tokens, stop=None, seed=None, sampling=None):
        prompt = self.tokenizer.decode(prompt_ids)
        self.log.append(
            dict(
                arm=self.name,
                prompt=prompt,
                max_new_tokens=max_new_tokens,
                stop=stop,
                seed=seed,
                sampling=sampling,
            )
        )
        text = self.respond(prompt)
        return RequestRecord(
            prompt_ids=list(prompt_ids),
            output_ids=self.tokenizer.encode(text),
            text=text,
            stop_reason="eos",
            seed=seed,
        )


def write_jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def use_private_caches(tmp_path, monkeypatch) -> None:
    """Generated YAMLs and punkt files go to tmp_path; NLTK's search path is restored after."""
    monkeypatch.delenv(task_data.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(task_data.DATA_DIR_ENV, raising=False)
    monkeypatch.setenv("NLTK_DATA", "")
    monkeypatch.setattr(nltk.data, "path", list(nltk.data.path))


# ---- GSM8K: questions with gold answers, and test questions with hand-written responses ---------
GSM8K_TRAIN = [
    ("Tom has 3 apples and buys 4 more. How many apples does he have?", "3 + 4 = 7\n#### 7"),
    ("A box holds 6 pens. How many pens are in 5 boxes?", "5 * 6 = 30\n#### 30"),
    ("Sara reads 12 pages a day. How many pages in 3 days?", "12 * 3 = 36\n#### 36"),
    ("A bus has 40 seats and 15 are taken. How many are free?", "40 - 15 = 25\n#### 25"),
    ("Eggs cost $2 each. How much do 9 eggs cost?", "9 * 2 = 18\n#### 18"),
]
GSM8K_TEST = {  # question -> (gold answer, hand-written response)
    "Mia had 20 stickers and gave away 8. How many are left?": (
        "20 - 8 = 12\n#### 12",
        "20 - 8 = 12.\n#### 12",
    ),
    "A farmer plants 7 rows of 9 trees. How many trees?": (
        "7 * 9 = 63\n#### 63",
        "7 rows times 9 trees is 63",
    ),
    "A shop sold 1,250 cups on Monday and 750 on Tuesday. How many in total?": (
        "1250 + 750 = 2000\n#### 2000",
        "<think>maybe #### 1500</think>The total is 2,000 cups.\n#### 2,000",
    ),
    "Ann has 5 cats and 2 dogs. How many pets?": (
        "5 + 2 = 7\n#### 7",
        "<think>so #### 7</think>#### 8",
    ),
}


def gsm8k_folder(root):
    write_jsonl(root / "gsm8k/train.jsonl", [{"question": q, "answer": a} for q, a in GSM8K_TRAIN])
    write_jsonl(
        root / "gsm8k/test.jsonl",
        [{"question": q, "answer": gold} for q, (gold, _) in GSM8K_TEST.items()],
    )
    return root


# ---- GPQA: four rows whose right answer each names its number ---------------------------------
GPQA_ROWS = [
    {
        "Question": f"Which value is listed as number {i}?",
        "Correct Answer": f"value {i}",
        "Incorrect Answer 1": f"other {i}a",
        "Incorrect Answer 2": f"other {i}b",
        "Incorrect Answer 3": f"other {i}c",
    }
    for i in range(4)
]
