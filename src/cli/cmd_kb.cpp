// `edgegemma kb`: the local knowledge base (src/kb, docs/knowledge-base.md).
//   kb add DB FILES... [-m MODEL]    index files (folders recursively); unchanged files are skipped
//   kb search DB "query" [-k N] [--json] [--lexical]
//   kb rm DB PATHS...                remove files (a folder: every file under it)
//   kb info DB [--json]
//   kb reembed DB -m MODEL           replace every vector with MODEL's
//   kb faq-add DB PAIRS.jsonl        question/answer pairs for the server's FAQ fallback
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/kb_open.h"
#include "core/error.h"
#include "embed/open.h"
#include "kb/faq.h"

namespace eg::cli {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct KbArgs {
  std::string db, model, query;
  std::vector<std::string> files;
  int k = 5;
  bool json_out = false, lexical = false;
  int chunk_bytes = 1200, overlap = 200;
  int max_file_mb = 64;
  std::string question, answer;
};

// Files to add: regular files as given, folders walked (sorted; hidden entries skipped).
std::vector<std::string> expand(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  for (const auto& p : paths) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      std::vector<std::string> found;
      for (auto it = fs::recursive_directory_iterator(p, fs::directory_options::skip_permission_denied, ec);
           it != fs::recursive_directory_iterator(); it.increment(ec)) {
        if (ec) break;
        const std::string name = it->path().filename().string();
        if (!name.empty() && name[0] == '.') {
          if (it->is_directory()) it.disable_recursion_pending();
          continue;
        }
        if (it->is_regular_file()) found.push_back(it->path().string());
      }
      std::sort(found.begin(), found.end());
      out.insert(out.end(), found.begin(), found.end());
    } else {
      out.push_back(p);
    }
  }
  return out;
}

int add(const KbArgs& a) {
  OpenedKb o = open_kb(a.db, a.model, true);
  kb::AddOptions ao;
  ao.chunking.chunk_bytes = a.chunk_bytes;
  ao.chunking.overlap_bytes = a.overlap;
  ao.extract.max_bytes = static_cast<uint64_t>(a.max_file_mb) << 20;
  int failed = 0;
  for (const auto& f : expand(a.files)) {
    try {
      const kb::AddResult r = o.kb->add_file(f, ao);
      const char* what = r.status == kb::AddResult::Status::Unchanged ? "unchanged"
                         : r.status == kb::AddResult::Status::Updated ? "updated" : "added";
      std::printf("%s %s: %zu chunks", what, f.c_str(), r.chunks);
      if (r.embedded || r.reused) std::printf(" (%zu embedded, %zu vectors reused from the file's previous version)", r.embedded, r.reused);
      std::printf("\n");
      std::fflush(stdout);
    } catch (const Error& e) {
      ++failed;
      std::fprintf(stderr, "edgegemma kb add: error: %s (skipped; the base is unchanged for it)\n", e.what());
    }
  }
  return failed ? 1 : 0;
}

int search(const KbArgs& a) {
  OpenedKb o = open_kb(a.db, a.lexical ? "" : a.model, false);
  kb::SearchOptions so;
  so.k = a.k;
  so.vectors = !a.lexical;
  if (a.lexical) o.kb->use_embedder(nullptr, "");
  const auto hits = o.kb->search(a.query, so);
  if (a.json_out) {
    json arr = json::array();
    for (const auto& h : hits) {
      json j{{"source", h.source}, {"offset", h.offset}, {"length", h.length}, {"score", h.score}, {"text", h.text}};
      if (h.bm25_rank) j["bm25_rank"] = h.bm25_rank, j["bm25"] = h.bm25;
      if (h.vector_rank) j["vector_rank"] = h.vector_rank, j["cosine"] = h.cosine;
      arr.push_back(j);
    }
    std::printf("%s\n", arr.dump(2, ' ', false, json::error_handler_t::replace).c_str());
    return 0;
  }
  if (hits.empty()) std::printf("(no match)\n");
  for (size_t i = 0; i < hits.size(); ++i) {
    const auto& h = hits[i];
    std::string t = h.text.substr(0, 300);
    while (!t.empty() && (static_cast<unsigned char>(t.back()) & 0xC0) == 0x80) t.pop_back();  // whole characters
    if (!t.empty() && static_cast<unsigned char>(t.back()) >= 0xC0) t.pop_back();
    std::replace(t.begin(), t.end(), '\n', ' ');
    std::printf("[%zu] %s (offset %llu, score %.4f%s%s)\n    %s%s\n", i + 1, h.source.c_str(),
                static_cast<unsigned long long>(h.offset), h.score, h.bm25_rank ? ", bm25" : "",
                h.vector_rank ? ", vector" : "", t.c_str(), h.text.size() > 300 ? " ..." : "");
  }
  return 0;
}

int rm(const KbArgs& a) {
  OpenedKb o = open_kb(a.db, "", false);
  int total = 0;
  for (const auto& f : a.files) {
    const int n = o.kb->remove(f);
    if (n == 0) std::fprintf(stderr, "edgegemma kb rm: note: %s is not in the base\n", f.c_str());
    total += n;
  }
  std::printf("removed %d file%s\n", total, total == 1 ? "" : "s");
  return 0;
}

