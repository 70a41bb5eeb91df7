// JPEG decoding with libjpeg-turbo, configured as Pillow decodes (islow DCT, fancy upsampling,
// RGB output), plus EXIF orientation. libjpeg reports errors through a callback that must not
// return: we longjmp back here and throw from plain C++ frames (no C frame is unwound by an
// exception). Objects with destructors live outside the setjmp region.
#include <csetjmp>
#include <cstdio>
#include <cstring>

#include <jpeglib.h>
#include <jerror.h>

#include "core/error.h"
#include "vision/decoders.h"

namespace eg::vision::detail {

namespace {

struct ErrorMgr {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void on_error(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorMgr*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Warnings: a premature end of data is a truncated file, which Pillow refuses ("image file is
// truncated"); we refuse it too. Other warnings (extraneous bytes, ...) are tolerated, as Pillow does.
void on_message(j_common_ptr cinfo, int level) {
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) {
    auto* err = reinterpret_cast<ErrorMgr*>(cinfo->err);
    (*cinfo->err->format_message)(cinfo, err->message);
    std::longjmp(err->jump, 1);
  }
}

int orientation_from_markers(const jpeg_decompress_struct& ci) {
  for (jpeg_saved_marker_ptr m = ci.marker_list; m; m = m->next)
    if (m->marker == JPEG_APP0 + 1 && m->data_length > 6 && std::memcmp(m->data, "Exif\0\0", 6) == 0)
      return exif_orientation(m->data + 6, m->data_length - 6);
  return 1;
}

}  // namespace

RgbImage decode_jpeg(const uint8_t* data, size_t n, const std::string& origin) {
  RgbImage img;      // outside the setjmp region: destroyed normally
  std::string fail;  // set before throwing
  volatile int orientation = 1;  // volatile: live across setjmp
  {
    jpeg_decompress_struct ci;
    ErrorMgr err;
    ci.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = on_error;
    err.pub.emit_message = on_message;
    err.message[0] = '\0';
    volatile bool created = false;
    if (setjmp(err.jump)) {
      fail = err.message;
    } else {
      jpeg_create_decompress(&ci);
      created = true;
      jpeg_mem_src(&ci, data, static_cast<unsigned long>(n));
      jpeg_save_markers(&ci, JPEG_APP0 + 1, 0xFFFF);
      jpeg_read_header(&ci, TRUE);
      fail = image_size_problem(ci.image_width, ci.image_height);  // no throw inside this region
      if (fail.empty() && (ci.jpeg_color_space == JCS_CMYK || ci.jpeg_color_space == JCS_YCCK))
        fail = "CMYK JPEG images are not supported";
      if (fail.empty()) {
        orientation = orientation_from_markers(ci);
        ci.out_color_space = JCS_RGB;
        ci.dct_method = JDCT_ISLOW;
        ci.do_fancy_upsampling = TRUE;
        jpeg_start_decompress(&ci);
        img.width = static_cast<int>(ci.output_width);
        img.height = static_cast<int>(ci.output_height);
        img.rgb.resize(static_cast<size_t>(img.width) * img.height * 3);
        while (ci.output_scanline < ci.output_height) {
          JSAMPROW row = img.rgb.data() + static_cast<size_t>(ci.output_scanline) * img.width * 3;
          jpeg_read_scanlines(&ci, &row, 1);
        }
        jpeg_finish_decompress(&ci);
      }
    }
    if (created) jpeg_destroy_decompress(&ci);
  }
  if (!fail.empty()) throw Error(origin + ": cannot decode JPEG: " + fail);
  return apply_exif_orientation(std::move(img), orientation);
}

}  // namespace eg::vision::detail
