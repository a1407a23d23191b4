// Model YAML configs in the official YOLOv9 grammar (models/detect/*.yaml): parsing, argument
// evaluation and channel inference, reproducing models/yolo.py: parse_model of WongKinYiu/yolov9
// (commit 5b1ea9a). The result is a flat list of resolved layer specs that graph/model.h builds
// modules from. No tensors are created here.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace graph {

/// One YAML argument after evaluation: an int, a float, a string ('nearest'), None, a bool, or a
/// list of arguments ([256, 512]). Strings naming `nc` are replaced by the class count.
struct Arg {
  enum class Kind { Int, Float, Str, None, Bool, List };
  Kind kind = Kind::None;
  int64_t i = 0;
  double f = 0.0;
  bool b = false;
  std::string s;
  std::vector<Arg> list;

  static Arg make_int(int64_t v) { Arg a; a.kind = Kind::Int; a.i = v; return a; }
  static Arg make_list(const std::vector<int64_t>& v);
  bool is_int() const { return kind == Kind::Int; }
  /// Python repr, as parse_model prints arguments: 64, 0.5, 'nearest', None, True, [64, 128].
  std::string repr() const;
};

/// A layer row after resolution (the parse_model loop body).
struct LayerSpec {
  int index = 0;                 ///< position in backbone + head (0-based)
  std::vector<int> from;         ///< `from` as written (-1 = previous layer, -k = k-th previous)
  bool from_is_list = false;     ///< true when `from` was a YAML list
  std::vector<int> from_abs;     ///< `from` normalised to absolute layer indices (-1 -> index-1; for layer 0, -1 stays -1 = the input image)
  int n = 1;                     ///< repeat count after the depth gain (n_yaml>1 ? max(round(n*gd),1) : n_yaml)
  std::string module;            ///< module name as written ("Conv", "nn.Upsample")
  std::string type;              ///< canonical class name ("Conv", "Upsample")
  std::vector<Arg> yaml_args;    ///< arguments as written, after evaluation (nc, None, ...)
  std::vector<Arg> args;         ///< constructor arguments after channel resolution (what parse_model prints)
  std::vector<int64_t> c_in;     ///< input channels, one per `from` entry (CBLinear pieces are not expanded)
  std::vector<int64_t> c_out;    ///< output channels (one value; a list for CBLinear: its pieces)
};

/// A parsed model file.
struct ModelConfig {
  std::string source;            ///< file path (or a name given to parse_model_config) used in messages
  int64_t nc = 80;               ///< class count in effect (YAML `nc` or the override)
  int64_t nc_yaml = 80;          ///< class count written in the YAML
  double depth_multiple = 1.0;
  double width_multiple = 1.0;
  int64_t anchors = 3;           ///< legacy `anchors` (only used for no = anchors*(nc+5))
  std::string activation;        ///< YAML `activation` text, empty when absent ("nn.ReLU()")
  int64_t ch_in = 3;             ///< input channels (YAML `ch` or the argument)
  std::vector<LayerSpec> layers;
  std::vector<int> save;         ///< sorted layer indices whose outputs later layers read
};

/// Largest class count a model config accepts (nc, the nc override, a head's nc argument).
inline constexpr int64_t kMaxClasses = 100000;
/// Largest channel count of any layer (after the width multiple); far above every official model.
inline constexpr int64_t kMaxChannels = 16384;

/// Python's make_divisible(x, divisor) = ceil(x / divisor) * divisor (utils/general.py).
int64_t make_divisible(double x, int64_t divisor);

/// Reads and resolves a model YAML file. `nc_override` > 0 replaces the YAML's nc (the official
/// "Overriding model.yaml nc" path); `ch_in` is the image channel count.
/// Throws engine::ConfigError naming the file, the layer index and module, and the problem
/// (unreadable file, YAML syntax, missing key, unknown module, bad `from`, wrong argument count or
/// type, an argument out of its range: kernel 1..63, stride, padding, dilation and upsample scale
/// up to 64, groups >= 1 dividing the channels, channels 1..kMaxChannels, nc 1..kMaxClasses,
/// depth/width multiples in (0, 10], `number` 1..1000), and engine::IoError when the file cannot
/// be opened. Never crashes on any text (fuzzed in CI: fuzz/model_yaml_fuzz.cpp).
ModelConfig load_model_config(const std::string& path, int64_t nc_override = -1, int64_t ch_in = 3);

/// Same as load_model_config on YAML text; `source` names it in error messages.
ModelConfig parse_model_config(const std::string& yaml_text, const std::string& source,
                               int64_t nc_override = -1, int64_t ch_in = 3);

/// Number of detection branches of a head type: DDetect 1, DualDDetect 2, TripleDDetect 3; 0 for
/// anything else.
int head_branches(const std::string& type);

}  // namespace graph
