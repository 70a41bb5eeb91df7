// `edgegemma kb` and `chat --kb` end to end (BM25-only bases: this build has no embedding model;
// vectors are covered in process by kb_test / server_kb_test with a test embedder): add (folders,
// no-op re-add, refused files reported while the others are added), search (text and --json),
// info, rm, faq-add, the planted-passage recall on the shared corpus's valid.txt, and chat --kb
// citing its sources.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace {

using namespace egtest;
using nlohmann::json;

bool has(const std::string& s, const std::string& p) { return s.find(p) != std::string::npos; }

TEST(KbCli, AddSearchInfoRm) {
  const std::string dir = make_temp_dir(), db = dir + "/kb.db";
  std::filesystem::create_directories(dir + "/docs/.hidden");
  write_file(dir + "/docs/a.md", "# Ferry\n\nThe last ferry to Dunmorrow leaves at 17:40 on weekdays.\n");
  write_file(dir + "/docs/b.html", "<p>The <b>Brindle</b> protocol gives up after seven attempts.</p>");
  write_file(dir + "/docs/c.txt", "caf\xe9 in Latin-1");
  write_file(dir + "/docs/.hidden/x.txt", "hidden");
  auto r = run_cmd({cli_path(), "kb", "add", db, dir + "/docs"});
  EXPECT_EQ(r.exit_code, 1) << "a refused file makes the exit status 1";
  EXPECT_TRUE(has(r.err, "c.txt: not valid UTF-8 at byte 3")) << r.err;
  EXPECT_TRUE(has(r.out, "added " + dir + "/docs/a.md: 1 chunks")) << r.out;
  EXPECT_TRUE(has(r.out, "added " + dir + "/docs/b.html")) << r.out;
  EXPECT_FALSE(has(r.out, "hidden"));
  r = run_cmd({cli_path(), "kb", "add", db, dir + "/docs/a.md"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(has(r.out, "unchanged")) << r.out;
  r = run_cmd({cli_path(), "kb", "search", db, "when does the last ferry leave", "--json", "-k", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json hits = json::parse(r.out);
  ASSERT_GE(hits.size(), 1u);
  EXPECT_EQ(hits[0]["source"], dir + "/docs/a.md");
  EXPECT_EQ(hits[0]["offset"], 0);
  EXPECT_EQ(hits[0]["bm25_rank"], 1);
  EXPECT_FALSE(hits[0].contains("vector_rank"));
  r = run_cmd({cli_path(), "kb", "search", db, "Brindle attempts"});
  EXPECT_TRUE(has(r.out, "[1] " + dir + "/docs/b.html")) << r.out;
  EXPECT_TRUE(has(r.out, "The Brindle protocol gives up")) << "HTML stripped: " << r.out;
  r = run_cmd({cli_path(), "kb", "info", db, "--json"});
  ASSERT_EQ(r.exit_code, 0);
  const json info = json::parse(r.out);
  EXPECT_EQ(info["files"], 2);
  EXPECT_TRUE(info["embedding_model"].is_null());
  r = run_cmd({cli_path(), "kb", "rm", db, dir + "/docs/b.html"});
  EXPECT_TRUE(has(r.out, "removed 1 file")) << r.out;
  EXPECT_TRUE(has(run_cmd({cli_path(), "kb", "search", db, "Brindle"}).out, "(no match)"));
  // Clear errors.
  r = run_cmd({cli_path(), "kb", "search", dir + "/missing.db", "x"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.err, "missing.db") && has(r.err, "no such database")) << r.err;
  write_file(dir + "/junk.db", std::string(4096, 'j'));
  r = run_cmd({cli_path(), "kb", "info", dir + "/junk.db"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.err, "junk.db") && has(r.err, "not a knowledge base")) << r.err;
  EXPECT_EQ(std::filesystem::file_size(dir + "/junk.db"), 4096u) << "a foreign file is not modified";
  r = run_cmd({cli_path(), "kb", "add", db, dir + "/docs/a.md", "-m", dir + "/no-model"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.err, "no-model")) << r.err;
}

TEST(KbCli, FaqAdd) {
  const std::string dir = make_temp_dir(), db = dir + "/faq.db";
  write_file(dir + "/faq.jsonl", "{\"question\": \"Opening hours?\", \"answer\": \"9 to 5\"}\n");
  auto r = run_cmd({cli_path(), "kb", "faq-add", db, dir + "/faq.jsonl"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "added 1 FAQ pair")) << r.out;
  r = run_cmd({cli_path(), "kb", "faq-add", db, "--question", "Where?", "--answer", "Here"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(run_cmd({cli_path(), "kb", "info", db, "--json"}).out)["faq"], 2);
  write_file(dir + "/bad.jsonl", "not json\n");
  r = run_cmd({cli_path(), "kb", "faq-add", db, dir + "/bad.jsonl"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.err, "bad.jsonl: line 1")) << r.err;
}

// Planted passages in the shared corpus's valid.txt (BM25 only): every keyword query finds its
// passage first (bench/kb_recall.py measures the whole corpus and paraphrased queries).
TEST(KbCli, PlantedPassagesAreFoundInTheCorpus) {
  const std::string dir = make_temp_dir(), db = dir + "/kb.db";
  const std::vector<std::pair<std::string, std::string>> planted = {
      {"The Velmora Observatory on Mount Karsh houses a telescope its astronomers nicknamed the Owl.",
       "What nickname did astronomers give the telescope on Mount Karsh?"},
      {"The last ferry from Quillan Harbour to Dunmorrow leaves at 17:40 on weekdays.", "When does the last ferry to Dunmorrow leave?"},
      {"The Kestrel K9 drone battery lasts 41 minutes in still air.", "How long does the Kestrel K9 battery last?"},
      {"The poet Ilse Marrow wrote The Glass Orchard while keeping a lighthouse in Finnmark.", "Who wrote The Glass Orchard?"}};
  std::vector<std::string> args = {cli_path(), "kb", "add", db, shared_dir() + "/data/corpus/valid.txt"};
  for (size_t i = 0; i < planted.size(); ++i) {
    write_file(dir + "/p" + std::to_string(i) + ".txt", planted[i].first + "\n");
    args.push_back(dir + "/p" + std::to_string(i) + ".txt");
  }
  ASSERT_EQ(run_cmd(args).exit_code, 0);
  for (size_t i = 0; i < planted.size(); ++i) {
    const auto r = run_cmd({cli_path(), "kb", "search", db, planted[i].second, "--json", "-k", "1"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(json::parse(r.out)[0]["source"], dir + "/p" + std::to_string(i) + ".txt") << planted[i].second;
  }
}

TEST(KbCli, ChatWithKbCitesItsSources) {
  const std::string dir = make_temp_dir(), db = dir + "/kb.db";
  write_file(dir + "/ferry.txt", "The last ferry to Dunmorrow leaves at 17:40 on weekdays.\n");
  ASSERT_EQ(run_cmd({cli_path(), "kb", "add", db, dir + "/ferry.txt"}).exit_code, 0);
  const auto r = run_cmd({cli_path(), "chat", "-m", shared_dir() + "/models/tiny-gemma3", "-t", "2", "--plain",
                          "--temp", "0", "-n", "8", "--kb", db},
                         "When does the last ferry to Dunmorrow leave?\nTell me a joke about zebras.\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.err, "sources: [1] " + dir + "/ferry.txt (offset 0)")) << r.err;
  EXPECT_TRUE(has(r.err, "(no passages from the knowledge base)")) << r.err;
}

TEST(KbCli, ServeFlagErrors) {
  const std::string dir = make_temp_dir();
  auto r = run_cmd({cli_path(), "serve", "--port", "0", "--first-token-timeout", "3x"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.err, "--first-token-timeout: unknown unit 'x'")) << r.err;
  r = run_cmd({cli_path(), "serve", "--port", "0", "-m", shared_dir() + "/models/tiny-gemma3", "--kb", dir + "/none.db"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.err, "none.db") && has(r.err, "no such database")) << r.err;
}

}  // namespace
