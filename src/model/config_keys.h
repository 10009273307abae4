// Typed reads of a config.json object with errors naming the file and the key; shared by
// ModelConfig::from_hf and the architectures' own keys.
#pragma once
#include <nlohmann/json.hpp>

#include <string>

#include "base/error.h"

namespace lw::model {

class ConfigKeys {
 public:
  using json = nlohmann::json;
  ConfigKeys(const json& j, std::string where) : j_(j), where_(std::move(where)) {}
  bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }
  template <class T>
  T get(const char* key) const {
    LW_CHECK(has(key), where_ << ": missing required key '" << key << "'");
    return as<T>(key);
  }
  template <class T>
  T get(const char* key, T fallback) const {
    return has(key) ? as<T>(key) : fallback;
  }
  const json& raw(const char* key) const { return j_[key]; }
  // "model config '<path>'": the start of every message about this file.
  const std::string& where() const { return where_; }

 private:
  template <class T>
  T as(const char* key) const {
    try {
      return j_[key].get<T>();
    } catch (const json::exception& e) {
      LW_FAIL(where_ << ": key '" << key << "' has the wrong type (" << j_[key].type_name() << "): " << e.what());
    }
  }
  const json& j_;
  std::string where_;
};

}  // namespace lw::model
