// The knowledge base (src/kb): SHA-256, text extraction and HTML stripping, chunking, the SIMD
// cosine scan against a float64 reference, reciprocal rank fusion, the SQLite store (schema,
// corrupt and locked files, no-op re-add, model mismatch, an add killed halfway), hybrid search on
// a planted corpus, the FAQ matcher and the RAG prompt.
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/error.h"
#include "kb/chunker.h"
#include "kb/faq.h"
#include "kb/fusion.h"
#include "kb/knowledge_base.h"
#include "kb/rag_prompt.h"
#include "core/sha256.h"
#include "kb/text_extract.h"
#include "kb/vector_scan.h"
#include "kb_test_embedder.h"
#include "test_util.h"
#include "tokenizer/utf8.h"

namespace {

using namespace eg::kb;
using eg::Sha256;
using eg::sha256_hex;
using egtest::TrigramEmbedder;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const eg::Error& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// ---- SHA-256: FIPS 180-2 appendix examples and the one-million-'a' vector ----
TEST(KbSha256, KnownVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  Sha256 h;
  const std::string block(1000, 'a');
  for (int i = 0; i < 1000; ++i) h.update(block.data(), block.size());  // streaming across block boundaries
  EXPECT_EQ(h.hex(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// ---- text extraction ----
TEST(KbText, RefusesBinaryAndInvalidUtf8WithTheFileName) {
  const std::string dir = egtest::make_temp_dir();
  egtest::write_file(dir + "/bin.dat", std::string("abc\0def", 7));
  egtest::write_file(dir + "/latin1.txt", "caf\xe9 au lait");
  egtest::write_file(dir + "/ok.md", "# Title\n\ncaf\xc3\xa9\n");
  std::string e = error_of([&] { extract_file(dir + "/bin.dat"); });
  EXPECT_TRUE(has(e, "bin.dat") && has(e, "not a text file") && has(e, "offset 3")) << e;
  e = error_of([&] { extract_file(dir + "/latin1.txt"); });
  EXPECT_TRUE(has(e, "latin1.txt") && has(e, "not valid UTF-8 at byte 3")) << e;
  const Extracted x = extract_file(dir + "/ok.md");
  EXPECT_EQ(x.kind, "text");
  EXPECT_EQ(x.text, "# Title\n\ncaf\xc3\xa9\n");  // byte for byte
  EXPECT_EQ(x.sha256, sha256_hex(x.text));
  e = error_of([&] { extract_file(dir + "/missing.txt"); });
  EXPECT_TRUE(has(e, "missing.txt")) << e;
  e = error_of([&] { extract_file(dir); });
  EXPECT_TRUE(has(e, "directory")) << e;
  egtest::write_file(dir + "/doc.pdf", "%PDF-1.4");
  e = error_of([&] { extract_file(dir + "/doc.pdf"); });
  EXPECT_TRUE(has(e, "PDF")) << e;
}

TEST(KbText, OneGigabyteFileIsRefusedBeforeReading) {
  const std::string path = egtest::make_temp_dir() + "/huge.txt";
  { std::ofstream f(path); }
  std::filesystem::resize_file(path, 1ull << 30);  // sparse: no disk used
  const std::string e = error_of([&] { extract_file(path); });
  EXPECT_TRUE(has(e, "huge.txt") && has(e, "too large") && has(e, "1024 MiB")) << e;
}

TEST(KbText, HtmlToText) {
  EXPECT_EQ(html_to_text("<html><head><title>T</title><style>p{color:red}</style></head>"
                         "<body><p>Hello&nbsp;<b>wor</b>ld &amp; caf&#233; &#x4E2D;</p>"
                         "<script>var x = '<p>no</p>';</script><!-- hidden --><ul><li>one</li><li>two</li></ul>"
                         "a &lt; b &unknown; 3 < 4</body></html>"),
            "T\n\nHello world & caf\xc3\xa9 \xe4\xb8\xad\n\none\ntwo\n\na < b &unknown; 3 < 4");
  EXPECT_EQ(html_to_text("<pre>a  b\nc</pre>"), "a  b\nc");
  EXPECT_EQ(html_to_text("<a href=\"x>y\">link</a>"), "link");  // '>' inside a quoted attribute
  EXPECT_EQ(html_to_text("&#0;&#xD800;&#1114112;"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(html_to_text("<p>unclosed <b"), "unclosed");
  // Never longer than the input; valid UTF-8 in -> valid UTF-8 out (random markup soup).
  std::mt19937 rng(7);
  const std::vector<std::string> atoms = {"<p>", "</p>", "<br>", "&amp;", "&#65;", "&#x10FFFF;", "&#0;", "<script>",
                                          "</script>", "<!--", "-->", " ", "\n", "x", "\xc3\xa9", "\xe4\xb8\xad",
                                          "<", ">", "&", ";", "<pre>", "</pre>", "\"", "<td>"};
  for (int t = 0; t < 2000; ++t) {
    std::string in;
    const int n = static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) in += atoms[rng() % atoms.size()];
    const std::string out = html_to_text(in);
    ASSERT_LE(out.size(), in.size()) << in;
    ASSERT_TRUE(eg::utf8::is_valid(out)) << in;
  }
}

// ---- chunking ----
TEST(KbChunker, OffsetsCoverTheTextOnCharacterBoundariesWithOverlap) {
  std::mt19937 rng(3);
  const std::vector<std::string> words = {"alpha", "beta", "gamma", "\xe4\xb8\xad\xe6\x96\x87", "caf\xc3\xa9",
                                          "delta.", "\n", "\n\n", "x"};
  std::string text;
  while (text.size() < 20000) text += words[rng() % words.size()] + (rng() % 3 ? " " : "");
  const ChunkOptions o{500, 100};
  const auto chunks = chunk_text(text, o);
  ASSERT_GT(chunks.size(), 30u);
  EXPECT_EQ(chunks.front().offset, 0u);
  EXPECT_EQ(chunks.back().offset + chunks.back().length, text.size());
  for (size_t i = 0; i < chunks.size(); ++i) {
    const Chunk& c = chunks[i];
    ASSERT_LE(c.length, 500u);
    ASSERT_GE(c.length, 500u / 3) << "only the last chunk may be short" << i;  // all but possibly the last
    ASSERT_TRUE(eg::utf8::is_valid(text.substr(c.offset, c.length))) << i;
    if (i > 0) {
      const Chunk& p = chunks[i - 1];
      ASSERT_GT(c.offset, p.offset);
      ASSERT_LE(c.offset, p.offset + p.length) << "no gap between chunks " << i - 1 << " and " << i;
      ASSERT_LE(p.offset + p.length - c.offset, 100u) << "overlap at most overlap_bytes";
    }
    if (i + 1 == chunks.size()) break;
  }
  EXPECT_EQ(chunk_text(text, o).size(), chunks.size());  // deterministic
  const auto again = chunk_text(text, o);
  for (size_t i = 0; i < chunks.size(); ++i) ASSERT_EQ(again[i].offset, chunks[i].offset);
  EXPECT_TRUE(chunk_text("", o).empty());
  EXPECT_TRUE(chunk_text("   \n\n  ", o).empty());
  EXPECT_FALSE(error_of([] { chunk_text("x", ChunkOptions{10, 0}); }).empty());
  EXPECT_FALSE(error_of([] { chunk_text("x", ChunkOptions{100, 60}); }).empty());
}

// Found by html_text_fuzz: in bytes that are not UTF-8, a long run of continuation bytes made the
// next chunk start past the end of the previous one (bytes skipped). Chunks must not leave gaps.
TEST(KbChunker, NoGapsInTextThatIsNotUtf8) {
  const std::string text = "&unknow" + std::string(300, '\x83') + "n; tail of the text";
  const auto chunks = chunk_text(text, ChunkOptions{64, 16});
  ASSERT_FALSE(chunks.empty());
  EXPECT_EQ(chunks.front().offset, 0u);
  EXPECT_EQ(chunks.back().offset + chunks.back().length, text.size());
  for (size_t i = 1; i < chunks.size(); ++i) {
    ASSERT_GT(chunks[i].offset, chunks[i - 1].offset);
    ASSERT_LE(chunks[i].offset, chunks[i - 1].offset + chunks[i - 1].length) << "gap before chunk " << i;
  }
}

// ---- the vector scan against a float64 reference (random, non-zero, various dims) ----
TEST(KbVectorScan, MatchesFloat64Reference) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (size_t dim : {1u, 3u, 7u, 16u, 17u, 64u, 100u, 768u, 1001u}) {
    const size_t n = 37;
    std::vector<float> q(dim), rows(n * dim), out(n);
    for (auto& x : q) x = u(rng) + (x == 0 ? 0.5f : 0.0f);
    for (auto& x : rows) x = u(rng) * 3.0f;
    cosine_scan(q.data(), rows.data(), n, dim, out.data());
    for (size_t j = 0; j < n; ++j) {
      double d = 0, qq = 0, rr = 0;
      for (size_t i = 0; i < dim; ++i) {
        d += double(q[i]) * rows[j * dim + i];
        qq += double(q[i]) * q[i];
        rr += double(rows[j * dim + i]) * rows[j * dim + i];
      }
      const double ref = d / std::sqrt(qq * rr);
      ASSERT_NEAR(out[j], ref, 2e-6 + 1e-5 * std::sqrt(double(dim)) * 1e-1) << "dim " << dim << " row " << j;
    }
  }
  std::vector<float> zero(8, 0.0f), one(8, 1.0f);
  float c = 1;
  cosine_scan(one.data(), zero.data(), 1, 8, &c);
  EXPECT_EQ(c, 0.0f);  // a zero row: 0, not NaN
}

TEST(KbVectorScan, TopK) {
  const float s[] = {0.1f, 0.9f, -0.5f, 0.9f, 0.3f};
  const auto t = top_k(s, 5, 3);
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].index, 1u);  // tie 0.9: lower index first
  EXPECT_EQ(t[1].index, 3u);
  EXPECT_EQ(t[2].index, 4u);
  EXPECT_EQ(top_k(s, 5, 10).size(), 5u);
}

// ---- fusion ----
TEST(KbFusion, ReciprocalRankFusionByHand) {
  // A: [10, 20, 30], B: [30, 40]; k = 60.
  const auto f = rrf_fuse({{10, 20, 30}, {30, 40}}, 10);
  ASSERT_EQ(f.size(), 4u);
  EXPECT_EQ(f[0].id, 30);  // 1/63 + 1/61
  EXPECT_NEAR(f[0].score, 1.0 / 63 + 1.0 / 61, 1e-12);
  EXPECT_EQ(f[1].id, 10);  // 1/61, best rank 1 (ties with 40's 1/62? no: 1/61 > 1/62)
  EXPECT_NEAR(f[1].score, 1.0 / 61, 1e-12);
  EXPECT_EQ(f[2].id, 20);  // 1/62, best rank 2
  EXPECT_EQ(f[3].id, 40);  // 1/62, best rank 2, higher id
  EXPECT_EQ(rrf_fuse({{1, 2, 3}}, 2).size(), 2u);
  EXPECT_EQ(fts_query("What's the colour, of X? x"), "\"what\" OR \"the\" OR \"colour\" OR \"of\"");
  EXPECT_EQ(fts_query("?!"), "");
}

// ---- the store ----
struct Corpus {
  std::string dir;
  Corpus() : dir(egtest::make_temp_dir()) {
    egtest::write_file(dir + "/lighthouse.txt",
                       "The old lighthouse keeper on Skerry Island logged every storm in a brass-bound journal. "
                       "In 1893 the lamp was converted from whale oil to kerosene.\n");
    egtest::write_file(dir + "/bread.md",
                       "# Sourdough\n\nA sourdough starter needs flour and water, fed daily. Bake the loaf at "
                       "250 degrees for forty minutes with steam.\n");
    egtest::write_file(dir + "/volcano.html",
                       "<html><body><h1>Volcanoes</h1><p>Basaltic lava flows are runny; andesitic eruptions "
                       "are explosive.</p></body></html>");
    egtest::write_file(dir + "/orchard.txt",
                       "Planting apple trees: the orchard was planted in rows twelve feet apart, and grafted "
                       "saplings bore fruit after four years.\n");
  }
};

TEST(KbStore, SchemaFts5AndReopen) {
  const std::string db = egtest::make_temp_dir() + "/kb.sqlite";
  EXPECT_TRUE(has(error_of([&] { KnowledgeBase::open(db); }), "no such database"));  // not created without create
  {
    auto kb = KnowledgeBase::open(db, KbOpenOptions{true});
    EXPECT_EQ(kb->info().schema_version, kSchemaVersion);
    EXPECT_EQ(sqlite3_compileoption_used("ENABLE_FTS5"), 1);  // Debian's libsqlite3 has FTS5
    EXPECT_EQ(kb->db().query_int("SELECT count(*) FROM sqlite_master WHERE name = 'chunks_fts'"), 1);
    Stmt s = kb->db().prepare("PRAGMA journal_mode");
    ASSERT_TRUE(s.step());
    EXPECT_EQ(s.col_text(0), "wal");
  }
  auto again = KnowledgeBase::open(db);
  EXPECT_EQ(again->info().files, 0);
}

TEST(KbStore, CorruptAndForeignFilesAreClearErrors) {
  const std::string dir = egtest::make_temp_dir();
  egtest::write_file(dir + "/garbage.db", std::string(8192, 'x'));
  std::string e = error_of([&] { KnowledgeBase::open(dir + "/garbage.db"); });
  EXPECT_TRUE(has(e, "garbage.db") && has(e, "not a knowledge base")) << e;
  // A SQLite database of another program.
  {
    sqlite3* h = nullptr;
    ASSERT_EQ(sqlite3_open((dir + "/other.db").c_str(), &h), SQLITE_OK);
    sqlite3_exec(h, "CREATE TABLE t(x)", nullptr, nullptr, nullptr);
    sqlite3_close(h);
  }
  e = error_of([&] { KnowledgeBase::open(dir + "/other.db"); });
  EXPECT_TRUE(has(e, "other.db") && has(e, "not an edgegemma knowledge base")) << e;
  // A real base with damaged pages.
  const std::string db = dir + "/kb.db";
  {
    auto kb = KnowledgeBase::open(db, KbOpenOptions{true});
    std::string big;
    for (int i = 0; i < 3000; ++i) big += "line " + std::to_string(i) + " of a file that fills several pages.\n";
    egtest::write_file(dir + "/big.txt", big);
    kb->add_file(dir + "/big.txt");
    kb->db().exec("PRAGMA wal_checkpoint(TRUNCATE)");
  }
  std::string bytes = egtest::read_file(db);
  ASSERT_GT(bytes.size(), 40000u);
  for (size_t i = 4096 * 3; i < bytes.size() - 4096; i += 4096)
    for (size_t k = 0; k < 600; ++k) bytes[i + 100 + k] = static_cast<char>(0xA5 ^ k);
  egtest::write_file(db, bytes);
  e = error_of([&] {
    auto kb = KnowledgeBase::open(db);
    kb->search("line of a file");
  });
  EXPECT_TRUE(has(e, "kb.db") && (has(e, "damaged"))) << e;
}

TEST(KbStore, LockedBaseIsAClearErrorAndNothingChanges) {
  Corpus c;
  const std::string db = c.dir + "/kb.db";
  { KnowledgeBase::open(db, KbOpenOptions{true})->add_file(c.dir + "/bread.md"); }
  sqlite3* h = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &h), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(h, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr), SQLITE_OK);
  KbOpenOptions o;
  o.busy_timeout_ms = 100;
  auto kb = KnowledgeBase::open(db, o);
  const std::string e = error_of([&] { kb->add_file(c.dir + "/lighthouse.txt"); });
  EXPECT_TRUE(has(e, "kb.db") && has(e, "locked") && has(e, "another process")) << e;
  sqlite3_exec(h, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(h);
  EXPECT_EQ(kb->info().files, 1);
  EXPECT_EQ(kb->add_file(c.dir + "/lighthouse.txt").status, AddResult::Status::Added);  // works once released
}

TEST(KbStore, ReAddingAnUnchangedFileIsANoOpAndChangedChunksReuseVectors) {
  Corpus c;
  TrigramEmbedder emb;
  auto kb = KnowledgeBase::open(c.dir + "/kb.db", KbOpenOptions{true});
  kb->use_embedder(&emb, "trigram");
  std::string text;
  for (int i = 0; i < 40; ++i) text += "Paragraph " + std::to_string(i) + " talks about topic " + std::to_string(i * 7) + ".\n\n";
  egtest::write_file(c.dir + "/long.txt", text);
  AddOptions ao;
  ao.chunking = ChunkOptions{256, 32};
  const AddResult r1 = kb->add_file(c.dir + "/long.txt", ao);
  EXPECT_EQ(r1.status, AddResult::Status::Added);
  ASSERT_GT(r1.chunks, 3u);
  EXPECT_EQ(r1.embedded, r1.chunks);
  const int64_t changes = sqlite3_total_changes64(kb->db().handle());
  const int calls = emb.calls;
  const AddResult r2 = kb->add_file(c.dir + "/long.txt", ao);
  EXPECT_EQ(r2.status, AddResult::Status::Unchanged);
  EXPECT_EQ(r2.chunks, r1.chunks);
  EXPECT_EQ(sqlite3_total_changes64(kb->db().handle()), changes);  // nothing written
  EXPECT_EQ(emb.calls, calls);                                     // nothing embedded
  // Append a paragraph: the earlier chunks keep their vectors.
  egtest::write_file(c.dir + "/long.txt", text + "A new closing paragraph.\n");
  const AddResult r3 = kb->add_file(c.dir + "/long.txt", ao);
  EXPECT_EQ(r3.status, AddResult::Status::Updated);
  EXPECT_GT(r3.reused, 0u);
  EXPECT_LT(r3.embedded, r3.chunks);
  EXPECT_EQ(r3.reused + r3.embedded, r3.chunks);
  const KbInfo i = kb->info();
  EXPECT_EQ(i.files, 1);
  EXPECT_EQ(i.chunks, static_cast<int64_t>(r3.chunks));
  EXPECT_EQ(i.vectors, i.chunks);
  EXPECT_EQ(i.chunking.chunk_bytes, 256);  // recorded at creation
  // Stored offsets point at the stored text (the file is plain text: byte offsets into it).
  Stmt s = kb->db().prepare("SELECT offset, length, text, sha256 FROM chunks");
  const std::string now = egtest::read_file(c.dir + "/long.txt");
  while (s.step()) {
    EXPECT_EQ(now.substr(static_cast<size_t>(s.col_int(0)), static_cast<size_t>(s.col_int(1))), s.col_text(2));
    EXPECT_EQ(sha256_hex(s.col_text(2)), s.col_text(3));
  }
}

TEST(KbStore, RefusesToMixModelsUntilReembedded) {
  Corpus c;
  TrigramEmbedder a(0), b(1), wide(0, 32);
  const std::string db = c.dir + "/kb.db";
  auto kb = KnowledgeBase::open(db, KbOpenOptions{true});
  kb->use_embedder(&a, "model-a");
  kb->add_file(c.dir + "/bread.md");
  std::string e = error_of([&] { kb->use_embedder(&b, "model-b"); });
  EXPECT_TRUE(has(e, "model-a") && has(e, "model-b") && has(e, "kb reembed")) << e;
  e = error_of([&] { kb->use_embedder(&wide, "model-a-32"); });
  EXPECT_TRUE(has(e, "never mixed")) << e;
  kb->use_embedder(nullptr, "");
  e = error_of([&] { kb->add_file(c.dir + "/lighthouse.txt"); });
  EXPECT_TRUE(has(e, "model-a") && has(e, "-m")) << e;
  EXPECT_EQ(kb->info().files, 1);
  kb->use_embedder(&b, "model-b", /*replacing=*/true);
  EXPECT_EQ(kb->reembed(), static_cast<size_t>(kb->info().chunks));
  EXPECT_EQ(kb->info().model_path, "model-b");
  EXPECT_EQ(kb->info().model_digest, b.model_digest());
  kb->use_embedder(&b, "model-b");  // accepted now
  EXPECT_FALSE(error_of([&] { kb->use_embedder(&a, "model-a"); }).empty());
  // A BM25-only base with chunks: only reembed gives it vectors.
  auto lex = KnowledgeBase::open(c.dir + "/lex.db", KbOpenOptions{true});
  lex->add_file(c.dir + "/bread.md");
  lex->use_embedder(&a, "model-a");
  e = error_of([&] { lex->add_file(c.dir + "/volcano.html"); });
  EXPECT_TRUE(has(e, "BM25-only") && has(e, "reembed")) << e;
}

TEST(KbStore, RefusedFilesLeaveTheBaseAsItWas) {
  Corpus c;
  auto kb = KnowledgeBase::open(c.dir + "/kb.db", KbOpenOptions{true});
  kb->add_file(c.dir + "/bread.md");
  egtest::write_file(c.dir + "/bad.txt", "ok\xff\xfe");
  EXPECT_TRUE(has(error_of([&] { kb->add_file(c.dir + "/bad.txt"); }), "bad.txt"));
  const KbInfo i = kb->info();
  EXPECT_EQ(i.files, 1);
  // An update whose new version is not text keeps the old version.
  egtest::write_file(c.dir + "/bread.md", std::string("\0\0binary", 8));
  EXPECT_TRUE(has(error_of([&] { kb->add_file(c.dir + "/bread.md"); }), "not a text file"));
  EXPECT_EQ(kb->info().chunks, i.chunks);
  EXPECT_FALSE(kb->search("sourdough starter").empty());
}

TEST(KbStore, AnAddKilledHalfwayLeavesTheBaseAsBeforeThatFile) {
  Corpus c;
  const std::string db = c.dir + "/kb.db";
  std::string v1, v2;
  for (int i = 0; i < 200; ++i) v1 += "Version one, sentence " + std::to_string(i) + " about the harbour.\n";
  for (int i = 0; i < 200; ++i) v2 += "Version two, sentence " + std::to_string(i) + " about the mountain.\n";
  egtest::write_file(c.dir + "/doc.txt", v1);
  AddOptions ao;
  ao.chunking = ChunkOptions{300, 50};
  int64_t chunks_before = 0;
  {
    auto kb = KnowledgeBase::open(db, KbOpenOptions{true});
    kb->add_file(c.dir + "/bread.md", ao);
    kb->add_file(c.dir + "/doc.txt", ao);
    chunks_before = kb->info().chunks;
  }
  egtest::write_file(c.dir + "/doc.txt", v2);
  for (const std::string& file : {std::string("/doc.txt"), std::string("/lighthouse.txt")}) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto kb = KnowledgeBase::open(db);
      AddOptions k = ao;
      k.on_chunk = [](size_t done, size_t) {
        if (done == 1) raise(SIGKILL);  // killed inside the file's transaction
      };
      kb->add_file(c.dir + file, k);
      _exit(0);  // not reached
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << file;
    auto kb = KnowledgeBase::open(db);  // integrity checked on open
    const KbInfo i = kb->info();
    EXPECT_EQ(i.files, 2) << file;
    EXPECT_EQ(i.chunks, chunks_before) << file;
    const auto hits = kb->search("harbour", SearchOptions{3});
    ASSERT_FALSE(hits.empty());
    EXPECT_TRUE(has(hits[0].text, "Version one")) << "the old version of doc.txt is intact";
    EXPECT_TRUE(kb->search("mountain").empty());
  }
}

