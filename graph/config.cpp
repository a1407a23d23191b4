// Model YAML parsing and channel resolution (official models/yolo.py: parse_model). Every error
// is an engine::ConfigError whose message starts with "<file>: layer <i> (<module>): ".
#include "graph/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "engine/error.h"

namespace graph {

// --- Arg --------------------------------------------------------------------------------------

Arg Arg::make_list(const std::vector<int64_t>& v) {
  Arg a;
  a.kind = Kind::List;
  for (int64_t x : v) a.list.push_back(make_int(x));
  return a;
}

std::string Arg::repr() const {
  switch (kind) {
    case Kind::Int: return std::to_string(i);
    case Kind::Float: {
      char buf[64];
      auto res = std::to_chars(buf, buf + sizeof(buf), f);
      std::string s(buf, res.ptr);
      if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // Python repr(2.0) = '2.0'
      return s;
    }
    case Kind::Str: return "'" + s + "'";
    case Kind::None: return "None";
    case Kind::Bool: return b ? "True" : "False";
    case Kind::List: {
      std::string out = "[";
      for (size_t k = 0; k < list.size(); ++k) out += (k ? ", " : "") + list[k].repr();
      return out + "]";
    }
  }
  return "?";
}

int64_t make_divisible(double x, int64_t divisor) {
  return static_cast<int64_t>(std::ceil(x / static_cast<double>(divisor))) * divisor;
}

int head_branches(const std::string& type) {
  if (type == "DDetect") return 1;
  if (type == "DualDDetect") return 2;
  if (type == "TripleDDetect") return 3;
  return 0;
}

namespace {

// Canonical class name for a module string, or "" when unsupported. The official code evals the
// string, so "nn.Upsample" and "Upsample" name different things; only the spellings the official
// files use (and the bare class names of models/common.py) are accepted.
std::string canonical_type(const std::string& m) {
  static const char* const kPlain[] = {"Conv",    "AConv",    "ADown",   "ELAN1",       "RepNCSPELAN4",
                                       "SPPELAN", "Concat",   "CBLinear", "CBFuse",     "Silence",
                                       "DDetect", "DualDDetect", "TripleDDetect"};
  for (const char* p : kPlain)
    if (m == p) return p;
  if (m == "nn.Upsample" || m == "torch.nn.Upsample") return "Upsample";
  return "";
}

// Python semantics for a YAML scalar: int, float, bool, None, a known name (nc) or a string.
Arg eval_scalar(const YAML::Node& node, int64_t nc) {
  Arg a;
  const std::string text = node.Scalar();
  if (node.Tag() == "!" ) {  // quoted scalar: a Python string literal (eval('nearest') fails -> kept)
    a.kind = Arg::Kind::Str;
    a.s = text;
    return a;
  }
  int64_t iv = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), iv);
  if (ec == std::errc() && p == text.data() + text.size()) return Arg::make_int(iv);
  double dv = 0.0;
  auto [p2, ec2] = std::from_chars(text.data(), text.data() + text.size(), dv);
  if (ec2 == std::errc() && p2 == text.data() + text.size()) {
    a.kind = Arg::Kind::Float;
    a.f = dv;
    return a;
  }
  if (text == "None" || text == "null" || text == "~" || text.empty()) return a;
  if (text == "True" || text == "true") { a.kind = Arg::Kind::Bool; a.b = true; return a; }
  if (text == "False" || text == "false") { a.kind = Arg::Kind::Bool; a.b = false; return a; }
  if (text == "nc") return Arg::make_int(nc);
  a.kind = Arg::Kind::Str;  // unknown names stay strings (NameError suppressed in parse_model)
  a.s = text;
  return a;
}

Arg eval_node(const YAML::Node& node, int64_t nc) {
  if (node.IsSequence()) {
    Arg a;
    a.kind = Arg::Kind::List;
    for (const auto& c : node) a.list.push_back(eval_node(c, nc));
    return a;
  }
  if (node.IsNull()) return Arg{};
  return eval_scalar(node, nc);
}

// Builds error messages that name file, layer and module.
struct Ctx {
  const std::string& source;
  int index;
  std::string module;
  template <typename... A>
  [[noreturn]] void fail(const A&... parts) const {
    Y9_THROW(engine::ConfigError, source, ": layer ", index, " (", module, "): ", parts...);
  }
};

