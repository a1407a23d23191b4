// The official YOLOv9 figures (results.png, confusion_matrix.png, PR/F1/P/R curves, labels.jpg,
// batch mosaics) drawn with OpenCV via io/plot_canvas. Layout and labels follow utils/plots.py
// and utils/metrics.py; pixel sizes are chosen for readability, not copied from matplotlib's dpi.
#include "io/plots.h"

#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>

#include "engine/device.h"
#include "engine/error.h"
#include "io/grad_norm_log.h"
#include "io/plot_canvas.h"

namespace io {

namespace {

using plot::Axes;
using plot::Font;
using plot::HAlign;
using plot::LegendEntry;
using plot::LineSpec;
using plot::LineStyle;
using plot::VAlign;

const cv::Scalar kBlack(0, 0, 0), kWhite(255, 255, 255), kGrey(128, 128, 128), kBlue(255, 0, 0);

std::vector<double> host_values(const engine::Tensor& t) {
  if (!t.defined() || t.numel() == 0) return {};
  return t.detach().to(engine::Device::cpu()).to_vector<double>();
}

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t\r\n"), b = s.find_last_not_of(" \t\r\n");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

cv::Mat white_canvas(int w, int h) { return cv::Mat(h, w, CV_8UC3, kWhite); }

}  // namespace

// --- Filters ---------------------------------------------------------------------------------

std::vector<double> smooth_box(const std::vector<double>& y, double f) {
  const int64_t n = static_cast<int64_t>(y.size());
  if (n == 0) return {};
  // nf = round(len(y) * f * 2) // 2 + 1 (Python round: half to even).
  double r = std::nearbyint(static_cast<double>(n) * f * 2.0);
  int64_t nf = static_cast<int64_t>(r) / 2 + 1, half = nf / 2;
  std::vector<double> yp(static_cast<size_t>(n + 2 * half));
  for (int64_t i = 0; i < half; ++i) {
    yp[static_cast<size_t>(i)] = y.front();
    yp[static_cast<size_t>(n + half + i)] = y.back();
  }
  std::copy(y.begin(), y.end(), yp.begin() + half);
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int64_t k = 0; k < nf; ++k) s += yp[static_cast<size_t>(i + k)];
    out[static_cast<size_t>(i)] = s / static_cast<double>(nf);
  }
  return out;
}

std::vector<double> gaussian_filter1d(const std::vector<double>& y, double sigma) {
  const int64_t n = static_cast<int64_t>(y.size());
  if (n == 0 || sigma <= 0) return y;
  const int64_t radius = static_cast<int64_t>(4.0 * sigma + 0.5);
  std::vector<double> w(static_cast<size_t>(2 * radius + 1));
  double sum = 0;
  for (int64_t k = -radius; k <= radius; ++k) sum += w[static_cast<size_t>(k + radius)] = std::exp(-0.5 * k * k / (sigma * sigma));
  for (double& v : w) v /= sum;
  // scipy 'reflect' (d c b a | a b c d | d c b a), repeated when the kernel is wider than y.
  auto at = [&](int64_t i) {
    int64_t m = ((i % (2 * n)) + 2 * n) % (2 * n);
    return y[static_cast<size_t>(m < n ? m : 2 * n - 1 - m)];
  };
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int64_t k = -radius; k <= radius; ++k) s += w[static_cast<size_t>(k + radius)] * at(i + k);
    out[static_cast<size_t>(i)] = s;
  }
  return out;
}

// --- results.png ----------------------------------------------------------------------------

