// The model store (src/store/store.h) and `edgegemma models` on the tiny fixtures: add (HF folder,
// GGUF), references, list/show, use, rollback, rm, verify, gc, refused corrupt models, the lock.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "store/model_check.h"
#include "store/sha256.h"
#include "store/store.h"
#include "test_util.h"

namespace fs = std::filesystem;
using eg::store::Store;
using nlohmann::json;

namespace {

std::string hf_dir() { return egtest::shared_dir() + "/models/tiny-gemma3"; }
std::string gguf_path() { return egtest::shared_dir() + "/models/gguf/tiny-gemma3/tiny-gemma3-q8_0.gguf"; }

eg::store::AddOptions named(const std::string& name, const std::string& version = "") {
  eg::store::AddOptions o;
  o.name = name;
  o.version = version;
  return o;
}

// A copy of the tiny HF model whose layer-0 down projection is all 0xFF bytes (bf16 NaN).
std::string nan_copy() {
  const std::string dir = egtest::make_temp_dir() + "/nan-model";
  fs::copy(hf_dir(), dir, fs::copy_options::recursive);
  const std::string st = dir + "/model.safetensors";
  fs::permissions(st, fs::perms::owner_write, fs::perm_options::add);
  std::string bytes = egtest::read_file(st);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const json h = json::parse(bytes.substr(8, n));
  const auto& off = h.at("model.layers.0.mlp.down_proj.weight").at("data_offsets");
  for (uint64_t i = off[0].get<uint64_t>(); i < off[1].get<uint64_t>(); ++i) bytes[8 + n + i] = '\xff';
  egtest::write_file(st, bytes);
  return dir;
}

void flip_byte(const std::string& path, uint64_t at) {
  ::chmod(path.c_str(), 0644);
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(at));
  char c = 0;
  f.read(&c, 1);
  c ^= 0x5a;
  f.seekp(static_cast<std::streamoff>(at));
  f.write(&c, 1);
}

json cli_json(const std::string& store, std::vector<std::string> args, int want_exit = 0) {
  std::vector<std::string> cmd = {egtest::cli_path(), "models"};
  cmd.insert(cmd.end(), args.begin(), args.end());
  cmd.insert(cmd.end(), {"--store", store, "--json"});
  const auto r = egtest::run_cmd(cmd);
  EXPECT_EQ(r.exit_code, want_exit) << r.err;
  if (r.out.empty()) return json();
  return json::parse(r.out);
}

}  // namespace

TEST(Store, AddHfAndGgufThenUseRollbackResolve) {
  Store s(egtest::make_temp_dir() + "/store");
  const auto m1 = s.add(hf_dir(), named("tiny"));
  EXPECT_EQ(m1.version, "v1");
  EXPECT_EQ(m1.format, "hf");
  EXPECT_EQ(m1.architecture, "Gemma3ForCausalLM");
  EXPECT_EQ(m1.quantization, "bfloat16");
  EXPECT_EQ(m1.tokenizer_digest, eg::store::sha256_file(hf_dir() + "/tokenizer.json"));
  // Every file of the folder, with sha256sum's digest and its size.
  std::set<std::string> names;
  for (const auto& f : m1.files) {
    names.insert(f.path);
    EXPECT_EQ(f.sha256, eg::store::sha256_file(hf_dir() + "/" + f.path));
    EXPECT_EQ(f.size, fs::file_size(hf_dir() + "/" + f.path));
  }
  EXPECT_TRUE(names.count("config.json") && names.count("model.safetensors") && names.count("tokenizer.json"));
  const auto m2 = s.add(gguf_path(), named("tiny"));
  EXPECT_EQ(m2.version, "v2");
  EXPECT_EQ(m2.format, "gguf");
  EXPECT_EQ(m2.architecture, "gemma3");
  EXPECT_EQ(m2.quantization, "Q8_0");
  EXPECT_EQ(m2.id(), eg::store::sha256_file(gguf_path()));
  EXPECT_EQ(s.pointers("tiny").current, "v2");
  EXPECT_EQ(s.pointers("tiny").previous, "v1");

  EXPECT_EQ(s.resolve("tiny").version, "v2");
  EXPECT_EQ(s.resolve("tiny:v1").version, "v1");
  EXPECT_EQ(s.resolve("sha256:" + m1.id().substr(0, 8)).version, "v1");
  EXPECT_EQ(s.resolve("sha256:" + m2.id()).version, "v2");
  EXPECT_THROW(s.resolve("sha256:" + m1.id().substr(0, 5)), eg::Error) << "too short";
  EXPECT_THROW(s.resolve("sha256:0000000000"), eg::Error);
  EXPECT_THROW(s.resolve("tiny:v3"), eg::Error);
  EXPECT_THROW(s.resolve("other"), eg::Error);
  EXPECT_THROW(s.resolve("../etc"), eg::Error);
  EXPECT_EQ(s.model_path(m2), s.root() + "/trees/tiny/v2/tiny-gemma3-q8_0.gguf");

  auto p = s.rollback("tiny");
  EXPECT_EQ(p.current, "v1");
  EXPECT_EQ(p.previous, "v2");
  p = s.rollback("tiny");
  EXPECT_EQ(p.current, "v2");
  p = s.use("tiny", "v1");
  EXPECT_EQ(p.current, "v1");
  EXPECT_EQ(p.previous, "v2");
  EXPECT_THROW(s.use("tiny", "v9"), eg::Error);
  EXPECT_EQ(s.pointers("tiny").current, "v1");
  EXPECT_THROW(s.add(hf_dir(), named("tiny", "v1")), eg::Error) << "existing version";
  // The same bytes under another version share their blobs.
  const auto m3 = s.add(hf_dir(), named("tiny", "again"));
  EXPECT_EQ(m3.id(), m1.id());
  EXPECT_THROW(s.resolve("sha256:" + m1.id().substr(0, 12)), eg::Error) << "ambiguous";
  EXPECT_TRUE(s.verify().consistent);
  EXPECT_TRUE(s.verify().garbage.empty());
}