int64_t need_int(const Ctx& cx, const std::vector<Arg>& args, size_t k, const char* what) {
  if (k >= args.size() || !args[k].is_int())
    cx.fail("argument ", k, " (", what, ") must be an integer, got ",
            k < args.size() ? args[k].repr() : std::string("nothing"));
  return args[k].i;
}

void need_count(const Ctx& cx, const std::vector<Arg>& args, size_t lo, size_t hi, const char* form) {
  if (args.size() < lo || args.size() > hi)
    cx.fail("expected ", lo == hi ? std::to_string(lo) : std::to_string(lo) + " to " + std::to_string(hi),
            " arguments ", form, ", got ", args.size());
}

// Bounds of module arguments. The official parse_model accepts anything and fails later (a
// ZeroDivisionError for stride or groups 0, an out-of-memory for a million channels); we refuse at
// the layer, naming it. The bounds are far above every official model.
constexpr int64_t kMaxKernel = 63;
constexpr int64_t kMaxStride = 64;    ///< also the bound for padding, dilation and upsample scale
constexpr int64_t kMaxRepeats = 64;   ///< RepNCSPELAN4 c5 (RepNCSP bottlenecks)
constexpr int64_t kMaxNumber = 1000;  ///< a row's `number` as written

void need_range(const Ctx& cx, int64_t v, int64_t lo, int64_t hi, const std::string& what) {
  if (v < lo || v > hi) cx.fail(what, " must be in ", lo, "..", hi, ", got ", v);
}

std::vector<int64_t> int_list(const Ctx& cx, const Arg& a, const char* what) {
  if (a.kind != Arg::Kind::List) cx.fail(what, " must be a list of integers, got ", a.repr());
  std::vector<int64_t> out;
  for (const auto& x : a.list) {
    if (!x.is_int()) cx.fail(what, " must be a list of integers, got ", a.repr());
    out.push_back(x.i);
  }
  return out;
}

}  // namespace

// --- parse ------------------------------------------------------------------------------------

ModelConfig load_model_config(const std::string& path, int64_t nc_override, int64_t ch_in) {
  std::ifstream in(path);
  if (!in) Y9_THROW(engine::IoError, path, ": cannot open model config");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_model_config(ss.str(), path, nc_override, ch_in);
}