void plot_results(const std::string& path, const std::string& out_png) {
  std::ifstream f(path);
  Y9_CHECK_T(engine::IoError, f.good(), "plot_results: cannot open ", path);
  std::string line;
  Y9_CHECK_T(engine::IoError, static_cast<bool>(std::getline(f, line)), "plot_results: empty file ", path);
  std::vector<std::string> header;
  {
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ',')) header.push_back(trim(cell));
  }
  std::vector<std::vector<double>> cols(header.size());
  while (std::getline(f, line)) {
    if (trim(line).empty()) continue;
    std::stringstream ss(line);
    std::string cell;
    for (size_t c = 0; c < header.size(); ++c) {
      double v = NAN;
      if (std::getline(ss, cell, ',')) {
        std::string t = trim(cell);
        char* end = nullptr;
        v = std::strtod(t.c_str(), &end);
        if (t.empty() || end != t.c_str() + t.size()) v = NAN;
      }
      cols[c].push_back(v);
    }
  }
  auto column = [&](const std::string& name) -> const std::vector<double>& {
    auto it = std::find(header.begin(), header.end(), name);
    Y9_CHECK_T(engine::IoError, it != header.end(), "plot_results: ", path, " has no column '", name, "'");
    return cols[static_cast<size_t>(it - header.begin())];
  };
  const std::vector<double>& epoch = column("epoch");
  Y9_CHECK_T(engine::IoError, !epoch.empty(), "plot_results: ", path, " has no data rows");
  static const char* kPanels[10] = {"train/box_loss",    "train/cls_loss", "train/dfl_loss", "metrics/precision",
                                    "metrics/recall",    "val/box_loss",   "val/cls_loss",   "val/dfl_loss",
                                    "metrics/mAP_0.5",   "metrics/mAP_0.5:0.95"};
  const int W = 2000, H = 900, cw = W / 5, ch = (H - 10) / 2;
  cv::Mat img = white_canvas(W, H);
  const LineSpec main_spec{plot::tab_color(0), 2, LineStyle::Solid, 4};
  const LineSpec smooth_spec{plot::tab_color(1), 2, LineStyle::Dotted, 0};
  for (int i = 0; i < 10; ++i) {
    const std::vector<double>& y = column(kPanels[i]);
    // Only rows where both epoch and value parse.
    std::vector<double> xs, ys;
    for (size_t r = 0; r < y.size(); ++r)
      if (std::isfinite(epoch[r]) && std::isfinite(y[r])) {
        xs.push_back(epoch[r]);
        ys.push_back(y[r]);
      }
    Axes ax(img, cv::Rect((i % 5) * cw, 5 + (i / 5) * ch, cw, ch), kPanels[i]);
    ax.title_font = Font{0.6, 2};
    ax.set_integer_xticks(true);
    ax.autoscale(xs, ys);
    ax.draw_frame();
    if (xs.empty()) {
      cv::Rect d = ax.data_rect();
      plot::draw_text(img, "no data", {d.x + d.width / 2, d.y + d.height / 2}, Font{0.6, 1}, kGrey, HAlign::Center,
                      VAlign::Middle);
      continue;
    }
    ax.plot(xs, ys, main_spec);
    ax.plot(xs, gaussian_filter1d(ys, 3.0), smooth_spec);
    if (i == 1) {
      std::string stem = std::filesystem::path(path).stem().string();
      ax.legend({{stem, main_spec}, {"smooth", smooth_spec}}, plot::LegendLoc::UpperRight);
    }
  }
  plot::write_image(out_png, img);
}

// --- confusion_matrix.png -------------------------------------------------------------------

void plot_confusion_matrix(const engine::Tensor& matrix, const std::vector<std::string>& names, bool normalize,
                           const std::string& out_png) {
  Y9_CHECK_SHAPE(matrix.defined() && matrix.dim() == 2 && matrix.size(0) == matrix.size(1) && matrix.size(0) >= 2,
                 "plot_confusion_matrix: expected a square [nc+1, nc+1] matrix (nc >= 1), got ",
                 matrix.defined() ? engine::shape_str(matrix.shape()) : std::string("undefined"), " for ", out_png);
  const int n = static_cast<int>(matrix.size(0)), nc = n - 1;
  std::vector<double> m = host_values(matrix);
  if (normalize) {
    for (int c = 0; c < n; ++c) {
      double s = 0;
      for (int r = 0; r < n; ++r) s += m[static_cast<size_t>(r * n + c)];
      for (int r = 0; r < n; ++r) m[static_cast<size_t>(r * n + c)] /= (s + 1e-9);
    }
  }
  double vmax = 0;
  for (double& v : m) {
    if (v < 0.005) v = NAN;  // blank cells, as the official array[array < 0.005] = nan
    if (std::isfinite(v)) vmax = std::max(vmax, v);
  }
  if (vmax <= 0) vmax = 1;

  const bool named = !names.empty() && names.size() < 99 && static_cast<int>(names.size()) == nc;
  std::vector<std::string> ticks;
  for (int i = 0; i < n; ++i)
    ticks.push_back(named ? (i < nc ? names[static_cast<size_t>(i)] : std::string("background")) : std::to_string(i));

  const int W = 1600, H = 1300;
  cv::Mat img = white_canvas(W, H);
  Font title{0.9, 2}, label{0.7, 1};
  // Tick font: shrink with the cell size so labels do not overlap.
  int avail = std::min(W - 420, H - 330);
  double cell_guess = static_cast<double>(avail) / n;
  Font tick{std::clamp(cell_guess / 40.0, 0.3, 0.55), 1};
  int max_tick_w = 0;
  for (const auto& t : ticks) max_tick_w = std::max(max_tick_w, plot::text_size(t, tick).width);
  max_tick_w = std::min(max_tick_w, 260);
  bool rotate_x = false;
  {
    int total = 0;
    for (const auto& t : ticks) total = std::max(total, plot::text_size(t, tick).width);
    rotate_x = total > cell_guess * 0.9;
  }
  int tick_h = plot::text_size("Ag", tick).height;
  int left = 30 + plot::text_size("Ag", label).height + 14 + max_tick_w + 12;
  int top = 80;
  int bottom = 30 + plot::text_size("Ag", label).height + 14 + (rotate_x ? max_tick_w : tick_h) + 12;
  int right = 170;
  int cell = std::max(1, std::min((W - left - right) / n, (H - top - bottom) / n));
  int gw = cell * n;
  int gx = left + (W - left - right - gw) / 2, gy = top;
  // Cells.
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < n; ++c) {
      double v = m[static_cast<size_t>(r * n + c)];
      cv::Rect rc(gx + c * cell, gy + r * cell, cell, cell);
      if (std::isfinite(v)) cv::rectangle(img, rc, cv::Scalar(plot::blues(v / vmax)), cv::FILLED);
    }
  cv::rectangle(img, cv::Rect(gx, gy, gw, gw), cv::Scalar(60, 60, 60), 1);
  // Annotations (nc < 30), white on dark cells as seaborn does.
  if (nc < 30) {
    std::string probe = normalize ? "0.00" : "0000";
    double s1 = plot::text_size(probe, Font{1.0, 1}).width;
    Font ann{std::min(0.7, cell * 0.7 / s1), 1};
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < n; ++c) {
        double v = m[static_cast<size_t>(r * n + c)];
        if (!std::isfinite(v)) continue;
        std::string s = normalize ? fmt("%.2f", v) : fmt("%.0f", v);
        cv::Scalar col = v / vmax > 0.55 ? kWhite : kBlack;
        plot::draw_text(img, s, {gx + c * cell + cell / 2, gy + r * cell + cell / 2}, ann, col, HAlign::Center,
                        VAlign::Middle);
      }
  }
  // Tick labels: x (true class) below, y (predicted) on the left.
  for (int i = 0; i < n; ++i) {
    int cx = gx + i * cell + cell / 2, cy = gy + i * cell + cell / 2;
    cv::line(img, {cx, gy + gw}, {cx, gy + gw + 4}, cv::Scalar(60, 60, 60), 1);
    cv::line(img, {gx - 4, cy}, {gx, cy}, cv::Scalar(60, 60, 60), 1);
    if (rotate_x)
      plot::draw_text(img, ticks[static_cast<size_t>(i)], {cx, gy + gw + 8}, tick, kBlack, HAlign::Center,
                      VAlign::Top, true);
    else
      plot::draw_text(img, ticks[static_cast<size_t>(i)], {cx, gy + gw + 8}, tick, kBlack, HAlign::Center,
                      VAlign::Top);
    plot::draw_text(img, ticks[static_cast<size_t>(i)], {gx - 8, cy}, tick, kBlack, HAlign::Right, VAlign::Middle);
  }
  int xl_y = gy + gw + 8 + (rotate_x ? max_tick_w : tick_h) + 14;
  plot::draw_text(img, "True", {gx + gw / 2, xl_y}, label, kBlack, HAlign::Center, VAlign::Top);
  plot::draw_text(img, "Predicted", {gx - 8 - max_tick_w - 14, gy + gw / 2}, label, kBlack, HAlign::Right,
                  VAlign::Middle, true);
  plot::draw_text(img, "Confusion Matrix", {gx + gw / 2, 28}, title, kBlack, HAlign::Center, VAlign::Top);
  plot::draw_colorbar(img, cv::Rect(gx + gw + 30, gy, 28, gw), 0.0, vmax, Font{0.5, 1});
  plot::write_image(out_png, img);
}

