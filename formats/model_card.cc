#include "formats/model_card.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"
#include "formats/checkpoint.h"
#include "formats/gguf.h"

namespace shardlm {
namespace {

using Json = nlohmann::ordered_json;

// llama.cpp's llama_ftype values, as GGUF's general.file_type stores them.
std::string FileTypeName(int64_t t) {
  static const std::map<int64_t, const char*> kNames = {
      {0, "F32"},     {1, "F16"},     {2, "Q4_0"},    {3, "Q4_1"},    {7, "Q8_0"},    {8, "Q5_0"},
      {9, "Q5_1"},    {10, "Q2_K"},   {11, "Q3_K_S"}, {12, "Q3_K_M"}, {13, "Q3_K_L"}, {14, "Q4_K_S"},
      {15, "Q4_K_M"}, {16, "Q5_K_S"}, {17, "Q5_K_M"}, {18, "Q6_K"},   {32, "BF16"}};
  const auto it = kNames.find(t);
  return it != kNames.end() ? it->second : absl::StrCat("type ", t);
}

Json GgufJson(const GgufValue& v) {
  if (v.type == GgufValueType::kBool) return v.i != 0;
  if (v.is_integer()) return v.i;
  if (v.is_float()) return v.f;
  if (v.type == GgufValueType::kString) return v.s;
  if (v.type != GgufValueType::kArray) return nullptr;
  if (v.array_type == GgufValueType::kString) return v.strings;
  if (v.array_type == GgufValueType::kF32 || v.array_type == GgufValueType::kF64) return v.floats;
  if (v.array_type == GgufValueType::kBool) {
    Json out = Json::array();
    for (int64_t b : v.ints) out.push_back(b != 0);
    return out;
  }
  return v.ints;
}

void AddFile(const std::string& path, ModelCard& card) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return;
  card.files.push_back(path);
  card.bytes += static_cast<int64_t>(size);
  const auto t = std::filesystem::last_write_time(path, ec);
  if (ec) return;
  const auto sys = std::chrono::time_point_cast<std::chrono::seconds>(
      t - std::filesystem::file_time_type::clock::now() + std::chrono::system_clock::now());
  card.modified_unix_s = std::max<int64_t>(card.modified_unix_s, sys.time_since_epoch().count());
}

absl::Status ReadGguf(const std::string& path, ModelCard& card) {
  SHARDLM_ASSIGN_OR_RETURN(auto file, GgufFile::Open(path));
  const GgufHeader& h = file->header();
  card.format = "gguf";
  for (const auto& [key, value] : h.metadata) card.metadata[key] = GgufJson(value);
  if (const GgufValue* a = h.Find("general.architecture"); a != nullptr) card.family = a->s;
  if (const GgufValue* t = h.Find("general.file_type"); t != nullptr && t->is_integer())
    card.quantization = FileTypeName(t->i);
  if (const GgufValue* l = h.Find("general.license"); l != nullptr) card.license = l->s;
  for (const GgufTensorInfo& t : h.tensors) {
    int64_t n = 1;
    for (int64_t d : t.dims) n *= d;
    card.parameter_count += n;
  }
  card.metadata["general.parameter_count"] = card.parameter_count;
  AddFile(path, card);
  return absl::OkStatus();
}

// config.json's fields under the names GGUF gives them.
void ConfigMetadata(const Json& config, ModelCard& card) {
  const std::string arch = card.family;
  Json& m = card.metadata;
  m["general.architecture"] = arch;
  m["general.parameter_count"] = card.parameter_count;
  const std::pair<const char*, const char*> keys[] = {{"max_position_embeddings", "context_length"},
                                                      {"hidden_size", "embedding_length"},
                                                      {"num_hidden_layers", "block_count"},
                                                      {"intermediate_size", "feed_forward_length"},
                                                      {"num_attention_heads", "attention.head_count"},
                                                      {"num_key_value_heads", "attention.head_count_kv"},
                                                      {"rms_norm_eps", "attention.layer_norm_rms_epsilon"},
                                                      {"rope_theta", "rope.freq_base"},
                                                      {"vocab_size", "vocab_size"}};
  for (const auto& [from, to] : keys) {
    if (config.contains(from) && config[from].is_number()) m[absl::StrCat(arch, ".", to)] = config[from];
  }
}

absl::Status ReadDirectory(const std::string& dir, ModelCard& card) {
  card.format = "safetensors";
  SHARDLM_ASSIGN_OR_RETURN(std::string text, ReadFileToString(dir + "/config.json"));
  Json config = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object()) return absl::InvalidArgumentError(dir + "/config.json is not a JSON object");
  const auto field = [&](const char* key) {
    return config.contains(key) && config[key].is_string() ? config[key].get<std::string>() : std::string();
  };
  card.family = field("model_type").empty() ? "unknown" : field("model_type");
  // transformers 5 writes "dtype", earlier ones "torch_dtype"; float32 when neither is there.
  const std::string dtype = !field("dtype").empty()         ? field("dtype")
                            : !field("torch_dtype").empty() ? field("torch_dtype")
                                                           : "float32";
  card.quantization = dtype == "bfloat16"  ? "BF16"
                      : dtype == "float16" ? "F16"
                                           : absl::AsciiStrToUpper(dtype);
  SHARDLM_ASSIGN_OR_RETURN(auto ckpt, Checkpoint::Open(dir));
  for (const std::string& name : ckpt->TensorNames()) {
    SHARDLM_ASSIGN_OR_RETURN(const TensorView* t, ckpt->Get(name));
    card.parameter_count += t->numel();
  }
  ConfigMetadata(config, card);
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && (name.ends_with(".safetensors") || name.ends_with(".json"))) {
      files.push_back(e.path().string());
    }
  }
  std::sort(files.begin(), files.end());
  for (const std::string& f : files) AddFile(f, card);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelCard> ReadModelCard(const std::string& model) {
  ModelCard card;
  SHARDLM_RETURN_IF_ERROR(IsGgufFile(model) ? ReadGguf(model, card) : ReadDirectory(model, card));
  return card;
}

std::string ParameterSizeText(int64_t n) {
  if (n >= 1000000000) return absl::StrFormat("%.1fB", n / 1e9);
  if (n >= 1000000) return absl::StrFormat("%.0fM", n / 1e6);
  if (n >= 1000) return absl::StrFormat("%.0fK", n / 1e3);
  return absl::StrCat(n);
}

}  // namespace shardlm
