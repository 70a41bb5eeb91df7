// `serve` following the model store (docs/model-store.md): hot rollback under a running load with
// zero failed requests (POST /v1/models/NAME/rollback, and `edgegemma models rollback` from
// another process), the admin key, /v1/models' versions, --rollback-if, and --mmproj kept across
// a swap.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "engine/loaded_model.h"
#include "model/gguf_quantize.h"
#include "model/mmproj.h"
#include "server_test_util.h"
#include "store/store.h"
#include "vision_test_util.h"

using egtest::TestServer;
using nlohmann::json;

namespace {

// v1: tiny Gemma 3 (HF folder); v2: tiny Gemma 2 (GGUF): different models, so each answer tells
// which version produced it.
struct Fixture {
  std::string root;
  std::string v1_path, v2_path;
};

Fixture make_store() {
  Fixture f;
  f.root = egtest::make_temp_dir() + "/store";
  eg::store::Store s(f.root);
  eg::store::AddOptions o;
  o.name = "tiny";
  o.version = "v1";
  s.add(egtest::shared_dir() + "/models/tiny-gemma3", o);
  o.version = "v2";
  s.add(egtest::shared_dir() + "/models/gguf/tiny-gemma2/tiny-gemma2-q8_0.gguf", o);  // current
  f.v1_path = s.model_path(s.manifest("tiny", "v1"));
  f.v2_path = s.model_path(s.manifest("tiny", "v2"));
  return f;
}

eg::server::ServerOptions store_opts(const Fixture& f) {
  eg::server::ServerOptions o;
  o.model_id = "tiny";
  o.store_root = f.root;
  o.store_name = "tiny";
  o.store_version = "v2";
  o.store_poll_s = 0.05;
  o.admin_key = "admin-secret";
  o.scheduler.slots = 4;
  o.scheduler.context_tokens = 512;
  return o;
}

const json kBody{{"prompt", "Once upon a time"}, {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true}};

std::string answer_of(const std::string& model_path) {
  eg::server::ServerOptions o;
  o.scheduler.context_tokens = 512;
  TestServer s(model_path, o);
  auto [st, r] = s.post("/v1/completions", kBody);
  EXPECT_EQ(st, 200) << r.dump();
  return r["choices"][0]["text"].get<std::string>();
}

std::string serving(const TestServer& s) {
  auto [st, r] = s.get("/v1/models");
  EXPECT_EQ(st, 200);
  return r["data"][0].value("version", "");
}

const httplib::Headers kAdmin{{"Authorization", "Bearer admin-secret"}};

}  // namespace

