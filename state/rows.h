// The state store's rows: what the tables hold, with no OpenAI shapes in them
// (JSON columns stay text; coordinator/stateful/ makes the clients' objects).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace shardlm {

// Columns every table has.
struct RowKey {
  std::string id;
  std::string owner;       // a hash of the API key that made it; "" without keys
  int64_t seq = 0;         // set by the store: one counter over every table (list and history order)
  int64_t created_at = 0;  // Unix seconds
};

struct AssistantRow : RowKey {
  std::string model;
  std::optional<std::string> name, description, instructions;
  std::string tools = "[]";                    // JSON array
  std::optional<std::string> response_format;  // JSON; empty: "auto"
  std::optional<double> temperature, top_p;
  std::string metadata = "{}";  // JSON object of strings
};

struct ThreadRow : RowKey {
  std::string metadata = "{}";
  int64_t version = 0;  // bumped by every change to the thread's history
};

struct MessageRow : RowKey {
  std::string thread_id;
  std::string role;            // "user" or "assistant"
  std::string content = "[]";  // JSON array of content parts
  std::string status = "completed";
  std::optional<std::string> assistant_id, run_id;
  std::string metadata = "{}";
  std::optional<int64_t> completed_at, incomplete_at;
  std::optional<std::string> incomplete_reason;
};

// A list request (cursor pagination): at most `limit` rows after or before the rows with those ids.
struct ListQuery {
  int limit = 20;
  bool ascending = false;
  std::string after, before;  // ids; empty: none
};

template <typename Row>
struct ListPage {
  std::vector<Row> rows;
  bool has_more = false;
};

}  // namespace shardlm
