// Session::save / Session::restore and the model fingerprint.
//
// File: "EGSESSN\0" | u32 version | u64 payload bytes | payload | u64 FNV-1a-64(payload).
// Payload (little-endian): u64 model fingerprint, options, sampler state, messages, context and
// cached token ids, the last logits, then the KV cache stream (KVCache::save).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/file_util.h"
#include "engine/memory_budget.h"
#include "engine/session.h"
#include "engine/session_prompt.h"

namespace eg {

namespace {

constexpr char kMagic[8] = {'E', 'G', 'S', 'E', 'S', 'S', 'N', '\0'};
constexpr uint32_t kVersion = 1;

uint64_t fnv1a(const void* data, size_t n, uint64_t h = 0xcbf29ce484222325ull) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

class Writer {
 public:
  template <class T>
  void put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    buf.append(reinterpret_cast<const char*>(&v), sizeof v);  // little-endian hosts only (x86, ARM)
  }
  void str(const std::string& s) {
    put<uint64_t>(s.size());
    buf += s;
  }
  template <class T>
  void vec(const std::vector<T>& v) {
    put<uint64_t>(v.size());
    buf.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  std::string buf;
};

class Reader {
 public:
  Reader(const std::string& b, const std::string& path) : buf_(b), path_(path) {}
  template <class T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, buf_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  std::string str() {
    const uint64_t n = get<uint64_t>();
    need(n);
    std::string s = buf_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  template <class T>
  std::vector<T> vec() {
    const uint64_t n = get<uint64_t>();
    if (n > (buf_.size() - pos_) / sizeof(T)) fail("array length past the end");
    std::vector<T> v(n);
    if (n > 0) std::memcpy(v.data(), buf_.data() + pos_, n * sizeof(T));  // (v.data() may be null when n == 0)
    pos_ += n * sizeof(T);
    return v;
  }
  size_t pos() const { return pos_; }
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(path_ + ": damaged session file (" + what + " at payload byte " + std::to_string(pos_) + ")");
  }

