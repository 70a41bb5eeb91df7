#include "store/manifest.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "store/sha256.h"

namespace eg::store {

using nlohmann::json;

bool is_valid_name(std::string_view s) {
  if (s.empty() || s.size() > 128 || s[0] == '.' || s[0] == '-' || s == "sha256") return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
      return false;
  return true;
}

bool is_valid_file_name(std::string_view s) { return s != "sha256" ? is_valid_name(s) : true; }

std::string Manifest::id() const {
  if (format == "gguf" && files.size() == 1) return files[0].sha256;
  Sha256 h;
  for (const auto& f : files) h.update(f.sha256 + "  " + f.path + "\n");
  return h.hex();
}

uint64_t Manifest::total_bytes() const {
  uint64_t n = 0;
  for (const auto& f : files) n += f.size;
  return n;
}

std::string manifest_to_json(const Manifest& m) {
  json files = json::array();
  for (const auto& f : m.files) files.push_back(json{{"path", f.path}, {"sha256", f.sha256}, {"size", f.size}});
  json j{{"schema", Manifest::kSchema}, {"name", m.name}, {"version", m.version}, {"format", m.format},
         {"architecture", m.architecture}, {"quantization", m.quantization},
         {"tokenizer_digest", m.tokenizer_digest}, {"created", m.created}, {"provenance", m.provenance},
         {"files", files}};
  return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

namespace {

const json& field(const json& j, const char* key, const std::string& origin) {
  auto it = j.find(key);
  if (it == j.end()) throw Error(origin + ": missing '" + key + "'");
  return *it;
}

std::string str_field(const json& j, const char* key, const std::string& origin, size_t max_len = 4096) {
  const json& v = field(j, key, origin);
  if (!v.is_string()) throw Error(origin + ": '" + key + "' must be a string");
  std::string s = v.get<std::string>();
  if (s.size() > max_len) throw Error(origin + ": '" + key + "' is too long");
  return s;
}

json parse_json(std::string_view text, const std::string& origin) {
  json j = json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded()) throw Error(origin + ": not valid JSON");
  if (!j.is_object()) throw Error(origin + ": not a JSON object");
  return j;
}

}  // namespace

Manifest parse_manifest(std::string_view text, const std::string& origin) {
  const json j = parse_json(text, origin);
  const json& schema = field(j, "schema", origin);
  if (!schema.is_number_integer() || schema.get<int64_t>() != Manifest::kSchema)
    throw Error(origin + ": unsupported schema (expected " + std::to_string(Manifest::kSchema) + ")");
  Manifest m;
  m.name = str_field(j, "name", origin);
  if (!is_valid_name(m.name)) throw Error(origin + ": invalid model name '" + m.name + "'");
  m.version = str_field(j, "version", origin);
  if (!is_valid_name(m.version)) throw Error(origin + ": invalid version '" + m.version + "'");
  m.format = str_field(j, "format", origin);
  if (m.format != "hf" && m.format != "gguf") throw Error(origin + ": 'format' must be \"hf\" or \"gguf\"");
  m.architecture = str_field(j, "architecture", origin, 256);
  m.quantization = str_field(j, "quantization", origin, 64);
  m.tokenizer_digest = str_field(j, "tokenizer_digest", origin, 64);
  if (!m.tokenizer_digest.empty() && !is_sha256_hex(m.tokenizer_digest))
    throw Error(origin + ": 'tokenizer_digest' must be 64 lowercase hex digits");
  m.created = str_field(j, "created", origin, 64);
  m.provenance = str_field(j, "provenance", origin);
  const json& files = field(j, "files", origin);
  if (!files.is_array() || files.empty()) throw Error(origin + ": 'files' must be a non-empty array");
  if (files.size() > 10000) throw Error(origin + ": too many files");
  for (const json& f : files) {
    if (!f.is_object()) throw Error(origin + ": each file must be an object");
    FileEntry e;
    e.path = str_field(f, "path", origin);
    if (!is_valid_file_name(e.path)) throw Error(origin + ": invalid file name '" + e.path + "'");
    e.sha256 = str_field(f, "sha256", origin);
    if (!is_sha256_hex(e.sha256)) throw Error(origin + ": file '" + e.path + "': 'sha256' must be 64 lowercase hex digits");
    const json& size = field(f, "size", origin);
    if (!size.is_number_unsigned() && !(size.is_number_integer() && size.get<int64_t>() >= 0))
      throw Error(origin + ": file '" + e.path + "': 'size' must be an integer >= 0");
    e.size = size.get<uint64_t>();
    if (!m.files.empty() && !(m.files.back().path < e.path))
      throw Error(origin + ": 'files' must be sorted by path without duplicates");
    m.files.push_back(std::move(e));
  }
  if (m.format == "gguf" && m.files.size() != 1) throw Error(origin + ": a gguf version has exactly one file");
  return m;
}

std::string pointers_to_json(const Pointers& p) {
  json j{{"current", p.current.empty() ? json(nullptr) : json(p.current)},
         {"previous", p.previous.empty() ? json(nullptr) : json(p.previous)}};
  return j.dump(2) + "\n";
}

Pointers parse_pointers(std::string_view text, const std::string& origin) {
  const json j = parse_json(text, origin);
  Pointers p;
  for (auto [key, out] : {std::pair<const char*, std::string*>{"current", &p.current}, {"previous", &p.previous}}) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_string() || !is_valid_name(it->get<std::string>()))
      throw Error(origin + ": '" + key + "' must be a version tag or null");
    *out = it->get<std::string>();
  }
  return p;
}

}  // namespace eg::store