TEST(KbStore, RemoveFileAndFolder) {
  Corpus c;
  std::filesystem::create_directories(c.dir + "/sub");
  egtest::write_file(c.dir + "/sub/a.txt", "alpha file");
  egtest::write_file(c.dir + "/sub/b.txt", "beta file");
  egtest::write_file(c.dir + "/subway.txt", "gamma file");
  auto kb = KnowledgeBase::open(c.dir + "/kb.db", KbOpenOptions{true});
  for (auto f : {"/sub/a.txt", "/sub/b.txt", "/subway.txt", "/bread.md"}) kb->add_file(c.dir + f);
  EXPECT_EQ(kb->remove(c.dir + "/sub/"), 2);  // not /subway.txt
  EXPECT_EQ(kb->info().files, 2);
  EXPECT_EQ(kb->remove(c.dir + "/bread.md"), 1);
  EXPECT_EQ(kb->remove(c.dir + "/bread.md"), 0);
  EXPECT_TRUE(kb->search("sourdough").empty());  // the FTS index follows
  EXPECT_FALSE(kb->search("gamma").empty());
}

// ---- hybrid search on a planted corpus ----
TEST(KbSearch, HybridRankingOnAPlantedCorpus) {
  Corpus c;
  TrigramEmbedder emb;
  auto kb = KnowledgeBase::open(c.dir + "/kb.db", KbOpenOptions{true});
  kb->use_embedder(&emb, "trigram");
  for (auto f : {"/lighthouse.txt", "/bread.md", "/volcano.html", "/orchard.txt"}) kb->add_file(c.dir + f);
  auto top = [&](const std::string& q, SearchOptions o = {}) {
    const auto h = kb->search(q, o);
    return h.empty() ? std::string() : std::filesystem::path(h[0].source).filename().string();
  };
  EXPECT_EQ(top("when was the lamp converted to kerosene"), "lighthouse.txt");
  EXPECT_EQ(top("sourdough starter flour"), "bread.md");
  EXPECT_EQ(top("explosive andesitic eruptions"), "volcano.html");
  // No word in common with the passage ("plant" vs "planted", "graft" vs "grafted"): BM25 finds
  // nothing, the vectors (shared trigrams) find it.
  SearchOptions lex;
  lex.vectors = false;
  EXPECT_TRUE(kb->search("plant graft sapling", lex).empty());
  const auto h = kb->search("plant graft sapling");
  ASSERT_FALSE(h.empty());
  EXPECT_EQ(std::filesystem::path(h[0].source).filename(), "orchard.txt");
  EXPECT_GT(h[0].vector_rank, 0);
  EXPECT_EQ(h[0].bm25_rank, 0);
  // Both lists: fused scores are the RRF sums of the ranks reported.
  for (const auto& x : kb->search("lighthouse keeper storm journal", SearchOptions{4})) {
    double s = 0;
    if (x.bm25_rank) s += 1.0 / (60 + x.bm25_rank);
    if (x.vector_rank) s += 1.0 / (60 + x.vector_rank);
    EXPECT_NEAR(x.score, s, 1e-12);
  }
  EXPECT_EQ(kb->search("lighthouse keeper storm journal")[0].bm25_rank, 1);
  // HTML was stripped before indexing: no tag names are searchable.
  EXPECT_TRUE(kb->search("body html", lex).empty());
}

