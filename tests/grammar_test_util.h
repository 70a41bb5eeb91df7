// Shared by grammar_test.cpp and tool_calls_test.cpp: an independent validator for the supported
// JSON Schema subset, and a seeded random walk that drives a Matcher through its mask.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"

namespace gtu {

using json = nlohmann::json;

/// Written from the JSON Schema spec, independently of the grammar compiler. Returns "" when
/// `v` is valid, else the reason.
inline std::string validate(const json& v, const json& s, const std::string& path = "#") {
  if (s.is_boolean()) return s.get<bool>() ? "" : path + ": false schema";
  if (s.contains("nullable") && s["nullable"] == true && v.is_null()) return "";
  if (s.contains("const") && v != s["const"]) return path + ": not the const";
  if (s.contains("enum")) {
    bool found = false;
    for (const auto& e : s["enum"]) found = found || e == v;
    if (!found) return path + ": not in enum";
  }
  if (s.contains("anyOf")) {
    bool ok = false;
    for (const auto& b : s["anyOf"]) ok = ok || validate(v, b, path).empty();
    if (!ok) return path + ": no anyOf branch matches";
  }
  if (s.contains("type")) {
    std::vector<std::string> types;
    if (s["type"].is_string()) types.push_back(s["type"]);
    else for (const auto& t : s["type"]) types.push_back(t);
    bool ok = false;
    for (const auto& t : types) {
      if (t == "object") ok = ok || v.is_object();
      if (t == "array") ok = ok || v.is_array();
      if (t == "string") ok = ok || v.is_string();
      if (t == "number") ok = ok || v.is_number();
      if (t == "integer") ok = ok || v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
      if (t == "boolean") ok = ok || v.is_boolean();
      if (t == "null") ok = ok || v.is_null();
    }
    if (!ok) return path + ": wrong type for " + v.dump();
  }
  if (v.is_object()) {
    const json props = s.value("properties", json::object());
    if (s.contains("required"))
      for (const auto& r : s["required"])
        if (!v.contains(r.get<std::string>())) return path + ": missing required " + r.dump();
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (props.contains(it.key())) {
        auto e = validate(it.value(), props[it.key()], path + "/" + it.key());
        if (!e.empty()) return e;
      } else if (s.contains("additionalProperties")) {
        const json& a = s["additionalProperties"];
        if (a == false) return path + ": extra property " + it.key();
        auto e = validate(it.value(), a, path + "/" + it.key());
        if (!e.empty()) return e;
      }
    }
  }
  if (v.is_string() && (s.contains("minLength") || s.contains("maxLength"))) {
    // Length in Unicode code points (JSON Schema): count UTF-8 lead bytes of the parsed value,
    // so an escape in the JSON text (\n, \u00e9) is one character.
    size_t n = 0;
    for (unsigned char c : v.get<std::string>()) n += (c & 0xC0) != 0x80;
    if (s.contains("minLength") && n < s["minLength"].get<size_t>()) return path + ": shorter than minLength";
    if (s.contains("maxLength") && n > s["maxLength"].get<size_t>()) return path + ": longer than maxLength";
  }
  if (v.is_array()) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return path + ": too few items";
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return path + ": too many items";
    if (s.contains("items"))
      for (size_t k = 0; k < v.size(); ++k) {
        auto e = validate(v[k], s["items"], path + "/" + std::to_string(k));
        if (!e.empty()) return e;
      }
  }
  return "";
}

inline bool bit(const std::vector<uint64_t>& bits, int32_t id) { return (bits[static_cast<size_t>(id / 64)] >> (id % 64)) & 1; }

struct Walk {
  std::vector<int32_t> ids;
  bool ended = false;
};

/// Picks random allowed tokens (from the mask) until an end token is taken or max_steps. Once
/// complete, takes an end token with probability 1/2; prefers tokens that close something
/// (containing '"', ']', '}' or special) with a probability growing with the length, so walks
/// terminate. `check(m, bits)` runs on every state before the choice.
template <class Check>
Walk random_walk(eg::grammar::Matcher m, const eg::grammar::TokenVocab& v, uint64_t seed, int max_steps, Check check) {
  std::mt19937_64 rng(seed);
  Walk w;
  std::vector<int32_t> allowed, closing;
  for (int step = 0; step < max_steps; ++step) {
    const std::vector<uint64_t> bits = m.allowed();
    check(m, bits);
    allowed.clear();
    closing.clear();
    int32_t end = -1;
    for (int32_t id = 0; id < v.size(); ++id) {
      if (!bit(bits, id)) continue;
      if (v.is_end(id)) {
        end = id;
        continue;
      }
      allowed.push_back(id);
      const auto b = v.bytes(id);
      if (v.is_special(id) || b.find_first_of("\"]}") != std::string_view::npos) closing.push_back(id);
    }
    if (end >= 0 && (allowed.empty() || rng() % 2 == 0)) {
      m.accept(end);
      w.ids.push_back(end);
      w.ended = true;
      return w;
    }
    if (allowed.empty()) {
      ADD_FAILURE() << "dead end: nothing allowed and not complete";
      return w;
    }
    const double p_close = std::min(0.95, 0.2 + step / 150.0);
    const bool pick_close = !closing.empty() && std::uniform_real_distribution<double>(0, 1)(rng) < p_close;
    const auto& pool = pick_close ? closing : allowed;
    const int32_t id = pool[rng() % pool.size()];
    m.accept(id);
    w.ids.push_back(id);
  }
  return w;
}

/// The text of a walk's non-end tokens (token bytes; specials as their text).
inline std::string walk_text(const eg::Tokenizer& tok, const eg::grammar::TokenVocab& v, const Walk& w) {
  std::vector<int32_t> ids;
  for (int32_t id : w.ids)
    if (!v.is_end(id)) ids.push_back(id);
  return tok.decode(ids);
}

}  // namespace gtu
