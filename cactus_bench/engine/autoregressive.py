"""The verifier alone, with the speculative decoder's sampling, stopping and bookkeeping: the
baseline of every speedup (one step per token: drafted 0, accepted 0, emitted 1)."""

from __future__ import annotations

import torch

from cactus_bench.engine.batch_steps import autoregressive_step
from cactus_bench.engine.decoder import BaseDecoder, DecodeState
from cactus_bench.engine.draws import LAST
from cactus_bench.engine.runtime import (
    check_token_map,
    graphs_apply,
    make_runner,
    resolve_compile,
)
from cactus_bench.engine.sampling import SamplingParams, process_logits


class AutoregressiveDecoder(BaseDecoder):
    """`generate(prompt_ids, max_new_tokens, stop=None, seed=None, sampling=None)`.

    token_map (optional, 1-D LongTensor of vocabulary ids) restricts sampling to those ids, so
    the baseline samples exactly the law a SpeculativeDecoder with the same token_map targets.
    fast / compile / cuda_graphs: as for `SpeculativeDecoder` (the same verifier forward path,
    so speedups compare like with like).
    """

    def __init__(
        self,
        verifier: torch.nn.Module,
        tokenizer,
        sampling: SamplingParams | None = None,
        eos_token_ids: list[int] | None = None,
        device: str | torch.device = "cpu",
        token_map: torch.Tensor | None = None,
        fast: str = "auto",
        compile: str = "auto",
        cuda_graphs: str = "auto",
    ):
        super().__init__(tokenizer, sampling, eos_token_ids, device, eos_model=verifier)
        self.cuda_graphs = graphs_apply(verifier, fast, cuda_graphs, self.device)
        compiled = not self.cuda_graphs and resolve_compile(verifier, fast, compile)
        self.verifier = make_runner(verifier, self.device, fast, compiled, sizes=(1,))
        self.token_map, self.token_list = check_token_map(token_map, self.device, verifier)

    def _start(self, state: DecodeState, prompt_ids: list[int]) -> None:
        state.caches["verifier"] = self.verifier.prefilled_cache(
            prompt_ids[:-1], rollback=False, capacity=state.capacity
        )
        state.pending["verifier"] = torch.tensor([prompt_ids[-1:]], device=self.device)

    def runners(self) -> list:
        return [self.verifier]

    def _named_runners(self) -> dict:
        return {"verifier": self.verifier}

    batch_step = autoregressive_step

    def graph_sizes(self) -> dict[str, list[tuple[int, bool]]]:
        return {"verifier": [(1, False)]}

    def _step(self, state: DecodeState, remaining: int) -> list[int]:
        clock, record, params = state.clock, state.record, state.params
        start = clock()
        logits = self.verifier.forward(state.pending["verifier"], state.caches["verifier"], False)
        logits = logits[:, -1]  # [1, V]
        if self.token_map is not None:
            logits = logits.index_select(-1, self.token_map)  # [1, K]
        probs = process_logits(logits, params)
        forwarded = clock()
        token = state.draw(probs, LAST, 0, params.is_greedy)  # [1, 1]
        if self.token_map is not None:
            token = self.token_map[token]
        token_id = int(token.item())  # the one sync per token: EOS and stop checks need it
        record.sampler_time_s += clock() - forwarded
        record.verify_time_s += forwarded - start
        record.drafted_per_step.append(0)
        record.accepted_per_step.append(0)
        record.emitted_per_step.append(1)
        state.pending["verifier"] = token
        state.seq_len += 1
        return [token_id]
