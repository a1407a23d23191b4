// Hyperparameters of a hyp YAML (official data/hyps/hyp.scratch-high.yaml keys, spec train.md
// section 11): one typed struct for the optimizer, schedule, loss gains and augmentation, keeping
// the file's key order so that hyp.yaml, opt.yaml and checkpoints echo the file as the official
// code does. Keys the engine does not know are kept (in order) and echoed, not used.
#pragma once
#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

namespace io {

struct Hyp {
  // Optimizer and schedule.
  double lr0 = 0.01, lrf = 0.01, momentum = 0.937, weight_decay = 0.0005;
  double warmup_epochs = 3.0, warmup_momentum = 0.8, warmup_bias_lr = 0.1;
  // Loss (box, cls, dfl gains are fixed in the official TAL loss classes; kept for the echo).
  double box = 7.5, cls = 0.5, cls_pw = 1.0, obj = 0.7, obj_pw = 1.0, dfl = 1.5, iou_t = 0.20, anchor_t = 5.0;
  double fl_gamma = 0.0;
  // Augmentation (utils/augmentations.py, utils/dataloaders.py).
  double hsv_h = 0.015, hsv_s = 0.7, hsv_v = 0.4;
  double degrees = 0.0, translate = 0.1, scale = 0.9, shear = 0.0, perspective = 0.0;
  double flipud = 0.0, fliplr = 0.5;
  double mosaic = 1.0, mixup = 0.15, copy_paste = 0.3;

  /// Keys in file order (set() appends a new key at the end).
  std::vector<std::string> order;
  /// Values of keys the struct has no field for.
  std::map<std::string, double> extra;

  /// Value of `key` (a field or an extra key); throws engine::ConfigError naming the key when absent.
  double get(const std::string& key) const;
  /// Sets `key` (appended to `order` when new).
  void set(const std::string& key, double value);
  bool has(const std::string& key) const;
  /// {key: value} in `order`.
  nlohmann::ordered_json to_json() const;
  /// "k=v, k=v, ..." in `order` (%g), the official "hyperparameters:" log line.
  std::string summary() const;

  /// Reads a hyp YAML (a mapping of key: number). With `require_training_keys`, every key the
  /// official train_dual.py reads must be present (KeyError there). Throws engine::IoError for a
  /// missing or invalid file, engine::ConfigError naming the file and key for a non-number, a NaN
  /// or infinite value, a missing required key, a negative required key or lr0 = 0.
  static Hyp load(const std::string& path, bool require_training_keys = true);
  /// From to_json() output (checkpoint metadata). Throws engine::ConfigError on a non-number.
  static Hyp from_json(const nlohmann::json& j);
};

}  // namespace io
