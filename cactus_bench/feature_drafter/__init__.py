"""A feature-level drafter for the embedded SmolLM2-135M verifier (EAGLE-1 style pilot).

The head reads, at position i, the verifier's last hidden state f_i (the feature its LM head
reads) together with the embedding of the next token s_{i+1}, and predicts the law of s_{i+2}
(Li et al., 2024, EAGLE). Modules:
- collect.py: the verifier answers training prompts; its features and processed laws are cached;
- head.py: the head (one Llama decoder layer of the verifier's width, a subset LM head);
- train.py: distillation of the cached laws into the head, resumable, in CPU minutes;
- acceptance.py: held-out position-1 acceptance sum_x min(p, q) with a bootstrap interval.
"""
