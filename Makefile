# Entry points the README promises. Everything runs on a fresh Debian 12 machine:
# `setup` installs what is missing (apt-get as root, npm fixtures), then builds.
BUILD ?= build
CUDA_BUILD ?= build-cuda
JOBS ?= $(shell nproc)
DEMO_MODEL ?= third_party/models/SmolLM2-135M-Instruct.Q4_1.gguf

.PHONY: setup configure build demo test test-cuda bench fuzz format clean

setup:
	bash scripts/setup.sh

configure: setup
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# The main job: SmolLM2-135M-Instruct (fetched by setup) served with tensor parallelism
# (serve --tp 2), and real answers streamed through it over gRPC and the OpenAI API.
demo: build
	BUILD=$(BUILD) DEMO_MODEL=$(DEMO_MODEL) bash scripts/demo.sh

# Each ctest run's skipped tests are listed with their reasons (tests/testing/skipped_tests.py); under
# CI=true a skip this machine does not explain (no GPU, no AVX-512) fails the run.
test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --output-junit $(abspath $(BUILD))/ctest-junit.xml
	python3 tests/testing/skipped_tests.py $(BUILD)/ctest-junit.xml
	$(MAKE) test-cuda

# The CUDA variant (docs/gpu.md), on this CPU machine: configured against the venv's PyTorch
# 2.11.0 (CUDA 13) and NVIDIA's CUDA 13 wheels, built (nvcc compiles every .cu file), checked for
# library clashes, packed for a GPU machine and preflighted, then the CPU suite run against it,
# less the checks of host-only code it shares with the CPU build (tests/CMakeLists.txt: host_code;
# not even built there) and the two the CPU build alone runs (cpu_variant).
test-cuda: setup
	bash scripts/cuda/configure.sh $(CUDA_BUILD) >/dev/null
	cmake --build $(CUDA_BUILD) -j $(JOBS)
	bash scripts/cuda/check_build.sh $(CUDA_BUILD)
	bash scripts/gpu/pack.sh $(CUDA_BUILD)
	SHARDLM_PYTHON=.venv/bin/python bash scripts/gpu/preflight.sh
	cd $(CUDA_BUILD) && ctest --output-on-failure -j $(JOBS) -LE 'host_code|cpu_variant' \
	  --output-junit $(abspath $(CUDA_BUILD))/ctest-junit.xml
	python3 tests/testing/skipped_tests.py $(CUDA_BUILD)/ctest-junit.xml

bench: build
	$(BUILD)/shardlm_kernels_bench
	$(BUILD)/shardlm_bench --model-dir $(BUILD)/bench-model --tp 1,2,4

fuzz: setup
	bash scripts/fuzz.sh

format:
	git ls-files '*.cc' '*.h' | xargs clang-format -i

clean:
	rm -rf $(BUILD) $(CUDA_BUILD)
