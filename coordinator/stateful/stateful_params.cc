#include "coordinator/stateful/stateful_params.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status.h"
#include "common/utf8.h"
#include "coordinator/openai_wire/params.h"
#include "coordinator/openai_wire/response_format.h"

namespace shardlm {
namespace stateful {
namespace {

using openai::Shown;

// Characters (code points) of UTF-8 text.
size_t Chars(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// application/x-www-form-urlencoded: '+' is a space, %XX a byte.
absl::StatusOr<std::string> Decode(absl::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out.push_back(' ');
    } else if (s[i] == '%') {
      const int hi = i + 2 < s.size() ? HexValue(s[i + 1]) : -1;
      const int lo = i + 2 < s.size() ? HexValue(s[i + 2]) : -1;
      if (hi < 0 || lo < 0) return absl::InvalidArgumentError("the query string has a bad %-escape");
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

absl::Status CheckFunctionTool(const Json& tool, const std::string& where) {
  if (!tool.contains("function") || !tool["function"].is_object()) {
    return BadParam(where, absl::StrCat(where, ".function is required (an object) for a function tool"));
  }
  return CheckFunction(tool["function"], where + ".function", where);
}

}  // namespace

absl::Status BadParam(const std::string& param, const std::string& message) {
  return WithField(absl::InvalidArgumentError(message), param);
}

openai::ApiError ErrorOf(const absl::Status& st) {
  openai::ApiError e = openai::FromStatus(st);
  if (absl::IsNotFound(st)) {
    e.type = "invalid_request_error";
    e.param = ErrorField(st);
  }
  if (absl::IsAlreadyExists(st))
    e = openai::ApiError{409, std::string(st.message()), "invalid_request_error", "", ""};
  return e;
}

absl::StatusOr<std::map<std::string, std::string>> ParseQuery(const std::string& query) {
  std::map<std::string, std::string> out;
  for (absl::string_view pair : absl::StrSplit(query, '&', absl::SkipEmpty())) {
    const size_t eq = pair.find('=');
    SHARDLM_ASSIGN_OR_RETURN(std::string key, Decode(pair.substr(0, eq)));
    SHARDLM_ASSIGN_OR_RETURN(
        std::string value, Decode(eq == absl::string_view::npos ? absl::string_view() : pair.substr(eq + 1)));
    if (!out.emplace(key, value).second) return BadParam(key, absl::StrCat(key, " is given twice"));
  }
  return out;
}

absl::StatusOr<ListQuery> ListQueryOf(const std::map<std::string, std::string>& query,
                                      const std::set<std::string>& also) {
  ListQuery q;
  for (const auto& [key, value] : query) {
    if (key == "limit") {
      int limit = 0;
      if (!absl::SimpleAtoi(value, &limit) || limit < 1 || limit > kMaxListLimit) {
        return BadParam("limit", absl::StrCat("limit must be an integer in [1, ", kMaxListLimit, "], got '",
                                              value.substr(0, 32), "'"));
      }
      q.limit = limit;
    } else if (key == "order") {
      if (value != "asc" && value != "desc") {
        return BadParam("order",
                        absl::StrCat("order must be 'asc' or 'desc', got '", value.substr(0, 32), "'"));
      }
      q.ascending = value == "asc";
    } else if (key == "after") {
      q.after = value;
    } else if (key == "before") {
      q.before = value;
    } else if (!also.count(key)) {
      return BadParam(key, absl::StrCat("Unrecognized query parameter: ", key.substr(0, 64)));
    }
  }
  return q;
}

absl::Status OnlyKnown(const Json& body, const std::set<std::string>& known) {
  for (auto it = body.begin(); it != body.end(); ++it) {
    if (!known.count(it.key())) {
      return BadParam(it.key(), absl::StrCat("Unrecognized request argument supplied: ", it.key()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> MetadataOf(const Json& body) {
  if (!body.contains("metadata") || body["metadata"].is_null()) return std::string("{}");
  const Json& m = body["metadata"];
  if (!m.is_object()) return BadParam("metadata", "metadata must be an object of strings");
  if (m.size() > kMaxMetadataPairs) {
    return BadParam("metadata",
                    absl::StrCat("metadata has ", m.size(), " keys; at most ", kMaxMetadataPairs));
  }
  for (auto it = m.begin(); it != m.end(); ++it) {
    if (Chars(it.key()) > kMaxMetadataKeyChars) {
      return BadParam("metadata", absl::StrCat("metadata keys are at most ", kMaxMetadataKeyChars,
                                               " characters; '", it.key().substr(0, 16), "...' is longer"));
    }
    if (!it.value().is_string()) {
      return BadParam("metadata",
                      absl::StrCat("metadata['", it.key(), "'] must be a string, got ", Shown(it.value())));
    }
    if (Chars(it.value().get<std::string>()) > kMaxMetadataValueChars) {
      return BadParam("metadata", absl::StrCat("metadata['", it.key(), "'] is longer than ",
                                               kMaxMetadataValueChars, " characters"));
    }
  }
  return m.dump();
}

absl::StatusOr<std::optional<std::string>> OptionalText(const Json& body, const std::string& key,
                                                        size_t max_chars) {
  if (!body.contains(key) || body[key].is_null()) return std::optional<std::string>();
  if (!body[key].is_string())
    return BadParam(key, absl::StrCat(key, " must be a string, got ", Shown(body[key])));
  std::string text = body[key].get<std::string>();
  if (!IsValidUtf8(text)) return BadParam(key, absl::StrCat(key, " is not valid UTF-8"));
  if (Chars(text) > max_chars) {
    return BadParam(key, absl::StrCat(key, " is ", Chars(text), " characters; at most ", max_chars));
  }
  return std::optional<std::string>(std::move(text));
}

absl::StatusOr<std::optional<double>> OptionalNumber(const Json& body, const std::string& key, double lo,
                                                     double hi) {
  if (!body.contains(key) || body[key].is_null()) return std::optional<double>();
  const Json& v = body[key];
  if (!v.is_number() || v.get<double>() < lo || v.get<double>() > hi) {
    return BadParam(key, absl::StrCat(key, " must be a number in [", lo, ", ", hi, "], got ", Shown(v)));
  }
  return std::optional<double>(v.get<double>());
}

absl::StatusOr<const Json*> ToolList(const Json& body) {
  if (!body.contains("tools") || body["tools"].is_null()) return nullptr;
  const Json& tools = body["tools"];
  if (!tools.is_array()) return BadParam("tools", "tools must be a list");
  if (tools.size() > static_cast<size_t>(kMaxTools)) {
    return BadParam("tools", absl::StrCat("tools has ", tools.size(), " entries; at most ", kMaxTools));
  }
  return &tools;
}

absl::Status CheckFunction(const Json& f, const std::string& where, const std::string& param) {
  if (!f.contains("name") || !f["name"].is_string() || f["name"].get<std::string>().empty() ||
      f["name"].get<std::string>().size() > 64) {
    return BadParam(param.empty() ? where + ".name" : param,
                    absl::StrCat(where, ".name is required (a string of 1 to 64 characters)"));
  }
  if (f.contains("parameters") && !f["parameters"].is_null() && !f["parameters"].is_object()) {
    return BadParam(param.empty() ? where + ".parameters" : param,
                    absl::StrCat(where, ".parameters must be a JSON Schema object"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ToolsOf(const Json& body) {
  SHARDLM_ASSIGN_OR_RETURN(const Json* list, ToolList(body));
  if (list == nullptr) return std::string("[]");
  const Json& tools = *list;
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string where = absl::StrCat("tools[", i, "]");
    const Json& t = tools[i];
    const std::string type =
        t.is_object() && t.contains("type") && t["type"].is_string() ? t["type"].get<std::string>() : "";
    if (type == "file_search" || type == "code_interpreter") {
      return BadParam(
          where + ".type",
          absl::StrCat(where, ".type '", type, "' is not supported by this server: only function tools"));
    }
    if (type != "function") {
      return BadParam(where + ".type", absl::StrCat(where, ".type must be 'function'"));
    }
    SHARDLM_RETURN_IF_ERROR(CheckFunctionTool(t, where));
  }
  return tools.dump();
}

absl::StatusOr<std::optional<std::string>> ResponseFormatOf(const Json& body) {
  if (!body.contains("response_format") || body["response_format"].is_null())
    return std::optional<std::string>();
  const Json& f = body["response_format"];
  if (f.is_string() && f.get<std::string>() == "auto") return std::optional<std::string>();
  ConstraintSpec unused;
  std::string error;
  if (!openai::ConstraintFromFormat(f, &unused, &error)) {
    return BadParam("response_format",
                    f.is_object() ? error : "response_format must be \"auto\" or an object");
  }
  return std::optional<std::string>(f.dump());
}

absl::StatusOr<std::string> ContentOf(const Json& content, const std::string& param) {
  Json parts = Json::array();
  auto text_part = [](const std::string& text) {
    return Json{{"type", "text"}, {"text", Json{{"value", text}, {"annotations", Json::array()}}}};
  };
  if (content.is_string()) {
    parts.push_back(text_part(content.get<std::string>()));
  } else if (content.is_array() && !content.empty()) {
    for (size_t i = 0; i < content.size(); ++i) {
      const Json& p = content[i];
      const std::string type =
          p.is_object() && p.contains("type") && p["type"].is_string() ? p["type"].get<std::string>() : "";
      if (type == "image_file" || type == "image_url") {
        return BadParam(param, absl::StrCat(param, "[", i, "].type '", type,
                                            "' is not supported by this server: text only"));
      }
      if (type != "text" || !p.contains("text") || !p["text"].is_string()) {
        return BadParam(param,
                        absl::StrCat(param, "[", i, "] must be {\"type\": \"text\", \"text\": \"...\"}"));
      }
      parts.push_back(text_part(p["text"].get<std::string>()));
    }
  } else {
    return BadParam(param, absl::StrCat(param, " must be a string or a non-empty list of text parts"));
  }
  for (const Json& p : parts) {
    if (!IsValidUtf8(p["text"]["value"].get_ref<const std::string&>())) {
      return BadParam(param, absl::StrCat(param, " is not valid UTF-8"));
    }
  }
  return parts.dump();
}

absl::Status RefusedUnlessEmpty(const Json& body, const std::string& key, const std::string& why) {
  if (!body.contains(key)) return absl::OkStatus();
  const Json& v = body[key];
  if (v.is_null() || (v.is_structured() && v.empty())) return absl::OkStatus();
  return BadParam(key, absl::StrCat(key, " is not supported by this server: ", why));
}

}  // namespace stateful
}  // namespace shardlm
