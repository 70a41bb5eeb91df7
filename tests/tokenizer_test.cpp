// Tokenizer tests: exact agreement with Hugging Face `tokenizers` on the shared references.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "test_util.h"

namespace {

using json = nlohmann::json;
using Ids = std::vector<int32_t>;

std::string shared(const std::string& rel) { return egtest::shared_dir() + "/" + rel; }

json load_json(const std::string& path) { return json::parse(egtest::read_file(path)); }

const eg::Tokenizer& gemma3() {
  static const eg::Tokenizer tok = eg::Tokenizer::load_dir(shared("tokenizers/gemma3"));
  return tok;
}
const eg::Tokenizer& tiny() {
  static const eg::Tokenizer tok = eg::Tokenizer::load_dir(shared("tokenizers/tiny-gemma"));
  return tok;
}

// Strict UTF-8 validity (no overlongs, surrogates, or code points above U+10FFFF).
bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n;
    unsigned lo = 0x80, hi = 0xBF;
    if (c < 0x80) { ++i; continue; }
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c >= 0xE0 && c <= 0xEF) { n = 3; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
    else if (c >= 0xF0 && c <= 0xF4) { n = 4; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
    else return false;
    if (i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return false;
    }
    i += n;
  }
  return true;
}

// Streams `ids`; checks every push() result is valid UTF-8; returns the concatenation.
std::string stream_all(const eg::Tokenizer& tok, const Ids& ids, bool skip_special = false) {
  eg::StreamingDetokenizer sd(tok, skip_special);
  std::string all;
  for (int32_t id : ids) {
    const std::string part = sd.push(id);
    EXPECT_TRUE(valid_utf8(part)) << "push(" << id << ") emitted invalid UTF-8";
    all += part;
  }
  const std::string tail = sd.flush();
  EXPECT_TRUE(valid_utf8(tail));
  return all + tail;
}

Ids to_ids(const json& j) { return j.get<Ids>(); }