namespace {

// --- the parse, step by step ---------------------------------------------------------------------------

/// The top-level keys: nc (or the override), depth/width multiples, ch, anchors, activation.
ModelConfig parse_header(const YAML::Node& root, const std::string& source, int64_t nc_override, int64_t ch_in) {
  if (!root.IsMap()) Y9_THROW(engine::ConfigError, source, ": a model config must be a YAML mapping");
  for (const char* key : {"nc", "depth_multiple", "width_multiple", "anchors", "backbone", "head"})
    if (!root[key]) Y9_THROW(engine::ConfigError, source, ": missing key '", key, "'");
  ModelConfig cfg;
  cfg.source = source;
  try {
    cfg.nc_yaml = root["nc"].as<int64_t>();
    cfg.depth_multiple = root["depth_multiple"].as<double>();
    cfg.width_multiple = root["width_multiple"].as<double>();
    if (root["ch"]) ch_in = root["ch"].as<int64_t>();  // the YAML's ch wins (Model.__init__)
  } catch (const YAML::Exception& e) {
    Y9_THROW(engine::ConfigError, source, ": bad value for nc/depth_multiple/width_multiple/ch: ", e.msg);
  }
  cfg.nc = nc_override > 0 ? nc_override : cfg.nc_yaml;
  if (cfg.nc <= 0 || cfg.nc > kMaxClasses)
    Y9_THROW(engine::ConfigError, source, ": nc must be in 1..", kMaxClasses, ", got ", cfg.nc);
  // !(x > 0) also refuses NaN.
  if (!(cfg.depth_multiple > 0 && cfg.depth_multiple <= 10))
    Y9_THROW(engine::ConfigError, source, ": depth_multiple must be in (0, 10], got ", cfg.depth_multiple);
  if (!(cfg.width_multiple > 0 && cfg.width_multiple <= 10))
    Y9_THROW(engine::ConfigError, source, ": width_multiple must be in (0, 10], got ", cfg.width_multiple);
  if (ch_in < 1 || ch_in > 64) Y9_THROW(engine::ConfigError, source, ": ch (input channels) must be in 1..64, got ", ch_in);
  cfg.ch_in = ch_in;
  const YAML::Node anchors = root["anchors"];
  if (anchors.IsSequence()) {
    if (anchors.size() == 0 || !anchors[0].IsSequence())
      Y9_THROW(engine::ConfigError, source, ": 'anchors' must be an integer or a list of lists");
    cfg.anchors = static_cast<int64_t>(anchors[0].size() / 2);
  } else {
    try {
      cfg.anchors = anchors.as<int64_t>();
    } catch (const YAML::Exception&) {
      Y9_THROW(engine::ConfigError, source, ": 'anchors' must be an integer or a list of lists");
    }
  }
  if (cfg.anchors < 0 || cfg.anchors > 100)
    Y9_THROW(engine::ConfigError, source, ": 'anchors' must be in 0..100, got ", cfg.anchors);
  if (root["activation"] && !root["activation"].IsNull()) cfg.activation = root["activation"].Scalar();
  return cfg;
}

/// backbone rows then head rows.
std::vector<YAML::Node> layer_rows(const YAML::Node& root, const std::string& source) {
  std::vector<YAML::Node> rows;
  for (const char* part : {"backbone", "head"}) {
    const YAML::Node list = root[part];
    if (!list.IsSequence()) Y9_THROW(engine::ConfigError, source, ": '", part, "' must be a list of layer rows");
    for (const auto& r : list) rows.push_back(r);
  }
  if (rows.empty()) Y9_THROW(engine::ConfigError, source, ": the model has no layers");
  return rows;
}

/// What resolving one row's arguments needs: the row, the channels of the layers so far
/// (official parse_model's `ch`), all rows (CBFuse checks its sources) and the multiples.
struct RowState {
  Ctx& cx;
  LayerSpec& L;
  const std::vector<std::vector<int64_t>>& ch;
  const std::vector<YAML::Node>& rows;
  int64_t no;      ///< anchors * (nc + 5): the official no-scaling channel count
  double gw;       ///< width multiple
  bool last_row;

