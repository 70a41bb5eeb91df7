// SHA-256 of the model store (src/store/sha256.h) against the FIPS 180-4 / NIST test vectors and
// against the coreutils `sha256sum` tool on the fixture files.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "store/sha256.h"
#include "test_util.h"

using eg::store::Sha256;
using eg::store::sha256_file;
using eg::store::sha256_hex;

TEST(StoreSha256, NistVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(StoreSha256, IncrementalEqualsOneShotAtEverySplit) {
  std::string data;
  for (int i = 0; i < 300; ++i) data += static_cast<char>((i * 131 + 7) & 0xff);
  const std::string want = sha256_hex(data);
  for (size_t cut = 0; cut <= data.size(); cut += 7) {
    Sha256 h;
    h.update(data.substr(0, cut));
    h.update(data.substr(cut));
    EXPECT_EQ(h.hex(), want) << cut;
  }
  Sha256 h;
  h.update("abc");
  h.hex();
  EXPECT_EQ(h.hex(), sha256_hex("")) << "hex() resets the hash";
}

TEST(StoreSha256, FilesMatchSha256sum) {
  for (const std::string rel : {"/models/tiny-gemma3/config.json", "/models/tiny-gemma3/model.safetensors",
                                "/models/gguf/tiny-gemma3/tiny-gemma3-q4_0.gguf"}) {
    const std::string path = egtest::shared_dir() + rel;
    const auto r = egtest::run_cmd({"/usr/bin/sha256sum", path});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    uint64_t size = 0;
    EXPECT_EQ(sha256_file(path, &size), r.out.substr(0, 64)) << path;
    EXPECT_EQ(size, egtest::read_file(path).size());
  }
  EXPECT_THROW(sha256_file("/nonexistent/file"), eg::Error);
  EXPECT_TRUE(eg::store::is_sha256_hex(sha256_hex("x")));
  EXPECT_FALSE(eg::store::is_sha256_hex(std::string(64, 'A')));
  EXPECT_FALSE(eg::store::is_sha256_hex(std::string(63, 'a')));
}