// --- PR / metric-confidence curves ------------------------------------------------------------

namespace {

struct Curves {
  std::vector<double> px;
  std::vector<std::vector<double>> py;  // [C][P]
};

Curves read_curves(const engine::Tensor& px, const engine::Tensor& py, const std::vector<std::string>& names,
                   const std::string& out, const char* fn) {
  Y9_CHECK_SHAPE(px.defined() && px.dim() == 1 && px.numel() >= 2, fn, ": px must be [P] with P >= 2 for ", out);
  Y9_CHECK_SHAPE(py.defined() && py.dim() == 2 && py.size(1) == px.size(0) && py.size(0) >= 1, fn,
                 ": py must be [C, ", px.size(0), "] with C >= 1, got ",
                 py.defined() ? engine::shape_str(py.shape()) : std::string("undefined"), " for ", out);
  Y9_CHECK_SHAPE(names.empty() || static_cast<int64_t>(names.size()) == py.size(0), fn, ": ", names.size(),
                 " names for ", py.size(0), " curves for ", out);
  Curves c;
  c.px = host_values(px);
  std::vector<double> all = host_values(py);
  const size_t P = c.px.size();
  for (int64_t i = 0; i < py.size(0); ++i)
    c.py.emplace_back(all.begin() + static_cast<long>(i * P), all.begin() + static_cast<long>((i + 1) * P));
  return c;
}

std::vector<double> class_mean(const Curves& c) {
  std::vector<double> m(c.px.size(), 0.0);
  for (const auto& row : c.py)
    for (size_t j = 0; j < m.size(); ++j) m[j] += row[j];
  for (double& v : m) v /= static_cast<double>(c.py.size());
  return m;
}

// Shared layout of the 0..1 curve figures: axes on the left, legend outside on the right.
void draw_curves(const Curves& c, const std::vector<std::string>& class_labels, const std::vector<double>& mean,
                 const std::string& mean_label, const std::string& xlabel, const std::string& ylabel,
                 const std::string& title, const std::string& out) {
  const bool per_class_legend = !class_labels.empty() && class_labels.size() < 21;
  std::vector<LegendEntry> entries;
  const LineSpec mean_spec{kBlue, 4, LineStyle::Solid, 0};
  for (size_t i = 0; i < c.py.size() && per_class_legend; ++i)
    entries.push_back({class_labels[i], LineSpec{plot::tab_color(static_cast<int64_t>(i)), 1, LineStyle::Solid, 0}});
  entries.push_back({mean_label, mean_spec});
  Font lf{0.5, 1};
  cv::Size ls = plot::legend_size(entries, lf);
  const int H = 1000;
  const int axes_w = 1100;
  const int W = std::max(1500, axes_w + ls.width + 40);
  cv::Mat img = white_canvas(W, H);
  Axes ax(img, cv::Rect(10, 10, axes_w, H - 20), title, xlabel, ylabel);
  ax.title_font = Font{0.8, 2};
  ax.label_font = Font{0.7, 1};
  ax.tick_font = Font{0.55, 1};
  ax.set_xlim(0, 1);
  ax.set_ylim(0, 1);
  ax.draw_frame();
  for (size_t i = 0; i < c.py.size(); ++i) {
    LineSpec s = per_class_legend ? LineSpec{plot::tab_color(static_cast<int64_t>(i)), 1, LineStyle::Solid, 0}
                                  : LineSpec{kGrey, 1, LineStyle::Solid, 0};
    ax.plot(c.px, c.py[i], s);
  }
  ax.plot(c.px, mean, mean_spec);
  cv::Rect d = ax.data_rect();
  plot::draw_legend(img, {d.x + d.width + 25, d.y}, entries, lf);
  plot::write_image(out, img);
}

}  // namespace

