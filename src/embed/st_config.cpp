#include "embed/st_config.h"

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_util.h"

namespace eg::embed {

using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

json parse_json(const std::string& text, const std::string& origin) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw Error(origin + ": invalid JSON (" + std::string(e.what()) + ")");
  }
}

json read_json(const fs::path& p) {
  if (!fs::exists(p)) throw Error("missing " + p.string());
  json j = parse_json(read_file(p.string()), p.string());
  if (!j.is_object()) throw Error(p.string() + ": expected a JSON object");
  return j;
}

int positive_int(const json& j, const char* key, const std::string& origin) {
  if (!j.contains(key) || !j[key].is_number_integer() || j[key].get<int64_t>() <= 0 ||
      j[key].get<int64_t>() > (1 << 30))
    throw Error(origin + ": '" + key + "' must be a positive integer");
  return static_cast<int>(j[key].get<int64_t>());
}

void read_pooling(const fs::path& dir, StConfig& c) {
  const fs::path p = dir / "config.json";
  const json j = read_json(p);
  const std::string o = p.string();
  std::string mode;
  if (j.contains("pooling_mode")) {  // sentence-transformers >= 5
    if (!j["pooling_mode"].is_string()) throw Error(o + ": 'pooling_mode' must be a string");
    mode = j["pooling_mode"];
  } else {  // older layout: one boolean per mode
    static const char* kModes[][2] = {{"pooling_mode_cls_token", "cls"}, {"pooling_mode_mean_tokens", "mean"},
                                      {"pooling_mode_max_tokens", "max"}, {"pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len"},
                                      {"pooling_mode_weightedmean_tokens", "weightedmean"}, {"pooling_mode_lasttoken", "lasttoken"}};
    for (const auto& m : kModes)
      if (j.contains(m[0]) && j[m[0]].is_boolean() && j[m[0]].get<bool>()) mode += (mode.empty() ? "" : "+") + std::string(m[1]);
  }
  if (mode != "mean") throw Error(o + ": pooling mode '" + mode + "' is not supported (only mean)");
  if (j.contains("include_prompt")) {
    if (!j["include_prompt"].is_boolean()) throw Error(o + ": 'include_prompt' must be true or false");
    c.include_prompt = j["include_prompt"];
  }
  if (!c.include_prompt) throw Error(o + ": include_prompt false is not supported");
}

void read_dense(const fs::path& dir, StConfig& c) {
  const fs::path p = dir / "config.json";
  const json j = read_json(p);
  const std::string o = p.string();
  DenseSpec d;
  d.dir = dir.string();
  d.in = positive_int(j, "in_features", o);
  d.out = positive_int(j, "out_features", o);
  if (j.contains("bias")) {
    if (!j["bias"].is_boolean()) throw Error(o + ": 'bias' must be true or false");
    d.bias = j["bias"];
  }
  std::string act = "torch.nn.modules.linear.Identity";
  if (j.contains("activation_function")) {
    if (!j["activation_function"].is_string()) throw Error(o + ": 'activation_function' must be a string");
    act = j["activation_function"];
  }
  if (act != "torch.nn.modules.linear.Identity" && act != "torch.nn.Identity")
    throw Error(o + ": activation '" + act + "' is not supported (only torch.nn.Identity)");
  if (!c.dense.empty() && c.dense.back().out != d.in)
    throw Error(o + ": in_features " + std::to_string(d.in) + " does not match the previous Dense's out_features " +
                std::to_string(c.dense.back().out));
  c.dense.push_back(d);
}

}  // namespace

