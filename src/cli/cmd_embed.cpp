// `edgegemma embed`: text embeddings (EmbeddingGemma; docs/embeddings.md) of stdin or files.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "core/file_util.h"
#include "embed/open.h"

namespace eg::cli {

namespace {

struct EmbedArgs {
  std::string model;
  std::vector<std::string> files;
  std::string task;
  int dim = 0;
  bool json = false;
  bool lines = false;
  int threads = 0;
};

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b <= s.size()) {
    size_t e = s.find('\n', b);
    if (e == std::string::npos) e = s.size();
    std::string line = s.substr(b, e - b);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) out.push_back(std::move(line));
    b = e + 1;
  }
  return out;
}

int embed(const EmbedArgs& a) {
  std::vector<std::string> texts;
  std::vector<std::string> sources;
  if (a.files.empty()) {
    if (isatty(STDIN_FILENO)) throw Error("no text: pipe it to stdin or give FILE arguments");
    const std::string in = read_stream(stdin);
    if (a.lines) texts = split_lines(in);
    else texts.push_back(in);
    for (size_t i = 0; i < texts.size(); ++i) sources.push_back(a.lines ? "stdin:" + std::to_string(i + 1) : "stdin");
  } else {
    for (const std::string& f : a.files) {
      const std::string in = read_file(f);
      if (a.lines) {
        const auto ls = split_lines(in);
        for (size_t i = 0; i < ls.size(); ++i) {
          texts.push_back(ls[i]);
          sources.push_back(f + ":" + std::to_string(i + 1));
        }
      } else {
        texts.push_back(in);
        sources.push_back(f);
      }
    }
  }
  if (texts.empty()) throw Error("no text to embed (empty input)");
  embed::OpenOptions oo;
  oo.threads = a.threads;
  std::unique_ptr<embed::Embedder> e = embed::open_embedder(a.model, oo);
  embed::EmbedOptions eo;
  eo.task = a.task;
  eo.dim = a.dim;
  const std::vector<embed::Embedding> out = e->embed(texts, eo);
  if (a.json) {
    nlohmann::json data = nlohmann::json::array();
    for (size_t i = 0; i < out.size(); ++i)
      data.push_back({{"index", i}, {"source", sources[i]}, {"tokens", out[i].tokens}, {"embedding", out[i].vector}});
    nlohmann::json j = {{"model", a.model}, {"dim", out[0].vector.size()}, {"task", a.task}, {"data", data}};
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    for (const embed::Embedding& v : out) {
      for (size_t i = 0; i < v.vector.size(); ++i) std::printf(i ? " %.9g" : "%.9g", v.vector[i]);
      std::printf("\n");
    }
  }
  std::fflush(stdout);
  if (std::ferror(stdout)) throw Error("cannot write the output (stdout)");
  return 0;
}

}  // namespace

Action register_embed(CLI::App& app) {
  auto a = std::make_shared<EmbedArgs>();
  app.add_option("-m,--model", a->model, "embedding model: sentence-transformers folder or gemma-embedding .gguf")->required();
  app.add_option("files", a->files, "text files to embed, one text each (default: stdin)");
  app.add_option("--task", a->task, "prompt name from the model's config (query, document, STS, ...); default: "
                                    "the model's default_prompt_name, else no prefix");
  app.add_option("--dim", a->dim, "Matryoshka truncation (EmbeddingGemma: 768, 512, 256, 128), re-normalised")
      ->check(CLI::Range(0, 1 << 20));
  app.add_flag("--lines", a->lines, "embed every non-empty line as its own text");
  app.add_flag("--json", a->json, "print {\"data\": [{\"index\", \"source\", \"tokens\", \"embedding\"}], ...}");
  app.add_option("-t,--threads", a->threads, "CPU threads (default: all cores)")->check(kCount);
  return [a] { return embed(*a); };
}

}  // namespace eg::cli
