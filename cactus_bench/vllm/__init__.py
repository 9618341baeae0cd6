"""The vLLM backend (`backend=vllm`): the acceptance-rule bridge and the vLLM decoder.

acceptance.py  replaces vLLM's `rejection_sample` with a cactus-bench rule in every vLLM process
               (the `vllm.general_plugins` entry point `cactus_bench.vllm.acceptance:register`)
decoder.py     builds `vllm.LLM` engines and decodes one request at a time into RequestRecords

Nothing here imports vllm at module import time: the package imports on any machine.
"""