void plot_pr_curve(const engine::Tensor& px, const engine::Tensor& py, const engine::Tensor& ap50,
                   const std::vector<std::string>& names, const std::string& out_png) {
  Curves c = read_curves(px, py, names, out_png, "plot_pr_curve");
  const int64_t C = py.size(0);
  Y9_CHECK_SHAPE(ap50.defined() && ap50.dim() >= 1 && ap50.dim() <= 2 && ap50.size(0) == C,
                 "plot_pr_curve: ap50 must be [", C, "] or [", C, ", K], got ",
                 ap50.defined() ? engine::shape_str(ap50.shape()) : std::string("undefined"), " for ", out_png);
  std::vector<double> apv = host_values(ap50);
  const int64_t stride = ap50.dim() == 2 ? ap50.size(1) : 1;
  std::vector<double> ap(static_cast<size_t>(C));
  double ap_mean = 0;
  for (int64_t i = 0; i < C; ++i) ap_mean += ap[static_cast<size_t>(i)] = apv[static_cast<size_t>(i * stride)];
  ap_mean /= static_cast<double>(C);
  std::vector<std::string> labels;
  for (size_t i = 0; i < names.size(); ++i) labels.push_back(names[i] + " " + fmt("%.3f", ap[i]));
  draw_curves(c, labels, class_mean(c), "all classes " + fmt("%.3f", ap_mean) + " mAP@0.5", "Recall", "Precision",
              "Precision-Recall Curve", out_png);
}

void plot_mc_curve(const engine::Tensor& px, const engine::Tensor& py, const std::vector<std::string>& names,
                   const std::string& xlabel, const std::string& ylabel, const std::string& out_png) {
  Curves c = read_curves(px, py, names, out_png, "plot_mc_curve");
  std::vector<double> y = smooth_box(class_mean(c), 0.05);
  size_t best = static_cast<size_t>(std::max_element(y.begin(), y.end()) - y.begin());
  std::string label = "all classes " + fmt("%.2f", y[best]) + " at " + fmt("%.3f", c.px[best]);
  draw_curves(c, names, y, label, xlabel, ylabel, ylabel + "-Confidence Curve", out_png);
}

// --- labels.jpg -----------------------------------------------------------------------------

namespace {

// 2-D histogram panel (seaborn histplot(bins=50, pmax=0.9)) over the data range of a and b.
void hist2d_panel(cv::Mat& img, cv::Rect cell, const std::vector<double>& a, const std::vector<double>& b,
                  const std::string& xl, const std::string& yl) {
  Axes ax(img, cell, "", xl, yl);
  ax.label_font = Font{0.7, 1};
  ax.tick_font = Font{0.55, 1};
  ax.grid = false;
  constexpr int kBins = 50;
  double a0 = 0, a1 = 1, b0 = 0, b1 = 1;
  if (!a.empty()) {
    a0 = *std::min_element(a.begin(), a.end());
    a1 = *std::max_element(a.begin(), a.end());
    b0 = *std::min_element(b.begin(), b.end());
    b1 = *std::max_element(b.begin(), b.end());
  }
  if (a1 - a0 < 1e-6) {
    a0 -= 0.01;
    a1 += 0.01;
  }
  if (b1 - b0 < 1e-6) {
    b0 -= 0.01;
    b1 += 0.01;
  }
  ax.set_xlim(a0 - 0.02 * (a1 - a0), a1 + 0.02 * (a1 - a0));
  ax.set_ylim(b0 - 0.02 * (b1 - b0), b1 + 0.02 * (b1 - b0));
  ax.draw_frame();
  std::vector<double> h(kBins * kBins, 0.0);
  for (size_t i = 0; i < a.size(); ++i) {
    int ia = std::clamp(static_cast<int>((a[i] - a0) / (a1 - a0) * kBins), 0, kBins - 1);
    int ib = std::clamp(static_cast<int>((b[i] - b0) / (b1 - b0) * kBins), 0, kBins - 1);
    h[static_cast<size_t>(ib * kBins + ia)] += 1;
  }
  // pmax = 0.9: the colour saturates at the bin count below which 90% of the mass lies.
  std::vector<double> nz;
  for (double v : h)
    if (v > 0) nz.push_back(v);
  std::sort(nz.begin(), nz.end());
  double total = std::accumulate(nz.begin(), nz.end(), 0.0), cum = 0, vmax = nz.empty() ? 1 : nz.back();
  for (double v : nz) {
    cum += v;
    if (cum >= 0.9 * total) {
      vmax = v;
      break;
    }
  }
  for (int ib = 0; ib < kBins; ++ib)
    for (int ia = 0; ia < kBins; ++ia) {
      double v = h[static_cast<size_t>(ib * kBins + ia)];
      if (v <= 0) continue;
      cv::Point2d p0 = ax.to_px(a0 + (a1 - a0) * ia / kBins, b0 + (b1 - b0) * (ib + 1) / kBins);
      cv::Point2d p1 = ax.to_px(a0 + (a1 - a0) * (ia + 1) / kBins, b0 + (b1 - b0) * ib / kBins);
      cv::Rect r(cv::Point(static_cast<int>(std::lround(p0.x)), static_cast<int>(std::lround(p0.y))),
                 cv::Point(static_cast<int>(std::lround(p1.x)), static_cast<int>(std::lround(p1.y))));
      // Lightest visible shade for a single count, as seaborn's map starts above white.
      cv::rectangle(img, r & ax.data_rect(), cv::Scalar(plot::blues(0.2 + 0.8 * std::min(v / vmax, 1.0))),
                    cv::FILLED);
    }
  cv::rectangle(img, ax.data_rect(), cv::Scalar(60, 60, 60), 1);
}

}  // namespace