  const std::vector<int64_t>& ch_of(int f) const {
    return ch[static_cast<size_t>(f < 0 ? static_cast<int>(ch.size()) + f : f)];
  }
  int64_t single_ch(int f) const {
    const auto& c = ch_of(f);
    if (c.size() != 1) cx.fail("input from ", f, " is a CBLinear output (a list of pieces); only CBFuse can read it");
    return c[0];
  }
  void need_single_from() const {
    if (L.from_is_list && L.from.size() != 1) cx.fail("expects one input, got a 'from' list of ", L.from.size());
  }
};

/// from, number (scaled by the depth multiple), module name and evaluated args of row i.
LayerSpec parse_row(const YAML::Node& row, int i, Ctx& cx, int n_avail, double gd, int64_t nc, std::set<int>& save) {
  if (!row.IsSequence() || row.size() != 4) cx.fail("a layer row must be [from, number, module, args]");
  LayerSpec L;
  L.index = i;
  try {
    L.module = row[2].as<std::string>();
  } catch (const YAML::Exception&) {
    cx.fail("the module name must be a string");
  }
  cx.module = L.module;
  L.type = canonical_type(L.module);
  if (L.type.empty()) cx.fail("unknown module '", L.module, "'");
  try {
    if (row[0].IsSequence()) {
      L.from_is_list = true;
      for (const auto& f : row[0]) L.from.push_back(f.as<int>());
      if (L.from.empty()) cx.fail("'from' list is empty");
    } else {
      L.from.push_back(row[0].as<int>());
    }
  } catch (const YAML::Exception&) {
    cx.fail("'from' must be an integer or a list of integers");
  }
  for (int f : L.from) {
    if (i == 0 ? f != -1 : (f >= i || f < -n_avail))
      cx.fail("bad 'from' index ", f, ": ",
              i == 0 ? "layer 0 can only read the input (-1)"
                     : "must name an earlier layer (0.." + std::to_string(i - 1) + ") or be -1..-" +
                           std::to_string(n_avail));
    L.from_abs.push_back(f < 0 ? i + f : f);
    if (f != -1) save.insert(((f % i) + i) % i);  // Python x % i
  }
  int n_yaml = 0;
  try {
    n_yaml = row[1].as<int>();
  } catch (const YAML::Exception&) {
    cx.fail("'number' must be an integer");
  }
  if (n_yaml < 1) cx.fail("'number' must be >= 1, got ", n_yaml);
  if (n_yaml > kMaxNumber) cx.fail("'number' must be at most ", kMaxNumber, ", got ", n_yaml);
  L.n = n_yaml > 1 ? std::max(static_cast<int>(std::nearbyint(n_yaml * gd)), 1) : n_yaml;
  if (!row[3].IsSequence()) cx.fail("'args' must be a list");
  for (const auto& a : row[3]) L.yaml_args.push_back(eval_node(a, nc));
  return L;
}

/// Conv, AConv, ADown, ELAN1, RepNCSPELAN4, SPPELAN: [c2, ...] -> [c1, c2 (width-scaled), ...].
int64_t resolve_conv_like(const RowState& st) {
  const Ctx& cx = st.cx;
  LayerSpec& L = st.L;
  const std::vector<Arg>& a = L.yaml_args;
  const std::string& t = L.type;
  st.need_single_from();
  if (t == "Conv") {
    need_count(cx, a, 1, 7, "[c2, k=1, s=1, p=None, g=1, d=1, act=True]");
    for (size_t k = 1; k < a.size(); ++k) {
      bool ok = k == 3 ? (a[k].is_int() || a[k].kind == Arg::Kind::None)
                       : k == 6 ? a[k].kind == Arg::Kind::Bool : a[k].is_int();
      if (!ok) cx.fail("argument ", k, " has the wrong type: ", a[k].repr());
    }
  } else if (t == "AConv" || t == "ADown") {
    need_count(cx, a, 1, 1, "[c2]");
  } else if (t == "ELAN1") {
    need_count(cx, a, 3, 3, "[c2, c3, c4]");
  } else if (t == "RepNCSPELAN4") {
    need_count(cx, a, 3, 4, "[c2, c3, c4, c5=1]");
  } else {
    need_count(cx, a, 2, 2, "[c2, c3]");
  }
  if (t != "Conv")
    for (size_t k = 1; k < a.size(); ++k) need_int(cx, a, k, "channel count");
  if (t == "Conv") {
    if (a.size() > 1) need_range(cx, a[1].i, 1, kMaxKernel, "kernel size (argument 1)");
    if (a.size() > 2) need_range(cx, a[2].i, 1, kMaxStride, "stride (argument 2)");
    if (a.size() > 3 && a[3].is_int()) need_range(cx, a[3].i, 0, kMaxStride, "padding (argument 3)");
    if (a.size() > 4) need_range(cx, a[4].i, 1, kMaxChannels, "groups (argument 4)");
    if (a.size() > 5) need_range(cx, a[5].i, 1, kMaxStride, "dilation (argument 5)");
  } else if (t == "ELAN1" || t == "RepNCSPELAN4") {
    need_range(cx, a[1].i, 2, kMaxChannels, "c3 (argument 1)");
    need_range(cx, a[2].i, 1, kMaxChannels, "c4 (argument 2)");
    if (a.size() > 3) need_range(cx, a[3].i, 1, kMaxRepeats, "c5, the RepNCSP repeats (argument 3),");
  } else if (t == "SPPELAN") {
    need_range(cx, a[1].i, 1, kMaxChannels, "c3 (argument 1)");
  }
  const int64_t c1 = st.single_ch(L.from[0]);
  int64_t c2 = need_int(cx, a, 0, "c2");
  if (c2 <= 0) cx.fail("output channels must be positive, got ", c2);
  need_range(cx, c2, 1, kMaxChannels, "output channels (argument 0)");
  if (c2 != st.no) c2 = make_divisible(static_cast<double>(c2) * st.gw, 8);
  need_range(cx, c2, 1, kMaxChannels, "output channels after the width multiple");
  L.args = {Arg::make_int(c1), Arg::make_int(c2)};
  L.args.insert(L.args.end(), a.begin() + 1, a.end());
  if (t == "ELAN1" || t == "RepNCSPELAN4") {
    if (a[1].i % 2 != 0) cx.fail("c3 (", a[1].i, ") must be even: it is split into two halves");
  }
  if (t == "ADown" && (c1 % 2 != 0 || c2 % 2 != 0))
    cx.fail("ADown needs even input and output channels, got ", c1, " -> ", c2);
  if (t == "Conv" && a.size() > 4 && (c1 % a[4].i != 0 || c2 % a[4].i != 0))
    cx.fail("groups ", a[4].i, " must divide the channels ", c1, " -> ", c2);
  return c2;
}

int64_t resolve_concat(const RowState& st) {
  const std::vector<Arg>& a = st.L.yaml_args;
  need_count(st.cx, a, 0, 1, "[dimension]");
  if (!a.empty() && (!a[0].is_int() || a[0].i != 1))
    st.cx.fail("only concatenation along dimension 1 (channels) is supported, got ", a[0].repr());
  int64_t c2 = 0;
  for (int f : st.L.from) c2 += st.single_ch(f);
  st.L.args = a;
  return c2;
}

int64_t resolve_upsample(const RowState& st) {
  const Ctx& cx = st.cx;
  const std::vector<Arg>& a = st.L.yaml_args;
  st.need_single_from();
  need_count(cx, a, 3, 3, "[size, scale_factor, mode]");
  if (a[0].kind != Arg::Kind::None) cx.fail("only size=None is supported, got ", a[0].repr());
  const bool int_scale = a[1].is_int() || (a[1].kind == Arg::Kind::Float && a[1].f == std::floor(a[1].f));
  if (!int_scale || !(a[1].is_int() ? a[1].i >= 1 && a[1].i <= kMaxStride : a[1].f >= 1 && a[1].f <= kMaxStride))
    cx.fail("scale_factor must be an integer in 1..", kMaxStride, ", got ", a[1].repr());
  if (a[2].kind != Arg::Kind::Str || a[2].s != "nearest") cx.fail("only mode 'nearest' is supported, got ", a[2].repr());
  st.L.args = a;
  return st.single_ch(st.L.from[0]);
}

int64_t resolve_silence(const RowState& st) {
  st.need_single_from();
  need_count(st.cx, st.L.yaml_args, 0, 0, "");
  st.L.args = st.L.yaml_args;
  return st.single_ch(st.L.from[0]);
}

std::vector<int64_t> resolve_cblinear(const RowState& st) {
  const Ctx& cx = st.cx;
  const std::vector<Arg>& a = st.L.yaml_args;
  st.need_single_from();
  need_count(cx, a, 1, 1, "[[c2 pieces]]");
  std::vector<int64_t> pieces = int_list(cx, a[0], "the CBLinear pieces");
  if (pieces.empty()) cx.fail("CBLinear needs at least one piece");
  for (int64_t c : pieces)
    if (c <= 0 || c > kMaxChannels) cx.fail("CBLinear pieces must be in 1..", kMaxChannels, ", got ", a[0].repr());
  if (pieces.size() > 64) cx.fail("CBLinear has ", pieces.size(), " pieces (at most 64)");
  st.L.args = {Arg::make_int(st.single_ch(st.L.from[0])), a[0]};
  return pieces;
}

int64_t resolve_cbfuse(const RowState& st) {
  const Ctx& cx = st.cx;
  const LayerSpec& L = st.L;
  const std::vector<Arg>& a = L.yaml_args;
  const int i = L.index;
  need_count(cx, a, 1, 1, "[[piece indices]]");
  if (!L.from_is_list || L.from.size() < 2) cx.fail("CBFuse needs a 'from' list of CBLinear layers and one map");
  const auto idx = int_list(cx, a[0], "the CBFuse indices");
  if (idx.size() != L.from.size() - 1)
    cx.fail("CBFuse has ", L.from.size() - 1, " routed inputs but ", idx.size(), " indices");
  const int64_t c2 = st.single_ch(L.from.back());
  for (size_t k = 0; k < idx.size(); ++k) {
    const int f = L.from[k];
    const int src = f < 0 ? i + f : f;
    if (st.rows[static_cast<size_t>(src)].IsSequence() &&
        canonical_type(st.rows[static_cast<size_t>(src)][2].as<std::string>()) != "CBLinear")
      cx.fail("input ", f, " of CBFuse is not a CBLinear layer");
    const auto& pieces = st.ch_of(f);
    if (idx[k] < 0 || idx[k] >= static_cast<int64_t>(pieces.size()))
      cx.fail("index ", idx[k], " out of range for layer ", src, " with ", pieces.size(), " pieces");
    if (pieces[static_cast<size_t>(idx[k])] != c2)
      cx.fail("piece ", idx[k], " of layer ", src, " has ", pieces[static_cast<size_t>(idx[k])],
              " channels but the fused map has ", c2);
  }
  st.L.args = a;
  return c2;
}

/// DDetect / DualDDetect / TripleDDetect: [nc] -> [nc, [input channels...]]; must be the last row.
void resolve_head(const RowState& st) {
  const Ctx& cx = st.cx;
  const std::vector<Arg>& a = st.L.yaml_args;
  const std::string& t = st.L.type;
  const int nb = head_branches(t);
  need_count(cx, a, 1, 1, "[nc]");
  need_int(cx, a, 0, "nc");
  need_range(cx, a[0].i, 1, kMaxClasses, "nc");
  if (st.L.from.size() % static_cast<size_t>(nb) != 0 || st.L.from.empty())
    cx.fail(t, " needs ", nb, " x (number of levels) inputs, got ", st.L.from.size());
  std::vector<int64_t> chl;
  for (int f : st.L.from) chl.push_back(st.single_ch(f));
  st.L.args = {a[0], Arg::make_list(chl)};
  if (!st.last_row) cx.fail(t, " must be the last layer");
}

/// The resolved args and output channels (pieces for CBLinear) of one row, as parse_model does.
std::vector<int64_t> resolve_row(const RowState& st) {
  const std::string& t = st.L.type;
  if (t == "Conv" || t == "AConv" || t == "ADown" || t == "ELAN1" || t == "RepNCSPELAN4" || t == "SPPELAN")
    return {resolve_conv_like(st)};
  if (t == "Concat") return {resolve_concat(st)};
  if (t == "Upsample") return {resolve_upsample(st)};
  if (t == "Silence") return {resolve_silence(st)};
  if (t == "CBLinear") return resolve_cblinear(st);
  if (t == "CBFuse") return {resolve_cbfuse(st)};
  resolve_head(st);
  return {0};  // never read by a later layer
}

}  // namespace