// A temporary directory, removed as soon as the test (or helper) that made it ends.
struct TempDir {
  std::string path;
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "eg-tok-test-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

// ---------------------------------------------------------------------------------------------
// The real Gemma 3 tokenizer against HF tokenizers 0.23.2 (shared/tokenizers/gemma3/reference.json)

TEST(Gemma3Tokenizer, Basics) {
  const eg::Tokenizer& t = gemma3();
  EXPECT_EQ(t.vocab_size(), 262145);  // 262144 model pieces + <image_soft_token>
  EXPECT_EQ(t.bos_id(), 2);
  EXPECT_EQ(t.eos_id(), 106);  // tokenizer_config.json: eos_token "<end_of_turn>"
  EXPECT_TRUE(t.add_bos());
  EXPECT_EQ(t.piece(2), "<bos>");
  EXPECT_EQ(t.piece(105), "<start_of_turn>");
  EXPECT_EQ(t.piece(262144), "<image_soft_token>");
  EXPECT_EQ(t.piece(238 + 0x0A), "<0x0A>");
  EXPECT_EQ(t.token_id("<end_of_turn>"), 106);
  EXPECT_EQ(t.token_id("\n"), 107);
  EXPECT_EQ(t.token_id("no such piece, surely"), -1);
  EXPECT_TRUE(t.is_special(2));
  EXPECT_TRUE(t.is_special(106));
  EXPECT_FALSE(t.is_special(107));  // whitespace runs are non-special added tokens
  EXPECT_FALSE(t.is_special(9259));
  EXPECT_FALSE(t.is_special(-1));
  EXPECT_THROW(t.piece(-1), eg::Error);
  EXPECT_THROW(t.piece(262145), eg::Error);
  EXPECT_NE(t.chat_template().find("<start_of_turn>"), std::string::npos);
  EXPECT_TRUE(t.encode("", false).empty());
  EXPECT_EQ(t.encode("", true), Ids{2});
}

TEST(Gemma3Tokenizer, ReferenceEntries) {
  const eg::Tokenizer& t = gemma3();
  const json ref = load_json(shared("tokenizers/gemma3/reference.json"));
  ASSERT_EQ(ref["entries"].size(), 101u);
  int i = 0;
  for (const json& e : ref["entries"]) {
    const std::string text = e["text"];
    SCOPED_TRACE("entry " + std::to_string(i++) + ": " + json(text).dump());
    const Ids no_bos = to_ids(e["ids_no_bos"]);
    const Ids with_bos = to_ids(e["ids_with_bos"]);
    EXPECT_EQ(t.encode(text, true), with_bos);
    EXPECT_EQ(t.encode(text, false), no_bos);
    EXPECT_EQ(t.encode(text, false, /*parse_special=*/false), to_ids(e["ids_no_bos_special_text_as_plain"]));
    std::vector<std::string> pieces;
    for (int32_t id : no_bos) pieces.push_back(t.piece(id));
    EXPECT_EQ(pieces, e["tokens_no_bos"].get<std::vector<std::string>>());
    const std::string dec = e["decode_no_bos"];
    EXPECT_EQ(t.decode(no_bos), dec);
    EXPECT_EQ(t.decode(with_bos, true), e["decode_with_bos_skip_special"].get<std::string>());
    if (e["round_trip_exact"].get<bool>()) {
      EXPECT_EQ(dec, text);
    }
    EXPECT_EQ(stream_all(t, no_bos), dec);
    EXPECT_EQ(stream_all(t, with_bos, true), e["decode_with_bos_skip_special"].get<std::string>());
  }
}

// llama.cpp's Gemma 4 vocabulary cases; the README says Gemma 3's tokenizer gives the same ids.
TEST(Gemma3Tokenizer, Gemma4VocabCases) {
  const std::string inp = egtest::read_file(shared("tokenizers/gemma4-vocab-test/cases.inp"));
  const std::string out = egtest::read_file(shared("tokenizers/gemma4-vocab-test/cases.out"));
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> cases;
  for (size_t b = 0;;) {
    const size_t e = inp.find(sep, b);
    cases.push_back(inp.substr(b, e == std::string::npos ? std::string::npos : e - b));
    if (e == std::string::npos) break;
    b = e + sep.size();
  }
  std::vector<Ids> expected;
  for (size_t b = 0; b < out.size();) {
    size_t e = out.find('\n', b);
    if (e == std::string::npos) e = out.size();
    Ids ids;
    const std::string line = out.substr(b, e - b);
    for (size_t p = 0; p < line.size();) {
      size_t q = line.find(' ', p);
      if (q == std::string::npos) q = line.size();
      if (q > p) ids.push_back(std::stoi(line.substr(p, q - p)));
      p = q + 1;
    }
    expected.push_back(ids);
    b = e + 1;
  }
  ASSERT_EQ(cases.size(), 46u);
  ASSERT_EQ(expected.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i) + ": " + json(cases[i]).dump());
    EXPECT_EQ(gemma3().encode(cases[i], false, false), expected[i]);
  }
}

// ---------------------------------------------------------------------------------------------
// The tiny models' tokenizer (shared/models/*/reference.json, HF tokenizers 0.23.2)

TEST(TinyTokenizer, ModelReferencePrompts) {
  for (const char* model : {"tiny-gemma3", "tiny-gemma2", "tiny-gemma4", "tiny-gemma4-moe"}) {
    const std::string dir = shared(std::string("models/") + model);
    const eg::Tokenizer t = eg::Tokenizer::load_dir(dir);
    const json ref = load_json(dir + "/reference.json");
    ASSERT_EQ(ref["prompts"].size(), 8u);
    for (const json& p : ref["prompts"]) {
      SCOPED_TRACE(std::string(model) + " prompt " + p["id"].get<std::string>());
      const std::string text = p["text"];
      const Ids ids = to_ids(p["input_ids"]);
      EXPECT_EQ(t.encode(text, p["add_special_tokens"].get<bool>()), ids);
      // Round trip: decode keeps <bos> and the turn tokens, so compare with the text + BOS.
      const std::string bos = p["add_special_tokens"].get<bool>() ? "<bos>" : "";
      EXPECT_EQ(t.decode(ids), bos + text);
      EXPECT_EQ(stream_all(t, ids), bos + text);
      // Greedy continuations were decoded by HF with skip_special_tokens=False.
      const Ids gen = to_ids(p["greedy_new_ids"]);
      EXPECT_EQ(t.decode(gen), p["greedy_text"].get<std::string>());
      EXPECT_EQ(stream_all(t, gen), p["greedy_text"].get<std::string>());
    }
  }
}