void plot_labels(const engine::Tensor& classes, const engine::Tensor& boxes, const std::vector<std::string>& names,
                 const std::string& out_jpg) {
  Y9_CHECK_SHAPE(classes.defined() && classes.dim() == 1, "plot_labels: classes must be [n] for ", out_jpg);
  Y9_CHECK_SHAPE(boxes.defined() && boxes.dim() == 2 && boxes.size(1) == 4 && boxes.size(0) == classes.size(0),
                 "plot_labels: boxes must be [", classes.size(0), ", 4] xywh, got ",
                 boxes.defined() ? engine::shape_str(boxes.shape()) : std::string("undefined"), " for ", out_jpg);
  std::vector<double> cls = host_values(classes), b = host_values(boxes);
  const size_t n = cls.size();
  int nc = 1;
  for (double c : cls) nc = std::max(nc, static_cast<int>(c) + 1);
  if (!names.empty()) nc = std::max(nc, static_cast<int>(names.size()));

  const int S = 1600, P = S / 2;
  cv::Mat img = white_canvas(S, S);
  // Panel 0: instances per class.
  {
    std::vector<double> counts(static_cast<size_t>(nc), 0.0);
    for (double c : cls)
      if (c >= 0) counts[static_cast<size_t>(c)] += 1;
    const bool tick_names = !names.empty() && names.size() < 30;
    Axes ax(img, cv::Rect(0, 0, P, P - (tick_names ? 0 : 0)), "", tick_names ? "" : "classes", "instances");
    ax.label_font = Font{0.7, 1};
    ax.tick_font = Font{0.55, 1};
    ax.set_xlim(-0.5, nc - 0.5);
    ax.set_ylim(0, std::max(1.0, *std::max_element(counts.begin(), counts.end())) * 1.05);
    ax.set_integer_xticks(true);
    if (tick_names) {
      // Room below for rotated names: draw the frame in a shorter cell, names under it.
      int maxw = 0;
      Font nf{std::min(0.55, 14.0 / std::max<size_t>(names.size(), 1) + 0.3), 1};
      for (const auto& s : names) maxw = std::max(maxw, plot::text_size(s, nf).width);
      maxw = std::min(maxw, 200);
      Axes ax2(img, cv::Rect(0, 0, P, P - maxw - 10), "", "", "instances");
      ax2.label_font = ax.label_font;
      ax2.tick_font = ax.tick_font;
      ax2.set_xlim(-0.5, nc - 0.5);
      ax2.set_integer_xticks(true);
      ax2.set_ylim(0, std::max(1.0, *std::max_element(counts.begin(), counts.end())) * 1.05);
      ax2.draw_frame();
      // Cover the numeric x tick labels with the names.
      cv::Rect d = ax2.data_rect();
      cv::rectangle(img, cv::Rect(d.x + 1, d.y + d.height + 6, d.width + 20, P - (d.y + d.height) - 6), kWhite,
                    cv::FILLED);
      for (int i = 0; i < nc; ++i) {
        double w = 0.8;
        cv::Point2d p0 = ax2.to_px(i - w / 2, counts[static_cast<size_t>(i)]), p1 = ax2.to_px(i + w / 2, 0);
        cv::rectangle(img, cv::Point(static_cast<int>(p0.x), static_cast<int>(p0.y)),
                      cv::Point(static_cast<int>(p1.x), static_cast<int>(p1.y)), plot::class_color(i), cv::FILLED);
        std::string s = i < static_cast<int>(names.size()) ? names[static_cast<size_t>(i)] : std::to_string(i);
        plot::draw_text(img, s, {static_cast<int>(ax2.to_px(i, 0).x), d.y + d.height + 6}, nf, kBlack,
                        HAlign::Center, VAlign::Top, true);
      }
      cv::rectangle(img, d, cv::Scalar(60, 60, 60), 1);
    } else {
      ax.draw_frame();
      for (int i = 0; i < nc; ++i) {
        double w = 0.8;
        cv::Point2d p0 = ax.to_px(i - w / 2, counts[static_cast<size_t>(i)]), p1 = ax.to_px(i + w / 2, 0);
        cv::rectangle(img, cv::Point(static_cast<int>(p0.x), static_cast<int>(p0.y)),
                      cv::Point(static_cast<int>(p1.x), static_cast<int>(p1.y)), plot::class_color(i), cv::FILLED);
      }
      cv::rectangle(img, ax.data_rect(), cv::Scalar(60, 60, 60), 1);
    }
  }
  // Panel 1: the first 1000 boxes drawn at the centre (axis off, as official).
  {
    const int m = 40, side = P - 2 * m;
    cv::Rect sq(P + m, m, side, side);
    cv::rectangle(img, sq, cv::Scalar(235, 235, 235), 1);
    cv::Mat roi = img(sq);
    for (size_t i = 0; i < std::min<size_t>(n, 1000); ++i) {
      double w = b[i * 4 + 2] * side, h = b[i * 4 + 3] * side;
      cv::Point2d p0(side / 2.0 - w / 2, side / 2.0 - h / 2), p1(side / 2.0 + w / 2, side / 2.0 + h / 2);
      cv::rectangle(roi, cv::Point(static_cast<int>(std::lround(p0.x)), static_cast<int>(std::lround(p0.y))),
                    cv::Point(static_cast<int>(std::lround(p1.x)), static_cast<int>(std::lround(p1.y))),
                    plot::class_color(static_cast<int64_t>(cls[i])), 1, cv::LINE_AA);
    }
  }
  // Panels 2 and 3: centre and size densities.
  std::vector<double> x(n), y(n), w(n), h(n);
  for (size_t i = 0; i < n; ++i) {
    x[i] = b[i * 4];
    y[i] = b[i * 4 + 1];
    w[i] = b[i * 4 + 2];
    h[i] = b[i * 4 + 3];
  }
  hist2d_panel(img, cv::Rect(0, P, P, P), x, y, "x", "y");
  hist2d_panel(img, cv::Rect(P, P, P, P), w, h, "width", "height");
  plot::write_image(out_jpg, img);
}

