"""Resume: a decoder that replays the requests a journal already holds and decodes the rest.

`JournaledDecoder(decoder, journal, arm)` is a `Decoder`: for a request whose seed has a
journal line with the same prompt ids it returns that record without decoding; any other
request it decodes with `decoder` and appends to the journal before returning it. The task loop
(lm-eval) never knows the difference, so a rerun of an interrupted run scores the same texts
and summarises the same per-request counts as an uninterrupted one: every request samples from
its own seed (`tasks.lm.request_seed`), not from a generator shared across requests.

Timings: a replayed record keeps the timings measured by the attempt that decoded it, so a
resumed row's times are sums over attempts of the requests each one decoded (nothing is
re-measured; warm-up costs are outside every record, as before). The machine's load is read
when this attempt's first request of the arm begins and its last one ends (`load_at`).
"""

from __future__ import annotations

from cactus_bench.run.identity import RunIdentity
from cactus_bench.store.journal import RecordJournal
from cactus_bench.store.machine_state import load_now


def run_journal(identity: RunIdentity) -> RecordJournal:
    """`<results_dir>/<csv stem>.journal/<config hash>.jsonl`: one run's requests, both arms."""
    csv = identity.results_csv
    return RecordJournal(csv.with_name(csv.stem + ".journal") / f"{identity.config_hash}.jsonl")


class JournaledDecoder:
    """Wraps a Decoder; `replayed` and `decoded` count the requests served each way."""

    def __init__(self, decoder, journal: RecordJournal, arm: str):
        self.decoder = decoder
        self.journal = journal
        self.arm = arm
        self.num_draft_tokens = decoder.num_draft_tokens
        self.sampler_name = decoder.sampler_name
        self._finished = journal.records(arm)  # {seed: record dict}, read once
        self.replayed = 0
        self.decoded = 0
        self.load_at: dict[str, dict] = {}  # "start" / "end" -> load_now() of this attempt
        self.step_log: list = []  # the last generate_batch's decoded steps (none if replayed)

    def _mark(self, moment: str) -> None:
        if moment == "end" or "start" not in self.load_at:
            self.load_at[moment] = load_now()

    def generate(self, prompt_ids, max_new_tokens, stop=None, seed=None, sampling=None):
        from cactus_bench.engine import RequestRecord  # lazy: keeps torch out of the checks

        if seed is None:
            raise ValueError("a journaled request needs its seed: it is the request's key")
        saved = self._finished.get(int(seed))
        if saved is not None and saved["prompt_ids"] == list(prompt_ids):
            self.replayed += 1
            return RequestRecord.from_dict(saved)
        self._mark("start")
        record = self.decoder.generate(
            prompt_ids, max_new_tokens=max_new_tokens, stop=stop, seed=seed, sampling=sampling
        )
        self._mark("end")
        self.journal.append(self.arm, record)  # durable before lm-eval sees the text
        self.decoded += 1
        return record

    def generate_batch(self, requests, batch: int = 1, on_finish=None):
        """The batched form: journaled requests are replayed, the rest decoded together by the
        decoder's `generate_batch` and journaled one by one as each ends."""
        from cactus_bench.engine import RequestRecord  # lazy: keeps torch out of the checks
        from cactus_bench.engine.requests import as_request  # lazy: as above

        requests = [as_request(self.decoder, request) for request in requests]
        records: list = [None] * len(requests)
        todo = []
        for index, request in enumerate(requests):
            saved = self._finished.get(int(request.seed))
            if saved is not None and saved["prompt_ids"] == list(request.prompt_ids):
                records[index] = RequestRecord.from_dict(saved)
                self.replayed += 1
                if on_finish is not None:
                    on_finish(index, records[index])
            else:
                todo.append(index)

        def finished(position: int, record) -> None:
            self.journal.append(self.arm, record)  # durable as soon as the request ends
            self.decoded += 1
            records[todo[position]] = record
            if on_finish is not None:
                on_finish(todo[position], record)

        self.step_log = []
        if todo:
            self._mark("start")
            self.decoder.generate_batch(
                [requests[index] for index in todo], batch, on_finish=finished
            )
            self._mark("end")
            self.step_log = list(getattr(self.decoder, "step_log", []))
        return records

    def __getattr__(self, name):  # anything else a backend's decoder offers
        if name == "decoder":  # not set yet (e.g. while unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.decoder, name)


def report(decoders: list[JournaledDecoder | None]) -> str | None:
    """`resume: 3 requests replayed from the journal, 2 decoded` when anything was replayed."""
    present = [d for d in decoders if d is not None]
    replayed = sum(d.replayed for d in present)
    if not replayed:
        return None
    decoded = sum(d.decoded for d in present)
    return f"resume: {replayed} requests replayed from the journal, {decoded} decoded"
