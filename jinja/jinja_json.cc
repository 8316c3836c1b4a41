// A template value as JSON: ToJsonText writes it as Python's json.dumps
// does (Jinja2's tojson filter: indent, separators, sort_keys, ensure_ascii,
// floats as repr, NaN and Infinity), ToJson as an nlohmann value for the
// chat code (jinja_value.h).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "jinja/jinja_value.h"
#include "jinja/py_string.h"

namespace shardlm::jinja {
namespace {

// json.dumps' string encoder (py_encode_basestring / _ascii).
void AppendJsonString(const std::string& s, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  char buf[16];
  for (char32_t c : py::Decode(s)) {
    switch (c) {
      case '"':
        out->append("\\\"");
        continue;
      case '\\':
        out->append("\\\\");
        continue;
      case '\n':
        out->append("\\n");
        continue;
      case '\r':
        out->append("\\r");
        continue;
      case '\t':
        out->append("\\t");
        continue;
      case '\b':
        out->append("\\b");
        continue;
      case '\f':
        out->append("\\f");
        continue;
      default:
        break;
    }
    if (c < 0x20 || (ensure_ascii && c > 0x7E)) {
      if (c > 0xFFFF) {
        const char32_t v = c - 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 | (v >> 10)),
                      static_cast<unsigned>(0xDC00 | (v & 0x3FF)));
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      }
      out->append(buf);
    } else {
      py::AppendUtf8(c, out);
    }
  }
  out->push_back('"');
}

std::string JsonFloat(double f) {
  if (std::isnan(f)) return "NaN";
  if (std::isinf(f)) return f > 0 ? "Infinity" : "-Infinity";
  return py::FloatRepr(f);
}

class JsonWriter {
 public:
  explicit JsonWriter(const JsonOptions& options) : options_(options) {
    if (options.separators) {
      item_sep_ = options.separators->first;
      key_sep_ = options.separators->second;
    } else {
      item_sep_ = options.indent ? "," : ", ";
      key_sep_ = ": ";
    }
  }

  absl::Status Write(const Value& v, int level, std::string* out) {
    if (level > 512) return absl::InvalidArgumentError("tojson: value nested too deeply");
    switch (v.kind()) {
      case Value::Kind::kNone:
        out->append("null");
        return absl::OkStatus();
      case Value::Kind::kBool:
        out->append(v.bool_value() ? "true" : "false");
        return absl::OkStatus();
      case Value::Kind::kInt:
        out->append(std::to_string(v.int_value()));
        return absl::OkStatus();
      case Value::Kind::kFloat:
        out->append(JsonFloat(v.number_value()));
        return absl::OkStatus();
      case Value::Kind::kString:
        AppendJsonString(v.string_value(), options_.ensure_ascii, out);
        return absl::OkStatus();
      case Value::Kind::kList:
      case Value::Kind::kTuple: {
        if (v.items().empty()) {
          out->append("[]");
          return absl::OkStatus();
        }
        out->push_back('[');
        Open(level + 1, out);
        for (size_t i = 0; i < v.items().size(); ++i) {
          if (i > 0) Separate(level + 1, out);
          SHARDLM_RETURN_IF_ERROR(Write(v.items()[i], level + 1, out));
        }
        Close(level, out);
        out->push_back(']');
        return absl::OkStatus();
      }
      case Value::Kind::kDict:
        return WriteDict(v.dict(), level, out);
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("Object of type ", TypeName(v), " is not JSON serializable"));
    }
  }

 private:
  absl::Status WriteDict(const Dict& dict, int level, std::string* out) {
    if (dict.size() == 0) {
      out->append("{}");
      return absl::OkStatus();
    }
    std::vector<const std::pair<Value, Value>*> entries;
    for (const auto& e : dict.entries()) entries.push_back(&e);
    if (options_.sort_keys) {
      absl::Status error;
      std::stable_sort(entries.begin(), entries.end(), [&](const auto* a, const auto* b) {
        absl::StatusOr<int> c = Compare(a->first, b->first);
        if (!c.ok()) {
          error = c.status();
          return false;
        }
        return *c < 0;
      });
      SHARDLM_RETURN_IF_ERROR(error);
    }
    out->push_back('{');
    Open(level + 1, out);
    bool first = true;
    for (const auto* e : entries) {
      if (!first) Separate(level + 1, out);
      first = false;
      const Value& key = e->first;
      switch (key.kind()) {
        case Value::Kind::kString:
          AppendJsonString(key.string_value(), options_.ensure_ascii, out);
          break;
        case Value::Kind::kBool:
          out->append(key.bool_value() ? "\"true\"" : "\"false\"");
          break;
        case Value::Kind::kNone:
          out->append("\"null\"");
          break;
        case Value::Kind::kInt:
          out->append("\"" + std::to_string(key.int_value()) + "\"");
          break;
        case Value::Kind::kFloat:
          out->append("\"" + JsonFloat(key.number_value()) + "\"");
          break;
        default:
          return absl::InvalidArgumentError(
              absl::StrCat("keys must be str, int, float, bool or None, not ", TypeName(key)));
      }
      out->append(key_sep_);
      SHARDLM_RETURN_IF_ERROR(Write(e->second, level + 1, out));
    }
    Close(level, out);
    out->push_back('}');
    return absl::OkStatus();
  }

  void Indent(int level, std::string* out) const {
    out->push_back('\n');
    for (int i = 0; i < level; ++i) out->append(*options_.indent);
  }
  void Open(int level, std::string* out) const {
    if (options_.indent) Indent(level, out);
  }
  void Separate(int level, std::string* out) const {
    out->append(item_sep_);
    if (options_.indent) Indent(level, out);
  }
  void Close(int level, std::string* out) const {
    if (options_.indent) Indent(level, out);
  }

  const JsonOptions& options_;
  std::string item_sep_;
  std::string key_sep_;
};

}  // namespace

absl::StatusOr<std::string> ToJsonText(const Value& v, const JsonOptions& options) {
  std::string out;
  JsonWriter writer(options);
  SHARDLM_RETURN_IF_ERROR(writer.Write(v, 0, &out));
  return out;
}

absl::StatusOr<nlohmann::ordered_json> ToJson(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return nlohmann::ordered_json();
    case Value::Kind::kBool:
      return nlohmann::ordered_json(v.bool_value());
    case Value::Kind::kInt:
      return nlohmann::ordered_json(v.int_value());
    case Value::Kind::kFloat:
      return nlohmann::ordered_json(v.number_value());
    case Value::Kind::kString:
      return nlohmann::ordered_json(v.string_value());
    case Value::Kind::kList:
    case Value::Kind::kTuple: {
      nlohmann::ordered_json out = nlohmann::ordered_json::array();
      for (const Value& item : v.items()) {
        SHARDLM_ASSIGN_OR_RETURN(nlohmann::ordered_json j, ToJson(item));
        out.push_back(std::move(j));
      }
      return out;
    }
    case Value::Kind::kDict: {
      nlohmann::ordered_json out = nlohmann::ordered_json::object();
      for (const auto& [k, item] : v.dict().entries()) {
        SHARDLM_ASSIGN_OR_RETURN(nlohmann::ordered_json j, ToJson(item));
        out[ToStr(k)] = std::move(j);
      }
      return out;
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat("a ", TypeName(v), " has no JSON form"));
  }
}

}  // namespace shardlm::jinja