// --- batch mosaics ----------------------------------------------------------------------------

namespace {

// One annotated box (utils/plots.py Annotator.box_label): outline, filled label box, white text.
void box_label(cv::Mat& img, cv::Rect2d box, const std::string& label, cv::Scalar color, int lw, const Font& font) {
  cv::Point p1(static_cast<int>(std::lround(box.x)), static_cast<int>(std::lround(box.y)));
  cv::Point p2(static_cast<int>(std::lround(box.x + box.width)), static_cast<int>(std::lround(box.y + box.height)));
  cv::rectangle(img, p1, p2, color, lw, cv::LINE_AA);
  if (label.empty()) return;
  cv::Size ts = plot::text_size(label, font);
  int pad = 3;
  bool outside = p1.y - ts.height - 2 * pad >= 0;  // label above the box if it fits
  cv::Rect r(p1.x, outside ? p1.y - ts.height - 2 * pad : p1.y, ts.width + 2 * pad, ts.height + 2 * pad);
  cv::rectangle(img, r, color, cv::FILLED);
  plot::draw_text(img, label, {r.x + pad, r.y + pad}, font, kWhite, HAlign::Left, VAlign::Top);
}

}  // namespace

void plot_images(const engine::Tensor& images, const engine::Tensor& targets, const std::vector<std::string>& names,
                 const std::string& out_jpg, const engine::Tensor& predictions, const std::vector<std::string>& paths,
                 int max_size, int max_subplots) {
  Y9_CHECK_SHAPE(images.defined() && images.dim() == 4 && images.size(1) == 3 && images.size(0) >= 1,
                 "plot_images: images must be [B, 3, H, W], got ",
                 images.defined() ? engine::shape_str(images.shape()) : std::string("undefined"), " for ", out_jpg);
  auto check_targets = [&](const engine::Tensor& t, const char* what) {
    Y9_CHECK_SHAPE(t.dim() == 2 && (t.size(1) == 6 || t.size(1) == 7), "plot_images: ", what,
                   " must be [n, 6] or [n, 7], got ", engine::shape_str(t.shape()), " for ", out_jpg);
  };
  if (targets.defined()) check_targets(targets, "targets");
  if (predictions.defined()) check_targets(predictions, "predictions");
  Y9_CHECK_SHAPE(max_size > 0 && max_subplots > 0, "plot_images: max_size and max_subplots must be positive for ",
                 out_jpg);

  const int bs = static_cast<int>(std::min<int64_t>(images.size(0), max_subplots));
  int h = static_cast<int>(images.size(2)), w = static_cast<int>(images.size(3));
  const int ns = static_cast<int>(std::ceil(std::sqrt(static_cast<double>(bs))));
  // Pixels as float 0..255 on the host, RGB planes.
  engine::Tensor im = images.detach().slice(0, 0, bs).to(engine::Device::cpu());
  std::vector<double> px = im.to_vector<double>();
  if (engine::is_floating(images.dtype())) {
    double mx = px.empty() ? 0 : *std::max_element(px.begin(), px.end());
    if (mx <= 1.0)
      for (double& v : px) v *= 255.0;
  }
  cv::Mat mosaic(ns * h, ns * w, CV_8UC3, kWhite);
  const size_t plane = static_cast<size_t>(h) * w;
  for (int i = 0; i < bs; ++i) {
    // Column-major tiling, as the official x = w * (i // ns), y = h * (i % ns).
    int x0 = w * (i / ns), y0 = h * (i % ns);
    for (int r = 0; r < h; ++r) {
      cv::Vec3b* dst = mosaic.ptr<cv::Vec3b>(y0 + r) + x0;
      for (int c = 0; c < w; ++c)
        for (int k = 0; k < 3; ++k)  // RGB -> BGR
          dst[c][2 - k] = cv::saturate_cast<uint8_t>(px[(static_cast<size_t>(i) * 3 + k) * plane + r * w + c]);
    }
  }
  double scale = static_cast<double>(max_size) / ns / std::max(h, w);
  if (scale < 1) {
    h = static_cast<int>(std::ceil(scale * h));
    w = static_cast<int>(std::ceil(scale * w));
    cv::resize(mosaic, mosaic, cv::Size(w * ns, h * ns), 0, 0, cv::INTER_AREA);
  }
  // Official font size fs = int((h + w) * ns * 0.01) (PIL points), line width round(fs / 10).
  const int fs = std::max(static_cast<int>((h + w) * ns * 0.01), 8);
  const int lw = std::max(static_cast<int>(std::lround(fs / 10.0)), 1);
  const Font font{std::max(0.35, fs / 36.0), std::max(1, lw / 2)};
  auto draw = [&](const engine::Tensor& t, int i, int x0, int y0) {
    if (!t.defined() || t.size(0) == 0) return;
    const int64_t cols = t.size(1);
    std::vector<double> v = host_values(t);
    bool has_conf = cols == 7;
    const int64_t rows = t.size(0);
    // Normalised when every coordinate of this image's boxes is <= 1.01 (official heuristic).
    double mx = 0;
    for (int64_t r = 0; r < rows; ++r)
      if (static_cast<int>(v[r * cols]) == i)
        for (int k = 2; k < 6; ++k) mx = std::max(mx, v[r * cols + k]);
    bool norm = mx <= 1.01;
    for (int64_t r = 0; r < rows; ++r) {
      const double* row = &v[static_cast<size_t>(r * cols)];
      if (static_cast<int>(row[0]) != i) continue;
      double conf = has_conf ? row[6] : 1.0;
      if (has_conf && conf <= 0.25) continue;
      double cx = row[2], cy = row[3], bw = row[4], bh = row[5];
      if (norm) {
        cx *= w;
        cy *= h;
        bw *= w;
        bh *= h;
      } else if (scale < 1) {
        cx *= scale;
        cy *= scale;
        bw *= scale;
        bh *= scale;
      }
      int64_t c = static_cast<int64_t>(row[1]);
      std::string name = c >= 0 && c < static_cast<int64_t>(names.size()) ? names[static_cast<size_t>(c)]
                                                                            : std::to_string(c);
      std::string label = has_conf ? name + " " + fmt("%.1f", conf) : name;
      box_label(mosaic, cv::Rect2d(x0 + cx - bw / 2, y0 + cy - bh / 2, bw, bh), label, plot::class_color(c), lw, font);
    }
  };
  for (int i = 0; i < bs; ++i) {
    int x0 = w * (i / ns), y0 = h * (i % ns);
    cv::rectangle(mosaic, cv::Rect(x0, y0, w, h), kWhite, 2);
    if (i < static_cast<int>(paths.size())) {
      std::string nm = std::filesystem::path(paths[static_cast<size_t>(i)]).filename().string().substr(0, 40);
      plot::draw_text(mosaic, nm, {x0 + 5, y0 + 5}, font, cv::Scalar(220, 220, 220), HAlign::Left, VAlign::Top);
    }
    draw(targets, i, x0, y0);
    draw(predictions, i, x0, y0);
  }
  plot::write_image(out_jpg, mosaic);
}

