// A small chart toolkit on top of OpenCV (no Python, no matplotlib): colours and colour maps,
// "nice number" tick placement, anti-aliased text (horizontal and vertical), and an Axes type
// with a grid, ticks, labels, solid/dotted lines with markers, and legends. io/plots.cpp draws
// every training/validation figure with it so that all plots share one look.
#pragma once
#include <opencv2/core.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace io::plot {

// --- Colours ---------------------------------------------------------------------------------

/// OpenCV BGR colour from a 0xRRGGBB value.
cv::Scalar hex_color(uint32_t rgb);
/// The official 20-entry class palette (utils/plots.py Colors: FF3838, FF9D97, ... FF37C7),
/// cycled by class index (negative indices wrap too). BGR.
cv::Scalar class_color(int64_t cls);
/// matplotlib's 'tab10' cycle (the default line colours), cycled by index. BGR.
cv::Scalar tab_color(int64_t i);
/// matplotlib's sequential 'Blues' map at t in [0, 1] (clamped): near-white -> dark blue. BGR.
cv::Vec3b blues(double t);

// --- Ticks and text --------------------------------------------------------------------------

/// Tick positions covering [lo, hi] with a "nice" step (1, 2, 2.5 or 5 x 10^k), at most about
/// `max_ticks` ticks, all inside [lo, hi] (rounding slack 1e-9 of the range). lo == hi gives {lo}.
std::vector<double> nice_ticks(double lo, double hi, int max_ticks = 6);
/// Tick label: enough decimals for `step` (e.g. 0.2 -> "0.4", 25 -> "50"), no trailing "-0".
std::string format_tick(double v, double step);

enum class HAlign { Left, Center, Right };
enum class VAlign { Top, Middle, Bottom };

/// Font used everywhere: cv::FONT_HERSHEY_SIMPLEX, anti-aliased.
struct Font {
  double scale = 0.6;  ///< OpenCV font scale (0.6 ~ 13 px cap height)
  int thickness = 1;   ///< stroke width in px
};

/// Size in px of `s` rendered with `font` (width, height of the cap + baseline).
cv::Size text_size(const std::string& s, const Font& font);
/// Draws `s` anchored at `at` (pixel) with the given alignment. `vertical` rotates the text by 90
/// degrees counter-clockwise (reads bottom to top, as matplotlib y labels); the alignment then
/// refers to the rotated box. Text outside the image is clipped.
void draw_text(cv::Mat& img, const std::string& s, cv::Point at, const Font& font, cv::Scalar color,
               HAlign h = HAlign::Left, VAlign v = VAlign::Bottom, bool vertical = false);

// --- Lines ----------------------------------------------------------------------------------

enum class LineStyle { Solid, Dotted, Dashed, None };

/// How one series is drawn (and shown in a legend).
struct LineSpec {
  cv::Scalar color{255, 0, 0};
  int thickness = 2;            ///< px
  LineStyle style = LineStyle::Solid;
  int marker_radius = 0;        ///< filled circle at each point when > 0 (px)
};

/// Anti-aliased polyline through `pts` (sub-pixel precision) with the given style; points with
/// non-finite coordinates break the line.
void draw_polyline(cv::Mat& img, const std::vector<cv::Point2d>& pts, const LineSpec& spec);

// --- Axes -----------------------------------------------------------------------------------

struct LegendEntry {
  std::string label;
  LineSpec spec;
  bool filled_box = false;  ///< draw a colour swatch instead of a line sample
};

enum class LegendLoc { UpperRight, UpperLeft, LowerLeft, LowerRight };

/// One panel of a figure: the panel occupies `cell` of the canvas; the data area is `cell`
/// minus margins for the title, tick labels and axis labels. Usage: construct, set limits
/// (or autoscale), draw_frame(), then plot lines, then legend(). Data coordinates are mapped
/// linearly; anything outside the data area is clipped.
class Axes {
 public:
  Axes(cv::Mat& canvas, cv::Rect cell, std::string title = "", std::string xlabel = "", std::string ylabel = "");

  void set_xlim(double lo, double hi);
  void set_ylim(double lo, double hi);
  /// Sets both limits from the finite values of xs/ys with a 5% pad (matplotlib's margins); a
  /// constant series gets +-0.5 (or +-5% of |v|) around its value.
  void autoscale(const std::vector<double>& xs, const std::vector<double>& ys);
  /// Integer x ticks only (epochs).
  void set_integer_xticks(bool on) { integer_x_ = on; }
  /// Logarithmic y axis (base 10): call before set_ylim/autoscale; limits and plotted values stay
  /// in data units (values <= 0 break the line); ticks at the decades in range ("0.1", "1", "10",
  /// "100", "1000", "1e+04"), or at nice linear steps when the range spans less than a decade.
  void set_ylog(bool on) { log_y_ = on; }

  Font title_font{0.7, 2};
  Font label_font{0.6, 1};
  Font tick_font{0.5, 1};
  bool grid = true;

  /// White data area, grid, frame, ticks with labels, title and axis labels.
  void draw_frame();
  /// Series in data coordinates (xs.size() == ys.size(), else engine::ShapeError).
  void plot(const std::vector<double>& xs, const std::vector<double>& ys, const LineSpec& spec);
  /// Legend box inside the data area at `loc`.
  void legend(const std::vector<LegendEntry>& entries, LegendLoc loc = LegendLoc::UpperRight,
              const Font& font = Font{0.5, 1});

  /// Data -> canvas pixel (double precision, not clipped).
  cv::Point2d to_px(double x, double y) const;
  /// The data area in canvas pixels.
  cv::Rect data_rect() const { return data_; }
  double xmin() const { return x0_; }
  double xmax() const { return x1_; }
  double ymin() const { return log_y_ ? std::pow(10.0, y0_) : y0_; }
  double ymax() const { return log_y_ ? std::pow(10.0, y1_) : y1_; }

 private:
  cv::Mat& canvas_;
  cv::Rect cell_, data_;
  std::string title_, xlabel_, ylabel_;
  double x0_ = 0, x1_ = 1, y0_ = 0, y1_ = 1;  ///< y limits are log10 of the data limits when log_y_
  bool integer_x_ = false;
  bool log_y_ = false;
};

/// Draws a legend box with its top-left corner at `top_left` (canvas pixels), e.g. outside an
/// Axes on the right. Returns the box drawn.
cv::Rect draw_legend(cv::Mat& canvas, cv::Point top_left, const std::vector<LegendEntry>& entries,
                     const Font& font = Font{0.5, 1});
/// Size the legend box for `entries` would take.
cv::Size legend_size(const std::vector<LegendEntry>& entries, const Font& font = Font{0.5, 1});

/// Vertical colour bar for the 'Blues' map in `rect` with ticks from vmin to vmax on its right.
void draw_colorbar(cv::Mat& canvas, cv::Rect rect, double vmin, double vmax, const Font& font = Font{0.5, 1});

/// Writes `img` (8-bit BGR) with cv::imwrite; throws engine::IoError naming `path` when the
/// encoder fails or the file cannot be written (e.g. missing directory).
void write_image(const std::string& path, const cv::Mat& img);

}  // namespace io::plot