TEST(TinyTokenizer, SharedCopiesAgree) {
  const eg::Tokenizer g4 = eg::Tokenizer::load_dir(shared("tokenizers/tiny-gemma4"));
  const eg::Tokenizer& g3 = tiny();
  EXPECT_EQ(g3.vocab_size(), 8192);
  EXPECT_EQ(g4.vocab_size(), 8192);
  EXPECT_EQ(g3.bos_id(), 2);
  EXPECT_EQ(g3.eos_id(), 1);
  EXPECT_EQ(g3.piece(105), "<start_of_turn>");
  EXPECT_EQ(g4.piece(105), "<|turn>");
  EXPECT_TRUE(g4.is_special(46));   // <|tool>
  EXPECT_FALSE(g3.is_special(46));  // <unused40>
  const std::string text = "Hello there, 床前明月光 🙂 \n\n\t\tx";
  EXPECT_EQ(g3.encode(text, true), g4.encode(text, true));
  // Non-special added tokens stay matched when special-token text is plain text.
  EXPECT_EQ(g3.encode("<unused0>", false, false), Ids{6});
  EXPECT_EQ(g3.encode("<mask>x", false, false).front(), 4);
  EXPECT_EQ(g3.encode("<start_of_turn>", false, true), Ids{105});
  EXPECT_GT(g3.encode("<start_of_turn>", false, false).size(), 1u);
}

// ---------------------------------------------------------------------------------------------
// Streaming and byte fallback

TEST(StreamingDetokenizer, CjkAndEmojiByteFallback) {
  const eg::Tokenizer& t = tiny();
  const std::vector<std::string> texts = {
      "龘靐齉爩 rare characters", "emoji 😀🚀🧪 and flags 🇯🇵🇫🇷", "family 👨‍👩‍👧‍👦 zwj",
      "混合 text with 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 and 🤖\n\n", "𠜎𠜱𠝹𠱓 (supplementary CJK)", "a😀b😀c😀"};
  for (const std::string& text : texts) {
    SCOPED_TRACE(text);
    const Ids ids = t.encode(text, true);
    int bytes = 0;
    for (int32_t id : ids) bytes += (t.piece(id).rfind("<0x", 0) == 0);
    EXPECT_GT(bytes, 0) << "expected byte-fallback pieces";
    EXPECT_EQ(t.decode(ids), "<bos>" + text);
    EXPECT_EQ(stream_all(t, ids), "<bos>" + text);
    EXPECT_EQ(stream_all(t, ids, true), text);
    // Each character appears only once it is complete.
    eg::StreamingDetokenizer sd(t, true);
    std::string acc;
    for (int32_t id : ids) {
      acc += sd.push(id);
      EXPECT_EQ(text.compare(0, acc.size(), acc), 0);
    }
  }
  // The same with the 262k vocabulary, where only unusual characters fall back to bytes.
  const std::string rare = "\xF0\x9F\xAB\xA8\xF0\x90\x8D\x88 \xE2\xBF\xB0";
  const Ids ids = gemma3().encode(rare, false);
  EXPECT_EQ(stream_all(gemma3(), ids), gemma3().decode(ids));
}