// --- grad_norm.png ----------------------------------------------------------------------------

void plot_grad_norm(const std::string& path, const std::string& out_png, double max_norm) {
  const std::vector<GradNormRow> rows = read_grad_norms(path);
  std::vector<double> xs, ys;
  int64_t above = 0, nonfinite = 0;
  std::vector<std::pair<int64_t, std::pair<double, int64_t>>> means;  // epoch -> (sum, count)
  for (const auto& r : rows) {
    if (!std::isfinite(r.norm)) {
      ++nonfinite;
      continue;
    }
    xs.push_back(r.x);
    ys.push_back(r.norm);
    above += r.norm > max_norm;
    if (means.empty() || means.back().first != r.epoch) means.push_back({r.epoch, {0.0, 0}});
    means.back().second.first += r.norm;
    ++means.back().second.second;
  }
  const int W = 1600, H = 700;
  cv::Mat img = white_canvas(W, H);
  std::string title = "gradient norm per optimizer step, before clipping";
  if (!rows.empty())
    title += fmt(": %.0f", static_cast<double>(above)) + " of " + std::to_string(rows.size()) + " steps above " +
             fmt("%g", max_norm) + " (clipped)" +
             (nonfinite ? ", " + std::to_string(nonfinite) + " not finite" : std::string());
  Axes ax(img, cv::Rect(0, 0, W, H), title, "epoch", "total L2 norm (log scale)");
  ax.set_ylog(true);
  std::vector<double> yr = ys;
  yr.push_back(max_norm);
  std::vector<double> xr = xs;
  if (!means.empty()) xr.push_back(static_cast<double>(means.front().first));
  ax.autoscale(xr.empty() ? std::vector<double>{0, 1} : xr, yr);
  ax.draw_frame();
  const LineSpec step_spec{plot::tab_color(0), 1, LineStyle::Solid, xs.size() <= 200 ? 2 : 0};
  const LineSpec mean_spec{plot::tab_color(1), 3, LineStyle::Solid, 0};
  const LineSpec clip_spec{plot::hex_color(0xD62728), 2, LineStyle::Dashed, 0};
  ax.plot({ax.xmin(), ax.xmax()}, {max_norm, max_norm}, clip_spec);
  if (xs.empty()) {
    cv::Rect d = ax.data_rect();
    plot::draw_text(img, "no data", {d.x + d.width / 2, d.y + d.height / 2}, Font{0.8, 1}, kGrey, HAlign::Center,
                    VAlign::Middle);
  } else {
    ax.plot(xs, ys, step_spec);
    // Epoch means as steps: a horizontal segment over each epoch, joined vertically.
    std::vector<double> mx, my;
    for (const auto& [e, sc] : means) {
      const double m = sc.first / static_cast<double>(sc.second);
      mx.insert(mx.end(), {static_cast<double>(e), static_cast<double>(e + 1)});
      my.insert(my.end(), {m, m});
    }
    ax.plot(mx, my, mean_spec);
  }
  ax.legend({{"per step", step_spec}, {"epoch mean", mean_spec}, {"clip threshold " + fmt("%g", max_norm), clip_spec}},
            plot::LegendLoc::UpperRight);
  plot::write_image(out_png, img);
}

