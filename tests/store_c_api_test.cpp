// The model store through the C API (eg_store_*): add, current, use, rollback, errors, and a
// model loaded from the path eg_store_current gives.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "edgegemma/edgegemma.h"
#include "test_util.h"

namespace {

std::string hf_dir() { return egtest::shared_dir() + "/models/tiny-gemma3"; }
std::string gguf_path() { return egtest::shared_dir() + "/models/gguf/tiny-gemma3/tiny-gemma3-q4_0.gguf"; }

}  // namespace

TEST(StoreCApi, AddCurrentUseRollback) {
  const std::string dir = egtest::make_temp_dir() + "/store";
  eg_store* st = nullptr;
  ASSERT_EQ(eg_store_open(dir.c_str(), &st), EG_OK) << eg_last_error();
  char ver[32], path[4096];
  ASSERT_EQ(eg_store_add(st, hf_dir().c_str(), "tiny", nullptr, ver, sizeof ver), EG_OK) << eg_last_error();
  EXPECT_STREQ(ver, "v1");
  ASSERT_EQ(eg_store_add(st, gguf_path().c_str(), "tiny", "q4", ver, sizeof ver), EG_OK) << eg_last_error();
  EXPECT_STREQ(ver, "q4");
  ASSERT_EQ(eg_store_current(st, "tiny", ver, sizeof ver, path, sizeof path), EG_OK) << eg_last_error();
  EXPECT_STREQ(ver, "q4");
  EXPECT_EQ(std::string(path), dir + "/trees/tiny/q4/tiny-gemma3-q4_0.gguf");
  ASSERT_EQ(eg_store_rollback(st, "tiny"), EG_OK) << eg_last_error();
  ASSERT_EQ(eg_store_current(st, "tiny", ver, sizeof ver, path, sizeof path), EG_OK);
  EXPECT_STREQ(ver, "v1");
  EXPECT_EQ(std::string(path), dir + "/trees/tiny/v1");
  // The path loads as any model folder does.
  eg_model* m = nullptr;
  ASSERT_EQ(eg_model_load(path, &m), EG_OK) << eg_last_error();
  eg_model_free(m);
  ASSERT_EQ(eg_store_use(st, "tiny", "q4"), EG_OK) << eg_last_error();
  ASSERT_EQ(eg_store_current(st, "tiny", ver, sizeof ver, nullptr, 0), EG_OK);
  EXPECT_STREQ(ver, "q4");
  eg_store_free(st);
  // Another handle (another process would do the same) sees the same pointers.
  ASSERT_EQ(eg_store_open(dir.c_str(), &st), EG_OK);
  ASSERT_EQ(eg_store_current(st, "tiny", ver, sizeof ver, nullptr, 0), EG_OK);
  EXPECT_STREQ(ver, "q4");
  eg_store_free(st);
}

TEST(StoreCApi, Errors) {
  const std::string dir = egtest::make_temp_dir() + "/store";
  eg_store* st = nullptr;
  EXPECT_EQ(eg_store_open(dir.c_str(), nullptr), EG_ERR_INVALID_ARGUMENT);
  ASSERT_EQ(eg_store_open(dir.c_str(), &st), EG_OK);
  char ver[32], tiny_buf[4];
  EXPECT_EQ(eg_store_add(nullptr, hf_dir().c_str(), "tiny", nullptr, nullptr, 0), EG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(eg_store_add(st, hf_dir().c_str(), "bad/name", nullptr, nullptr, 0), EG_ERR_FAILED);
  EXPECT_EQ(eg_store_add(st, "/nonexistent", "tiny", nullptr, nullptr, 0), EG_ERR_FAILED);
  EXPECT_NE(std::string(eg_last_error()).find("/nonexistent"), std::string::npos) << eg_last_error();
  EXPECT_EQ(eg_store_current(st, "tiny", ver, sizeof ver, nullptr, 0), EG_ERR_FAILED);
  ASSERT_EQ(eg_store_add(st, hf_dir().c_str(), "tiny", nullptr, nullptr, 0), EG_OK) << eg_last_error();
  EXPECT_EQ(eg_store_rollback(st, "tiny"), EG_ERR_FAILED);
  EXPECT_NE(std::string(eg_last_error()).find("no previous version"), std::string::npos) << eg_last_error();
  EXPECT_EQ(eg_store_use(st, "tiny", "v7"), EG_ERR_FAILED);
  EXPECT_EQ(eg_store_current(st, "tiny", tiny_buf, sizeof tiny_buf, nullptr, 0), EG_OK) << "\"v1\" fits in 4 bytes";
  EXPECT_EQ(eg_store_current(st, "tiny", tiny_buf, 2, nullptr, 0), EG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(eg_store_current(st, "tiny", nullptr, 0, tiny_buf, sizeof tiny_buf), EG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(eg_store_current(st, "../x", ver, sizeof ver, nullptr, 0), EG_ERR_FAILED);
  ASSERT_EQ(eg_store_current(st, "tiny", ver, sizeof ver, nullptr, 0), EG_OK);
  EXPECT_STREQ(ver, "v1");
  eg_store_free(st);
  eg_store_free(nullptr);
}
