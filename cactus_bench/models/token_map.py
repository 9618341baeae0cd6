"""The tokenizer rule of a pair: which vocabulary ids the drafter's and the verifier's laws share.

Speculative sampling compares p and q id by id, so before any decoding the two tokenizers must
agree on every id both models can emit (ids below both output sizes); otherwise ``load_pair``
stops with one line naming both models. When the output sizes differ (DeepSeek-R1-Distill-Qwen
1.5B has 151,936 logits and 7B 152,064 over one tokenizer), both distributions are restricted to
the shared ids: ``token_map`` holds the ids below both sizes that both tokenizers define, and the
engine renormalises p and q over exactly those ids.
"""

from __future__ import annotations

import torch


def _id_to_token(tokenizer) -> dict[int, str]:
    return {index: token for token, index in tokenizer.get_vocab().items()}


def shared_token_ids(
    drafter_tokenizer,
    verifier_tokenizer,
    drafter_vocab: int,
    verifier_vocab: int,
    drafter_id: str = "drafter",
    verifier_id: str = "verifier",
) -> torch.Tensor | None:
    """The token_map rule: None when the output sizes match, else the shared ids [K] int64.

    Raises ValueError (one line naming both models) when the tokenizers map an id below both
    output sizes to different tokens, or only one of them defines it.
    """
    emittable = min(drafter_vocab, verifier_vocab)
    if drafter_tokenizer is verifier_tokenizer:
        defined = set(range(emittable)) & set(_id_to_token(verifier_tokenizer))
    else:
        draft_tokens = _id_to_token(drafter_tokenizer)
        verify_tokens = _id_to_token(verifier_tokenizer)
        for index in range(emittable):
            if draft_tokens.get(index) != verify_tokens.get(index):
                raise ValueError(
                    f"tokenizers of drafter {drafter_id} and verifier {verifier_id} disagree on "
                    f"token id {index} ({draft_tokens.get(index)!r} vs "
                    f"{verify_tokens.get(index)!r}); pick a drafter from the verifier's family"
                )
        defined = set(range(emittable)) & set(verify_tokens)
    if drafter_vocab == verifier_vocab:
        return None
    return torch.tensor(sorted(defined), dtype=torch.long)


def output_size(model: torch.nn.Module) -> int:
    """Logits per position: the head's rows, or ``config.vocab_size`` for restricted heads."""
    weight = getattr(model.get_output_embeddings(), "weight", None)
    return int(weight.shape[0]) if weight is not None else int(model.config.vocab_size)
