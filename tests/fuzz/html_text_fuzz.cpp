// libFuzzer target: the knowledge base's text path (src/kb): check_text, html_to_text and the
// chunker on arbitrary bytes. docs/reliability.md; built by scripts/fuzz.
//
// Checks: check_text throws only eg::Error, and accepts exactly the NUL-free valid UTF-8 inputs;
// html_to_text never throws, never grows its input, and keeps valid UTF-8 valid; chunk_text's
// chunks lie inside the text, in increasing order, at most chunk_bytes long, without gaps (but dropped whitespace), and on
// UTF-8 character boundaries of valid text.
#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.h"
#include "fuzz_util.h"
#include "kb/chunker.h"
#include "kb/text_extract.h"
#include "tokenizer/utf8.h"

namespace {

void check(bool ok, const std::string& what) {
  if (!ok) egfuzz::fail("html_text_fuzz", what);
}

void write_seeds(const std::string& dir) {
  egfuzz::write_seed(dir, "page.html",
                     "<!DOCTYPE html><html><head><title>T</title><style>p{}</style></head><body><h1>Head</h1>"
                     "<p>Caf&eacute; &amp; caf&#233; &#x4E2D;&nbsp;text<br>line</p><script>x='<p>'</script>"
                     "<!-- c --><ul><li>a</li><li>b</li></ul><pre>  keep\n  this</pre><a href=\"x>y\">l</a>"
                     "<table><tr><td>1</td><td>2</td></tr></table></body></html>");
  egfuzz::write_seed(dir, "text.md", "# Title\n\nA paragraph. Another sentence.\n\n\xe4\xb8\xad\xe6\x96\x87\xe3\x80\x82 more\n");
  egfuzz::write_seed(dir, "entities.html", "&#0;&#xD800;&#1114112;&#65;&lt;&gt;&quot;&apos;&mdash;&unknown;&#;&#x;");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  egfuzz::maybe_write_seeds(write_seeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  bool text = true;
  try {
    eg::kb::check_text(in, "input");
  } catch (const eg::Error&) {
    text = false;
  }
  check(text == (eg::utf8::is_valid(in) && in.find('\0') == std::string_view::npos), "check_text verdict");
  const std::string out = eg::kb::html_to_text(in);
  check(out.size() <= in.size(), "html_to_text grew the input");
  if (eg::utf8::is_valid(in)) check(eg::utf8::is_valid(out), "html_to_text broke UTF-8");
  const eg::kb::ChunkOptions o{64, 16};
  const auto chunks = eg::kb::chunk_text(out, o);
  uint64_t prev_start = 0, prev_end = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const auto& c = chunks[i];
    check(c.length > 0 && c.length <= 64 && c.offset + c.length <= out.size(), "chunk bounds");
    if (i > 0) {
      check(c.offset > prev_start, "chunk order");
      // A gap only where a whitespace-only chunk was dropped.
      check(c.offset <= prev_end ||
                out.substr(prev_end, c.offset - prev_end).find_first_not_of(" \t\r\n\f\v") == std::string::npos,
            "gap between chunks");
    }
    if (eg::utf8::is_valid(out)) check(eg::utf8::is_valid(std::string_view(out).substr(c.offset, c.length)), "chunk splits a character");
    prev_start = c.offset, prev_end = c.offset + c.length;
  }
  return 0;
}
