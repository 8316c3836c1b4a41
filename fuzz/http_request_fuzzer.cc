// libFuzzer target: the OpenAI front end from raw bytes. The input is what a
// client sends on the HTTP port: Beast's request parser reads it with the
// limits HttpServer uses (header and body), then a completions or chat body
// goes through ParseJson and ParseRequest with the Llama-3 tokenizer and chat
// template (the npm fixture's directory, in SHARDLM_FUZZ_MODEL_DIR).
//
// Failures: a crash or sanitizer report; an accepted request with no prompt,
// an empty prompt, or one past the context; a refusal whose status is not a
// 4xx or whose message is empty; more than 100 ms per KB (100 ms at least).
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>

#include "chat/chat_template.h"
#include "coordinator/http/http_server.h"
#include "coordinator/openai/openai_api.h"
#include "tokenizer/tokenizer.h"

namespace {

namespace http = boost::beast::http;
using shardlm::openai::ApiError;
using shardlm::openai::Json;

struct Model {
  std::unique_ptr<shardlm::Tokenizer> tokenizer;
  std::unique_ptr<shardlm::ChatTemplate> chat_template;
  shardlm::openai::ModelContext context;
};

const Model& Get() {
  static Model* model = [] {
    const char* dir = std::getenv("SHARDLM_FUZZ_MODEL_DIR");
    const std::string d = dir != nullptr ? dir : ".";
    auto m = new Model();
    auto tok = shardlm::Tokenizer::Load(d + "/tokenizer.json");
    auto tmpl = shardlm::ChatTemplate::Load(d);
    if (!tok.ok() || !tmpl.ok()) {
      std::fprintf(stderr, "http_request_fuzzer: cannot load %s (set SHARDLM_FUZZ_MODEL_DIR)\n", d.c_str());
      std::abort();
    }
    m->tokenizer = std::move(*tok);
    m->chat_template = std::move(*tmpl);
    m->context.names = {"tiny"};
    m->context.tokenizer = m->tokenizer.get();
    m->context.chat_template = m->chat_template.get();
    m->context.max_context = 8192;
    m->context.vocab_size = 128256;
    m->context.max_queued_sequences = 1024;
    return m;
  }();
  return *model;
}

void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "http_request_fuzzer: %s: %s\n", what, detail.c_str());
  std::abort();
}

// The body of a completions request, as the server would parse it.
void CheckBody(shardlm::openai::Endpoint endpoint, const std::string& body) {
  const Model& m = Get();
  shardlm::openai::OpenAiRequest request;
  ApiError error;
  bool parsed = false;
  try {
    parsed = shardlm::openai::ParseRequest(endpoint, shardlm::openai::ParseJson(body), m.context, &request,
                                           &error);
  } catch (const Json::exception&) {
    return;  // the server's 400 "not valid JSON"
  } catch (const std::invalid_argument&) {
    return;  // nested too deep: 400
  }
  if (!parsed) {
    if (error.http_status < 400 || error.http_status >= 500 || error.message.empty()) {
      Fail("a refusal that is not a named 4xx", std::to_string(error.http_status) + " " + error.message);
    }
    (void)error.Body().dump(-1, ' ', false, Json::error_handler_t::replace);
    return;
  }
  if (request.prompts.empty()) Fail("accepted", "no prompt");
  for (const auto& p : request.prompts) {
    const int64_t n = static_cast<int64_t>(p.request.prompt.size());
    if (n == 0) Fail("accepted", "an empty prompt");
    if (n > m.context.max_context) Fail("accepted", "a prompt past the context");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Get();  // loaded once, outside the time budget
  const auto start = std::chrono::steady_clock::now();
  const shardlm::HttpServerOptions limits;
  http::request_parser<http::string_body> parser;
  parser.header_limit(static_cast<uint32_t>(limits.max_header_bytes));
  parser.body_limit(1 << 20);
  boost::beast::error_code ec;
  size_t used = 0;
  while (used < size && !parser.is_done()) {
    const size_t n = parser.put(boost::asio::buffer(data + used, size - used), ec);
    if (ec == http::error::need_more) break;
    if (ec) return 0;  // the server's 400 / 413 / 431
    if (n == 0) break;
    used += n;
  }
  if (!parser.is_done()) return 0;  // waits for more bytes, until --http-request-timeout-s
  const auto& req = parser.get();
  const std::string target(req.target());
  const std::string path = target.substr(0, target.find('?'));
  if (req.method() == http::verb::post && path == "/v1/completions") {
    CheckBody(shardlm::openai::Endpoint::kCompletions, req.body());
  } else if (req.method() == http::verb::post && path == "/v1/chat/completions") {
    CheckBody(shardlm::openai::Endpoint::kChat, req.body());
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const double budget_ms = std::max(100.0, 100.0 * static_cast<double>(size) / 1024.0);
  if (ms > budget_ms) Fail("too slow", std::to_string(size) + " bytes took " + std::to_string(ms) + " ms");
  return 0;
}
