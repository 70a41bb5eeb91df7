// `edgegemma serve` with bad flags or files: a clear one-line error and a non-zero exit before
// anything listens, never a crash.
#include <gtest/gtest.h>

#include "test_util.h"

using namespace egtest;

TEST(ServeCli, BadFlagsAndFilesAreClearErrors) {
  const std::string model = shared_dir() + "/models/tiny-gemma3";
  const std::string dir = make_temp_dir();
  write_file(dir + "/bad.jinja", "{% for m in messages %}{{ m.content ");
  write_file(dir + "/garbage.gguf", "this is not a GGUF file at all, just text");
  struct Case {
    std::vector<std::string> args;
    int exit_code;
    std::string needle;  // in stderr
  };
  const std::vector<Case> cases = {
      {{"-m", dir + "/missing-model"}, 1, "error"},
      {{"-m", dir + "/garbage.gguf"}, 1, "garbage.gguf"},
      {{"-m", model, "--port", "70000"}, 2, "port"},
      {{"-m", model, "--port", "http"}, 2, "port"},
      {{"-m", model, "--parallel", "0"}, 2, "parallel"},
      {{"-m", model, "--queue", "-1"}, 2, "queue"},
      {{"-m", model, "--timeout", "0"}, 2, "timeout"},
      {{"-m", model, "--max-body-kb", "0"}, 2, "max-body-kb"},
      {{"-m", model, "--media-cache-mb", "-1"}, 2, "media-cache-mb"},
      {{"-m", model, "--media-cache-mb", "lots"}, 2, "media-cache-mb"},
      {{"-m", model, "--media-cache-mb", "99999999999999"}, 2, "media-cache-mb"},
      {{"-m", model, "--prefix-cache-mb", "-5"}, 2, "prefix-cache-mb"},
      {{"-m", model, "--ctx", "99999999"}, 1, "exceeds"},
      {{"-m", model, "--kv-type", "fp7"}, 1, "fp7"},
      {{"-m", model, "--chat-template", dir + "/missing.jinja"}, 1, "missing.jinja"},
      {{"-m", model, "--chat-template", dir + "/bad.jinja"}, 1, "error"},
      {{"-m", model, "--host", "999.1.1.1", "--port", "0"}, 1, "cannot bind"},
      {{"-m", model, "--bogus-flag"}, 2, "bogus"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {cli_path(), "serve"};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    const CmdResult r = run_cmd(argv);
    std::string joined;
    for (const auto& a : c.args) joined += a + " ";
    EXPECT_EQ(r.exit_code, c.exit_code) << joined << "\n" << r.err;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << joined << "\n" << r.err;
    EXPECT_EQ(r.out.find("listening"), std::string::npos) << joined;
  }
}
