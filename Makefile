# Entry points the README promises. Everything runs on a fresh Debian 12 machine:
# `setup` installs what is missing (apt-get as root, npm fixtures), then builds.
BUILD ?= build
JOBS ?= $(shell nproc)
DEMO_MODEL ?= third_party/models/SmolLM2-135M-Instruct.Q4_1.gguf

.PHONY: setup configure build demo test bench fuzz format clean

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

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

bench: build
	$(BUILD)/shardlm_kernels_bench
	$(BUILD)/shardlm_bench --model-dir $(BUILD)/bench-model --tp 1,2,4

fuzz: setup
	bash scripts/fuzz.sh

format:
	git ls-files '*.cc' '*.h' | xargs clang-format -i

clean:
	rm -rf $(BUILD)
