# cactus-bench: every entry point a user needs. `make help` lists them.
PYTHON ?= .venv/bin/python
PIP    ?= .venv/bin/pip
TORCH_VERSION ?= 2.13.0

.DEFAULT_GOAL := help
.PHONY: help setup test test-fast lint bench tables plots drafter eval-drafter run demo

help:  ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  %-12s %s\n", $$1, $$2}'

setup:  ## .venv with CPU torch first (never a CUDA build here), the package + dev extras, SmolLM2 cache
	test -x $(PYTHON) || python3 -m venv .venv
	$(PIP) install --quiet torch==$(TORCH_VERSION)
	$(PIP) install --quiet -e '.[dev]'
	$(PYTHON) scripts/prepare_smollm2.py

test:  ## run the whole test suite (fast and slow)
	$(PYTHON) -m pytest -q

test-fast:  ## run only the fast unit tests
	$(PYTHON) -m pytest -q -m "not slow"

lint:  ## ruff check and format check
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .

bench:  ## benchmarks: samplers, engine vs transformers, fast forward (results/bench/*.csv)
	$(PYTHON) scripts/bench_samplers.py
	$(PYTHON) scripts/bench_engine.py
	$(PYTHON) scripts/bench_forward.py

tables:  ## Table 1 layout and speedup table from results/*.csv (Markdown + LaTeX)
	$(PYTHON) -m cactus_bench.report tables --csv 'results/*.csv' --out results

plots:  ## figures from results/*.csv (PNG + PDF under results/figures/)
	$(PYTHON) -m cactus_bench.report plots --csv 'results/*.csv' --out results

drafter:  ## distil the embedded pair's drafter (CPU, <= 3 h of one thread, resumable; weights land in the package)
	$(PYTHON) scripts/train_drafter.py

eval-drafter:  ## drafter acceptance, step costs and the speedup cost model, fp32 and bf16 (~10 min)
	$(PYTHON) scripts/eval_drafter.py --out results/bench/drafter_smollm2.json
	$(PYTHON) scripts/eval_drafter.py --dtype bfloat16 --out results/bench/drafter_smollm2_bf16.json

run:  ## the embedded default: SmolLM2-135M pair, demo task, cactus (a few minutes on a CPU)
	$(PYTHON) run.py

# Offline data for the demo's GSM8K slice: DATA_DIR=..., else $$CACTUS_BENCH_DATA, else ../shared/data.
DATA_DIR ?= $(or $(CACTUS_BENCH_DATA),$(wildcard ../shared/data))

demo:  ## CPU demo sweep on the embedded pair (+ a GSM8K slice given DATA_DIR), tables and figures
	$(PYTHON) run.py experiment=demo
ifneq ($(strip $(DATA_DIR)),)
	$(PYTHON) run.py experiment=demo_gsm8k data_dir=$(abspath $(DATA_DIR))
else
	@echo "demo: GSM8K slice skipped: no data folder (make demo DATA_DIR=/path/like/shared/data)"
endif
	$(PYTHON) -m cactus_bench.report all --csv 'results/demo/*.csv' --out results/demo