TEST(StreamingDetokenizer, InvalidBytesBecomeReplacementCharacters) {
  const eg::Tokenizer& t = tiny();
  auto byte = [&](int b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    return t.token_id(name);
  };
  const int32_t a = t.token_id("a");
  ASSERT_GE(a, 0);
  const std::string r = "\xEF\xBF\xBD";
  // HF ByteFallback: a run that is not valid UTF-8 gives one U+FFFD per byte of the run.
  EXPECT_EQ(t.decode({byte(0xE4), byte(0xB8), a}), r + r + "a");
  EXPECT_EQ(t.decode({byte(0xE4), byte(0xB8), byte(0xAD), byte(0xFF)}), r + r + r + r);
  EXPECT_EQ(t.decode({byte(0xE4), byte(0xB8), byte(0xAD)}), "\xE4\xB8\xAD");
  EXPECT_EQ(t.decode({byte(0xE4), a, byte(0xB8), byte(0xAD)}), r + "a" + r + r);
  // Streaming: a character split by another token, and an unfinished tail at flush().
  EXPECT_EQ(stream_all(t, {byte(0xE4), byte(0xB8), a}), r + r + "a");
  EXPECT_EQ(stream_all(t, {a, byte(0xF0), byte(0x9F)}), "a" + r + r);
  EXPECT_EQ(stream_all(t, {byte(0xFF), a}), r + "a");
  // A special token dropped by skip_special does not split the byte run (as in decode).
  const Ids split = {byte(0xE4), 106, byte(0xB8), byte(0xAD)};
  EXPECT_EQ(t.decode(split, true), "\xE4\xB8\xAD");
  EXPECT_EQ(stream_all(t, split, true), "\xE4\xB8\xAD");
  EXPECT_EQ(stream_all(t, split, false), t.decode(split, false));
  // Unknown ids are dropped, as HF does.
  EXPECT_EQ(t.decode({a, 99999, -5, a}), "aa");
  EXPECT_EQ(stream_all(t, {a, 99999, a}), "aa");
}

// ---------------------------------------------------------------------------------------------
// Large inputs (correctness only: speed is measured in bench/tokenizer_bench.cpp)

TEST(TokenizerLarge, LoadGemma3) {
  const eg::Tokenizer t = eg::Tokenizer::load_dir(shared("tokenizers/gemma3"));
  EXPECT_EQ(t.vocab_size(), 262145);
}

