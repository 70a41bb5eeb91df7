// Manifest and pointer files of the model store (src/store/manifest.h) and the --rollback-if rule
// language (src/server/rollback_rules.h).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "server/rollback_rules.h"
#include "store/manifest.h"
#include "store/sha256.h"

using namespace eg::store;
using nlohmann::json;

namespace {

Manifest sample() {
  Manifest m;
  m.name = "tiny";
  m.version = "v1";
  m.format = "hf";
  m.architecture = "Gemma3ForCausalLM";
  m.quantization = "bfloat16";
  m.tokenizer_digest = sha256_hex("tok");
  m.created = "2026-12-01T17:00:00Z";
  m.provenance = "test";
  m.files = {{"config.json", sha256_hex("a"), 1}, {"model.safetensors", sha256_hex("b"), 123456789012ull}};
  return m;
}

}  // namespace

TEST(StoreManifest, RoundTrip) {
  const Manifest m = sample();
  const Manifest back = parse_manifest(manifest_to_json(m), "m.json");
  EXPECT_EQ(manifest_to_json(back), manifest_to_json(m));
  EXPECT_EQ(back.files[1].size, 123456789012ull);
  EXPECT_EQ(back.total_bytes(), 123456789013ull);
}

TEST(StoreManifest, IdIsTheSha256sumListingOrTheGgufDigest) {
  Manifest m = sample();
  // Computed independently: the text `sha256sum config.json model.safetensors` would print.
  const std::string listing = sha256_hex("a") + "  config.json\n" + sha256_hex("b") + "  model.safetensors\n";
  EXPECT_EQ(m.id(), sha256_hex(listing));
  Manifest other = m;
  other.name = "x";
  other.version = "v9";
  other.created = "2030-01-01T00:00:00Z";
  EXPECT_EQ(other.id(), m.id()) << "the id depends on the bytes only";
  m.format = "gguf";
  m.files = {{"a.gguf", sha256_hex("g"), 5}};
  EXPECT_EQ(m.id(), sha256_hex("g"));
}

TEST(StoreManifest, RejectsEveryDefect) {
  const json good = json::parse(manifest_to_json(sample()));
  auto bad = [&](auto edit, const char* what) {
    json j = good;
    edit(j);
    EXPECT_THROW(parse_manifest(j.dump(), "m.json"), eg::Error) << what;
  };
  bad([](json& j) { j["schema"] = 2; }, "schema");
  bad([](json& j) { j.erase("name"); }, "no name");
  bad([](json& j) { j["name"] = "../x"; }, "name with /");
  bad([](json& j) { j["name"] = ".hidden"; }, "hidden name");
  bad([](json& j) { j["version"] = ""; }, "empty version");
  bad([](json& j) { j["version"] = 3; }, "numeric version");
  bad([](json& j) { j["format"] = "onnx"; }, "format");
  bad([](json& j) { j["files"] = json::array(); }, "no files");
  bad([](json& j) { j["files"][0]["path"] = "../../etc/passwd"; }, "path escape");
  bad([](json& j) { j["files"][0]["path"] = "a/b"; }, "path with /");
  bad([](json& j) { j["files"][0]["sha256"] = std::string(64, 'G'); }, "bad hex");
  bad([](json& j) { j["files"][0]["sha256"] = "abc"; }, "short hex");
  bad([](json& j) { j["files"][0]["size"] = -1; }, "negative size");
  bad([](json& j) { j["files"][0]["size"] = 1.5; }, "fractional size");
  bad([](json& j) { std::swap(j["files"][0], j["files"][1]); }, "unsorted");
  bad([](json& j) { j["files"][1] = j["files"][0]; }, "duplicate");
  bad([](json& j) { j["format"] = "gguf"; }, "gguf with two files");
  bad([](json& j) { j["tokenizer_digest"] = "zz"; }, "tokenizer digest");
  EXPECT_THROW(parse_manifest("{", "m.json"), eg::Error);
  EXPECT_THROW(parse_manifest("[]", "m.json"), eg::Error);
  EXPECT_THROW(parse_manifest("", "m.json"), eg::Error);
}