 private:
  void need(uint64_t n) const {
    if (n > buf_.size() - pos_) fail("truncated field");
  }
  const std::string& buf_;
  std::string path_;
  size_t pos_ = 0;
};

uint64_t model_fingerprint(const LoadedModel& lm) {
  const ModelConfig& c = lm.model().config();
  Writer w;
  w.put<int32_t>(static_cast<int32_t>(c.family));
  for (int v : {c.vocab_size, c.hidden_size, c.n_layers, c.n_heads, c.sliding_window, c.max_position_embeddings,
                c.ple_dim, c.n_experts, lm.tokenizer().vocab_size()})
    w.put<int32_t>(v);
  for (const LayerConfig& l : c.layers) {
    for (int v : {static_cast<int>(l.type), l.head_dim, l.n_kv_heads, l.intermediate_size, l.kv_source, l.rope_pairs})
      w.put<int32_t>(v);
    w.put<float>(l.rope_theta);
  }
  const ModelWeights& mw = lm.model().weights();
  for (const std::string& name : mw.store.names()) {
    const TensorInfo* t = mw.store.find(name);
    if (t == nullptr) continue;
    w.str(name);
    w.put<int32_t>(static_cast<int32_t>(t->dtype));
    for (int64_t d : t->shape) w.put<int64_t>(d);
    // A sample of the bytes: the first and last 32 (different fine-tunes of one shape differ).
    const size_t n = std::min<size_t>(32, t->nbytes);
    if (t->data != nullptr && n > 0) {
      w.buf.append(reinterpret_cast<const char*>(t->data), n);
      w.buf.append(reinterpret_cast<const char*>(t->data + t->nbytes - n), n);
    }
  }
  return fnv1a(w.buf.data(), w.buf.size());
}

void write_all(int fd, const char* p, size_t n, const std::string& path) {
  if (!eg::write_all(fd, p, n)) throw Error(path + ": write failed: " + std::strerror(errno));
}

}  // namespace

struct SessionFile {
  static std::string payload(Session& s) {
    const SessionOptions& o = s.opt_;
    Writer w;
    w.put<uint64_t>(model_fingerprint(*s.lm_));
    w.put<int32_t>(s.ctx_);
    w.put<uint8_t>(o.chat);
    w.put<uint8_t>(static_cast<uint8_t>(o.overflow));
    w.put<int32_t>(o.holdback_tokens);
    w.put<int32_t>(o.prefill_chunk_tokens);
    w.put<uint8_t>(o.ignore_eos);
    w.put<int32_t>(o.threads);
    w.put<uint64_t>(o.memory_budget_bytes);
    w.str(o.chat_template);
    w.put<int8_t>(o.enable_thinking ? (*o.enable_thinking ? 1 : 0) : -1);
    w.put<uint8_t>(static_cast<uint8_t>(o.kv.type));
    w.put<int32_t>(o.kv.page_tokens);
    w.put<int32_t>(o.kv.rollback_margin_tokens);
    const SamplingParams& p = s.sampler_.params();
    w.put<float>(p.temperature);
    w.put<int32_t>(p.top_k);
    w.put<float>(p.top_p);
    w.put<float>(p.min_p);
    w.put<uint64_t>(p.seed);
    w.put<float>(p.repeat_penalty);
    w.put<int32_t>(p.repeat_last_n);
    w.put<float>(p.presence_penalty);
    w.put<float>(p.frequency_penalty);
    w.str(s.sampler_.save_state());
    for (const ChatMessage& m : s.messages_)
      if (!m.images.empty())
        throw Error("saving a conversation with images is not supported yet (the images are not stored)");
    w.put<uint64_t>(s.messages_.size());
    for (const ChatMessage& m : s.messages_) {
      w.str(m.role);
      w.str(m.content);
    }
    w.vec(s.context_);
    w.vec(s.cached_);
    w.put<uint8_t>(s.logits_valid_);
    w.vec(s.logits_valid_ ? s.logits_ : std::vector<float>{});
    // A device cache (--device cuda) copies its pages from the device as it writes them.
    std::ostringstream kv;
    s.kv_->save(kv);
    w.str(kv.str());
    return std::move(w.buf);
  }

  // The largest file a session of this model can need (Session::max_file_bytes).
  static size_t max_file_bytes(const LoadedModel& lm) {
    const ModelConfig& cfg = lm.model().config();
    const int ctx = std::max(cfg.max_position_embeddings, 1);
    KVCacheOptions ko;
    ko.type = KVType::F32;  // the widest KV type
    ko.max_tokens = ctx;
    // ×4: any page size up to the context (a page may hold up to page_tokens - 1 positions more
    // than stored, sliding layers keep their window plus a margin of at least a page).
    const size_t kv = 4 * kv_bytes_for_context(cfg, ctx, ko);
    // Last logits; context + cached token ids and their text in messages; options, template.
    return kv + 4 * static_cast<size_t>(cfg.vocab_size) + 64 * static_cast<size_t>(ctx) + (size_t{64} << 20);
  }

