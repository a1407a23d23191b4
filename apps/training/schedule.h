// Learning-rate schedules of train_dual.py / train.py: the epoch factor lf(e) (linear, cosine =
// one_cycle, flat-cosine = one_flat_cycle, fixed), a LambdaLR equivalent over an Optimizer's
// groups, and the per-iteration warm-up (np.interp of lr, momentum and accumulate).
//
// THE ONE-EPOCH LAG (official quirk, spec train.md 4.2): LambdaLR is constructed (lr = lr0*lf(0),
// counter 0), then the script sets the counter to start_epoch-1 (= -1) and calls
// scheduler.step() only AFTER each epoch. Hence epoch 0 trains with lf(0), and epoch k >= 1
// trains with lf(k-1) outside warm-up, while warm-up targets lr0*lf(k) of the CURRENT epoch k
// (it calls lf(epoch) itself). LambdaLR below reproduces this exactly when driven the official
// way: construct, set_last_epoch(start_epoch - 1), apply_warmup() per iteration while ni <= nw,
// step() at each epoch end.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "apps/training/optim.h"

namespace training {

/// --cos-lr / --flat-cos-lr / --fixed-lr / default linear.
enum class LrScheduleKind { Linear, Cosine, FlatCosine, Fixed };

/// Epoch factor lf(e) as the official lambdas compute it (double precision, same operation
/// order as utils/general.py one_cycle / one_flat_cycle and the linear lambda of train_dual.py):
///  linear:      (1 - e/epochs) * (1 - lrf) + lrf
///  cosine:      ((1 - cos(e*pi/epochs)) / 2) * (lrf - 1) + 1
///  flat-cosine: e > epochs//2 ? ((1 - cos((e - epochs//2)*pi/(epochs//2))) / 2) * (lrf - 1) + 1 : 1
///  fixed:       1
/// `epochs` > 0, else engine::ConfigError. Flat-cosine with epochs == 1 divides by zero in the
/// official code (ZeroDivisionError at the first scheduler step); the lambda throws
/// engine::ConfigError there.
std::function<double(int64_t)> make_lr_lambda(LrScheduleKind kind, double lrf, int64_t epochs);

/// Parses "linear", "cos"/"cosine", "flat-cos"/"flat-cosine", "fixed"; engine::ConfigError else.
LrScheduleKind parse_lr_schedule(const std::string& name);

/// torch.optim.lr_scheduler.LambdaLR with one lambda for all groups: lr_g = initial_lr_g * lf(epoch).
class LambdaLR {
 public:
  /// Sets every group's initial_lr to its current lr (when 0), then lr = initial_lr * lf(0)
  /// with last_epoch = 0 (PyTorch's constructor step).
  LambdaLR(Optimizer& opt, std::function<double(int64_t)> lf);
  /// Overwrites the epoch counter without touching the lrs (official
  /// `scheduler.last_epoch = start_epoch - 1`).
  void set_last_epoch(int64_t e) { last_epoch_ = e; }
  int64_t last_epoch() const { return last_epoch_; }
  /// last_epoch += 1; every group's lr = initial_lr * lf(last_epoch). Call at each epoch end.
  void step();
  /// The lambda (warm-up needs lf(epoch)).
  double lf(int64_t epoch) const { return lf_(epoch); }
  /// Current lr of every group.
  std::vector<double> last_lr() const;

 private:
  Optimizer& opt_;
  std::function<double(int64_t)> lf_;
  int64_t last_epoch_ = 0;
};

/// Warm-up hyper-parameters (hyp.scratch-high.yaml values as defaults).
struct WarmupHyp {
  double warmup_epochs = 3.0;
  double warmup_momentum = 0.8;
  double warmup_bias_lr = 0.1;
  double momentum = 0.937;  ///< hyp['momentum'], the momentum warm-up ends at
  int64_t nbs = 64;         ///< nominal batch size
};

/// Official warm-up length: max(round_half_even(warmup_epochs * nb), 100); nb = batches per epoch.
int64_t warmup_iterations(double warmup_epochs, int64_t nb);

/// numpy.interp(x, [x0, x1], [y0, y1]) for x0 < x1, bitwise as numpy computes it:
/// y0 for x <= x0 (x < x0: left value), y1 for x >= x1, else slope*(x - x0) + y0 with
/// slope = (y1 - y0)/(x1 - x0).
double np_interp(double x, double x0, double x1, double y0, double y1);

/// Applies the warm-up of iteration `ni` (call only while ni <= nw) to the optimizer's groups
/// (train_dual.py): xi = [0, nw];
///   group j lr = interp(ni, xi, [j == 0 ? warmup_bias_lr : 0, initial_lr_j * lf_epoch]);
///   momentum = interp(ni, xi, [warmup_momentum, momentum]) when opt.warmup_momentum() (SGD);
/// returns accumulate = max(1, round_half_even(interp(ni, xi, [1, nbs / batch_size]))).
/// lf_epoch = lf(current epoch). Group 0 must be the bias group (make_official_optimizer order).
/// Errors: engine::Error when nw <= 0 or batch_size <= 0.
int64_t apply_warmup(Optimizer& opt, int64_t ni, int64_t nw, double lf_epoch, const WarmupHyp& hyp,
                     int64_t batch_size);

}  // namespace training
