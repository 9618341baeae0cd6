"""An lm-evaluation-harness model that decodes with a cactus-bench engine decoder.

lm-eval builds each task's prompts (chat template applied through `apply_chat_template`) and
scores the text `generate_until` returns with its own filters and metrics. The per-request
engine records (acceptance per step, timings) are kept on the model for the run's report.

With a baseline decoder (the verifier alone), every prompt is also decoded by it, interleaved
prompt by prompt with the speculative decoder and alternating which goes first, so that slow
drifts of a shared machine hit both arms alike. Only the speculative output is scored.

With batch > 1 the requests are decoded in waves of `batch`: the first `batch` requests by the
speculative decoder's `generate_batch`, the same requests by the baseline's, then the next
`batch`, alternating which arm goes first per wave as batch 1 alternates per prompt (a wave is
one prompt at batch 1). Continuous batching stays within an arm's wave, so both arms of a wave
share the machine's state and a load change between waves lands on both (docs/batch.md).
"""

from __future__ import annotations

from typing import Any

from lm_eval.api.instance import Instance
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model
from lm_eval.models.utils import normalize_gen_kwargs
from tqdm.auto import tqdm

from cactus_bench.engine import BatchRequest, Decoder, RequestRecord, SamplingParams, cut_at_stop
from cactus_bench.paper import PAPER
from cactus_bench.tasks.paper_settings import THINK_CLOSE, THINK_OPEN
from cactus_bench.tasks.prompt_ids import rendered_prompt_ids
from cactus_bench.tasks.specs import DEFAULT_MAX_GEN_TOKS

# lm-eval's normalize_gen_kwargs folds the token-budget aliases into max_gen_toks.
MAX_TOKEN_ALIASES = ("max_gen_toks", "max_new_tokens", "max_tokens", "max_completion_tokens")
SUPPORTED_GEN_KWARGS = frozenset(
    {"until", "do_sample", "temperature", "top_p", "top_k", *MAX_TOKEN_ALIASES}
)


def request_seed(run_seed: int, index: int) -> int:
    """The sampling seed of request `index`: the same for both arms, distinct across runs."""
    return (run_seed * 1_000_003 + index) % 2**31


def continues_thinking(context: str) -> str:
    """`<think>` when the prompt ends inside a reasoning block, else "".

    DeepSeek-R1's chat template opens the block in the prompt (`<｜Assistant｜><think>\\n`), so
    the response carries only `</think>`, or no tag at all when the token budget runs out
    mid-reasoning. Putting the opening tag back in front of the response lets the `<think>`
    filter treat both template styles alike: a finished block is removed, and an unfinished one
    is scored as paper_settings.strip_thinking's think_filter says.
    """
    opened = context.rfind(THINK_OPEN)
    return THINK_OPEN if opened >= 0 and context.find(THINK_CLOSE, opened) < 0 else ""


def sampling_from_gen_kwargs(kwargs: dict[str, Any]) -> SamplingParams:
    """lm-eval gen kwargs -> SamplingParams. A key that is absent means off, as in HF's
    generate: temperature 1, top-p 1, top-k 0. do_sample False means greedy (temperature 0)."""
    return SamplingParams.from_gen_kwargs(kwargs, default=SamplingParams())