// ---- FAQ ----
TEST(KbFaq, LexicalAndVectorMatchesAndThresholds) {
  const std::string dir = egtest::make_temp_dir();
  egtest::write_file(dir + "/faq.jsonl",
                     "{\"question\": \"What are the opening hours?\", \"answer\": \"We are open 9 to 5.\"}\n"
                     "\n{\"question\": \"How do I reset my password?\", \"answer\": \"Use the reset link.\"}\n");
  auto kb = KnowledgeBase::open(dir + "/faq.db", KbOpenOptions{true});
  EXPECT_EQ(faq_import(*kb, dir + "/faq.jsonl"), 2u);
  auto m = faq_match(*kb, "what are your opening hours");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->answer, "We are open 9 to 5.");
  EXPECT_EQ(m->method, "lexical");
  EXPECT_NEAR(m->similarity, word_dice("what are your opening hours", "What are the opening hours?"), 1e-12);
  EXPECT_NEAR(word_dice("what are your opening hours", "What are the opening hours?"), 2.0 * 4 / (5 + 5), 1e-12);
  EXPECT_FALSE(faq_match(*kb, "tell me about volcanoes"));
  EXPECT_FALSE(faq_match(*kb, "password"));  // one shared word of 5: below 0.6
  egtest::write_file(dir + "/bad.jsonl", "{\"question\": \"q\"}\n");
  EXPECT_TRUE(has(error_of([&] { faq_import(*kb, dir + "/bad.jsonl"); }), "line 1"));
  faq_add(*kb, "How do I reset my password?", "Open Settings, then Reset.");  // replaces the answer
  EXPECT_EQ(kb->info().faq, 2);
  // With vectors: a misspelt question shares trigrams, not words.
  TrigramEmbedder emb;
  auto vk = KnowledgeBase::open(dir + "/faqv.db", KbOpenOptions{true});
  vk->use_embedder(&emb, "trigram");
  faq_import(*vk, dir + "/faq.jsonl");
  FaqOptions fo;
  fo.vector_threshold = 0.5;
  m = faq_match(*vk, "how do i reseting my pasword", fo);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->method, "vector");
  EXPECT_EQ(m->answer, "Use the reset link.");
  const auto qv = emb.vector_of("how do i reseting my pasword"), pv = emb.vector_of("How do I reset my password?");
  double ref = 0;
  for (size_t i = 0; i < qv.size(); ++i) ref += double(qv[i]) * pv[i];
  EXPECT_NEAR(m->similarity, ref, 1e-5);
  fo.vector_threshold = 0.99;
  fo.lexical_threshold = 0.99;
  EXPECT_FALSE(faq_match(*vk, "how do i reseting my pasword", fo));
}

