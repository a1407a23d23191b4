// Chart toolkit for the training/validation figures: palettes, nice ticks, anti-aliased text and
// lines, Axes with grid/ticks/labels, legends, a colour bar, and checked image writing.
#include "io/plot_canvas.h"

#ifndef Y9_NO_OPENCV_CODECS
#include <opencv2/imgcodecs.hpp>
#endif
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "engine/error.h"
#include "io/atomic_file.h"
#include "io/image.h"

namespace io::plot {

namespace {
constexpr int kShift = 4;  // sub-pixel bits for cv::line / cv::circle
constexpr double kScale = 1 << kShift;
constexpr int kFace = cv::FONT_HERSHEY_SIMPLEX;

cv::Point sub(cv::Point2d p) {
  return {static_cast<int>(std::lround(p.x * kScale)), static_cast<int>(std::lround(p.y * kScale))};
}
}  // namespace

// --- Colours ---------------------------------------------------------------------------------

cv::Scalar hex_color(uint32_t rgb) {
  return cv::Scalar((rgb & 0xFF), (rgb >> 8) & 0xFF, (rgb >> 16) & 0xFF);
}

cv::Scalar class_color(int64_t cls) {
  static constexpr std::array<uint32_t, 20> kPalette = {
      0xFF3838, 0xFF9D97, 0xFF701F, 0xFFB21D, 0xCFD231, 0x48F90A, 0x92CC17, 0x3DDB86, 0x1A9334, 0x00D4BB,
      0x2C99A8, 0x00C2FF, 0x344593, 0x6473FF, 0x0018EC, 0x8438FF, 0x520085, 0xCB38FF, 0xFF95C8, 0xFF37C7};
  int64_t i = ((cls % 20) + 20) % 20;
  return hex_color(kPalette[static_cast<size_t>(i)]);
}

cv::Scalar tab_color(int64_t i) {
  static constexpr std::array<uint32_t, 10> kTab10 = {0x1F77B4, 0xFF7F0E, 0x2CA02C, 0xD62728, 0x9467BD,
                                                      0x8C564B, 0xE377C2, 0x7F7F7F, 0xBCBD22, 0x17BECF};
  return hex_color(kTab10[static_cast<size_t>(((i % 10) + 10) % 10)]);
}

cv::Vec3b blues(double t) {
  static constexpr std::array<uint32_t, 9> kBlues = {0xF7FBFF, 0xDEEBF7, 0xC6DBEF, 0x9ECAE1, 0x6BAED6,
                                                     0x4292C6, 0x2171B5, 0x08519C, 0x08306B};
  if (!std::isfinite(t)) t = 0;
  t = std::clamp(t, 0.0, 1.0) * (kBlues.size() - 1);
  size_t i = std::min(static_cast<size_t>(t), kBlues.size() - 2);
  double f = t - static_cast<double>(i);
  cv::Scalar a = hex_color(kBlues[i]), b = hex_color(kBlues[i + 1]);
  cv::Vec3b out;
  for (int c = 0; c < 3; ++c) out[c] = cv::saturate_cast<uint8_t>(a[c] + (b[c] - a[c]) * f);
  return out;
}

// --- Ticks and text --------------------------------------------------------------------------

std::vector<double> nice_ticks(double lo, double hi, int max_ticks) {
  if (!(std::isfinite(lo) && std::isfinite(hi))) return {};
  if (hi < lo) std::swap(lo, hi);
  if (hi == lo) return {lo};
  max_ticks = std::max(max_ticks, 2);
  double raw = (hi - lo) / (max_ticks - 1);
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 10 * mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (m * mag >= raw * (1 - 1e-9)) {
      step = m * mag;
      break;
    }
  }
  double eps = (hi - lo) * 1e-9;
  std::vector<double> ticks;
  for (double v = std::ceil((lo - eps) / step) * step; v <= hi + eps; v += step) {
    ticks.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);
    if (ticks.size() > 1000) break;
  }
  return ticks;
}