TEST(TokenizerLarge, LongInputsRoundTrip) {
  const json ref = load_json(shared("tokenizers/gemma3/reference.json"));
  std::string lines, one_line;
  while (lines.size() < 500 * 1024) {
    for (const json& e : ref["entries"]) {
      const std::string text = e["text"];
      if (text.find("\xE2\x96\x81") != std::string::npos) continue;  // "▁" does not round-trip
      lines += text + "\n";
    }
  }
  for (char c : lines) one_line += (c == '\n' || c == '\t' || c == '\r') ? ' ' : c;
  for (const std::string* text : {&lines, &one_line}) {
    for (const eg::Tokenizer* t : {&gemma3(), &tiny()}) {
      const Ids ids = t->encode(*text, false, false);
      EXPECT_EQ(t->decode(ids), *text);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Errors

std::string tiny_json_text() { return egtest::read_file(shared("tokenizers/tiny-gemma/tokenizer.json")); }

// Expects load_files to throw eg::Error whose message mentions `needle`.
void expect_load_error(const std::string& tok_json, const std::string& cfg_json, const std::string& needle) {
  try {
    eg::Tokenizer::load_files(tok_json, cfg_json);
    ADD_FAILURE() << "no error for " << tok_json;
  } catch (const eg::Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(TokenizerErrors, MissingFiles) {
  const TempDir tmp;
  const std::string& dir = tmp.path;
  EXPECT_THROW(eg::Tokenizer::load_dir(dir + "/nope"), eg::Error);
  expect_load_error(dir + "/tokenizer.json", "", dir + "/tokenizer.json");
  EXPECT_THROW(eg::Tokenizer::load_dir(dir), eg::Error);  // directory without tokenizer.json
  expect_load_error(dir, "", dir);                        // a directory is not a file
  const std::string tj = shared("tokenizers/tiny-gemma/tokenizer.json");
  expect_load_error(tj, dir + "/tokenizer_config.json", dir + "/tokenizer_config.json");
}

TEST(TokenizerErrors, MalformedJson) {
  const TempDir tmp;
  const std::string& dir = tmp.path;
  const std::string text = tiny_json_text();
  const std::string p = dir + "/tokenizer.json";
  for (const std::string& bad :
       {text.substr(0, text.size() / 2), text.substr(0, text.size() - 2), std::string(),
        std::string("{not json"), std::string("[1, 2, 3]"), std::string("{}"),
        std::string("{\"model\": 5}")}) {
    egtest::write_file(p, bad);
    expect_load_error(p, "", p);
  }
}

TEST(TokenizerErrors, BadContents) {
  const TempDir tmp;
  const std::string& dir = tmp.path;
  const std::string p = dir + "/tokenizer.json";
  const json base = json::parse(tiny_json_text());
  auto check = [&](const std::function<void(json&)>& edit, const std::string& needle) {
    json j = base;
    edit(j);
    egtest::write_file(p, j.dump());
    expect_load_error(p, "", needle);
  };
  check([](json& j) { j["model"]["type"] = "Unigram"; }, "Unigram");
  check([](json& j) { j["model"]["type"] = "WordPiece"; }, "only BPE");
  check([](json& j) { j["model"].erase("vocab"); }, "model.vocab");
  check([](json& j) { j["model"].erase("merges"); }, "model.merges");
  check([](json& j) { j["model"]["vocab"]["\xE2\x96\x81t"] = "seven"; }, "model.vocab");
  check([](json& j) { j["model"]["merges"].push_back(json::array({"no-such-piece", "t"})); }, "not in the vocabulary");
  check([](json& j) { j["model"]["merges"].push_back(json::array({"a"})); }, "model.merges");
  check([](json& j) { j["normalizer"] = {{"type", "NFKC"}}; }, "NFKC");
  check([](json& j) { j["decoder"] = {{"type", "WordPiece"}}; }, "WordPiece");
  check([](json& j) { j["added_tokens"][0].erase("content"); }, "content");

  // tokenizer_config.json problems name that file.
  const std::string tj = shared("tokenizers/tiny-gemma/tokenizer.json");
  const std::string cfg = dir + "/tokenizer_config.json";
  egtest::write_file(cfg, "{\"add_bos_token\": tru");
  expect_load_error(tj, cfg, cfg);
  egtest::write_file(cfg, "{\"add_bos_token\": \"yes\"}");
  expect_load_error(tj, cfg, "add_bos_token");
  egtest::write_file(cfg, "{\"bos_token\": \"<nope>\"}");
  expect_load_error(tj, cfg, "<nope>");
}

// ---------------------------------------------------------------------------------------------
// Behaviours the Gemma files do not exercise, on small hand-made tokenizer.json files
// (expected results follow HF tokenizers' BPE and AddedVocabulary code).

// Loads a tokenizer from the JSON `j` (written to a temporary file).
eg::Tokenizer load_synthetic(const json& j) {
  const TempDir tmp;
  const std::string p = tmp.path + "/tokenizer.json";
  egtest::write_file(p, j.dump());
  return eg::Tokenizer::load_files(p, "");
}

json synthetic_base() {
  return json{
      {"version", "1.0"},
      {"added_tokens", json::array()},
      {"normalizer", {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}},
      {"pre_tokenizer", nullptr},
      {"post_processor", nullptr},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders", json::array({{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
                                  {{"type", "ByteFallback"}},
                                  {{"type", "Fuse"}}})}}},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", "<unk>"}, {"fuse_unk", true},
        {"byte_fallback", false}, {"ignore_merges", false},
        {"vocab", {{"<unk>", 0}, {"a", 1}, {"b", 2}, {"c", 3}, {"ab", 4}, {"abc", 5}, {"bc", 6},
                   {"\xE2\x96\x81", 7}, {"<x>", 8}, {"<bos>", 9}}},
        {"merges", json::array({json::array({"b", "c"}), json::array({"a", "b"}), json::array({"ab", "c"})})}}}};
}