TEST(ServerStoreSwap, HotRollbackUnderLoadFailsNoRequest) {
  const Fixture f = make_store();
  const std::string a1 = answer_of(f.v1_path), a2 = answer_of(f.v2_path);
  ASSERT_NE(a1, a2) << "the two versions must answer differently for this test to see the switch";
  TestServer s(f.v2_path, store_opts(f));
  {
    auto [st, r] = s.get("/v1/models");
    ASSERT_EQ(st, 200);
    const json m = r["data"][0];
    EXPECT_EQ(m["version"], "v2");
    EXPECT_EQ(m["current"], "v2");
    EXPECT_EQ(m["previous"], "v1");
    ASSERT_EQ(m["versions"].size(), 2u);
  }
  // The load: 6 clients (2 streaming) sending greedy completions back to back.
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0}, failed{0};
  std::mutex mu;
  std::vector<std::string> failures;
  std::atomic<int> phase{2};                // the version every request *started* now must get
  std::atomic<int> wrong_after_switch{0};   // a request started after a switch got the old answer
  std::vector<std::thread> clients;
  for (int c = 0; c < 6; ++c) {
    clients.emplace_back([&, c] {
      while (!stop) {
        const int want = phase.load();
        std::string text;
        int status = 200;
        if (c < 2) {
          json b = kBody;
          b["stream"] = true;
          const auto ev = s.stream("/v1/completions", b);
          if (ev.empty() || ev.back() != "[DONE]") status = -1;
          for (const json& e : ev)
            if (e.is_object() && e.contains("choices") && e["choices"][0]["text"].is_string())
              text += e["choices"][0]["text"].get<std::string>();
            else if (e.is_object()) status = -2;
        } else {
          auto [st, r] = s.post("/v1/completions", kBody);
          status = st;
          if (st == 200 && r.is_object() && r["choices"][0]["text"].is_string()) text = r["choices"][0]["text"].get<std::string>();
        }
        if (status != 200 || (text != a1 && text != a2)) {
          ++failed;
          std::lock_guard<std::mutex> lk(mu);
          failures.push_back(std::to_string(status) + " '" + text + "'");
        } else {
          ++ok;
          if ((want == 1 && text != a1) || (want == 2 && text != a2)) ++wrong_after_switch;
        }
      }
    });
  }
  auto wait_requests = [&](int n) {
    const int until = ok + failed + n;
    for (int i = 0; i < 3000 && ok + failed < until; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  };
  wait_requests(20);
  // 1. Rollback over HTTP: answers once v1 serves new requests.
  phase = 0;  // requests in flight during the switch may get either answer
  {
    auto [st, r] = s.post("/v1/models/tiny/rollback", json::object(), kAdmin);
    ASSERT_EQ(st, 200) << r.dump();
    EXPECT_EQ(r["current"], "v1");
    EXPECT_EQ(r["previous"], "v2");
    EXPECT_EQ(r["serving"], "v1");
  }
  phase = 1;
  EXPECT_EQ(serving(s), "v1");
  wait_requests(20);
  // 2. Rollback by another process (`edgegemma models rollback`): the server follows the pointer.
  phase = 0;
  const auto r = egtest::run_cmd({egtest::cli_path(), "models", "rollback", "tiny", "--store", f.root});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (int i = 0; i < 1000 && serving(s) != "v2"; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(serving(s), "v2");
  phase = 2;
  wait_requests(20);
  stop = true;
  for (auto& t : clients) t.join();
  EXPECT_EQ(failed.load(), 0) << (failures.empty() ? "" : failures[0]);
  EXPECT_EQ(wrong_after_switch.load(), 0);
  EXPECT_GE(ok.load(), 60);
  std::printf("hot rollbacks under load: %d requests, %d failed\n", ok.load(), failed.load());
}

TEST(ServerStoreSwap, AdminKeyGuardsRollback) {
  const Fixture f = make_store();
  auto o = store_opts(f);
  o.api_key = "user-key";
  TestServer s(f.v2_path, o);
  EXPECT_EQ(s.post("/v1/models/tiny/rollback", json::object()).first, 401);
  EXPECT_EQ(s.post("/v1/models/tiny/rollback", json::object(), {{"Authorization", "Bearer user-key"}}).first, 401)
      << "the API key is not the admin key";
  EXPECT_EQ(s.post("/v1/models/other/rollback", json::object(), kAdmin).first, 404);
  EXPECT_EQ(eg::store::Store(f.root, false).pointers("tiny").current, "v2");
  EXPECT_EQ(s.post("/v1/models/tiny/rollback", json::object(), kAdmin).first, 200);
  EXPECT_EQ(eg::store::Store(f.root, false).pointers("tiny").current, "v1");
  // Rolling back again returns to v2; a third time to v1 (one step each).
  EXPECT_EQ(s.post("/v1/models/tiny/rollback", json::object(), kAdmin).second["serving"], "v2");

  auto no_admin = store_opts(f);
  no_admin.admin_key.clear();
  TestServer s2(f.v2_path, no_admin);
  EXPECT_EQ(s2.post("/v1/models/tiny/rollback", json::object(), kAdmin).first, 403);
}

TEST(ServerStoreSwap, RollbackIfThresholdRollsBackOnce) {
  const Fixture f = make_store();
  auto o = store_opts(f);
  o.rollback_if = "ttft_p50>=0s";  // always holds: the first window of 3 requests triggers it
  o.rollback_min_requests = 3;
  TestServer s(f.v2_path, o);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(s.post("/v1/completions", kBody).first, 200);
  for (int i = 0; i < 500 && serving(s) != "v1"; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(serving(s), "v1");
  EXPECT_EQ(eg::store::Store(f.root, false).pointers("tiny").current, "v1");
  EXPECT_EQ(s.metric("edgegemma_auto_rollbacks_total"), 1);
  // It fires once: v1 also "violates" the rule, but no second rollback follows.
  for (int i = 0; i < 4; ++i) EXPECT_EQ(s.post("/v1/completions", kBody).first, 200);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(serving(s), "v1");
  EXPECT_EQ(s.metric("edgegemma_auto_rollbacks_total"), 1);
}

TEST(ServerStoreSwap, NotFollowingWithoutStore) {
  eg::server::ServerOptions o;
  TestServer s(egtest::shared_dir() + "/models/tiny-gemma3", o);
  auto [st, r] = s.get("/v1/models");
  EXPECT_FALSE(r["data"][0].contains("versions"));
  EXPECT_EQ(s.post("/v1/models/test-model/rollback", json::object(), kAdmin).first, 403);
  o.rollback_if = "ttft_p95>1s";
  EXPECT_THROW(eg::server::Server(egtest::shared_model(egtest::shared_dir() + "/models/tiny-gemma3"), o), eg::Error);
}

// serve -m NAME --mmproj FILE: the mmproj is attached to every version the store swaps in, not
// only the first (before, the rolled-back version answered image requests with "no vision tower").
TEST(ServerStoreSwap, MmprojStaysAttachedAcrossASwap) {
  const std::string dir = egtest::make_temp_dir();
  const std::string text = dir + "/text.gguf", mm = dir + "/mmproj.gguf";
  eg::GGUFQuantizeOptions q;
  q.type = "q8_0";
  eg::quantize_to_gguf(egtest::g3v_dir(), text, q);
  eg::MmprojWriteOptions mo;
  mo.type = "f16";
  eg::write_mmproj(egtest::g3v_dir(), mm, mo);
  Fixture f;
  f.root = dir + "/store";
  {
    eg::store::Store st(f.root);
    eg::store::AddOptions o;
    o.name = "tiny";
    o.version = "v1";
    st.add(text, o);
    o.version = "v2";
    st.add(text, o);  // the same text model: the answers must not change across the swap
    f.v2_path = st.model_path(st.manifest("tiny", "v2"));
  }
  auto o = store_opts(f);
  o.mmproj = mm;
  o.scheduler.slots = 1;
  std::shared_ptr<eg::LoadedModel> first = eg::LoadedModel::load(f.v2_path);
  first->attach_mmproj(mm);
  TestServer s(std::shared_ptr<const eg::LoadedModel>(std::move(first)), o);
  const std::string png = egtest::g3v_dir() + "/inputs/img_gradient_224x224.png";
  const json req = {{"messages", json::array({{{"role", "user"},
                                               {"content", json::array({{{"type", "image_url"},
                                                                         {"image_url", {{"url", "data:image/png;base64," + egtest::base64(egtest::read_file(png))}}}},
                                                                        {{"type", "text"}, {"text", "Describe this."}}})}}})},
                    {"max_tokens", 8},
                    {"temperature", 0},
                    {"ignore_eos", true}};
  auto [st1, r1] = s.post("/v1/chat/completions", req);
  ASSERT_EQ(st1, 200) << r1.dump();
  EXPECT_EQ(s.post("/v1/models/tiny/rollback", json::object(), kAdmin).first, 200);
  for (int i = 0; i < 500 && serving(s) != "v1"; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(serving(s), "v1");
  auto [st2, r2] = s.post("/v1/chat/completions", req);
  ASSERT_EQ(st2, 200) << r2.dump();
  EXPECT_EQ(r2["choices"][0]["message"]["content"], r1["choices"][0]["message"]["content"]);
  EXPECT_EQ(r2["usage"]["prompt_tokens"], r1["usage"]["prompt_tokens"]);
}
