// edgegemma: run Gemma models locally. Subcommands: run, tokenize, inspect, synth.

#include <cstdio>
#include <cstdlib>
#include <string>
#include <filesystem>

#include "backend/cpu/thread_pool.h"
#include "cli/commands.h"
#include "core/error.h"

namespace eg::cli {

void apply_threads(int n) {
  if (n > 0) cpu::set_default_num_threads(n);
}

std::string default_model_dir() {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (const fs::path& cand : {exe.parent_path() / ".." / "models" / "tiny-gemma3",
                                 exe.parent_path() / "models" / "tiny-gemma3"}) {
      if (fs::exists(cand / "config.json")) return fs::weakly_canonical(cand).string();
    }
  }
  return EDGEGEMMA_DEFAULT_MODEL_DIR;
}

}  // namespace eg::cli

int main(int argc, char** argv) {
  CLI::App app{"edgegemma: run Google's Gemma models locally, fast and in little memory"};
  app.set_version_flag("--version", "edgegemma " EDGEGEMMA_VERSION);
  app.require_subcommand(1);
  std::vector<std::pair<CLI::App*, eg::cli::Action>> cmds;
  auto add = [&](const char* name, const char* help, eg::cli::Action (*reg)(CLI::App&)) {
    CLI::App* sub = app.add_subcommand(name, help);
    cmds.emplace_back(sub, reg(*sub));
  };
  add("run", "generate text from a prompt (streams tokens to stdout)", eg::cli::register_run);
  add("chat", "interactive multi-turn chat (streams answers; /help for commands)", eg::cli::register_chat);
  add("tokenize", "print the token ids and pieces of a text", eg::cli::register_tokenize);
  add("synth", "write a random-weight checkpoint with the real shapes of a Gemma model",
      eg::cli::register_synth);
  add("inspect", "show a checkpoint's architecture, parameter counts, bytes per token and KV bytes",
      eg::cli::register_inspect);
  add("quantize", "write a model as a (quantized) GGUF file for llama.cpp and edgegemma",
      eg::cli::register_quantize);
  add("perplexity", "perplexity of a model over a text file (default or llama-perplexity method)",
      eg::cli::register_perplexity);
  add("serve", "OpenAI-compatible HTTP server with streaming, JSON-schema output, tool calls and a web chat page",
      eg::cli::register_serve);
  add("embed", "text embeddings (EmbeddingGemma) of stdin or files, with task prompts and Matryoshka dims",
      eg::cli::register_embed);
  add("models", "the model store: add, list, show, use, rollback, rm, verify, gc (versions, verified updates)",
      eg::cli::register_models);
  add("bench", "measure prefill and decode speed (tok/s), TTFT, load time and peak RSS, like llama-bench",
      eg::cli::register_bench);
  add("kb", "local knowledge base: add files, hybrid search (BM25 + vectors), FAQ pairs (docs/knowledge-base.md)",
      eg::cli::register_kb);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --version and the like
    std::fprintf(stderr, "edgegemma: error: %s (see --help)\n", e.what());
    return 2;
  }
  try {
    for (auto& [sub, action] : cmds)
      if (sub->parsed()) return action();
  } catch (const eg::Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "edgegemma: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fflush(stdout);
    std::fprintf(stderr, "edgegemma: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {  // e.g. std::filesystem errors: still one clear line
    std::fflush(stdout);
    std::fprintf(stderr, "edgegemma: error: %s\n", e.what());
    return 1;
  }
  return 1;
}
