// The C API (include/edgegemma/edgegemma.h) over eg::Session. Every entry point catches every
// exception: eg::Error -> EG_ERR_FAILED, std::bad_alloc -> EG_ERR_OUT_OF_MEMORY, anything else
// -> EG_ERR_INTERNAL, with the message in the thread-local last error.
#include "edgegemma/edgegemma.h"

#include <cstring>
#include <memory>
#include <vector>
#include <new>
#include <string>

#include "core/error.h"
#include "engine/loaded_model.h"
#include "audio/audio.h"
#include "engine/session.h"
#include "store/store.h"
#include "vision/image.h"

struct eg_model {
  std::shared_ptr<const eg::LoadedModel> lm;
};

struct eg_session {
  std::unique_ptr<eg::Session> s;
};

struct eg_store {
  std::unique_ptr<eg::store::Store> s;
};

namespace {

thread_local std::string g_last_error;

int fail(int code, const std::string& msg) {
  g_last_error = msg;
  return code;
}

template <class F>
int guarded(F&& f) {
  try {
    return f();
  } catch (const eg::Error& e) {
    return fail(EG_ERR_FAILED, e.what());
  } catch (const std::bad_alloc&) {
    return fail(EG_ERR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return fail(EG_ERR_INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    return fail(EG_ERR_INTERNAL, "internal error: unknown exception");
  }
}

#define EG_REQUIRE(cond, what) \
  if (!(cond)) return fail(EG_ERR_INVALID_ARGUMENT, what)

eg::GenerateParams to_cpp(const eg_generate_params* p) {
  eg::GenerateParams g;
  if (p == nullptr) return g;
  if (p->max_new_tokens < 0) throw eg::Error("max_new_tokens must be >= 0");
  g.max_new_tokens = p->max_new_tokens;
  if (p->n_stop_strings < 0 || (p->n_stop_strings > 0 && p->stop_strings == nullptr))
    throw eg::Error("stop_strings: NULL array or negative count");
  for (int32_t i = 0; i < p->n_stop_strings; ++i) {
    if (p->stop_strings[i] == nullptr) throw eg::Error("stop_strings[" + std::to_string(i) + "] is NULL");
    g.stop_strings.emplace_back(p->stop_strings[i]);
  }
  return g;
}

eg::PieceCallback to_cpp(eg_piece_callback cb, void* user) {
  if (cb == nullptr) return {};
  return [cb, user](std::string_view piece) {
    const std::string s(piece);  // NUL-terminated copy
    return cb(s.c_str(), user) == 0;
  };
}

void fill(const eg::TurnResult& r, eg_result* out) {
  if (out == nullptr) return;
  out->finish_reason = static_cast<int32_t>(r.finish);
  out->generated_tokens = r.stats.generated_tokens;
  out->prompt_tokens = r.stats.prompt_tokens;
  out->reused_tokens = r.stats.reused_tokens;
}

}  // namespace

static_assert(static_cast<int>(eg::FinishReason::Stop) == EG_FINISH_STOP);
static_assert(static_cast<int>(eg::FinishReason::Length) == EG_FINISH_LENGTH);
static_assert(static_cast<int>(eg::FinishReason::Cancelled) == EG_FINISH_CANCELLED);
static_assert(static_cast<int>(eg::FinishReason::ContextFull) == EG_FINISH_CONTEXT_FULL);
static_assert(static_cast<int>(eg::KVType::F16) == EG_KV_F16 && static_cast<int>(eg::KVType::INT8) == EG_KV_INT8);

extern "C" {

const char* eg_last_error(void) { return g_last_error.c_str(); }

const char* eg_version(void) {
#ifdef EDGEGEMMA_VERSION
  return EDGEGEMMA_VERSION;
#else
  return "0.1.0";
#endif
}

int eg_model_load(const char* path, eg_model** out) { return eg_model_load_device(path, nullptr, out); }

int eg_model_load_device(const char* path, const char* device, eg_model** out) {
  return eg_model_load_mmproj(path, nullptr, device, out);
}

int eg_model_load_mmproj(const char* path, const char* mmproj_path, const char* device, eg_model** out) {
  EG_REQUIRE(path != nullptr && out != nullptr, "eg_model_load: path and out must not be NULL");
  *out = nullptr;
  return guarded([&] {
    const eg::DeviceRequest dev = eg::parse_device(device != nullptr ? device : "auto");
    auto m = std::make_unique<eg_model>();
    auto lm = eg::LoadedModel::load(path, dev);
    if (mmproj_path != nullptr) lm->attach_mmproj(mmproj_path);
    m->lm = std::move(lm);
    *out = m.release();
    return EG_OK;
  });
}

const char* eg_model_device(const eg_model* model) {
  if (model == nullptr || !model->lm) return "";
  return eg::device_name(model->lm->executor().device());
}

void eg_model_free(eg_model* model) { delete model; }

void eg_session_params_default(eg_session_params* p) {
  if (p == nullptr) return;
  const eg::SessionOptions o;
  *p = eg_session_params{};
  p->context_tokens = o.context_tokens;
  p->kv_type = static_cast<int32_t>(o.kv.type);
  p->kv_page_tokens = o.kv.page_tokens;
  p->chat = o.chat ? 1 : 0;
  p->overflow = EG_OVERFLOW_DROP_OLDEST_TURNS;
  p->memory_budget_bytes = o.memory_budget_bytes;
  p->threads = o.threads;
  p->holdback_tokens = o.holdback_tokens;
  p->ignore_eos = o.ignore_eos ? 1 : 0;
  p->temperature = o.sampling.temperature;
  p->top_k = o.sampling.top_k;
  p->top_p = o.sampling.top_p;
  p->min_p = o.sampling.min_p;
  p->seed = o.sampling.seed;
  p->repeat_penalty = o.sampling.repeat_penalty;
  p->repeat_last_n = o.sampling.repeat_last_n;
  p->presence_penalty = o.sampling.presence_penalty;
  p->frequency_penalty = o.sampling.frequency_penalty;
}

int eg_session_create(eg_model* model, const eg_session_params* params, eg_session** out) {
  EG_REQUIRE(model != nullptr && out != nullptr, "eg_session_create: model and out must not be NULL");
  *out = nullptr;
  eg_session_params p;
  eg_session_params_default(&p);
  if (params != nullptr) p = *params;
  EG_REQUIRE(p.kv_type >= EG_KV_F16 && p.kv_type <= EG_KV_INT8,
             "eg_session_create: kv_type " + std::to_string(p.kv_type) + " is not one of EG_KV_*");
  EG_REQUIRE(p.overflow == EG_OVERFLOW_DROP_OLDEST_TURNS || p.overflow == EG_OVERFLOW_STOP,
             "eg_session_create: overflow " + std::to_string(p.overflow) + " is not one of EG_OVERFLOW_*");
  return guarded([&] {
    eg::SessionOptions o;
    o.context_tokens = p.context_tokens;
    o.kv.type = static_cast<eg::KVType>(p.kv_type);
    o.kv.page_tokens = p.kv_page_tokens;
    o.chat = p.chat != 0;
    o.overflow = p.overflow == EG_OVERFLOW_STOP ? eg::OverflowPolicy::Stop : eg::OverflowPolicy::DropOldestTurns;
    o.memory_budget_bytes = p.memory_budget_bytes;
    o.threads = p.threads;
    o.holdback_tokens = p.holdback_tokens;
    o.ignore_eos = p.ignore_eos != 0;
    o.sampling.temperature = p.temperature;
    o.sampling.top_k = p.top_k;
    o.sampling.top_p = p.top_p;
    o.sampling.min_p = p.min_p;
    o.sampling.seed = p.seed;
    o.sampling.repeat_penalty = p.repeat_penalty;
    o.sampling.repeat_last_n = p.repeat_last_n;
    o.sampling.presence_penalty = p.presence_penalty;
    o.sampling.frequency_penalty = p.frequency_penalty;
    auto s = std::make_unique<eg_session>();
    s->s = std::make_unique<eg::Session>(model->lm, o);
    *out = s.release();
    return EG_OK;
  });
}

void eg_session_free(eg_session* session) {
  try {
    delete session;
  } catch (...) {  // destructors do not throw; never let anything escape anyway
  }
}

#define EG_SESSION(name) EG_REQUIRE(session != nullptr, name ": session must not be NULL")

int eg_session_set_system(eg_session* session, const char* text) {
  EG_SESSION("eg_session_set_system");
  EG_REQUIRE(text != nullptr, "eg_session_set_system: text must not be NULL");
  return guarded([&] {
    session->s->set_system(text);
    return EG_OK;
  });
}

int eg_session_add_message(eg_session* session, const char* role, const char* content) {
  EG_SESSION("eg_session_add_message");
  EG_REQUIRE(role != nullptr && content != nullptr, "eg_session_add_message: role and content must not be NULL");
  return guarded([&] {
    session->s->add_message(role, content);
    return EG_OK;
  });
}

int eg_session_add_image(eg_session* session, const char* path) {
  EG_SESSION("eg_session_add_image");
  EG_REQUIRE(path != nullptr, "eg_session_add_image: path must not be NULL");
  return guarded([&] {
    session->s->add_image(eg::vision::load_image_file(path));
    return EG_OK;
  });
}

int eg_session_set_pan_and_scan(eg_session* session, int32_t on) {
  EG_SESSION("eg_session_set_pan_and_scan");
  EG_REQUIRE(on == 0 || on == 1, "eg_session_set_pan_and_scan: on must be 0 or 1");
  return guarded([&] {
    session->s->set_pan_and_scan(on != 0);
    return EG_OK;
  });
}

int eg_session_add_image_rgb(eg_session* session, const uint8_t* pixels, int32_t width, int32_t height,
                             int32_t channels, int32_t stride_bytes) {
  EG_SESSION("eg_session_add_image_rgb");
  EG_REQUIRE(pixels != nullptr, "eg_session_add_image_rgb: pixels must not be NULL");
  EG_REQUIRE(channels == 3 || channels == 4, "eg_session_add_image_rgb: channels must be 3 (RGB) or 4 (RGBA)");
  EG_REQUIRE(width > 0 && height > 0, "eg_session_add_image_rgb: width and height must be > 0");
  const std::string bad = eg::vision::image_size_problem(width, height);
  EG_REQUIRE(bad.empty(), "eg_session_add_image_rgb: " + bad);
  const int64_t row = static_cast<int64_t>(width) * channels;
  EG_REQUIRE(stride_bytes == 0 || stride_bytes >= row,
             "eg_session_add_image_rgb: stride_bytes must be 0 (packed) or >= width * channels");
  return guarded([&] {
    const int64_t stride = stride_bytes == 0 ? row : stride_bytes;
    std::vector<uint8_t> packed(static_cast<size_t>(row * height));
    for (int32_t y = 0; y < height; ++y)
      std::memcpy(packed.data() + y * row, pixels + y * stride, static_cast<size_t>(row));
    session->s->add_image(eg::vision::image_from_pixels(packed.data(), width, height, channels));
    return EG_OK;
  });
}

int eg_session_add_audio(eg_session* session, const char* path) {
  EG_SESSION("eg_session_add_audio");
  EG_REQUIRE(path != nullptr, "eg_session_add_audio: path must not be NULL");
  return guarded([&] {
    session->s->add_audio(eg::audio::load_audio_file(path));
    return EG_OK;
  });
}

int eg_session_add_audio_pcm(eg_session* session, const float* samples, int64_t n_samples, int32_t sample_rate) {
  EG_SESSION("eg_session_add_audio_pcm");
  EG_REQUIRE(samples != nullptr, "eg_session_add_audio_pcm: samples must not be NULL");
  EG_REQUIRE(n_samples > 0, "eg_session_add_audio_pcm: n_samples must be > 0");
  EG_REQUIRE(sample_rate >= 1000 && sample_rate <= 384000,
             "eg_session_add_audio_pcm: sample_rate must be in [1000, 384000]");
  EG_REQUIRE(static_cast<double>(n_samples) / sample_rate <= eg::audio::kDefaultMaxSeconds,
             "eg_session_add_audio_pcm: the clip is longer than 600 s");
  return guarded([&] {
    session->s->add_audio(eg::audio::downmix(samples, static_cast<size_t>(n_samples), 1, sample_rate));
    return EG_OK;
  });
}

int eg_session_append_audio(eg_session* session, const float* pcm, size_t frames, int channels, int sample_rate) {
  EG_SESSION("eg_session_append_audio");
  EG_REQUIRE(pcm != nullptr || frames == 0, "eg_session_append_audio: pcm must not be NULL");
  EG_REQUIRE(channels >= 1 && channels <= 64, "eg_session_append_audio: channels must be in [1, 64]");
  EG_REQUIRE(sample_rate >= 1000 && sample_rate <= 384000,
             "eg_session_append_audio: sample_rate must be in [1000, 384000]");
  EG_REQUIRE(static_cast<double>(frames) / sample_rate <= eg::audio::kDefaultMaxSeconds,
             "eg_session_append_audio: the chunk is longer than 600 s");
  return guarded([&] {
    if (frames == 0) {
      session->s->append_audio(nullptr, 0, sample_rate);  // checks the model and the rate only
      return EG_OK;
    }
    const eg::audio::Pcm mono = eg::audio::downmix(pcm, frames * static_cast<size_t>(channels), channels, sample_rate);
    session->s->append_audio(mono.samples.data(), mono.samples.size(), sample_rate);
    return EG_OK;
  });
}

int eg_session_end_audio(eg_session* session) {
  EG_SESSION("eg_session_end_audio");
  return guarded([&] {
    session->s->end_audio();
    return EG_OK;
  });
}

int eg_session_append_text(eg_session* session, const char* text) {
  EG_SESSION("eg_session_append_text");
  EG_REQUIRE(text != nullptr, "eg_session_append_text: text must not be NULL");
  return guarded([&] {
    session->s->append_text(text);
    return EG_OK;
  });
}

int eg_session_update_input(eg_session* session, const char* text) {
  EG_SESSION("eg_session_update_input");
  EG_REQUIRE(text != nullptr, "eg_session_update_input: text must not be NULL");
  return guarded([&] {
    session->s->update_input(text);
    return EG_OK;
  });
}

int eg_session_generate(eg_session* session, const eg_generate_params* params, eg_piece_callback callback,
                        void* user, eg_result* result) {
  EG_SESSION("eg_session_generate");
  return guarded([&] {
    fill(session->s->generate(to_cpp(params), to_cpp(callback, user)), result);
    return EG_OK;
  });
}

int eg_session_chat(eg_session* session, const char* user_text, const eg_generate_params* params,
                    eg_piece_callback callback, void* user, eg_result* result) {
  EG_SESSION("eg_session_chat");
  EG_REQUIRE(user_text != nullptr, "eg_session_chat: user_text must not be NULL");
  return guarded([&] {
    fill(session->s->chat(user_text, to_cpp(params), to_cpp(callback, user)), result);
    return EG_OK;
  });
}

int eg_session_cancel(eg_session* session) {
  EG_SESSION("eg_session_cancel");
  session->s->cancel();
  return EG_OK;
}

int eg_session_count_tokens(eg_session* session, const char* text, int32_t* out) {
  EG_SESSION("eg_session_count_tokens");
  EG_REQUIRE(text != nullptr && out != nullptr, "eg_session_count_tokens: text and out must not be NULL");
  return guarded([&] {
    *out = session->s->count_tokens(text);
    return EG_OK;
  });
}

int eg_session_reset(eg_session* session) {
  EG_SESSION("eg_session_reset");
  return guarded([&] {
    session->s->reset();
    return EG_OK;
  });
}

int eg_session_save(eg_session* session, const char* path) {
  EG_SESSION("eg_session_save");
  EG_REQUIRE(path != nullptr, "eg_session_save: path must not be NULL");
  return guarded([&] {
    session->s->save(path);
    return EG_OK;
  });
}

int eg_session_restore(eg_session* session, const char* path) {
  EG_SESSION("eg_session_restore");
  EG_REQUIRE(path != nullptr, "eg_session_restore: path must not be NULL");
  return guarded([&] {
    session->s->restore(path);
    return EG_OK;
  });
}

int eg_session_stats(eg_session* session, eg_stats* out) {
  EG_SESSION("eg_session_stats");
  EG_REQUIRE(out != nullptr, "eg_session_stats: out must not be NULL");
  const eg::SessionStats& st = session->s->last_stats();
  out->prompt_tokens = st.prompt_tokens;
  out->reused_tokens = st.reused_tokens;
  out->prefilled_tokens = st.prefilled_tokens;
  out->generated_tokens = st.generated_tokens;
  out->prefill_ms = st.prefill_ms;
  out->ttft_ms = st.ttft_ms;
  out->decode_ms = st.decode_ms;
  out->prefill_tok_s = st.prefill_tok_s;
  out->decode_tok_s = st.decode_tok_s;
  out->context_used = st.context_used;
  out->context_size = st.context_size;
  out->kv_bytes = st.kv_bytes;
  return EG_OK;
}

}  // extern "C"

// ---- the model store ----

namespace {

int copy_out(const std::string& v, char* out, size_t size, const char* what) {
  if (out == nullptr) return EG_OK;
  if (v.size() + 1 > size) return fail(EG_ERR_INVALID_ARGUMENT, std::string(what) + " buffer too small (needs " + std::to_string(v.size() + 1) + " bytes)");
  std::memcpy(out, v.c_str(), v.size() + 1);
  return EG_OK;
}

}  // namespace

extern "C" int eg_store_open(const char* dir, eg_store** out) {
  EG_REQUIRE(out != nullptr, "out is NULL");
  *out = nullptr;
  return guarded([&] {
    auto h = std::make_unique<eg_store>();
    h->s = std::make_unique<eg::store::Store>(dir && *dir ? std::string(dir) : eg::store::Store::default_root());
    *out = h.release();
    return EG_OK;
  });
}

extern "C" void eg_store_free(eg_store* store) { delete store; }

extern "C" int eg_store_add(eg_store* store, const char* path, const char* name, const char* version, char* version_out,
                            size_t version_out_size) {
  EG_REQUIRE(store != nullptr && path != nullptr && name != nullptr, "store, path or name is NULL");
  return guarded([&] {
    eg::store::AddOptions o;
    o.name = name;
    o.version = version ? version : "";
    const eg::store::Manifest m = store->s->add(path, o);
    return copy_out(m.version, version_out, version_out_size, "version_out");
  });
}

extern "C" int eg_store_use(eg_store* store, const char* name, const char* version) {
  EG_REQUIRE(store != nullptr && name != nullptr && version != nullptr, "store, name or version is NULL");
  return guarded([&] {
    store->s->use(name, version);
    return EG_OK;
  });
}

extern "C" int eg_store_rollback(eg_store* store, const char* name) {
  EG_REQUIRE(store != nullptr && name != nullptr, "store or name is NULL");
  return guarded([&] {
    store->s->rollback(name);
    return EG_OK;
  });
}

extern "C" int eg_store_current(eg_store* store, const char* name, char* version_out, size_t version_out_size,
                                char* path_out, size_t path_out_size) {
  EG_REQUIRE(store != nullptr && name != nullptr, "store or name is NULL");
  return guarded([&] {
    if (!eg::store::is_valid_name(name)) throw eg::Error(std::string("invalid model name '") + name + "'");
    const eg::store::Manifest m = store->s->resolve(name);
    const std::string path = store->s->model_path(m);
    if (version_out && m.version.size() + 1 > version_out_size)
      return copy_out(m.version, version_out, version_out_size, "version_out");
    if (path_out && path.size() + 1 > path_out_size) return copy_out(path, path_out, path_out_size, "path_out");
    copy_out(m.version, version_out, version_out_size, "version_out");
    return copy_out(path, path_out, path_out_size, "path_out");
  });
}
