"""Shared by the tasks tests: a decoder that answers from a script, and test-local caches."""

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
