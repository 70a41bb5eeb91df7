// libFuzzer target: tokenizer.json + tokenizer_config.json loading, and encode/decode of
// arbitrary bytes (docs/reliability.md). Built by scripts/fuzz.
//
// Input: the first byte selects the mode, the rest is the payload.
//   0 (mod 4): a tokenizer.json, optionally followed by a NUL byte and a tokenizer_config.json
//              (raw JSON never holds a NUL). Loaded with Tokenizer::load_files; when it loads,
//              a few fixed strings are encoded and decoded with it (checks below).
//   1: encode the payload with the tiny-gemma tokenizer (tokenizers/tiny-gemma), 3: with the
//      real Gemma 3 tokenizer (tokenizers/gemma3); the second byte's bits choose add_bos and
//      parse_special.
//   2: the payload as little-endian int32 ids (any value), decoded with the tiny tokenizer.
// Checks: every id encode returns is in [0, vocab_size); decode and the streaming detokenizer
// (fed the same ids) give the same text, and every streamed piece is valid UTF-8; a valid UTF-8
// payload without U+2581 ("▁", the normalizer's space) encoded without special-token parsing
// decodes back to itself.
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "core/error.h"
#include "fuzz_util.h"
#include "tokenizer_checks.h"
#include "tokenizer/tokenizer.h"

namespace {

using egfuzz::decode_checked;
using egfuzz::encode_checked;
using egfuzz::valid_utf8;

void check(bool ok, const std::string& what) {
  if (!ok) egfuzz::fail("tokenizer_fuzz", what);
}

const eg::Tokenizer& tiny() {
  static const eg::Tokenizer t = eg::Tokenizer::load_dir(egfuzz::shared_dir() + "/tokenizers/tiny-gemma");
  return t;
}
const eg::Tokenizer& gemma3() {
  static const eg::Tokenizer t = eg::Tokenizer::load_dir(egfuzz::shared_dir() + "/tokenizers/gemma3");
  return t;
}

void fuzz_load(std::string_view payload) {
  static egfuzz::MemFile tj("tokenizer.json"), cj("tokenizer_config.json");
  const auto [tok_json, cfg_json] = egfuzz::split(payload, std::string_view("\0", 1));
  tj.set(tok_json);
  cj.set(cfg_json);
  const bool has_cfg = payload.find('\0') != std::string_view::npos;
  try {
    const eg::Tokenizer tok = eg::Tokenizer::load_files(tj.path(), has_cfg ? cj.path() : std::string());
    for (const char* s : {"Hello world", "  two  spaces\n\n", "<bos><start_of_turn>user\nhi<end_of_turn>", "中文 😀",
                          "\xff\xfe bad utf8"}) {
      decode_checked(tok, encode_checked(tok, s, true, true));
      decode_checked(tok, encode_checked(tok, s, false, false));
    }
    std::vector<int32_t> all;
    for (int32_t id = -2; id < tok.vocab_size() + 2 && id < 4096; ++id) all.push_back(id);
    decode_checked(tok, all);
    (void)tok.bos_id();
    (void)tok.eos_id();
    (void)tok.chat_template();
  } catch (const eg::Error&) {
  }
}

void fuzz_encode(const eg::Tokenizer& tok, std::string_view payload) {
  if (payload.empty()) return;
  const bool bos = payload[0] & 1, special = payload[0] & 2;
  const std::string_view text = payload.substr(1);
  const std::vector<int32_t> ids = encode_checked(tok, text, bos, special);
  decode_checked(tok, ids);
  if (!special && !bos && valid_utf8(text) && text.find("\xe2\x96\x81") == std::string_view::npos)
    check(tok.decode(ids) == text, "decode(encode(text)) != text for valid UTF-8 text");
}

void fuzz_decode(std::string_view payload) {
  std::vector<int32_t> ids(payload.size() / 4);
  if (!ids.empty()) std::memcpy(ids.data(), payload.data(), ids.size() * 4);
  // Mostly ids near the vocabulary (the interesting part), some arbitrary values.
  for (int32_t& id : ids)
    if ((id & 0x40000000) == 0) id = static_cast<int32_t>(static_cast<uint32_t>(id) % (tiny().vocab_size() + 8)) - 4;
  decode_checked(tiny(), ids);
}

// Seeds: a trimmed copy of the tiny tokenizer (ids < 600, the merges among them) with and without
// its config, and a few texts for the encode modes.
void write_seeds(const std::string& dir) {
  const std::string src = egfuzz::shared_dir() + "/tokenizers/tiny-gemma";
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(egfuzz::read_text(src + "/tokenizer.json"));
  constexpr int kKeep = 600;
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  std::set<std::string> kept;
  for (auto it = j["model"]["vocab"].begin(); it != j["model"]["vocab"].end(); ++it)
    if (it.value().get<int>() < kKeep) vocab[it.key()] = it.value(), kept.insert(it.key());
  nlohmann::ordered_json merges = nlohmann::ordered_json::array();
  for (const auto& m : j["model"]["merges"]) {
    const std::string a = m[0], b = m[1];
    if (kept.count(a) && kept.count(b) && kept.count(a + b)) merges.push_back(m);
  }
  j["model"]["vocab"] = vocab;
  j["model"]["merges"] = merges;
  nlohmann::ordered_json added = nlohmann::ordered_json::array();
  for (const auto& t : j["added_tokens"])
    if (t["id"].get<int>() < kKeep) added.push_back(t);
  j["added_tokens"] = added;
  const std::string tok = j.dump();
  nlohmann::ordered_json c = nlohmann::ordered_json::parse(egfuzz::read_text(src + "/tokenizer_config.json"));
  c.erase("added_tokens_decoder");
  c["chat_template"] = "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}";
  egfuzz::write_seed(dir, "load-tok", std::string(1, '\0') + tok);
  egfuzz::write_seed(dir, "load-tok-cfg", std::string(1, '\0') + tok + std::string(1, '\0') + c.dump());
  int k = 0;
  for (const char* s : {"Hello world, this is a test.", "  leading and  double spaces\n\n\ttabs",
                        "<bos><start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n", "中文 日本語 한국어 😀👩‍👩‍👧",
                        "\xe5\x8f\xab\xff\x80 <unused0> <0x0A>", "def f(x):\n    return x ** 2  # code"}) {
    for (char mode : {'\1', '\3'})
      for (char flags : {'\0', '\3'})
        egfuzz::write_seed(dir, "encode-" + std::to_string(k++), std::string(1, mode) + flags + s);
  }
  std::string ids(1, '\2');
  for (int32_t id : {2, 105, 300, 238, 239, 1000, 8191, 8192, -1, 106}) ids.append(reinterpret_cast<const char*>(&id), 4);
  egfuzz::write_seed(dir, "decode", ids);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  egfuzz::maybe_write_seeds(write_seeds);
  (void)tiny();
  (void)gemma3();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view payload(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] & 3) {
    case 0: fuzz_load(payload); break;
    case 1: fuzz_encode(tiny(), payload); break;
    case 2: fuzz_decode(payload); break;
    case 3: fuzz_encode(gemma3(), payload); break;
  }
  return 0;
}
