"""Stopping: EOS token ids, stop strings (lm-eval's `until`) and max_new_tokens.

lm-eval cuts a continuation with `for term in until: text = text.split(term)[0]`, i.e. at the
earliest occurrence of any non-empty stop string. We do the same on the decoded continuation and
keep the shortest token prefix whose decoded text starts with the cut text (so a token carrying
both the last characters before the stop string and its start is kept); the text never contains
the stop string.
"""

from __future__ import annotations

from collections.abc import Iterable


def cut_at_stop(text: str, stop: Iterable[str]) -> tuple[str, bool]:
    """The text before the earliest stop string (exactly lm-eval's `until`), and whether any hit."""
    cut = text
    for term in stop:
        if term:
            cut = cut.split(term)[0]
    return cut, len(cut) < len(text)  # a non-empty term that occurs always shortens the text


class OutputTracker:
    """Accumulates emitted token ids and decides when and why generation ends.

    `extend` takes each step's emitted ids (never more than `remaining`), truncates at the first
    EOS and tells the loop to stop; stop strings are searched in a decoded window covering the
    new tokens and enough earlier ones to catch a stop string straddling two steps. `finish`
    applies the exact lm-eval cut on the whole decoded continuation.
    """

    def __init__(
        self, tokenizer, eos_token_ids: Iterable[int], stop: list[str] | None, max_new_tokens: int
    ):
        self.tokenizer = tokenizer
        self.eos_token_ids = frozenset(eos_token_ids)
        self.stop = [term for term in (stop or []) if term]
        self.max_new_tokens = max_new_tokens
        # A character is at most 4 byte-level tokens; a margin covers a split first character.
        self._window_extra = 4 * max((len(term) for term in self.stop), default=0) + 4
        self.token_ids: list[int] = []
        self.hit_eos = False
        self.hit_stop = False

    @property
    def remaining(self) -> int:
        return self.max_new_tokens - len(self.token_ids)

    @property
    def done(self) -> bool:
        return self.hit_eos or self.hit_stop or self.remaining <= 0

    def extend(self, new_ids: list[int]) -> None:
        new_ids = new_ids[: self.remaining]
        for index, token in enumerate(new_ids):
            if token in self.eos_token_ids:
                new_ids = new_ids[: index + 1]
                self.hit_eos = True
                break
        self.token_ids.extend(new_ids)
        if self.stop and new_ids:
            window = self.token_ids[-(len(new_ids) + self._window_extra) :]
            tail = self.tokenizer.decode(window, skip_special_tokens=True)
            self.hit_stop = any(term in tail for term in self.stop)

    def finish(self) -> tuple[list[int], str, str]:
        """(output_ids, text, stop_reason) after the exact stop-string cut."""
        text = self.tokenizer.decode(self.token_ids, skip_special_tokens=True)
        cut, stopped = cut_at_stop(text, self.stop)
        if not stopped:
            return list(self.token_ids), text, "eos" if self.hit_eos else "length"
        # Shortest prefix whose decoded text still starts with the cut text. Walking back from
        # the end is cheap: the cut lies within the last step (plus a stop string) of the end.
        keep = len(self.token_ids)
        while keep > 0 and self._decode(keep - 1).startswith(cut):
            keep -= 1
        return self.token_ids[:keep], cut, "stop"

    def _decode(self, length: int) -> str:
        return self.tokenizer.decode(self.token_ids[:length], skip_special_tokens=True)
