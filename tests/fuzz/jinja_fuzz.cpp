// libFuzzer target: the Jinja chat-template interpreter (src/tokenizer/jinja/ through
// ChatTemplate: lexer, parser, interpreter, filters, the message JSON -> Value conversion, the
// Gemma 2 system folding), docs/reliability.md. Built by scripts/fuzz.
//
// Input: template text, then optionally a NUL byte and a JSON object
//   {"messages": [...], "tools": [...], "add_generation_prompt": bool, "enable_thinking": bool}
// (or a bare JSON array of messages). Without valid JSON a fixed two-turn conversation is used.
// Checks: parsing and rendering throw nothing but eg::Error; a render that succeeds twice gives
// the same text (the interpreter keeps no state between renders).
// Seeds (EG_FUZZ_WRITE_SEEDS): the six chat templates of tests/fixtures/chat_template_cases.json
// (Gemma 2, 3, 4 31B, 4 31B interleaved, the tiny models') × a few of its conversations.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "fuzz_util.h"
#include "tokenizer/chat_template.h"

namespace {

using ojson = nlohmann::ordered_json;

const ojson& default_messages() {
  static const ojson m = ojson::parse(
      R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
          {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": [{"type": "text", "text": "More"}]}])");
  return m;
}

std::string template_source(const ojson& entry) {
  const std::string path = egfuzz::shared_dir() + "/" + entry["path"].get<std::string>();
  if (path.size() > 5 && path.substr(path.size() - 5) == ".json") {
    const ojson cfg = ojson::parse(egfuzz::read_text(path));
    return cfg["chat_template"].get<std::string>();
  }
  return egfuzz::read_text(path);
}

void write_seeds(const std::string& dir) {
  const ojson cases = ojson::parse(egfuzz::read_text(std::string(EG_SOURCE_DIR) + "/tests/fixtures/chat_template_cases.json"));
  const ojson& convs = cases["conversations"];
  const ojson& tool_sets = cases["tool_sets"];
  std::vector<ojson> tools;
  for (auto it = tool_sets.begin(); it != tool_sets.end(); ++it) tools.push_back(it.value());
  for (auto t = cases["templates"].begin(); t != cases["templates"].end(); ++t) {
    const std::string src = template_source(t.value());
    for (size_t c = 0; c < convs.size(); c += 17) {
      ojson in;
      in["messages"] = convs[c];
      if (c % 2 == 1 && !tools.empty()) in["tools"] = tools[c % tools.size()];
      in["add_generation_prompt"] = c % 3 != 0;
      if (c % 4 == 1) in["enable_thinking"] = true;
      egfuzz::write_seed(dir, t.key() + "-" + std::to_string(c), src + std::string(1, '\0') + in.dump());
    }
  }
}

std::string render(const eg::ChatTemplate& t, const ojson& msgs, const eg::ChatOptions& o) { return t.render(msgs, o); }

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  egfuzz::maybe_write_seeds(write_seeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const auto [src, rest] = egfuzz::split(in, std::string_view("\0", 1));
  ojson msgs = default_messages();
  eg::ChatOptions o;
  const ojson j = ojson::parse(rest.begin(), rest.end(), nullptr, false);
  if (!j.is_discarded()) {
    if (j.is_array()) msgs = j;
    if (j.is_object()) {
      if (auto it = j.find("messages"); it != j.end()) msgs = *it;
      if (auto it = j.find("tools"); it != j.end()) o.tools = *it;
      if (auto it = j.find("add_generation_prompt"); it != j.end() && it->is_boolean()) o.add_generation_prompt = *it;
      if (auto it = j.find("enable_thinking"); it != j.end() && it->is_boolean()) o.enable_thinking = it->get<bool>();
    }
  }
  try {
    const eg::ChatTemplate t(src);
    std::string first;
    try {
      first = render(t, msgs, o);
    } catch (const eg::Error&) {
      return 0;
    }
    if (render(t, msgs, o) != first) egfuzz::fail("jinja_fuzz", "two renders of the same input differ");
  } catch (const eg::Error&) {
  }
  return 0;
}
