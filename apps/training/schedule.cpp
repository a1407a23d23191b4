// LR lambdas, LambdaLR and warm-up exactly as the official training scripts compute them.
#include "apps/training/schedule.h"

#include <algorithm>
#include <cmath>

namespace training {

using engine::ConfigError;

namespace {
constexpr double kPi = 3.141592653589793;  // math.pi
}

std::function<double(int64_t)> make_lr_lambda(LrScheduleKind kind, double lrf, int64_t epochs) {
  Y9_CHECK_T(ConfigError, epochs > 0, "LR schedule: epochs must be positive, got ", epochs);
  const double steps = static_cast<double>(epochs);
  switch (kind) {
    case LrScheduleKind::Linear:
      return [=](int64_t e) { return (1.0 - static_cast<double>(e) / steps) * (1.0 - lrf) + lrf; };
    case LrScheduleKind::Cosine: {
      const double y1 = 1.0, y2 = lrf;  // one_cycle(1, lrf, epochs)
      return [=](int64_t e) { return ((1.0 - std::cos(static_cast<double>(e) * kPi / steps)) / 2.0) * (y2 - y1) + y1; };
    }
    case LrScheduleKind::FlatCosine: {
      const double y1 = 1.0, y2 = lrf;  // one_flat_cycle(1, lrf, epochs)
      const int64_t half = epochs / 2;
      return [=](int64_t e) {
        if (e <= half) return y1;
        Y9_CHECK_T(ConfigError, half > 0, "flat-cosine LR schedule with epochs = ", epochs,
                   " divides by epochs // 2 = 0 (the official code raises ZeroDivisionError too)");
        const double h = static_cast<double>(half);
        return ((1.0 - std::cos((static_cast<double>(e) - h) * kPi / h)) / 2.0) * (y2 - y1) + y1;
      };
    }
    case LrScheduleKind::Fixed:
      return [](int64_t) { return 1.0; };
  }
  Y9_THROW(ConfigError, "unknown LR schedule");
}

LrScheduleKind parse_lr_schedule(const std::string& name) {
  if (name == "linear") return LrScheduleKind::Linear;
  if (name == "cos" || name == "cosine") return LrScheduleKind::Cosine;
  if (name == "flat-cos" || name == "flat-cosine") return LrScheduleKind::FlatCosine;
  if (name == "fixed") return LrScheduleKind::Fixed;
  Y9_THROW(ConfigError, "unknown LR schedule '", name, "' (linear, cos, flat-cos, fixed)");
}

// --- LambdaLR ----------------------------------------------------------------------------------

LambdaLR::LambdaLR(Optimizer& opt, std::function<double(int64_t)> lf) : opt_(opt), lf_(std::move(lf)) {
  for (auto& g : opt_.param_groups())
    if (g.initial_lr == 0.0) g.initial_lr = g.lr;
  last_epoch_ = -1;
  step();
}

void LambdaLR::step() {
  ++last_epoch_;
  const double f = lf_(last_epoch_);
  for (auto& g : opt_.param_groups()) g.lr = g.initial_lr * f;
}

std::vector<double> LambdaLR::last_lr() const {
  std::vector<double> out;
  for (const auto& g : opt_.param_groups()) out.push_back(g.lr);
  return out;
}

// --- warm-up -----------------------------------------------------------------------------------

int64_t warmup_iterations(double warmup_epochs, int64_t nb) {
  const double r = std::nearbyint(warmup_epochs * static_cast<double>(nb));  // Python round: half-to-even
  return std::max<int64_t>(static_cast<int64_t>(r), 100);
}

double np_interp(double x, double x0, double x1, double y0, double y1) {
  if (x < x0) return y0;
  if (x >= x1) return y1;  // numpy returns the right value at and beyond the last point
  if (x == x0) return y0;
  const double slope = (y1 - y0) / (x1 - x0);
  return slope * (x - x0) + y0;
}

int64_t apply_warmup(Optimizer& opt, int64_t ni, int64_t nw, double lf_epoch, const WarmupHyp& hyp,
                     int64_t batch_size) {
  Y9_CHECK(nw > 0 && batch_size > 0, "apply_warmup: nw ", nw, " and batch_size ", batch_size, " must be positive");
  const double x = static_cast<double>(ni), x1 = static_cast<double>(nw);
  const double acc = std::nearbyint(np_interp(x, 0.0, x1, 1.0, static_cast<double>(hyp.nbs) / static_cast<double>(batch_size)));
  auto& groups = opt.param_groups();
  for (size_t j = 0; j < groups.size(); ++j) {
    ParamGroup& g = groups[j];
    g.lr = np_interp(x, 0.0, x1, j == 0 ? hyp.warmup_bias_lr : 0.0, g.initial_lr * lf_epoch);
    if (opt.warmup_momentum()) g.momentum = np_interp(x, 0.0, x1, hyp.warmup_momentum, hyp.momentum);
  }
  return std::max<int64_t>(1, static_cast<int64_t>(acc));
}

}  // namespace training