int info(const KbArgs& a) {
  kb::KbOpenOptions ko;
  auto base = kb::KnowledgeBase::open(a.db, ko);
  const kb::KbInfo i = base->info();
  if (a.json_out) {
    json j{{"path", i.path}, {"schema_version", i.schema_version}, {"files", i.files}, {"chunks", i.chunks},
           {"vectors", i.vectors}, {"faq", i.faq}, {"text_bytes", i.text_bytes},
           {"chunk_bytes", i.chunking.chunk_bytes}, {"chunk_overlap", i.chunking.overlap_bytes},
           {"embedding_model", i.model_path.empty() ? json(nullptr) : json(i.model_path)},
           {"embedding_digest", i.model_digest.empty() ? json(nullptr) : json(i.model_digest)}, {"dim", i.dim}};
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("knowledge base %s (schema %d)\n  files: %lld, chunks: %lld (%lld bytes of text), FAQ pairs: %lld\n"
              "  chunking: %d bytes, %d overlap\n",
              i.path.c_str(), i.schema_version, static_cast<long long>(i.files), static_cast<long long>(i.chunks),
              static_cast<long long>(i.text_bytes), static_cast<long long>(i.faq), i.chunking.chunk_bytes,
              i.chunking.overlap_bytes);
  if (i.model_path.empty())
    std::printf("  vectors: none (BM25 only; add vectors with `edgegemma kb reembed DB -m MODEL`)\n");
  else
    std::printf("  vectors: %lld of dimension %d by %s (digest %s)\n", static_cast<long long>(i.vectors), i.dim,
                i.model_path.c_str(), i.model_digest.c_str());
  return 0;
}

}  // namespace

Action register_kb(CLI::App& app) {
  auto a = std::make_shared<KbArgs>();
  app.require_subcommand(1);
  auto* add_c = app.add_subcommand("add", "index files (text, Markdown, HTML; folders recursively)");
  add_c->add_option("db", a->db, "knowledge base file (created when missing)")->required();
  add_c->add_option("files", a->files, "files or folders")->required();
  add_c->add_option("-m,--model", a->model, "embedding model (default: the base's; none: a BM25-only base)");
  add_c->add_option("--chunk-bytes", a->chunk_bytes, "chunk size in bytes for a new base (default 1200)")
      ->check(CLI::Range(64, 1 << 24));
  add_c->add_option("--overlap", a->overlap, "bytes shared by consecutive chunks for a new base (default 200)")
      ->check(kCount);
  add_c->add_option("--max-file-mb", a->max_file_mb, "largest file indexed, MiB (default 64)")->check(CLI::Range(1, 1 << 20));
  auto* search_c = app.add_subcommand("search", "hybrid search: BM25 + vectors fused by reciprocal rank");
  search_c->add_option("db", a->db, "knowledge base file")->required();
  search_c->add_option("query", a->query, "what to look for")->required();
  search_c->add_option("-k", a->k, "results (default 5)")->check(CLI::Range(1, 1000));
  search_c->add_option("-m,--model", a->model, "embedding model (default: the base's)");
  search_c->add_flag("--json", a->json_out, "JSON output");
  search_c->add_flag("--lexical", a->lexical, "BM25 only (no embedding model)");
  auto* rm_c = app.add_subcommand("rm", "remove files (a folder: everything under it)");
  rm_c->add_option("db", a->db, "knowledge base file")->required();
  rm_c->add_option("paths", a->files, "files or folders as added")->required();
  auto* info_c = app.add_subcommand("info", "counts, chunking and the embedding model of a base");
  info_c->add_option("db", a->db, "knowledge base file")->required();
  info_c->add_flag("--json", a->json_out, "JSON output");
  auto* re_c = app.add_subcommand("reembed", "replace every vector (chunks and FAQ) with another model's");
  re_c->add_option("db", a->db, "knowledge base file")->required();
  re_c->add_option("-m,--model", a->model, "embedding model")->required();
  auto* faq_c = app.add_subcommand("faq-add", "add question/answer pairs (the server's FAQ fallback, --faq)");
  faq_c->add_option("db", a->db, "knowledge base file (created when missing)")->required();
  faq_c->add_option("pairs", a->files, "JSON Lines files of {\"question\": ..., \"answer\": ...}");
  faq_c->add_option("--question", a->question, "one question (with --answer)");
  faq_c->add_option("--answer", a->answer, "its answer");
  faq_c->add_option("-m,--model", a->model, "embedding model (default: the base's)");
  return [a, add_c, search_c, rm_c, info_c, re_c, faq_c]() -> int {
    if (add_c->parsed()) return add(*a);
    if (search_c->parsed()) return search(*a);
    if (rm_c->parsed()) return rm(*a);
    if (info_c->parsed()) return info(*a);
    if (re_c->parsed()) {
      OpenedKb o;
      kb::KbOpenOptions ko;
      o.kb = kb::KnowledgeBase::open(a->db, ko);
      o.embedder = embed::open_embedder(a->model);
      o.kb->use_embedder(o.embedder.get(), a->model, /*replacing=*/true);
      const size_t n = o.kb->reembed();
      std::printf("re-embedded %zu chunks with %s\n", n, a->model.c_str());
      return 0;
    }
    if (faq_c->parsed()) {
      if (a->files.empty() && (a->question.empty() || a->answer.empty()))
        throw Error("kb faq-add needs PAIRS files or --question and --answer");
      OpenedKb o = open_kb(a->db, a->model, true);
      size_t n = 0;
      for (const auto& f : a->files) n += kb::faq_import(*o.kb, f);
      if (!a->question.empty()) kb::faq_add(*o.kb, a->question, a->answer), ++n;
      std::printf("added %zu FAQ pair%s\n", n, n == 1 ? "" : "s");
      return 0;
    }
    return 1;
  };
}

}  // namespace eg::cli