void parse_st_prompts(const std::string& json_text, const std::string& origin, StConfig& out) {
  const json j = parse_json(json_text, origin);
  if (!j.is_object()) throw Error(origin + ": expected a JSON object");
  out.prompts.clear();
  out.default_prompt_name.clear();
  if (j.contains("prompts") && !j["prompts"].is_null()) {
    if (!j["prompts"].is_object()) throw Error(origin + ": 'prompts' must be an object of strings");
    for (const auto& [name, v] : j["prompts"].items()) {
      if (!v.is_string()) throw Error(origin + ": prompt '" + name + "' must be a string");
      out.prompts.push_back({name, v.get<std::string>()});
    }
  }
  std::sort(out.prompts.begin(), out.prompts.end(), [](const Prompt& a, const Prompt& b) { return a.name < b.name; });
  if (j.contains("default_prompt_name") && !j["default_prompt_name"].is_null()) {
    if (!j["default_prompt_name"].is_string()) throw Error(origin + ": 'default_prompt_name' must be a string or null");
    out.default_prompt_name = j["default_prompt_name"];
    const bool known = std::any_of(out.prompts.begin(), out.prompts.end(),
                                   [&](const Prompt& p) { return p.name == out.default_prompt_name; });
    if (!known) throw Error(origin + ": default_prompt_name '" + out.default_prompt_name + "' is not one of the prompts");
  }
}

std::vector<std::pair<std::string, std::string>> parse_st_modules(const std::string& json_text,
                                                                  const std::string& origin) {
  const json j = parse_json(json_text, origin);
  if (!j.is_array()) throw Error(origin + ": expected a list of modules");
  std::vector<std::pair<int64_t, std::pair<std::string, std::string>>> mods;
  for (const json& m : j) {
    if (!m.is_object() || !m.contains("type") || !m["type"].is_string() || !m.contains("path") || !m["path"].is_string())
      throw Error(origin + ": every module needs a string 'type' and 'path'");
    const std::string type = m["type"];
    const std::string path = m["path"];
    if (path.find("..") != std::string::npos || (!path.empty() && path[0] == '/'))
      throw Error(origin + ": module path '" + path + "' leaves the model folder");
    const int64_t idx = m.contains("idx") && m["idx"].is_number_integer() ? m["idx"].get<int64_t>()
                                                                            : static_cast<int64_t>(mods.size());
    const size_t dot = type.rfind('.');
    mods.push_back({idx, {dot == std::string::npos ? type : type.substr(dot + 1), path}});
  }
  std::stable_sort(mods.begin(), mods.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::pair<std::string, std::string>> out;
  for (auto& m : mods) out.push_back(std::move(m.second));
  return out;
}

StConfig load_st_config(const std::string& dir_s) {
  const fs::path dir(dir_s);
  const fs::path mp = dir / "modules.json";
  if (!fs::exists(mp)) throw Error("missing modules.json in " + dir_s + " (not a sentence-transformers folder)");
  const auto mods = parse_st_modules(read_file(mp.string()), mp.string());
  StConfig c;
  // Transformer, Pooling, Dense*, [Normalize]: the order sentence-transformers runs them in.
  size_t i = 0;
  auto fail = [&](const std::string& why) { throw Error(mp.string() + ": " + why); };
  if (mods.empty() || mods[0].first != "Transformer" || !mods[0].second.empty())
    fail("the first module must be the Transformer at path \"\"");
  if (mods.size() < 2 || mods[1].first != "Pooling") fail("the second module must be Pooling");
  read_pooling(dir / mods[1].second, c);
  for (i = 2; i < mods.size() && mods[i].first == "Dense"; ++i) read_dense(dir / mods[i].second, c);
  if (i < mods.size() && mods[i].first == "Normalize") {
    c.normalize = true;
    ++i;
  }
  if (i < mods.size()) fail("module '" + mods[i].first + "' (" + mods[i].second + ") is not supported here");

  const fs::path pp = dir / "config_sentence_transformers.json";
  if (fs::exists(pp)) parse_st_prompts(read_file(pp.string()), pp.string(), c);
  const fs::path sb = dir / "sentence_bert_config.json";
  if (fs::exists(sb)) {
    const json j = read_json(sb);
    if (j.contains("max_seq_length") && !j["max_seq_length"].is_null()) c.max_seq_length = positive_int(j, "max_seq_length", sb.string());
  }
  return c;
}

}  // namespace eg::embed