ModelConfig parse_model_config(const std::string& yaml_text, const std::string& source, int64_t nc_override,
                               int64_t ch_in) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    Y9_THROW(engine::ConfigError, source, ": YAML syntax error at line ", e.mark.line + 1, ", column ",
             e.mark.column + 1, ": ", e.msg);
  }
  ModelConfig cfg = parse_header(root, source, nc_override, ch_in);
  const std::vector<YAML::Node> rows = layer_rows(root, source);
  const int64_t no = cfg.anchors * (cfg.nc + 5);

  // ch[i] = output channels of layer i; starts as [ch_in] and is reset after layer 0.
  std::vector<std::vector<int64_t>> ch{{cfg.ch_in}};
  std::set<int> save;
  for (size_t ri = 0; ri < rows.size(); ++ri) {
    const int i = static_cast<int>(ri);
    Ctx cx{source, i, "?"};
    LayerSpec L = parse_row(rows[ri], i, cx, static_cast<int>(ch.size()), cfg.depth_multiple, cfg.nc, save);
    const RowState st{cx, L, ch, rows, no, cfg.width_multiple, ri + 1 == rows.size()};
    for (int f : L.from) L.c_in.push_back(st.ch_of(f).size() == 1 ? st.ch_of(f)[0] : -1);
    L.c_out = resolve_row(st);
    const std::string& t = L.type;
    if (L.n > 1 && (t == "CBLinear" || t == "CBFuse" || head_branches(t) > 0 || t == "Concat"))
      cx.fail("'number' > 1 is not supported for ", t);
    if (i == 0) ch.clear();
    ch.push_back(L.c_out);
    cfg.layers.push_back(std::move(L));
  }
  if (head_branches(cfg.layers.back().type) == 0)
    Y9_THROW(engine::ConfigError, source, ": the last layer must be a detection head (DDetect, DualDDetect, TripleDDetect), got ",
             cfg.layers.back().module);
  cfg.save.assign(save.begin(), save.end());
  return cfg;
}

}  // namespace graph
