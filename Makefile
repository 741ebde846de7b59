# Self-hosted RL stack. `make help` lists the targets.
SHELL := /bin/bash
VENV ?= .venv
PYTHON := $(VENV)/bin/python
PYTEST_ARGS ?=
BENCH_ARGS ?= --sessions 1 32 64 --seconds 10
# The base image, resolved by each recipe that uses it (official if pullable, else built offline;
# quick once it exists).
BASE = BASE_IMAGE="$$(scripts/ensure-base-image.sh)"

GPU_COMPOSE = docker compose -f compose.yaml -f compose.gpu.yaml

.PHONY: help preflight up up-gpu urls down logs build build-gpu wheelhouse base-images venv lint format test test-unit test-container test-swarm bench lock gpu-smoke gpu-preflight gpu-host-wheels swarm-up swarm-down

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-15s %s\n", $$1, $$2}'

preflight: ## check (as root: provision) what make up needs: Docker engine, Compose v2, Python venv
	@PURPOSE=$(or $(PURPOSE),up) scripts/preflight.sh

up: preflight wheelhouse ## build what is missing, start the stack, run the default training job (the stack stays up)
	$(BASE) scripts/up.sh

up-gpu: preflight ## the same on an NVIDIA GPU host: pre-flight, then vLLM + Qwen3-1.7B (two GPUs: NCCL sync; one: the walkthrough, no vLLM)
	$(BASE) scripts/up-gpu.sh

gpu-preflight: ## check this host for the GPU stack (driver, GPUs, compute capability, memory) and say which topology
	@$(BASE) bash -c 'source scripts/gpu-preflight.sh && gpu_preflight'

eval: ## held-out evaluation on the running stack (EVAL_MODEL: a model folder in the trainer, default the CPU job's final/)
	$(BASE) docker compose run --rm --no-deps trainer "python3 -m trainer eval --config \"\$$GRPO_CONFIG\" --model $${EVAL_MODEL:-/outputs/grpo-cpu/final} --out /outputs/eval/eval.json"

urls: ## where the services listen
	@echo "reasoning-gym-env: http://127.0.0.1:$${REASONING_GYM_ENV_PORT:-8001}  (WebSocket ws://127.0.0.1:$${REASONING_GYM_ENV_PORT:-8001}/ws)"
	@echo "inference:         http://127.0.0.1:$${INFERENCE_PORT:-8000}/v1  (OpenAI API)"
	@echo "opencode-env:      http://127.0.0.1:$${OPENCODE_ENV_PORT:-8002}  (POST /rollouts; proxy /v1/chat/completions)"
	@echo "dashboard:         http://127.0.0.1:$${DASHBOARD_PORT:-7860}/  (trackio)"

swarm-up: preflight build ## deploy the stack on this Docker Swarm (ENV_REPLICAS, OPENCODE_REPLICAS; README: Scaling out)
	scripts/swarm-up.sh

swarm-down: ## remove the Swarm stack (node-local volumes are kept)
	docker stack rm $${SWARM_STACK:-rlstack}

down: ## stop the stack (volumes are kept; `docker compose down -v` removes them)
	docker compose down

logs: ## follow the stack's logs
	docker compose logs --follow

build: wheelhouse ## build the images
	$(BASE) docker compose build

build-gpu: ## build the GPU images (no GPU needed to build)
	$(BASE) $(GPU_COMPOSE) build inference trainer

gpu-smoke: ## unattended check of the GPU path on a GPU host: a verdict per stage (services, NCCL, GRPO/AsyncGRPO steps, weight sync)
	$(BASE) scripts/gpu-smoke.sh

# The GPU host check's wheel folder (docs/gpu.md, GPU host without Docker): GPU_HOST_PYTHON is an
# interpreter of the host's Python version; HOST_PACKAGES a `pip freeze` of the host (optional);
# GPU_HOST_WHEELS_LZMA=1 re-compresses the wheels with LZMA.
GPU_HOST_PYTHON ?= python3.12
gpu-host-wheels: venv ## wheels for the GPU host check on a host without Docker (into gpu-host-wheels/; needs PyPI)
	$(PYTHON) scripts/gpu_host_wheels.py --target-python $(GPU_HOST_PYTHON) $(if $(HOST_PACKAGES),--host-packages $(HOST_PACKAGES)) $(if $(GPU_HOST_WHEELS_LZMA),--lzma)

wheelhouse: ## copy the CPU torch wheel from the host's pip find-links folder into the build context
	scripts/fill-wheelhouse.sh

base-images: ## build the offline base image with debootstrap (hosts without a registry)
	docker/build-base-image.sh local/py311-base:bookworm

venv: ## create the Python environment the tests and benchmarks run in
	VENV=$(VENV) scripts/make-test-venv.sh

test: PURPOSE = test
# The Swarm test runs in its own pytest session after the rest: this engine joins a swarm only once
# the other modules' containers (session fixtures included) are gone. Both run even if one fails.
test: preflight venv lint build ## lint, then the test suite: in-process and container tests, then the two-node Docker Swarm test
	@status=0; export TESTCONTAINERS_RYUK_DISABLED=true $(BASE); \
	$(PYTHON) -m pytest -m "not swarm" $(PYTEST_ARGS) || status=1; \
	$(PYTHON) -m pytest -m swarm $(PYTEST_ARGS) || status=1; \
	exit $$status

test-swarm: PURPOSE = test
test-swarm: preflight venv build ## only the Docker Swarm test (this engine makes a two-node swarm and leaves it)
	TESTCONTAINERS_RYUK_DISABLED=true $(BASE) $(PYTHON) -m pytest -m swarm $(PYTEST_ARGS)

lint: venv ## ruff (pinned in requirements/test.in): lint and format check of the whole tree
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: venv ## apply ruff's fixes and formatting
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

test-unit: venv ## only the fast in-process tests
	$(PYTHON) -m pytest -m unit $(PYTEST_ARGS)

test-container: PURPOSE = test
test-container: preflight venv build ## only the container tests
	TESTCONTAINERS_RYUK_DISABLED=true $(BASE) $(PYTHON) -m pytest -m "container and not swarm" $(PYTEST_ARGS)

bench: venv build ## benchmarks (figures in docs/benchmarks.md)
	$(PYTHON) bench/env_server_load.py $(BENCH_ARGS)
	$(PYTHON) bench/inference_cpu.py
	$(PYTHON) bench/proxy_overhead.py
	$(PYTHON) bench/opencode_rollouts.py
	$(PYTHON) bench/opencode_learning_cpu.py

lock: ## re-resolve docker/requirements/*.lock from the *.in files inside the base image
	$(BASE) scripts/lock-requirements.sh $(LOCK)