  static void restore(Session& s, const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw Error(path + ": cannot open session file: " + std::strerror(errno));
    // Checked before anything is read: a huge file (or a special file) is refused, not loaded.
    std::error_code ec;
    const uintmax_t size = std::filesystem::file_size(path, ec);
    const size_t limit = max_file_bytes(*s.lm_);
    if (!ec && size > limit)
      throw Error(path + ": session file of " + format_bytes(size) + " is larger than any session of this model can be (" +
                  format_bytes(limit) + ")");
    std::string file((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const size_t head = sizeof kMagic + 4 + 8;
    if (file.size() < head || std::memcmp(file.data(), kMagic, sizeof kMagic) != 0)
      throw Error(path + ": not an edgegemma session file (bad magic)");
    uint32_t version;
    uint64_t n;
    std::memcpy(&version, file.data() + 8, 4);
    std::memcpy(&n, file.data() + 12, 8);
    if (version != kVersion)
      throw Error(path + ": session file version " + std::to_string(version) + " is not supported (this build reads " +
                  std::to_string(kVersion) + ")");
    if (n > file.size() - head || file.size() - head - n != 8)
      throw Error(path + ": truncated session file (" + std::to_string(file.size()) + " bytes, header says " +
                  std::to_string(head + n + 8) + ")");
    uint64_t sum;
    std::memcpy(&sum, file.data() + head + n, 8);
    const std::string pl = file.substr(head, n);
    if (fnv1a(pl.data(), pl.size()) != sum) throw Error(path + ": damaged session file (checksum mismatch)");

    Reader r(pl, path);
    if (r.get<uint64_t>() != model_fingerprint(*s.lm_))
      throw Error(path + ": the session was saved with a different model");
    SessionOptions o = s.opt_;
    const int ctx = r.get<int32_t>();
    o.context_tokens = ctx;
    o.chat = r.get<uint8_t>() != 0;
    const uint8_t ov = r.get<uint8_t>();
    if (ov > 1) r.fail("overflow policy");
    o.overflow = static_cast<OverflowPolicy>(ov);
    o.holdback_tokens = r.get<int32_t>();
    o.prefill_chunk_tokens = r.get<int32_t>();
    o.ignore_eos = r.get<uint8_t>() != 0;
    o.threads = r.get<int32_t>();
    o.memory_budget_bytes = r.get<uint64_t>();
    o.chat_template = r.str();
    const int8_t th = r.get<int8_t>();
    o.enable_thinking = th < 0 ? std::nullopt : std::optional<bool>(th == 1);
    const uint8_t kt = r.get<uint8_t>();
    if (kt > 3) r.fail("KV type");
    o.kv.type = static_cast<KVType>(kt);
    o.kv.page_tokens = r.get<int32_t>();
    o.kv.rollback_margin_tokens = r.get<int32_t>();
    o.kv.max_tokens = ctx;
    if (ctx <= 0 || ctx > s.lm_->model().config().max_position_embeddings || o.holdback_tokens < 0 ||
        o.prefill_chunk_tokens < 1 || o.threads < 0)
      r.fail("options");
    SamplingParams p;
    p.temperature = r.get<float>();
    p.top_k = r.get<int32_t>();
    p.top_p = r.get<float>();
    p.min_p = r.get<float>();
    p.seed = r.get<uint64_t>();
    p.repeat_penalty = r.get<float>();
    p.repeat_last_n = r.get<int32_t>();
    p.presence_penalty = r.get<float>();
    p.frequency_penalty = r.get<float>();
    o.sampling = p;
    Sampler sampler(p);  // validates
    sampler.restore_state(r.str());
    const uint64_t nm = r.get<uint64_t>();
    if (nm > pl.size()) r.fail("message count");
    std::vector<ChatMessage> msgs;
    for (uint64_t i = 0; i < nm; ++i) {
      ChatMessage m;
      m.role = r.str();
      m.content = r.str();
      msgs.push_back(std::move(m));
    }
    std::vector<int32_t> context = r.vec<int32_t>();
    std::vector<int32_t> cached = r.vec<int32_t>();
    const bool logits_valid = r.get<uint8_t>() != 0;
    std::vector<float> logits = r.vec<float>();
    if (logits_valid && logits.size() != static_cast<size_t>(s.lm_->model().config().vocab_size))
      r.fail("logits size");
    std::istringstream kvs(r.str());
    if (r.pos() != pl.size()) r.fail("trailing bytes");
    KVCache kv = KVCache::load(kvs, s.lm_->model().config());
    if (kv.n_past() != static_cast<int>(cached.size()) || kv.max_tokens() != ctx)
      throw Error(path + ": damaged session file (KV cache holds " + std::to_string(kv.n_past()) +
                  " positions, expected " + std::to_string(cached.size()) + ")");
    // The session's cache lives on its executor's device: a device cache gets the pages copied
    // in (an int8 file on the GPU, or an F16 layer the CPU widened to BF16, is refused here).
    std::unique_ptr<KVCache> dev;
    if (s.kv_->device_state()) {
      try {
        dev = s.lm_->executor().new_kv_cache(kv.options());
        dev->import_pages(kv.n_past(), [&](int layer, int page) {
          return KVPageRef{kv.page_data(layer, page), kv.layer_type(layer)};
        });
      } catch (const Error& e) {
        throw Error(path + ": this session's KV cache cannot go on the " + device_name(s.lm_->executor().device()) +
                    " device: " + e.what());
      }
    }
    std::unique_ptr<PromptEncoder> enc;
    if (o.chat_template != s.opt_.chat_template || o.enable_thinking != s.opt_.enable_thinking)
      enc = std::make_unique<PromptEncoder>(s.lm_->tokenizer(), o.chat_template, o.enable_thinking);

    // Everything parsed: commit (nothing below throws).
    s.opt_ = std::move(o);
    s.ctx_ = ctx;
    s.sampler_ = std::move(sampler);
    if (enc) s.encoder_ = std::move(enc);
    s.messages_ = std::move(msgs);
    s.context_ = std::move(context);
    s.cached_ = std::move(cached);
    s.cached_media_.assign(s.cached_.size(), 0);
    s.draft_images_.clear();
    s.draft_clips_ = 0;
    s.logits_valid_ = logits_valid;
    s.logits_ = std::move(logits);
    if (dev) s.kv_ = std::move(dev);
    else *s.kv_ = std::move(kv);
    s.draft_.clear();
    s.stats_ = SessionStats{};
  }
};

void Session::save(const std::string& path) {
  stop_worker_job();
  const std::string pl = SessionFile::payload(*this);
  std::string file(kMagic, sizeof kMagic);
  file.append(reinterpret_cast<const char*>(&kVersion), 4);
  const uint64_t n = pl.size();
  file.append(reinterpret_cast<const char*>(&n), 8);
  file += pl;
  const uint64_t sum = fnv1a(pl.data(), pl.size());
  file.append(reinterpret_cast<const char*>(&sum), 8);

  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::string tmpl = (dir / (target.filename().string() + ".tmp.XXXXXX")).string();
  const int fd = ::mkstemp(tmpl.data());
  if (fd < 0) throw Error(path + ": cannot create a temporary file in " + dir.string() + ": " + std::strerror(errno));
  try {
    const size_t half = file.size() / 2;
    write_all(fd, file.data(), half, path);
    if (save_fault_hook) save_fault_hook();
    write_all(fd, file.data() + half, file.size() - half, path);
    if (::fsync(fd) != 0) throw Error(path + ": fsync failed: " + std::strerror(errno));
    if (::close(fd) != 0) {
      const int e = errno;
      ::unlink(tmpl.c_str());
      throw Error(path + ": close failed: " + std::strerror(e));
    }
  } catch (...) {
    ::close(fd);
    ::unlink(tmpl.c_str());
    throw;
  }
  if (::rename(tmpl.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmpl.c_str());
    throw Error(path + ": rename failed: " + std::strerror(e));
  }
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

size_t Session::max_file_bytes() const { return SessionFile::max_file_bytes(*lm_); }

void Session::restore(const std::string& path) {
  discard_stream();
  stop_worker_job();
  SessionFile::restore(*this, path);
}

WarmupResult Session::warmup() {
  stop_worker_job();
  set_threads();
  WarmupResult w;
  auto t0 = std::chrono::steady_clock::now();
  w.bytes_touched = touch_weights(lm_->model());
  w.touch_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const ModelConfig& cfg = lm_->model().config();
  KVCacheOptions ko = opt_.kv;
  ko.max_tokens = 1;
  const StepExecutor& exec = lm_->executor();
  std::unique_ptr<KVCache> kv = exec.new_kv_cache(ko);
  std::unique_ptr<StepWorkspace> ws = exec.new_workspace();
  std::vector<float> logits;
  const int32_t id = lm_->tokenizer().bos_id() >= 0 && lm_->tokenizer().bos_id() < cfg.vocab_size
                         ? lm_->tokenizer().bos_id()
                         : 0;
  t0 = std::chrono::steady_clock::now();
  exec.prefill(&id, 1, *kv, *ws, LogitsMode::Last, logits);
  w.forward_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return w;
}

}  // namespace eg