@register_model("cactus_bench")
class CactusBenchLM(LM):
    """lm-eval `LM` around a SpeculativeDecoder or AutoregressiveDecoder (generative tasks only).

    decoder / baseline: `cactus_bench.engine.Decoder`s (`generate` one request, `generate_batch`
    `batch` at a time, into RequestRecords); tokenizer: the verifier's HF tokenizer (its chat
    template formats prompts); chat_template_kwargs: extra template variables such as
    {"enable_thinking": True}.
    """

    def __init__(
        self,
        decoder,
        tokenizer,
        baseline=None,
        chat_template_kwargs: dict[str, Any] | None = None,
        max_gen_toks: int = DEFAULT_MAX_GEN_TOKS,
        seed: int = PAPER.seed,
        show_progress: bool = True,
        batch: int = 1,
    ) -> None:
        super().__init__()
        if not isinstance(decoder, Decoder):
            raise TypeError("decoder must be a cactus_bench.engine.Decoder (generate, ...)")
        if baseline is not None and not isinstance(baseline, Decoder):
            raise TypeError("baseline must be None or a cactus_bench.engine.Decoder")
        if max_gen_toks < 1:
            raise ValueError(f"max_gen_toks must be >= 1; got {max_gen_toks}")
        self.decoder = decoder
        self.baseline = baseline
        self.tokenizer = tokenizer
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.max_gen_toks = max_gen_toks
        self.seed = seed
        self.show_progress = show_progress
        self.batch = batch
        self.records: list[RequestRecord] = []  # speculative (or only) arm, request order
        self.baseline_records: list[RequestRecord] = []  # same requests, verifier alone
        # batch > 1: each arm's decoder steps (engine.batched.BatchStep), for the step-cost model
        self.step_logs: dict[str, list] = {"spec": [], "baseline": []}
        self.waves = 0  # batch > 1: waves decoded so far (each arm decodes each wave once)

    # ---- what lm-eval asks of a chat model ------------------------------------------------------
    @property
    def tokenizer_name(self) -> str:
        return str(getattr(self.tokenizer, "name_or_path", "") or "cactus_bench").replace("/", "__")

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        template = getattr(self.tokenizer, "chat_template", None)
        return template if isinstance(template, str) else None

    def apply_chat_template(
        self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True
    ) -> str:
        """The prompt text for lm-eval's messages, rendered by the tokenizer's chat template."""
        return self.tokenizer.apply_chat_template(
            chat_history,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=not add_generation_prompt,
            **self.chat_template_kwargs,
        )

    def loglikelihood(self, requests: list[Instance]) -> list[tuple[float, bool]]:
        raise NotImplementedError(
            "cactus_bench measures decoding: it supports generative tasks only "
            "(output_type generate_until), not log-likelihood tasks"
        )

    def loglikelihood_rolling(self, requests: list[Instance]) -> list[float]:
        raise NotImplementedError(
            "cactus_bench measures decoding: it supports generative tasks only "
            "(output_type generate_until), not log-likelihood tasks"
        )

    # ---- decoding -------------------------------------------------------------------------------
    def encode_prompt(self, context: str) -> list[int]:
        """Token ids of a prompt `apply_chat_template` rendered (prompt_ids.py: the BOS rule)."""
        return rendered_prompt_ids(self.tokenizer, context)

    def generate_until(self, requests: list[Instance], disable_tqdm: bool = False) -> list[str]:
        hide = disable_tqdm or not self.show_progress
        if self.batch > 1:
            return self._generate_batched(requests, hide)
        outputs = []
        for request in tqdm(requests, desc="generate_until", disable=hide):
            context, gen_kwargs = request.args
            outputs.append(self._generate_one(context, gen_kwargs))
            self.cache_hook.add_partial("generate_until", request.args, outputs[-1])
        return outputs

    def _request(self, context: str, gen_kwargs: dict[str, Any], index: int) -> BatchRequest:
        """Request `index` as both arms decode it: same prompt, budget, stops and seed."""
        unknown = set(gen_kwargs) - SUPPORTED_GEN_KWARGS
        if unknown:
            raise ValueError(
                f"unsupported generation kwargs {sorted(unknown)}; cactus_bench understands "
                f"{sorted(SUPPORTED_GEN_KWARGS)}"
            )
        kwargs = normalize_gen_kwargs(gen_kwargs, default_max_gen_toks=self.max_gen_toks)
        return BatchRequest(
            prompt_ids=self.encode_prompt(context),
            max_new_tokens=kwargs["max_gen_toks"],
            stop=[term for term in kwargs["until"] if term],
            seed=request_seed(self.seed, index),
            sampling=sampling_from_gen_kwargs(kwargs),
        )

    def _generate_one(self, context: str, gen_kwargs: dict[str, Any]) -> str:
        request = self._request(context, gen_kwargs, len(self.records))

        def run(decoder) -> RequestRecord:
            return decoder.generate(
                list(request.prompt_ids),
                max_new_tokens=request.max_new_tokens,
                stop=request.stop,
                seed=request.seed,
                sampling=request.sampling,
            )

        index = len(self.records)
        if self.baseline is not None and index % 2 == 1:  # alternate which arm goes first
            self.baseline_records.append(run(self.baseline))
        record = run(self.decoder)
        self.records.append(record)
        if self.baseline is not None and index % 2 == 0:
            self.baseline_records.append(run(self.baseline))
        return self._answer(context, record, request.stop)

    def _generate_batched(self, instances: list[Instance], hide: bool) -> list[str]:
        """lm-eval's instances as requests in waves of `batch`, each wave through both arms'
        `generate_batch`."""
        first = len(self.records)
        requests = [
            self._request(*instance.args, first + offset)
            for offset, instance in enumerate(instances)
        ]
        arms = [("spec", self.decoder, self.records)]
        if self.baseline is not None:
            arms.append(("baseline", self.baseline, self.baseline_records))
        bars = {
            arm: tqdm(total=len(requests), desc=f"{arm} (batch {self.batch})", disable=hide)
            for arm, _, _ in arms
        }
        for start in range(0, len(requests), self.batch):
            wave = requests[start : start + self.batch]
            # alternate which arm goes first, wave by wave, as batch 1 does prompt by prompt
            order = arms if self.waves % 2 == 0 else arms[::-1]
            for arm, decoder, kept in order:
                bar = bars[arm]
                kept.extend(
                    decoder.generate_batch(
                        wave, self.batch, on_finish=lambda index, record, bar=bar: bar.update(1)
                    )
                )
                self.step_logs[arm].extend(getattr(decoder, "step_log", []))
            self.waves += 1
        for bar in bars.values():
            bar.close()
        outputs = []
        for request, (context, _), record in zip(
            requests, (i.args for i in instances), self.records[first:], strict=True
        ):
            outputs.append(self._answer(context, record, request.stop))
        for instance, output in zip(instances, outputs, strict=True):
            self.cache_hook.add_partial("generate_until", instance.args, output)
        return outputs

    @staticmethod
    def _answer(context: str, record: RequestRecord, stop: list[str]) -> str:
        # Every Decoder cuts at stop strings with cut_at_stop; cutting the returned text again
        # with the same function guards the scorer against a decoder that does not.
        return continues_thinking(context) + cut_at_stop(record.text, stop)[0]
