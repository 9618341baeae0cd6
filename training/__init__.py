"""Drafter training: how the committed SmolLM2-135M drafter (cactus_bench/models/drafter.py) was
made. A pipeline beside the runtime package, not in it: it imports cactus_bench, and nothing in
cactus_bench imports it (tests/test_architecture.py).

`prompts.py` (the prompt mix: GSM8K train and templated instructions, `templates.py`),
`teacher.py` (phase 1: the verifier's sampled answers and top logits, in resumable shards),
`distill.py` (phase 2's losses and batches), `train.py` (the distillation, the export of the
best held-out weights, and phase 3's logit-scale calibration). `shards.py` (shard files and the
train / held-out split) and `loop.py` (the CPU-budgeted, resumable training loop) also served the
feature-drafter pilot, removed after its no-go (docs/feature-drafter.md). `scripts/train_drafter.py`
(`make drafter`) runs the three phases.
"""