TEST(StoreManifest, Names) {
  EXPECT_TRUE(is_valid_name("gemma-3_1b.it"));
  EXPECT_TRUE(is_valid_name(std::string(128, 'a')));
  EXPECT_FALSE(is_valid_name(std::string(129, 'a')));
  for (const char* s : {"", ".", "..", "-x", "a/b", "a:b", "a b", "sha256", "é"}) EXPECT_FALSE(is_valid_name(s)) << s;
}

TEST(StoreManifest, Pointers) {
  const Pointers p = parse_pointers(pointers_to_json({"v2", "v1"}), "r.json");
  EXPECT_EQ(p.current, "v2");
  EXPECT_EQ(p.previous, "v1");
  const Pointers q = parse_pointers(pointers_to_json({"v2", ""}), "r.json");
  EXPECT_EQ(q.previous, "");
  EXPECT_THROW(parse_pointers(R"({"current": "../x"})", "r.json"), eg::Error);
  EXPECT_THROW(parse_pointers(R"({"current": 1})", "r.json"), eg::Error);
  EXPECT_THROW(parse_pointers("nope", "r.json"), eg::Error);
}

TEST(StoreRollbackRules, Parse) {
  using eg::server::parse_rollback_rules;
  const auto r = parse_rollback_rules("ttft_p95>2s, error_rate >= 5%,token_p50<300ms");
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].metric, "ttft_p95");
  EXPECT_EQ(r[0].op, ">");
  EXPECT_DOUBLE_EQ(r[0].value, 2.0);
  EXPECT_EQ(r[1].op, ">=");
  EXPECT_DOUBLE_EQ(r[1].value, 0.05);
  EXPECT_EQ(r[2].op, "<");
  EXPECT_DOUBLE_EQ(r[2].value, 0.3);
  for (const char* s : {"", "ttft_p95", "ttft_p95>", "ttft_p95>x", "speed>2", "ttft_p95>2%", "error_rate>2s",
                        "error_rate>150%", "ttft_p95>-1s", "ttft_p95>2s,", ">2s"})
    EXPECT_THROW(parse_rollback_rules(s), eg::Error) << s;
}

TEST(StoreRollbackRules, WindowPercentilesAndTrigger) {
  using namespace eg::server;
  MetricsWindow w(10);
  const auto rules = parse_rollback_rules("ttft_p95>0.9s,error_rate>20%");
  for (int i = 1; i <= 10; ++i) w.add({i / 10.0, 0.01 * i, false});  // ttft 0.1 .. 1.0
  // Nearest rank: p50 of 10 values is the 5th (0.5), p95 the 10th (1.0).
  EXPECT_DOUBLE_EQ(w.value("ttft_p50"), 0.5);
  EXPECT_DOUBLE_EQ(w.value("ttft_p95"), 1.0);
  EXPECT_DOUBLE_EQ(w.value("token_p50"), 0.05);
  EXPECT_EQ(w.triggered(rules, 11), "") << "fewer samples than min_requests";
  EXPECT_NE(w.triggered(rules, 10), "");
  MetricsWindow ok(10);
  for (int i = 0; i < 10; ++i) ok.add({0.1, 0.01, i < 2});  // 20% failed: not > 20%
  EXPECT_DOUBLE_EQ(ok.value("error_rate"), 0.2);
  EXPECT_EQ(ok.triggered(rules, 5), "");
  ok.add({0.1, 0.01, true});  // the window drops the oldest (a failure): still 2 of 10
  EXPECT_DOUBLE_EQ(ok.value("error_rate"), 0.2);
  ok.add({0.1, 0.01, true});  // drops the other old failure
  EXPECT_DOUBLE_EQ(ok.value("error_rate"), 0.2);
  ok.add({0.1, 0.01, true});  // drops a success
  EXPECT_DOUBLE_EQ(ok.value("error_rate"), 0.3);
  EXPECT_NE(ok.triggered(rules, 5), "");
}
