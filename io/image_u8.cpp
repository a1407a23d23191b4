// The OpenCV-free image path (io/image_u8.h): libjpeg-turbo / libpng decode and encode, OpenCV's
// uint8 INTER_LINEAR resize repeated in plain C++, the official letterbox, box outlines.
#include "io/image_u8.h"

#include <jpeglib.h>
#include <png.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <utility>

#include "engine/error.h"

namespace io {

namespace {

// OpenCV's CV_IO_MAX_IMAGE_PIXELS default: a header asking for more is refused before allocating.
constexpr uint64_t kMaxImagePixels = uint64_t{1} << 30;

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  Y9_CHECK_T(engine::IoError, f.good(), "cannot read image ", path, ": no such file or not readable");
  std::vector<uint8_t> buf((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  Y9_CHECK_T(engine::IoError, !buf.empty(), "cannot read image ", path, ": empty file");
  return buf;
}

// ---- EXIF orientation (JPEG APP1 "Exif\0\0" + TIFF header, IFD0 tag 0x0112) ----------------

int exif_orientation(const uint8_t* p, size_t n) {
  if (n < 14 || std::memcmp(p, "Exif\0\0", 6) != 0) return 1;
  const uint8_t* t = p + 6;
  const size_t tn = n - 6;
  const bool le = t[0] == 'I' && t[1] == 'I';
  if (!le && !(t[0] == 'M' && t[1] == 'M')) return 1;
  auto u16 = [&](size_t o) -> uint32_t { return le ? t[o] | t[o + 1] << 8 : t[o] << 8 | t[o + 1]; };
  auto u32 = [&](size_t o) -> uint32_t {
    return le ? t[o] | t[o + 1] << 8 | t[o + 2] << 16 | static_cast<uint32_t>(t[o + 3]) << 24
              : static_cast<uint32_t>(t[o]) << 24 | t[o + 1] << 16 | t[o + 2] << 8 | t[o + 3];
  };
  const size_t ifd = u32(4);
  if (ifd + 2 > tn) return 1;
  const uint32_t count = u16(ifd);
  for (uint32_t i = 0; i < count; ++i) {
    const size_t e = ifd + 2 + 12 * static_cast<size_t>(i);
    if (e + 12 > tn) break;
    if (u16(e) == 0x0112) {
      const uint32_t v = u16(e + 8);
      return v >= 1 && v <= 8 ? static_cast<int>(v) : 1;
    }
  }
  return 1;
}

// OpenCV's ExifTransform: 2 flip x, 3 flip both, 4 flip y, 5 transpose, 6 transpose + flip x,
// 7 transpose + flip both, 8 transpose + flip y.
// Takes the image by value so that orientation 1 (and the caller's std::move) costs no copy.
ImageU8 orient(ImageU8 s, int o) {
  if (o <= 1) return s;
  const int H = s.height, W = s.width;
  const bool tr = o >= 5;
  ImageU8 d;
  d.height = tr ? W : H;
  d.width = tr ? H : W;
  d.data.resize(s.data.size());
  for (int y = 0; y < d.height; ++y)
    for (int x = 0; x < d.width; ++x) {
      int sy = y, sx = x;
      switch (o) {
        case 2: sx = W - 1 - x; break;
        case 3: sy = H - 1 - y; sx = W - 1 - x; break;
        case 4: sy = H - 1 - y; break;
        case 5: sy = x; sx = y; break;
        case 6: sy = H - 1 - x; sx = y; break;
        case 7: sy = H - 1 - x; sx = W - 1 - y; break;
        case 8: sy = x; sx = W - 1 - y; break;
      }
      std::memcpy(d.row(y) + 3 * x, s.row(sy) + 3 * sx, 3);
    }
  return d;
}

// ---- JPEG --------------------------------------------------------------------------------------

struct JpegErr {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char msg[JMSG_LENGTH_MAX];
};
void jpeg_err_exit(j_common_ptr c) {
  JpegErr* e = reinterpret_cast<JpegErr*>(c->err);
  (*c->err->format_message)(c, e->msg);
  std::longjmp(e->jump, 1);
}
void jpeg_err_silent(j_common_ptr, int) {}

ImageU8 decode_jpeg(const std::string& path, const std::vector<uint8_t>& buf) {
  jpeg_decompress_struct cinfo;
  JpegErr err;
  err.msg[0] = 0;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_err_exit;
  err.mgr.emit_message = jpeg_err_silent;
  ImageU8 im;
  volatile int orientation = 1;
  volatile bool scanned = false;  // every scanline read: an error after that is in jpeg_finish_decompress
  ImageU8* volatile decoded = &im;  // read through after longjmp: im's fields changed after setjmp
  std::vector<uint8_t> line;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    // as OpenCV 4.6 (JpegDecoder::readData sets its result before jpeg_finish_decompress): an error
    // there (a stray marker after a corrupt scan, "Unsupported marker type") keeps the decoded image
    if (scanned) return orient(std::move(*decoded), orientation);
    Y9_THROW(engine::IoError, "cannot decode JPEG ", path, ": ", err.msg);
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, buf.data(), static_cast<unsigned long>(buf.size()));
  jpeg_save_markers(&cinfo, JPEG_APP0 + 1, 0xFFFF);
  jpeg_read_header(&cinfo, TRUE);
  for (jpeg_saved_marker_ptr m = cinfo.marker_list; m; m = m->next)
    if (m->marker == JPEG_APP0 + 1) orientation = exif_orientation(m->data, m->data_length);
  const bool cmyk = cinfo.num_components == 4;
  // as OpenCV 4.6 grfmt_jpeg.cpp with libjpeg-turbo: BGR straight from the decoder, CMYK converted after
  cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_EXT_BGR;
  cinfo.out_color_components = cmyk ? 4 : 3;
  if (static_cast<uint64_t>(cinfo.image_width) * cinfo.image_height > kMaxImagePixels) {
    jpeg_destroy_decompress(&cinfo);
    Y9_THROW(engine::IoError, "cannot decode JPEG ", path, ": ", cinfo.image_width, "x", cinfo.image_height,
             " pixels is more than the limit of 2^30");
  }
  jpeg_start_decompress(&cinfo);
  im.width = static_cast<int>(cinfo.output_width);
  im.height = static_cast<int>(cinfo.output_height);
  im.data.resize(static_cast<size_t>(im.width) * im.height * 3);
  line.resize(static_cast<size_t>(im.width) * 4);
  while (cinfo.output_scanline < cinfo.output_height) {
    const int y = static_cast<int>(cinfo.output_scanline);
    JSAMPROW r = cmyk ? line.data() : im.row(y);
    jpeg_read_scanlines(&cinfo, &r, 1);
    if (cmyk) {  // OpenCV icvCvt_CMYK2BGR_8u_C4C3R
      uint8_t* d = im.row(y);
      for (int x = 0; x < im.width; ++x) {
        const int c = line[4 * x], m = line[4 * x + 1], yy = line[4 * x + 2], k = line[4 * x + 3];
        d[3 * x + 2] = static_cast<uint8_t>(k - ((255 - c) * k >> 8));
        d[3 * x + 1] = static_cast<uint8_t>(k - ((255 - m) * k >> 8));
        d[3 * x + 0] = static_cast<uint8_t>(k - ((255 - yy) * k >> 8));
      }
    }
  }
  scanned = true;
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return orient(std::move(im), orientation);
}

// ---- PNG ---------------------------------------------------------------------------------------

struct PngSrc {
  const std::vector<uint8_t>* buf;
  size_t pos;
};
void png_read_mem(png_structp p, png_bytep out, png_size_t n) {
  PngSrc* s = static_cast<PngSrc*>(png_get_io_ptr(p));
  if (s->pos + n > s->buf->size()) png_error(p, "truncated file");
  std::memcpy(out, s->buf->data() + s->pos, n);
  s->pos += n;
}
void png_err(png_structp p, png_const_charp msg) {
  std::snprintf(static_cast<char*>(png_get_error_ptr(p)), 256, "%s", msg);
  png_longjmp(p, 1);
}
void png_warn(png_structp, png_const_charp) {}

ImageU8 decode_png(const std::string& path, const std::vector<uint8_t>& buf) {
  char msg[256] = "";
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, msg, png_err, png_warn);
  Y9_CHECK_T(engine::IoError, png, "cannot decode PNG ", path, ": libpng init failed");
  png_infop info = png_create_info_struct(png);
  ImageU8 im;
  std::vector<png_bytep> rows;
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    Y9_THROW(engine::IoError, "cannot decode PNG ", path, ": ", msg);
  }
  PngSrc src{&buf, 0};
  png_set_read_fn(png, &src, png_read_mem);
  png_read_info(png, info);
  const int ct = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
  // as OpenCV 4.6 grfmt_png.cpp for IMREAD_COLOR
  if (depth == 16) png_set_strip_16(png);
  png_set_strip_alpha(png);
  if (ct == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if ((ct & PNG_COLOR_MASK_COLOR) == 0 && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (ct & PNG_COLOR_MASK_COLOR) png_set_bgr(png);
  else png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  if (static_cast<uint64_t>(png_get_image_width(png, info)) * png_get_image_height(png, info) > kMaxImagePixels)
    png_error(png, "more pixels than the limit of 2^30");
  png_read_update_info(png, info);
  im.width = static_cast<int>(png_get_image_width(png, info));
  im.height = static_cast<int>(png_get_image_height(png, info));
  if (png_get_rowbytes(png, info) != static_cast<size_t>(im.width) * 3) png_error(png, "unexpected row layout");
  im.data.resize(static_cast<size_t>(im.width) * im.height * 3);
  rows.resize(static_cast<size_t>(im.height));
  for (int y = 0; y < im.height; ++y) rows[y] = im.row(y);
  png_read_image(png, rows.data());
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  return im;
}

std::string lower_ext(const std::string& path) {
  const size_t dot = path.find_last_of('.');
  std::string e = dot == std::string::npos ? "" : path.substr(dot + 1);
  for (char& c : e) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return e;
}

uint8_t sat_u8(int v) { return static_cast<uint8_t>(std::clamp(v, 0, 255)); }

// Python round(): half to even.
int round_half_even(double x) { return static_cast<int>(std::nearbyint(x)); }

}  // namespace

ImageU8 read_image_u8(const std::string& path) {
  const std::vector<uint8_t> buf = read_file(path);
  if (buf.size() >= 3 && buf[0] == 0xFF && buf[1] == 0xD8 && buf[2] == 0xFF) return decode_jpeg(path, buf);
  if (buf.size() >= 8 && png_sig_cmp(buf.data(), 0, 8) == 0) return decode_png(path, buf);
  Y9_THROW(engine::IoError, "cannot read image ", path,
                                               ": not a JPEG or PNG file (other formats need the OpenCV build)");
}

ImageU8 resize_linear_u8(const ImageU8& src, int new_h, int new_w) {
  Y9_CHECK(!src.empty() && static_cast<size_t>(src.width) * src.height * 3 == src.data.size(),
           "resize_linear_u8: empty or inconsistent image ", src.height, "x", src.width);
  Y9_CHECK(new_h > 0 && new_w > 0, "resize_linear_u8: bad size ", new_h, "x", new_w);
  const int H = src.height, W = src.width;
  ImageU8 dst;
  dst.height = new_h;
  dst.width = new_w;
  dst.data.resize(static_cast<size_t>(new_w) * new_h * 3);
  // OpenCV: inv_scale = dsize / ssize, scale = 1 / inv_scale (not ssize / dsize: the last bit can differ)
  const double scale_x = 1.0 / (static_cast<double>(new_w) / W), scale_y = 1.0 / (static_cast<double>(new_h) / H);
  if (W == 2 * new_w && H == 2 * new_h) {  // OpenCV turns an exact 2x downscale into INTER_AREA: a 2x2 mean
    for (int y = 0; y < new_h; ++y) {
      const uint8_t *s0 = src.row(2 * y), *s1 = src.row(2 * y + 1);
      uint8_t* d = dst.row(y);
      for (int x = 0; x < new_w; ++x)
        for (int c = 0; c < 3; ++c) {
          const int i = 6 * x + c;
          d[3 * x + c] = static_cast<uint8_t>((s0[i] + s0[i + 3] + s1[i] + s1[i + 3] + 2) >> 2);
        }
    }
    return dst;
  }
  constexpr int kBits = 11, kOne = 1 << kBits;  // INTER_RESIZE_COEF_BITS, INTER_RESIZE_COEF_SCALE
  // horizontal taps: source column and the two 11-bit weights per output column
  std::vector<int> xofs(new_w);
  std::vector<int16_t> alpha(2 * static_cast<size_t>(new_w));
  for (int dx = 0; dx < new_w; ++dx) {
    float fx = static_cast<float>((dx + 0.5) * scale_x - 0.5);
    int sx = static_cast<int>(std::floor(fx));
    fx -= static_cast<float>(sx);
    if (sx < 0) fx = 0, sx = 0;
    if (sx >= W - 1) fx = 0, sx = W - 1;
    xofs[dx] = sx;
    alpha[2 * dx] = static_cast<int16_t>(std::lrint((1.f - fx) * static_cast<float>(kOne)));
    alpha[2 * dx + 1] = static_cast<int16_t>(std::lrint(fx * static_cast<float>(kOne)));
  }
  const int row_len = new_w * 3;
  std::vector<int> hrow[2] = {std::vector<int>(row_len), std::vector<int>(row_len)};
  int cached[2] = {-1, -1};
  auto hresize = [&](int sy, std::vector<int>& out) {
    const uint8_t* s = src.row(sy);
    for (int dx = 0; dx < new_w; ++dx) {
      const int sx = xofs[dx], a0 = alpha[2 * dx], a1 = alpha[2 * dx + 1];
      const uint8_t* p0 = s + 3 * sx;
      const uint8_t* p1 = sx + 1 < W ? p0 + 3 : p0;  // a1 == 0 there
      for (int c = 0; c < 3; ++c) out[3 * dx + c] = p0[c] * a0 + p1[c] * a1;
    }
  };
  for (int dy = 0; dy < new_h; ++dy) {
    float fy = static_cast<float>((dy + 0.5) * scale_y - 0.5);
    const int sy = static_cast<int>(std::floor(fy));
    fy -= static_cast<float>(sy);  // not clamped (OpenCV clamps the rows, not the weights)
    const int b0 = static_cast<int>(std::lrint((1.f - fy) * static_cast<float>(kOne)));
    const int b1 = static_cast<int>(std::lrint(fy * static_cast<float>(kOne)));
    const int r0 = std::clamp(sy, 0, H - 1), r1 = std::clamp(sy + 1, 0, H - 1);
    for (int k = 0; k < 2; ++k) {
      const int r = k == 0 ? r0 : r1;
      if (cached[k] == r) continue;
      if (cached[1 - k] == r) {
        hrow[k] = hrow[1 - k];
      } else {
        hresize(r, hrow[k]);
      }
      cached[k] = r;
    }
    const int* S0 = hrow[0].data();
    const int* S1 = hrow[1].data();
    uint8_t* d = dst.row(dy);
    // OpenCV's VResizeLinear<uchar, int, short, ...> specialisation: its SSE2 loop and its scalar
    // tail both compute ((b0 * (S0 >> 4)) >> 16) + ((b1 * (S1 >> 4)) >> 16), then (v + 2) >> 2,
    // not the exact (S0 b0 + S1 b1 + 2^21) >> 22 of FixedPtCast (which can differ by one level).
    for (int x = 0; x < row_len; ++x) {
      const int v = (((S0[x] >> 4) * b0) >> 16) + (((S1[x] >> 4) * b1) >> 16);
      d[x] = sat_u8((v + 2) >> 2);
    }
  }
  return dst;
}

LetterboxU8 letterbox_u8(const ImageU8& im, int new_h, int new_w, bool auto_pad, bool scaleup, int stride) {
  Y9_CHECK(!im.empty(), "letterbox: empty image");
  Y9_CHECK(new_h > 0 && new_w > 0 && stride > 0, "letterbox: bad target ", new_h, "x", new_w, " stride ", stride);
  const int h = im.height, w = im.width;
  double r = std::min(static_cast<double>(new_h) / h, static_cast<double>(new_w) / w);
  if (!scaleup) r = std::min(r, 1.0);
  LetterboxU8 out;
  out.ratio_w = out.ratio_h = r;
  const int nw = std::max(1, round_half_even(w * r)), nh = std::max(1, round_half_even(h * r));
  double dw = new_w - nw, dh = new_h - nh;
  if (auto_pad) {
    dw = std::fmod(dw, stride);
    dh = std::fmod(dh, stride);
  }
  dw /= 2;
  dh /= 2;
  const ImageU8 resized = (w != nw || h != nh) ? resize_linear_u8(im, nh, nw) : im;
  const int top = round_half_even(dh - 0.1), bottom = round_half_even(dh + 0.1);
  const int left = round_half_even(dw - 0.1), right = round_half_even(dw + 0.1);
  out.img.height = nh + top + bottom;
  out.img.width = nw + left + right;
  out.img.data.assign(static_cast<size_t>(out.img.height) * out.img.width * 3, 114);
  for (int y = 0; y < nh; ++y)
    std::memcpy(out.img.row(y + top) + 3 * left, resized.row(y), static_cast<size_t>(nw) * 3);
  out.dw = dw;
  out.dh = dh;
  return out;
}

void draw_box_u8(ImageU8& im, float x1, float y1, float x2, float y2, const std::array<uint8_t, 3>& color, int lw) {
  lw = std::max(lw, 1);
  const int ax = static_cast<int>(x1), ay = static_cast<int>(y1), bx = static_cast<int>(x2), by = static_cast<int>(y2);
  const int lo = lw / 2, hi = (lw - 1) / 2;  // a line of width lw centred on the edge
  auto fill = [&](int xa, int ya, int xb, int yb) {  // inclusive, clipped
    xa = std::max(xa, 0), ya = std::max(ya, 0), xb = std::min(xb, im.width - 1), yb = std::min(yb, im.height - 1);
    for (int y = ya; y <= yb; ++y)
      for (int x = xa; x <= xb; ++x) std::memcpy(im.row(y) + 3 * x, color.data(), 3);
  };
  fill(ax - lo, ay - lo, bx + hi, ay + hi);  // top
  fill(ax - lo, by - lo, bx + hi, by + hi);  // bottom
  fill(ax - lo, ay - lo, ax + hi, by + hi);  // left
  fill(bx - lo, ay - lo, bx + hi, by + hi);  // right
}

void write_image_u8(const std::string& path, const ImageU8& im, int jpeg_quality) {
  Y9_CHECK(!im.empty(), "write_image_u8: empty image for ", path);
  const std::string e = lower_ext(path);
  if (e == "jpg" || e == "jpeg") {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    Y9_CHECK_T(engine::IoError, f, "cannot write ", path);
    jpeg_compress_struct cinfo;
    JpegErr err;
    err.msg[0] = 0;
    cinfo.err = jpeg_std_error(&err.mgr);
    err.mgr.error_exit = jpeg_err_exit;
    err.mgr.emit_message = jpeg_err_silent;
    if (setjmp(err.jump)) {
      jpeg_destroy_compress(&cinfo);
      std::fclose(f);
      Y9_THROW(engine::IoError, "cannot write ", path, ": ", err.msg);
    }
    jpeg_create_compress(&cinfo);
    jpeg_stdio_dest(&cinfo, f);
    cinfo.image_width = static_cast<JDIMENSION>(im.width);
    cinfo.image_height = static_cast<JDIMENSION>(im.height);
    cinfo.input_components = 3;
    cinfo.in_color_space = JCS_EXT_BGR;
    jpeg_set_defaults(&cinfo);
    jpeg_set_quality(&cinfo, std::clamp(jpeg_quality, 1, 100), TRUE);
    jpeg_start_compress(&cinfo, TRUE);
    while (cinfo.next_scanline < cinfo.image_height) {
      JSAMPROW r = const_cast<uint8_t*>(im.row(static_cast<int>(cinfo.next_scanline)));
      jpeg_write_scanlines(&cinfo, &r, 1);
    }
    jpeg_finish_compress(&cinfo);
    jpeg_destroy_compress(&cinfo);
    Y9_CHECK_T(engine::IoError, std::fclose(f) == 0, "cannot write ", path);
    return;
  }
  Y9_CHECK_T(engine::IoError, e == "png", "cannot write ", path,
             ": this build writes only .jpg/.jpeg and .png images (other formats need the OpenCV build)");
  std::FILE* f = std::fopen(path.c_str(), "wb");
  Y9_CHECK_T(engine::IoError, f, "cannot write ", path);
  char msg[256] = "";
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, msg, png_err, png_warn);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (!png || !info || setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    std::fclose(f);
    Y9_THROW(engine::IoError, "cannot write ", path, ": ", msg);
  }
  png_init_io(png, f);
  png_set_IHDR(png, info, static_cast<png_uint_32>(im.width), static_cast<png_uint_32>(im.height), 8,
               PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  png_set_bgr(png);
  for (int y = 0; y < im.height; ++y) png_write_row(png, const_cast<uint8_t*>(im.row(y)));
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  Y9_CHECK_T(engine::IoError, std::fclose(f) == 0, "cannot write ", path);
}

}  // namespace io