// ---- the RAG prompt ----
TEST(KbRag, PromptLabelsSourcesAndKeepsTheBudget) {
  std::vector<SearchHit> hits(3);
  hits[0].source = "/a.txt", hits[0].offset = 10, hits[0].text = std::string(40, 'a');
  hits[1].source = "/b.txt", hits[1].offset = 0, hits[1].text = std::string(4000, 'b');  // too big
  hits[2].source = "/c.txt", hits[2].offset = 7, hits[2].text = std::string(40, 'c');
  auto count = [](const std::string& s) { return static_cast<int>(s.size() / 4 + 1); };
  const RagPrompt p = build_rag_prompt("Why?", hits, 200, count);
  ASSERT_EQ(p.used.size(), 2u);
  EXPECT_EQ(p.used[0].source, "/a.txt");
  EXPECT_EQ(p.used[1].source, "/c.txt");
  EXPECT_TRUE(has(p.message, "[1] (source: /a.txt, offset 10)\n" + std::string(40, 'a')));
  EXPECT_TRUE(has(p.message, "[2] (source: /c.txt, offset 7)\n" + std::string(40, 'c')));
  EXPECT_FALSE(has(p.message, "bbbb"));
  EXPECT_TRUE(p.message.size() >= 5 && p.message.substr(p.message.size() - 14) == "Question: Why?");
  EXPECT_LE(count(p.message), 200 + 4);
  EXPECT_EQ(build_rag_prompt("Why?", {}, 200, count).message, "Why?");
  EXPECT_EQ(build_rag_prompt("Why?", hits, 10, count).message, "Why?");
}

}  // namespace