TEST(SyntheticTokenizer, MergeOrderIgnoreMergesAndUnk) {
  json j = synthetic_base();
  {
    const eg::Tokenizer t = load_synthetic(j);
    EXPECT_EQ(t.encode("abc", false), (Ids{1, 6}));  // rank 0 "b c" wins over "a b"
    EXPECT_EQ(t.encode("ab", false), (Ids{4}));
    EXPECT_EQ(t.encode("axyb", false), (Ids{1, 0, 2}));  // fuse_unk: one <unk> for "xy"
    EXPECT_EQ(t.encode("abc", true), (Ids{9, 1, 6}));    // no post-processor: <bos> by name
    EXPECT_EQ(t.decode({1, 6, 7, 2}), "abc b");
  }
  j["model"]["ignore_merges"] = true;
  j["model"]["fuse_unk"] = false;
  {
    const eg::Tokenizer t = load_synthetic(j);
    EXPECT_EQ(t.encode("abc", false), (Ids{5}));  // whole word in vocab: no merging
    EXPECT_EQ(t.encode("axyb", false), (Ids{1, 0, 0, 2}));
  }
  // Legacy "a b" merge strings.
  j = synthetic_base();
  j["model"]["merges"] = json::array({"b c", "a b", "ab c"});
  {
    const eg::Tokenizer t = load_synthetic(j);
    EXPECT_EQ(t.encode("abc", false), (Ids{1, 6}));
  }
}

TEST(SyntheticTokenizer, AddedTokenFlags) {
  json j = synthetic_base();
  auto added = [](const char* content, bool lstrip, bool rstrip, bool single_word, bool normalized) {
    return json{{"id", 0},         {"content", content},   {"single_word", single_word}, {"lstrip", lstrip},
                {"rstrip", rstrip}, {"normalized", normalized}, {"special", false}};
  };
  j["added_tokens"] = json::array({added("<x>", true, true, false, false)});
  {
    const eg::Tokenizer t = load_synthetic(j);
    EXPECT_EQ(t.encode("a <x>  b", false), (Ids{1, 8, 2}));  // spaces around <x> absorbed
  }
  j["added_tokens"] = json::array({added("<x>", false, false, false, false)});
  {
    const eg::Tokenizer t = load_synthetic(j);
    EXPECT_EQ(t.encode("a <x> b", false), (Ids{1, 7, 8, 7, 2}));
  }
  j["added_tokens"] = json::array({added("ab", false, false, true, false)});
  {
    const eg::Tokenizer t = load_synthetic(j);
    EXPECT_EQ(t.encode("ab c", false), (Ids{4, 7, 3}));
    EXPECT_EQ(t.encode("cabc", false), (Ids{3, 1, 6}));  // inside a word: not matched, BPE
  }
  // normalized:true: matched in the normalized text ("c a" -> "c▁a"); it gets the next free id.
  j["added_tokens"] = json::array({added("c a", false, false, false, true)});
  {
    const eg::Tokenizer t = load_synthetic(j);
    EXPECT_EQ(t.vocab_size(), 11);
    EXPECT_EQ(t.piece(10), "c a");
    EXPECT_EQ(t.encode("cc a", false), (Ids{3, 10}));
    EXPECT_EQ(t.decode({3, 10}), "cc a");
  }
}

TEST(SyntheticTokenizer, MoveAndReuse) {
  eg::Tokenizer a = load_synthetic(synthetic_base());
  eg::Tokenizer b = std::move(a);
  EXPECT_EQ(b.encode("ab", false), (Ids{4}));
  eg::Tokenizer c = eg::Tokenizer::load_dir(shared("tokenizers/tiny-gemma"));
  c = std::move(b);
  EXPECT_EQ(c.encode("ab", false), (Ids{4}));
  eg::StreamingDetokenizer sd(c);
  std::string s = sd.push(1);
  s += sd.push(7);
  s += sd.flush();
  EXPECT_EQ(s, "a ");
  s = sd.push(2);
  s += sd.flush();
  EXPECT_EQ(s, "b");
}

}  // namespace