TEST(Store, SmokeGenerationIsTheEnginesGreedyOutput) {
  // Independent: the same prompt through the CLI's greedy `run`.
  const auto ids = eg::store::smoke_generate(hf_dir());
  ASSERT_EQ(ids.size(), static_cast<size_t>(eg::store::kSmokeTokens));
  const auto r = egtest::run_cmd({egtest::cli_path(), "run", "-m", hf_dir(), "-p", eg::store::kSmokePrompt, "-n",
                                  std::to_string(eg::store::kSmokeTokens), "--temp", "0", "--ignore-eos", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  std::vector<int> want;
  for (const auto& x : j.at("generated_ids")) want.push_back(x.get<int>());
  EXPECT_EQ(ids, want);
}

TEST(Store, CorruptModelsAreRefusedAndCurrentStays) {
  Store s(egtest::make_temp_dir() + "/store");
  s.add(hf_dir(), named("tiny"));
  // NaN weights: the headers parse, the smoke generation finds non-finite logits.
  try {
    s.add(nan_copy(), named("tiny"));
    FAIL() << "NaN weights accepted";
  } catch (const eg::Error& e) {
    EXPECT_NE(std::string(e.what()).find("non-finite"), std::string::npos) << e.what();
  }
  // A download that is not the expected one (--expect sha256:...): refused before any check.
  auto ex = named("tiny");
  ex.expect_id = "sha256:" + std::string(64, '0');
  EXPECT_THROW(s.add(gguf_path(), ex), eg::Error);
  ex.expect_id = "sha256:" + eg::store::sha256_file(gguf_path());
  ex.make_current = false;
  EXPECT_EQ(s.add(gguf_path(), ex).id(), ex.expect_id.substr(7));
  s.remove("tiny", "v2", false);
  // A truncated GGUF: its header does not parse.
  const std::string trunc = egtest::make_temp_dir() + "/t.gguf";
  egtest::write_file(trunc, egtest::read_file(gguf_path()).substr(0, 100000));
  EXPECT_THROW(s.add(trunc, named("tiny")), eg::Error);
  EXPECT_EQ(s.pointers("tiny").current, "v1");
  EXPECT_EQ(s.versions("tiny").size(), 1u);
  EXPECT_TRUE(s.verify().consistent);
  EXPECT_FALSE(s.verify().garbage.empty()) << "the refused blobs are left for gc";
  const auto g = s.gc();
  EXPECT_GT(g.bytes_freed, 0u);
  EXPECT_TRUE(s.verify().garbage.empty());

  // A blob corrupted in the store: use refuses it, verify reports it.
  s.add(gguf_path(), named("tiny", "q8"));
  s.use("tiny", "v1");
  const auto m = s.manifest("tiny", "q8");
  flip_byte(s.blob_path(m.files[0].sha256), 4096);
  try {
    s.use("tiny", "q8");
    FAIL() << "corrupt blob accepted";
  } catch (const eg::Error& e) {
    EXPECT_NE(std::string(e.what()).find("corrupt"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s.pointers("tiny").current, "v1");
  EXPECT_THROW(s.rollback("tiny"), eg::Error) << "previous is the corrupt q8";
  EXPECT_EQ(s.pointers("tiny").current, "v1");
  const auto v = s.verify();
  EXPECT_FALSE(v.consistent);
  ASSERT_EQ(v.errors.size(), 1u);
  EXPECT_NE(v.errors[0].find("tiny:q8"), std::string::npos) << v.errors[0];
  EXPECT_TRUE(s.verify("tiny").errors.size() == 1u);
}

TEST(Store, VerifyReportsEveryKindOfDamage) {
  Store s(egtest::make_temp_dir() + "/store");
  const auto m = s.add(gguf_path(), named("tiny"));
  ASSERT_TRUE(s.verify().consistent);
  auto expect_error = [&](const std::string& needle) {
    const auto v = s.verify();
    EXPECT_FALSE(v.consistent) << needle;
    bool found = false;
    for (const auto& e : v.errors) found |= e.find(needle) != std::string::npos;
    EXPECT_TRUE(found) << "no error mentioning '" << needle << "'";
  };
  // A dangling pointer.
  const std::string refs = s.refs_path("tiny"), good_refs = egtest::read_file(refs);
  egtest::write_file(refs, R"({"current": "nope", "previous": null})");
  expect_error("names nope");
  egtest::write_file(refs, "garbage");
  expect_error("bad pointer file");
  egtest::write_file(refs, good_refs);
  // A missing blob, a truncated blob, a tree entry that is not the blob.
  const std::string blob = s.blob_path(m.files[0].sha256), keep = egtest::make_temp_dir() + "/keep";
  fs::rename(blob, keep);
  expect_error("is missing");
  fs::copy_file(keep, blob);
  expect_error("is not a link to its blob");
  fs::remove(blob);
  fs::rename(keep, blob);
  ASSERT_TRUE(s.verify().consistent);
  ::truncate(blob.c_str(), 1000);
  expect_error("has 1000 bytes");
  // An unreadable manifest.
  egtest::write_file(s.manifest_path("tiny", "broken"), "{\"schema\": 1}");
  expect_error("bad manifest");
}

TEST(Store, RemoveKeepsSharedBlobsAndGcFreesExactBytes) {
  Store s(egtest::make_temp_dir() + "/store");
  const auto a = s.add(hf_dir(), named("a"));
  s.add(hf_dir(), named("b"));  // the same blobs
  const auto g1 = s.add(gguf_path(), named("a", "q8"));  // current of a
  EXPECT_THROW(s.remove("a", "q8", false), eg::Error) << "current without --force";
  s.remove("a", "v1", false);  // previous; its blobs are still b's
  EXPECT_EQ(s.pointers("a").previous, "");
  for (const auto& f : a.files) EXPECT_TRUE(fs::exists(s.blob_path(f.sha256))) << f.path;
  EXPECT_TRUE(s.verify().consistent);
  s.remove("a", "q8", true);  // the last version: the gguf blob goes, a has no pointers
  EXPECT_FALSE(fs::exists(s.blob_path(g1.files[0].sha256)));
  EXPECT_EQ(s.pointers("a").current, "");
  EXPECT_EQ(s.names(), std::vector<std::string>{"b"});
  EXPECT_TRUE(s.verify().consistent);
  EXPECT_EQ(s.gc().bytes_freed, 0u) << "rm already removed what nobody uses";
  // gc: blobs nobody references (left by an interrupted add) are freed, byte-exact.
  const std::string junk = s.blob_path(eg::store::sha256_hex("junk"));
  egtest::write_file(junk, std::string(12345, 'j'));
  egtest::write_file(s.root() + "/tmp/blob-1-1", std::string(100, 'x'));
  const auto g = s.gc();
  EXPECT_EQ(g.bytes_freed, 12345u + 100u);
  EXPECT_EQ(g.blobs, 1);
  EXPECT_EQ(g.temp, 1);
  EXPECT_TRUE(s.verify().consistent);
  EXPECT_EQ(s.resolve("b").version, "v1");
}

TEST(Store, HardLinkAddSharesTheSourceInodeAndFollowsSymlinks) {
  const std::string tmp = egtest::make_temp_dir();
  // A folder like a Hugging Face cache snapshot: the files are symlinks to blobs elsewhere.
  const std::string real = tmp + "/real", snap = tmp + "/snapshot";
  fs::copy(hf_dir(), real, fs::copy_options::recursive);
  fs::create_directories(snap);
  for (const auto& e : fs::directory_iterator(real)) fs::create_symlink(e.path(), snap + "/" + e.path().filename().string());
  Store s(tmp + "/store");
  auto o = named("tiny");
  o.hard_link = true;
  const auto m = s.add(snap, o);
  for (const auto& f : m.files) {
    struct stat a{}, b{};
    ASSERT_EQ(::lstat(s.blob_path(f.sha256).c_str(), &a), 0);
    ASSERT_EQ(::stat((real + "/" + f.path).c_str(), &b), 0);
    EXPECT_TRUE(S_ISREG(a.st_mode)) << f.path << ": the blob is a file, not a symlink";
    EXPECT_EQ(a.st_ino, b.st_ino) << f.path;
  }
  EXPECT_TRUE(s.verify().consistent);
  // Editing the linked source corrupts the store, and verify says so.
  flip_byte(real + "/model.safetensors", 100000);
  EXPECT_FALSE(s.verify().consistent);
  // Without --link the store has its own copy.
  Store c(tmp + "/copied");
  const auto mc = c.add(snap, named("tiny"));
  struct stat a{}, b{};
  ::stat(c.blob_path(mc.files[0].sha256).c_str(), &a);
  ::stat((real + "/" + mc.files[0].path).c_str(), &b);
  EXPECT_NE(a.st_ino, b.st_ino);
}

TEST(Store, CliCommandsWithJson) {
  const std::string store = egtest::make_temp_dir() + "/store";
  json j = cli_json(store, {"add", hf_dir(), "--name", "tiny"});
  EXPECT_EQ(j["version"], "v1");
  EXPECT_EQ(j["current"], true);
  j = cli_json(store, {"add", gguf_path(), "--name", "tiny", "--version", "q8", "--no-switch"});
  EXPECT_EQ(j["current"], false);
  j = cli_json(store, {"list"});
  ASSERT_EQ(j["models"].size(), 1u);
  EXPECT_EQ(j["models"][0]["current"], "v1");
  EXPECT_EQ(j["models"][0]["versions"].size(), 2u);
  EXPECT_EQ(j["shared_bytes"], 0);
  j = cli_json(store, {"show", "tiny:q8"});
  EXPECT_EQ(j["quantization"], "Q8_0");
  EXPECT_EQ(j["id"], "sha256:" + eg::store::sha256_file(gguf_path()));
  j = cli_json(store, {"use", "tiny:q8"});
  EXPECT_EQ(j["current"], "q8");
  EXPECT_EQ(j["previous"], "v1");
  j = cli_json(store, {"rollback", "tiny"});
  EXPECT_EQ(j["current"], "v1");
  j = cli_json(store, {"add", hf_dir(), "--name", "tiny2"});
  j = cli_json(store, {"list"});
  EXPECT_EQ(j["shared_bytes"].get<uint64_t>(), fs::file_size(hf_dir() + "/model.safetensors") +
                                                    fs::file_size(hf_dir() + "/tokenizer.json") +
                                                    fs::file_size(hf_dir() + "/tokenizer_config.json") +
                                                    fs::file_size(hf_dir() + "/config.json") +
                                                    fs::file_size(hf_dir() + "/generation_config.json") +
                                                    fs::file_size(hf_dir() + "/reference.json"));
  j = cli_json(store, {"rm", "tiny:v1"}, 1);  // current
  j = cli_json(store, {"rm", "tiny:q8"});
  EXPECT_EQ(j["removed"], "q8");
  j = cli_json(store, {"verify"});
  EXPECT_EQ(j["consistent"], true);
  j = cli_json(store, {"gc"});
  EXPECT_EQ(j["bytes_freed"], 0);
  // -m takes a store reference (EDGEGEMMA_STORE), a path on disk wins.
  setenv("EDGEGEMMA_STORE", store.c_str(), 1);
  auto r = egtest::run_cmd({egtest::cli_path(), "run", "-m", "tiny", "-p", "Hi", "-n", "3", "--temp", "0", "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = egtest::run_cmd({egtest::cli_path(), "run", "-m", "nosuch", "-p", "Hi", "-n", "3"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("no model 'nosuch'"), std::string::npos) << r.err;
  unsetenv("EDGEGEMMA_STORE");
}

TEST(Store, ConcurrentAddsTakeTheLock) {
  // Three CLI processes add versions without a tag at once: the lock serialises them, so each
  // gets its own vN (without it they would race for the same tag or the same temp names).
  const std::string store = egtest::make_temp_dir() + "/store";
  std::vector<pid_t> kids;
  for (int i = 0; i < 3; ++i) {
    const pid_t pid = fork();
    if (pid == 0) {
      const std::string cli = egtest::cli_path();
      execl(cli.c_str(), cli.c_str(), "models", "add", gguf_path().c_str(), "--name", "m", "--store", store.c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
    kids.push_back(pid);
  }
  for (pid_t k : kids) {
    int st = 0;
    waitpid(k, &st, 0);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  Store s(store, false);
  std::set<std::string> vs;
  for (const auto& v : s.versions("m")) vs.insert(v.manifest.version);
  EXPECT_EQ(vs, (std::set<std::string>{"v1", "v2", "v3"}));
  EXPECT_TRUE(s.verify().consistent);
  EXPECT_TRUE(s.verify().garbage.empty());
}
