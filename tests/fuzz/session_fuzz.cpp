// libFuzzer target: session files (Session::restore: header, checksum, options, sampler state,
// messages, token ids, logits, the KV cache stream), docs/reliability.md. Built by scripts/fuzz.
//
// Input: byte 0 even: the rest is a payload, wrapped by the harness into a valid file (magic,
// version 1, length, FNV-1a checksum), so that the fuzzer gets past the checksum; odd: the rest is
// the whole file as is. Each input restores into a fresh Session over tiny-gemma3 (256-token
// context); a restore that succeeds is followed by one generated token, so that restored state
// (token ids, logits, KV pages, sampler) is used, not only parsed.
// Checks: restore and the generation after it throw nothing but eg::Error; a failed restore
// leaves the session as it was (no messages, no context).
// Seeds (EG_FUZZ_WRITE_SEEDS): sessions saved by this build (chat mode after one turn, raw mode
// with a prompt, an empty session), each as payload and as whole file.
#include <cstring>
#include <memory>

#include "core/error.h"
#include "engine/loaded_model.h"
#include "engine/session.h"
#include "fuzz_util.h"

namespace {

void check(bool ok, const std::string& what) {
  if (!ok) egfuzz::fail("session_fuzz", what);
}

std::shared_ptr<const eg::LoadedModel> model() {
  static const std::shared_ptr<const eg::LoadedModel> m = eg::LoadedModel::load_dir(egfuzz::shared_dir() + "/models/tiny-gemma3");
  return m;
}

eg::SessionOptions options(bool chat) {
  eg::SessionOptions o;
  o.context_tokens = 256;
  o.threads = 1;
  o.chat = chat;
  return o;
}

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

std::string wrap(std::string_view payload) {
  std::string f("EGSESSN\0", 8);
  const uint32_t version = 1;
  const uint64_t n = payload.size(), sum = fnv1a(payload);
  f.append(reinterpret_cast<const char*>(&version), 4);
  f.append(reinterpret_cast<const char*>(&n), 8);
  f.append(payload);
  f.append(reinterpret_cast<const char*>(&sum), 8);
  return f;
}

void write_seeds(const std::string& dir) {
  const std::string tmp = dir + "/.session.tmp";
  auto save = [&](eg::Session& s, const std::string& name) {
    s.save(tmp);
    const std::string file = egfuzz::read_text(tmp);
    egfuzz::write_seed(dir, name + "-file", std::string(1, '\1') + file);
    egfuzz::write_seed(dir, name + "-payload", std::string(1, '\0') + file.substr(20, file.size() - 28));
  };
  eg::GenerateParams gp;
  gp.max_new_tokens = 3;
  {
    eg::Session s(model(), options(true));
    s.set_system("Be brief.");
    s.chat("Hello", gp);
    save(s, "chat");
  }
  {
    eg::Session s(model(), options(false));
    s.append_text("Once upon a time");
    s.generate(gp);
    save(s, "raw");
  }
  {
    eg::Session s(model(), options(true));
    save(s, "empty");
  }
  std::filesystem::remove(tmp);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  egfuzz::maybe_write_seeds(write_seeds);
  (void)model();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static egfuzz::MemFile file("session");
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  file.set((data[0] & 1) ? std::string(rest) : wrap(rest));
  eg::Session s(model(), options(true));
  try {
    s.restore(file.path());
  } catch (const eg::Error&) {
    check(s.messages().empty() && s.context_tokens().empty() && s.cached_tokens() == 0,
          "a failed restore changed the session");
    return 0;
  }
  try {
    eg::GenerateParams gp;
    gp.max_new_tokens = 1;
    s.generate(gp);
  } catch (const eg::Error&) {
  }
  return 0;
}
