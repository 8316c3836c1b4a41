# Entry points the README promises. Everything runs on a fresh Debian 12 machine:
# `setup` installs what is missing (apt-get as root, npm fixtures), then builds.
BUILD ?= build
JOBS ?= $(shell nproc)
DEMO_MODEL ?= $(BUILD)/demo-model

.PHONY: setup configure build demo test bench fuzz format clean

setup:
	bash scripts/setup.sh

configure: setup
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# The main job: a tiny Llama-3-tokenizer model, then a streaming generation.
demo: build
	$(BUILD)/shardlm make-tiny-model $(DEMO_MODEL) --arch llama --tokenizer llama3 --seed 1 \
	  --hidden-size 256 --num-layers 4 --num-heads 8 --num-kv-heads 4 --intermediate-size 512
	$(BUILD)/shardlm generate --model $(DEMO_MODEL) --prompt "The capital of France is" \
	  --max-new-tokens 32 --temperature 0.8 --top-p 0.95 --seed 7

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

bench: build
	$(BUILD)/shardlm_bench --model-dir $(BUILD)/bench-model

fuzz: setup
	bash scripts/fuzz.sh

format:
	git ls-files '*.cc' '*.h' | xargs clang-format -i

clean:
	rm -rf $(BUILD)
