#include "coordinator/ollama/ollama_models.h"

#include <chrono>
#include <ctime>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "openssl/evp.h"

namespace shardlm {
namespace ollama {
namespace {

// sha256 over the files, in order, as hex; "" when one cannot be read or `stop` is set.
std::string Sha256Files(const std::vector<std::string>& files, const std::atomic<bool>& stop) {
  if (files.empty()) return "";
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  std::vector<char> buf(1 << 20);
  bool ok = true;
  for (const std::string& f : files) {
    std::ifstream in(f, std::ios::binary);
    ok &= static_cast<bool>(in);
    while (in && !stop.load()) {
      in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
      EVP_DigestUpdate(ctx, buf.data(), static_cast<size_t>(in.gcount()));
    }
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx, md, &n);
  EVP_MD_CTX_free(ctx);
  std::string hex;
  for (unsigned int i = 0; i < n; ++i) absl::StrAppendFormat(&hex, "%02x", md[i]);
  return ok && !stop.load() ? hex : "";
}

std::string Rfc3339(int64_t unix_s) {
  const std::time_t t = static_cast<std::time_t>(unix_s);
  std::tm tm{};
  gmtime_r(&t, &tm);
  return absl::StrFormat("%04d-%02d-%02dT%02d:%02d:%02dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                         tm.tm_hour, tm.tm_min, tm.tm_sec);
}

// Ollama's show without verbose: general.name and the chat template dropped, long arrays emptied.
Json ModelInfo(const Json& metadata, bool verbose) {
  Json out = Json::object();
  for (auto it = metadata.begin(); it != metadata.end(); ++it) {
    if (it.key() == "general.name" || it.key() == "tokenizer.chat_template") continue;
    out[it.key()] = !verbose && it.value().is_array() && it.value().size() > 5 ? Json::array() : it.value();
  }
  return out;
}

}  // namespace

ModelEndpoints::ModelEndpoints(ModelDescription description, std::vector<std::string> names)
    : d_(std::move(description)), names_(std::move(names)) {
  model_info_ = ModelInfo(d_.card.metadata, /*verbose=*/false);
  hasher_ = std::thread([this] { Hash(); });
}

ModelEndpoints::~ModelEndpoints() {
  stop_ = true;
  hasher_.join();
}

void ModelEndpoints::Hash() {
  std::string digest = Sha256Files(d_.card.files, stop_);
  std::lock_guard<std::mutex> lock(mu_);
  digest_ = std::move(digest);
  done_ = true;
  hashed_.notify_all();
}

std::string ModelEndpoints::Digest() {
  std::unique_lock<std::mutex> lock(mu_);
  if (!waited_) {  // the first listing waits for it; later ones answer at once
    hashed_.wait_for(lock, std::chrono::seconds(10), [this] { return done_; });
    waited_ = true;
  }
  return digest_;
}

Json ModelEndpoints::Details() const {
  return Json{{"parent_model", ""},
              {"format", d_.card.format},
              {"family", d_.card.family},
              {"families", Json::array({d_.card.family})},
              {"parameter_size", ParameterSizeText(d_.card.parameter_count)},
              {"quantization_level", d_.card.quantization},
              {"context_length", d_.context_length}};
}

Json ModelEndpoints::Entry() {
  const std::string name =
      names_.front().find(':') == std::string::npos ? names_.front() + ":latest" : names_.front();
  return Json{
      {"name", name},          {"model", name},      {"modified_at", Rfc3339(d_.card.modified_unix_s)},
      {"size", d_.card.bytes}, {"digest", Digest()}, {"details", Details()}};
}

Json ModelEndpoints::Tags() { return Json{{"models", Json::array({Entry()})}}; }

Json ModelEndpoints::Ps() {
  Json m = Entry();
  m.erase("modified_at");
  m["expires_at"] = "9999-12-31T23:59:59Z";  // never: the model stays loaded while shardlm runs
  m["size_vram"] = d_.on_gpu ? d_.card.bytes : 0;
  m["context_length"] = d_.context_length;
  return Json{{"models", Json::array({m})}};
}

std::string ModelEndpoints::Parameters() const {
  std::vector<std::string> lines;
  for (const std::string& s : d_.stop_texts)
    lines.push_back(absl::StrFormat("%-30s %s", "stop", Json(s).dump()));
  for (const auto& [key, value] :
       std::vector<std::pair<const char*, std::string>>{{"temperature", "0.8"},
                                                        {"top_k", "40"},
                                                        {"top_p", "0.9"},
                                                        {"repeat_last_n", "64"},
                                                        {"num_ctx", absl::StrCat(d_.context_length)}}) {
    lines.push_back(absl::StrFormat("%-30s %s", key, value));
  }
  return absl::StrJoin(lines, "\n");
}

std::string ModelEndpoints::Modelfile() const {
  std::string out = absl::StrCat("# Modelfile of the model shardlm serves (given at start with --model)\n",
                                 "FROM ", d_.path, "\n");
  if (!d_.template_source.empty()) absl::StrAppend(&out, "TEMPLATE \"\"\"", d_.template_source, "\"\"\"\n");
  for (const std::string& s : d_.stop_texts) absl::StrAppend(&out, "PARAMETER stop ", Json(s).dump(), "\n");
  if (!d_.card.license.empty()) absl::StrAppend(&out, "LICENSE \"\"\"", d_.card.license, "\"\"\"\n");
  return out;
}

bool ModelEndpoints::Show(const Json& body, Json* out, OllamaError* error) {
  std::string name;
  for (const char* key : {"model", "name"}) {
    if (name.empty() && body.contains(key) && body[key].is_string()) name = body[key].get<std::string>();
  }
  if (name.empty()) {
    *error = {400, "model is required"};
    return false;
  }
  if (ServedName(names_, name).empty()) {
    *error = {404, absl::StrCat("model '", name, "' not found")};
    return false;
  }
  const bool verbose =
      body.contains("verbose") && body["verbose"].is_boolean() && body["verbose"].get<bool>();
  Json capabilities = Json::array({"completion"});
  if (d_.tools) capabilities.push_back("tools");
  if (d_.insert) capabilities.push_back("insert");
  *out = Json{{"modelfile", Modelfile()},
              {"parameters", Parameters()},
              {"template", d_.template_source},
              {"details", Details()},
              {"model_info", verbose ? ModelInfo(d_.card.metadata, true) : model_info_},
              {"capabilities", capabilities},
              {"modified_at", Rfc3339(d_.card.modified_unix_s)}};
  if (!d_.card.license.empty()) (*out)["license"] = d_.card.license;
  return true;
}

}  // namespace ollama
}  // namespace shardlm