std::string format_tick(double v, double step) {
  int decimals = 0;
  step = std::abs(step);
  if (step > 0) {
    while (decimals < 6) {
      double s = step * std::pow(10.0, decimals);
      if (std::abs(s - std::round(s)) < 1e-6 * std::max(1.0, s)) break;
      ++decimals;
    }
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  std::string s = buf;
  if (s.rfind("-", 0) == 0 && std::strtod(s.c_str(), nullptr) == 0.0) s = s.substr(1);
  return s;
}

cv::Size text_size(const std::string& s, const Font& font) {
  int baseline = 0;
  cv::Size sz = cv::getTextSize(s, kFace, font.scale, font.thickness, &baseline);
  return {sz.width, sz.height + baseline};
}

void draw_text(cv::Mat& img, const std::string& s, cv::Point at, const Font& font, cv::Scalar color, HAlign h,
               VAlign v, bool vertical) {
  if (s.empty()) return;
  int baseline = 0;
  cv::Size sz = cv::getTextSize(s, kFace, font.scale, font.thickness, &baseline);
  if (!vertical) {
    // Vertical alignment uses the cap height (descenders hang below), as text on a chart reads best.
    int x = at.x - (h == HAlign::Center ? sz.width / 2 : h == HAlign::Right ? sz.width : 0);
    int y = at.y + (v == VAlign::Top ? sz.height : v == VAlign::Middle ? sz.height / 2 : 0);
    cv::putText(img, s, {x, y}, kFace, font.scale, color, font.thickness, cv::LINE_AA);
    return;
  }
  // Render a horizontal alpha mask, rotate it, and blend the colour through it.
  int pad = font.thickness + 1;
  cv::Mat mask = cv::Mat::zeros(sz.height + baseline + 2 * pad, sz.width + 2 * pad, CV_8U);
  cv::putText(mask, s, {pad, pad + sz.height}, kFace, font.scale, cv::Scalar(255), font.thickness, cv::LINE_AA);
  cv::Mat rot;
  cv::rotate(mask, rot, cv::ROTATE_90_COUNTERCLOCKWISE);
  // In the rotated box the cap line is at the left edge: x alignment refers to the box centre.
  int bw = rot.cols, bh = rot.rows;
  int x0 = at.x - (h == HAlign::Center ? bw / 2 : h == HAlign::Right ? bw : 0);
  int y0 = at.y - (v == VAlign::Middle ? bh / 2 : v == VAlign::Bottom ? bh : 0);
  CV_Assert(img.type() == CV_8UC3);
  for (int r = 0; r < bh; ++r) {
    int y = y0 + r;
    if (y < 0 || y >= img.rows) continue;
    const uint8_t* m = rot.ptr<uint8_t>(r);
    cv::Vec3b* dst = img.ptr<cv::Vec3b>(y);
    for (int c = 0; c < bw; ++c) {
      int x = x0 + c;
      if (x < 0 || x >= img.cols || m[c] == 0) continue;
      double a = m[c] / 255.0;
      for (int k = 0; k < 3; ++k) dst[x][k] = cv::saturate_cast<uint8_t>(dst[x][k] * (1 - a) + color[k] * a);
    }
  }
}

// --- Lines ----------------------------------------------------------------------------------

void draw_polyline(cv::Mat& img, const std::vector<cv::Point2d>& pts, const LineSpec& spec) {
  const int th = std::max(1, spec.thickness);
  // Dash pattern in px along the path: (on, off). Dots are drawn as round blobs.
  double on = 0, off = 0;
  if (spec.style == LineStyle::Dotted) {
    on = 0.01;
    off = 2.2 * th;
  } else if (spec.style == LineStyle::Dashed) {
    on = 4.0 * th;
    off = 2.5 * th;
  }
  if (spec.style != LineStyle::None) {
    double phase = 0;  // distance travelled inside the current pattern period
    for (size_t i = 1; i < pts.size(); ++i) {
      cv::Point2d a = pts[i - 1], b = pts[i];
      if (!(std::isfinite(a.x) && std::isfinite(a.y) && std::isfinite(b.x) && std::isfinite(b.y))) {
        phase = 0;
        continue;
      }
      // Keep far-away points within int range for cv::line (the image clips the rest).
      auto clampp = [](cv::Point2d p) { return cv::Point2d(std::clamp(p.x, -1e5, 1e5), std::clamp(p.y, -1e5, 1e5)); };
      a = clampp(a);
      b = clampp(b);
      if (spec.style == LineStyle::Solid) {
        cv::line(img, sub(a), sub(b), spec.color, th, cv::LINE_AA, kShift);
        continue;
      }
      double len = std::hypot(b.x - a.x, b.y - a.y);
      double t = 0;
      while (t < len) {
        double period = on + off;
        if (phase < on) {
          double seg = std::min(on - phase, len - t);
          cv::Point2d p = a + (b - a) * (t / std::max(len, 1e-12));
          cv::Point2d q = a + (b - a) * ((t + seg) / std::max(len, 1e-12));
          if (spec.style == LineStyle::Dotted)
            cv::circle(img, sub(p), static_cast<int>(std::lround(0.55 * th * kScale)), spec.color, cv::FILLED,
                       cv::LINE_AA, kShift);
          else
            cv::line(img, sub(p), sub(q), spec.color, th, cv::LINE_AA, kShift);
          phase += seg;
          t += seg;
        } else {
          double seg = std::min(period - phase, len - t);
          phase += seg;
          t += seg;
        }
        if (phase >= period - 1e-12) phase = 0;
      }
    }
  }
  if (spec.marker_radius > 0) {
    for (const auto& p : pts)
      if (std::isfinite(p.x) && std::isfinite(p.y) && std::abs(p.x) < 1e5 && std::abs(p.y) < 1e5)
        cv::circle(img, sub(p), spec.marker_radius * static_cast<int>(kScale), spec.color, cv::FILLED, cv::LINE_AA,
                   kShift);
  }
}

// --- Axes -----------------------------------------------------------------------------------

Axes::Axes(cv::Mat& canvas, cv::Rect cell, std::string title, std::string xlabel, std::string ylabel)
    : canvas_(canvas), cell_(cell), data_(cell), title_(std::move(title)), xlabel_(std::move(xlabel)),
      ylabel_(std::move(ylabel)) {}

void Axes::set_xlim(double lo, double hi) {
  x0_ = lo;
  x1_ = hi > lo ? hi : lo + 1;
}

void Axes::set_ylim(double lo, double hi) {
  if (log_y_) {
    lo = lo > 0 && std::isfinite(lo) ? std::log10(lo) : 0.0;
    hi = hi > 0 && std::isfinite(hi) ? std::log10(hi) : lo + 1;
  }
  y0_ = lo;
  y1_ = hi > lo ? hi : lo + 1;
}

namespace {
std::pair<double, double> padded_range(const std::vector<double>& v) {
  double lo = INFINITY, hi = -INFINITY;
  for (double x : v)
    if (std::isfinite(x)) {
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
  if (!std::isfinite(lo)) return {0, 1};
  if (hi == lo) {
    double d = lo == 0 ? 0.5 : std::abs(lo) * 0.05;
    return {lo - d, hi + d};
  }
  double pad = (hi - lo) * 0.05;
  return {lo - pad, hi + pad};
}
}  // namespace

void Axes::autoscale(const std::vector<double>& xs, const std::vector<double>& ys) {
  auto [xa, xb] = padded_range(xs);
  set_xlim(xa, xb);
  if (log_y_) {
    std::vector<double> ly;
    for (double v : ys)
      if (v > 0 && std::isfinite(v)) ly.push_back(std::log10(v));
    auto [ya, yb] = padded_range(ly);
    y0_ = ya;
    y1_ = yb > ya ? yb : ya + 1;
    return;
  }
  auto [ya, yb] = padded_range(ys);
  set_ylim(ya, yb);
}

cv::Point2d Axes::to_px(double x, double y) const {
  if (log_y_) y = y > 0 ? std::log10(y) : NAN;
  double px = data_.x + (x - x0_) / (x1_ - x0_) * (data_.width - 1);
  double py = data_.y + (data_.height - 1) - (y - y0_) / (y1_ - y0_) * (data_.height - 1);
  return {px, py};
}

void Axes::draw_frame() {
  const cv::Scalar black(0, 0, 0), grey(225, 225, 225), dark(60, 60, 60);
  // Ticks first: their labels decide the margins.
  std::vector<double> xt, yt;
  int approx_w = std::max(cell_.width - 80, 50), approx_h = std::max(cell_.height - 80, 50);
  xt = nice_ticks(x0_, x1_, std::clamp(approx_w / 70, 4, 11));
  if (integer_x_) {
    std::vector<double> ints;
    for (double v : xt)
      if (std::abs(v - std::round(v)) < 1e-9) ints.push_back(std::round(v));
    if (ints.size() < 2 && x1_ - x0_ < 20) {
      ints.clear();
      for (double v = std::ceil(x0_); v <= x1_; v += 1) ints.push_back(v);
    }
    xt = ints;
  }
  yt = nice_ticks(y0_, y1_, std::clamp(approx_h / 55, 3, 11));
  double xstep = xt.size() > 1 ? xt[1] - xt[0] : 1, ystep = yt.size() > 1 ? yt[1] - yt[0] : 1;
  // Tick labels in data units: with a log axis the decades (or nice linear steps inside one).
  auto ylabel_of = [&](double v) {
    if (!log_y_) return format_tick(v, ystep);
    char b[32];
    std::snprintf(b, sizeof b, "%g", v);
    return std::string(b);
  };
  if (log_y_) {
    yt.clear();
    for (double k = std::ceil(y0_ - 1e-9); k <= y1_ + 1e-9; k += 1) yt.push_back(std::pow(10.0, k));
    if (yt.size() < 2) {
      yt.clear();
      for (double v : nice_ticks(std::pow(10.0, y0_), std::pow(10.0, y1_), 4))
        if (v > 0) yt.push_back(v);
    }
  }
  int ytw = 0;
  for (double v : yt) ytw = std::max(ytw, text_size(ylabel_of(v), tick_font).width);
  int th = text_size("0", tick_font).height;
  int lh = text_size("Ag", label_font).height;
  int top = title_.empty() ? 12 : text_size(title_, title_font).height + 22;
  int left = 8 + (ylabel_.empty() ? 0 : lh + 12) + ytw + 10;
  int bottom = th + 16 + (xlabel_.empty() ? 0 : lh + 12) + 6;
  int right = 18;
  data_ = cv::Rect(cell_.x + left, cell_.y + top, std::max(cell_.width - left - right, 10),
                   std::max(cell_.height - top - bottom, 10));

  cv::rectangle(canvas_, data_, cv::Scalar(255, 255, 255), cv::FILLED);
  if (grid) {
    for (double v : xt) {
      int x = static_cast<int>(std::lround(to_px(v, 0).x));
      cv::line(canvas_, {x, data_.y}, {x, data_.y + data_.height - 1}, grey, 1);
    }
    for (double v : yt) {
      int y = static_cast<int>(std::lround(to_px(0, v).y));
      cv::line(canvas_, {data_.x, y}, {data_.x + data_.width - 1, y}, grey, 1);
    }
  }
  cv::rectangle(canvas_, data_, dark, 1);
  for (double v : xt) {
    int x = static_cast<int>(std::lround(to_px(v, 0).x));
    int yb = data_.y + data_.height;
    cv::line(canvas_, {x, yb}, {x, yb + 5}, dark, 1);
    draw_text(canvas_, format_tick(v, xstep), {x, yb + 9}, tick_font, black, HAlign::Center, VAlign::Top);
  }
  for (double v : yt) {
    int y = static_cast<int>(std::lround(to_px(0, v).y));
    cv::line(canvas_, {data_.x - 5, y}, {data_.x, y}, dark, 1);
    draw_text(canvas_, ylabel_of(v), {data_.x - 9, y}, tick_font, black, HAlign::Right, VAlign::Middle);
  }
  if (!title_.empty())
    draw_text(canvas_, title_, {data_.x + data_.width / 2, cell_.y + 8}, title_font, black, HAlign::Center,
              VAlign::Top);
  if (!xlabel_.empty())
    draw_text(canvas_, xlabel_, {data_.x + data_.width / 2, data_.y + data_.height + th + 20}, label_font, black,
              HAlign::Center, VAlign::Top);
  if (!ylabel_.empty())
    draw_text(canvas_, ylabel_, {cell_.x + 8, data_.y + data_.height / 2}, label_font, black, HAlign::Left,
              VAlign::Middle, true);
}

void Axes::plot(const std::vector<double>& xs, const std::vector<double>& ys, const LineSpec& spec) {
  Y9_CHECK_SHAPE(xs.size() == ys.size(), "Axes::plot: ", xs.size(), " x values but ", ys.size(), " y values");
  std::vector<cv::Point2d> pts(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    cv::Point2d p = to_px(xs[i], ys[i]);
    pts[i] = {p.x - data_.x, p.y - data_.y};
  }
  // Draw inside the data area only (the ROI clips), leaving room for markers on the frame.
  cv::Mat roi = canvas_(data_);
  draw_polyline(roi, pts, spec);
  cv::rectangle(canvas_, data_, cv::Scalar(60, 60, 60), 1);
}

cv::Size legend_size(const std::vector<LegendEntry>& entries, const Font& font) {
  int w = 0, rh = text_size("Ag", font).height + 8;
  for (const auto& e : entries) w = std::max(w, text_size(e.label, font).width);
  return {w + 36 + 24, static_cast<int>(entries.size()) * rh + 12};
}

cv::Rect draw_legend(cv::Mat& canvas, cv::Point tl, const std::vector<LegendEntry>& entries, const Font& font) {
  if (entries.empty()) return {};
  cv::Size sz = legend_size(entries, font);
  cv::Rect box(tl, sz);
  cv::Mat roi;
  cv::Rect clipped = box & cv::Rect(0, 0, canvas.cols, canvas.rows);
  if (clipped.area() > 0) {
    // 80% opaque white, like matplotlib's framealpha=0.8.
    roi = canvas(clipped);
    cv::addWeighted(roi, 0.2, cv::Mat(roi.size(), roi.type(), cv::Scalar(255, 255, 255)), 0.8, 0, roi);
  }
  cv::rectangle(canvas, box, cv::Scalar(200, 200, 200), 1, cv::LINE_AA);
  int rh = text_size("Ag", font).height + 8;
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    int cy = box.y + 6 + static_cast<int>(i) * rh + rh / 2;
    int x = box.x + 8;
    if (e.filled_box) {
      cv::rectangle(canvas, cv::Rect(x + 6, cy - 6, 16, 12), e.spec.color, cv::FILLED);
    } else {
      LineSpec s = e.spec;
      std::vector<cv::Point2d> pts = {{double(x), double(cy)}, {double(x + 28), double(cy)}};
      int mr = s.marker_radius;
      s.marker_radius = 0;
      draw_polyline(canvas, pts, s);
      if (mr > 0) cv::circle(canvas, {x + 14, cy}, mr, s.color, cv::FILLED, cv::LINE_AA);
    }
    draw_text(canvas, e.label, {x + 36, cy}, font, cv::Scalar(0, 0, 0), HAlign::Left, VAlign::Middle);
  }
  return box;
}

void Axes::legend(const std::vector<LegendEntry>& entries, LegendLoc loc, const Font& font) {
  cv::Size sz = legend_size(entries, font);
  int m = 8;
  bool right = loc == LegendLoc::UpperRight || loc == LegendLoc::LowerRight;
  bool upper = loc == LegendLoc::UpperRight || loc == LegendLoc::UpperLeft;
  cv::Point tl(right ? data_.x + data_.width - sz.width - m : data_.x + m,
               upper ? data_.y + m : data_.y + data_.height - sz.height - m);
  draw_legend(canvas_, tl, entries, font);
}

void draw_colorbar(cv::Mat& canvas, cv::Rect rect, double vmin, double vmax, const Font& font) {
  for (int r = 0; r < rect.height; ++r) {
    double t = 1.0 - static_cast<double>(r) / std::max(rect.height - 1, 1);
    cv::line(canvas, {rect.x, rect.y + r}, {rect.x + rect.width - 1, rect.y + r}, cv::Scalar(blues(t)), 1);
  }
  cv::rectangle(canvas, rect, cv::Scalar(60, 60, 60), 1);
  auto ticks = nice_ticks(vmin, vmax, 6);
  double step = ticks.size() > 1 ? ticks[1] - ticks[0] : 1;
  for (double v : ticks) {
    int y = rect.y + rect.height - 1 -
            static_cast<int>(std::lround((v - vmin) / std::max(vmax - vmin, 1e-12) * (rect.height - 1)));
    cv::line(canvas, {rect.x + rect.width, y}, {rect.x + rect.width + 5, y}, cv::Scalar(60, 60, 60), 1);
    draw_text(canvas, format_tick(v, step), {rect.x + rect.width + 9, y}, font, cv::Scalar(0, 0, 0), HAlign::Left,
              VAlign::Middle);
  }
}

void write_image(const std::string& path, const cv::Mat& img) {
  Y9_CHECK_T(engine::IoError, !img.empty(), "write_image: empty image for ", path);
  std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path() && !std::filesystem::is_directory(p.parent_path(), ec))
    Y9_THROW(engine::IoError, "cannot write image ", path, ": directory ", p.parent_path().string(),
             " does not exist");
  // Encode in memory, then replace the file atomically: a full disk is reported with its reason
  // ("No space left on device") and never leaves a torn image.
#ifdef Y9_NO_OPENCV_CODECS
  // No in-memory encoder without OpenCV's codecs: write a hidden sibling with the same extension
  // (io::write_image_bgr: JPEG or PNG), then rename it over `path` (atomic on one file system).
  namespace fs = std::filesystem;
  const fs::path tmp = p.parent_path() / ("." + p.stem().string() + ".tmp" + p.extension().string());
  try {
    write_image_bgr(tmp.string(), img, 95);
  } catch (...) {
    fs::remove(tmp, ec);
    throw;
  }
  fs::rename(tmp, p, ec);
  if (ec) {
    std::error_code ec2;
    fs::remove(tmp, ec2);
    Y9_THROW(engine::IoError, "cannot write image ", path, ": ", ec.message());
  }
#else
  std::vector<unsigned char> buf;
  bool ok = false;
  try {
    ok = cv::imencode(p.extension().string(), img, buf);
  } catch (const cv::Exception& e) {
    Y9_THROW(engine::IoError, "cannot write image ", path, ": ", e.err, " (unsupported extension?)");
  }
  Y9_CHECK_T(engine::IoError, ok, "cannot write image ", path, " (unsupported extension)");
  write_file_atomic(path, std::string(buf.begin(), buf.end()));
#endif
}

}  // namespace io::plot
