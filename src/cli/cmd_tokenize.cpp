// `edgegemma tokenize`: print the ids and pieces of a text.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "core/file_util.h"
#include "format/gguf.h"
#include "tokenizer/tokenizer.h"

namespace eg::cli {

namespace {
struct TokenizeArgs {
  std::string model_dir;
  std::string text;
  bool text_given = false;
  bool json = false;
  bool no_bos = false;
};

int tokenize(const TokenizeArgs& a) {
  std::string text = a.text;
  if (!a.text_given) {
    if (isatty(STDIN_FILENO)) throw Error("no text: give TEXT or pipe it to stdin");
    text = read_stream(stdin);
  }
  const std::string dir = model_path(a.model_dir);
  const bool gguf = dir.size() > 5 && dir.compare(dir.size() - 5, 5, ".gguf") == 0;
  Tokenizer tok = gguf ? Tokenizer::from_gguf(*GGUFFile::open(dir)) : Tokenizer::load_dir(dir);
  std::vector<int32_t> ids = tok.encode(text, tok.add_bos() && !a.no_bos, true);
  if (a.json) {
    nlohmann::json pieces = nlohmann::json::array();
    for (int32_t id : ids) pieces.push_back(tok.piece(id));
    nlohmann::json j = {{"ids", ids}, {"pieces", pieces}};
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    for (int32_t id : ids) std::printf("%6d  %s\n", id, nlohmann::json(tok.piece(id)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    std::printf("tokens: %zu\n", ids.size());
  }
  std::fflush(stdout);
  if (std::ferror(stdout)) throw Error("cannot write the output (stdout)");
  return 0;
}
}  // namespace

Action register_tokenize(CLI::App& app) {
  auto a = std::make_shared<TokenizeArgs>();
  app.add_option("-m,--model", a->model_dir, "model or tokenizer directory, or a .gguf file (default: bundled tiny-gemma3)");
  app.add_option("text", a->text, "text to tokenize (default: stdin)")->each([a](const std::string&) { a->text_given = true; });
  app.add_flag("--json", a->json, "print {\"ids\": [...], \"pieces\": [...]}");
  app.add_flag("--no-bos", a->no_bos, "do not add <bos>");
  return [a] { return tokenize(*a); };
}

}  // namespace eg::cli
