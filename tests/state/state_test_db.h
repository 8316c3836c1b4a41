// A state database in a fresh temporary directory, for the state tests.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "state/sql_db.h"
#include "state/store.h"

namespace shardlm {

class TempStateDir {
 public:
  TempStateDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "shardlm-state-XXXXXX").string();
    dir_ = mkdtemp(tmpl.data());
  }
  ~TempStateDir() { std::filesystem::remove_all(dir_); }
  std::string path() const { return dir_ + "/sub/state.db"; }
  std::string url() const { return "sqlite://" + path(); }

 private:
  std::string dir_;
};

inline std::unique_ptr<StateStore> OpenStore(const TempStateDir& dir, int64_t now_s = 1000) {
  auto url = ParseStateDbUrl(dir.url(), "--state-db");
  EXPECT_TRUE(url.ok()) << url.status();
  auto db = OpenSqlDb(*url);
  EXPECT_TRUE(db.ok()) << db.status();
  auto store = StateStore::Open(std::move(*db), now_s);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

}  // namespace shardlm