// --- feature maps (--visualize, --plot-features) -----------------------------------------------

void plot_feature_maps(const engine::Tensor& x, const std::string& out_png, int n) {
  Y9_CHECK_SHAPE(x.defined() && x.dim() == 4 && x.size(0) >= 1 && x.size(1) >= 1 && x.size(2) >= 1 && x.size(3) >= 1 &&
                     n >= 1,
                 "plot_feature_maps: expected x [B, C, H, W] with every size >= 1 and n >= 1, got ",
                 x.defined() ? engine::shape_str(x.shape()) : std::string("undefined"), ", n ", n, " for ", out_png);
  const int64_t C = x.size(1), h = x.size(2), w = x.size(3);
  const int k = static_cast<int>(std::min<int64_t>(n, C));
  const engine::Tensor img0 = x.detach().select(0, 0).narrow(0, 0, k).to(engine::Device::cpu()).to(engine::DType::F32).contiguous();
  const float* p = img0.data<float>();
  // Tile size: the map scaled by an integer to >= 64 px, or down to <= 256 px, on its longer side.
  const int64_t side = std::max(h, w);
  double scale = side < 64 ? std::ceil(64.0 / static_cast<double>(side)) : side > 256 ? 256.0 / side : 1.0;
  const int th = std::max(1, static_cast<int>(std::lround(h * scale))), tw = std::max(1, static_cast<int>(std::lround(w * scale)));
  const int cols = std::min(k, 8), rows = (k + 7) / 8, gap = 6;
  cv::Mat canvas(rows * th + (rows + 1) * gap, cols * tw + (cols + 1) * gap, CV_8UC3, kWhite);
  for (int c = 0; c < k; ++c) {
    const float* m = p + static_cast<int64_t>(c) * h * w;
    float lo = INFINITY, hi = -INFINITY;
    for (int64_t i = 0; i < h * w; ++i)
      if (std::isfinite(m[i])) lo = std::min(lo, m[i]), hi = std::max(hi, m[i]);
    cv::Mat g(static_cast<int>(h), static_cast<int>(w), CV_8UC1);
    for (int64_t i = 0; i < h * w; ++i) {
      // imshow of a constant map shows its lowest colour.
      const double t = std::isfinite(m[i]) && hi > lo ? (m[i] - lo) / static_cast<double>(hi - lo) : 0.0;
      g.data[i] = static_cast<uint8_t>(std::lround(std::clamp(t, 0.0, 1.0) * 255.0));
    }
    cv::Mat col, tile;
    cv::applyColorMap(g, col, cv::COLORMAP_VIRIDIS);
    cv::resize(col, tile, cv::Size(tw, th), 0, 0, scale >= 1 ? cv::INTER_NEAREST : cv::INTER_AREA);
    const int r = c / 8, q = c % 8;
    tile.copyTo(canvas(cv::Rect(gap + q * (tw + gap), gap + r * (th + gap), tw, th)));
  }
  plot::write_image(out_png, canvas);
}

}  // namespace io
