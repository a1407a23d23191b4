// ONNX emission of the YOLOv9 inference graph: one emitter per module type, mirroring
// graph/forward.cpp op by op so that the file computes what Model::forward computes, then the
// DDetect decode and the optional NMS tail. Shapes are static unless OnnxOptions::dynamic; the
// ops are chosen so that OpenCV 4.6's DNN importer loads the graph without NMS (Slice rather
// than Split, constant initializers for every shape, scale and roi input).
#include "apps/onnx/onnx_export.h"

#include <onnx/onnx_pb.h>  // defines ONNX_API, then includes onnx-ml.pb.h (ONNX_ML=1)

#include <algorithm>
#include <cstring>
#include <map>

#include "engine/error.h"
#include "engine/half.h"
#include "graph/modules.h"

namespace onnx_export {

namespace {

using graph::Act;
using onnx::TensorProto_DataType;

constexpr int64_t kMinOpset = 13, kMaxOpset = 19;

// --- attributes and the emitter ----------------------------------------------------------------

struct Attr {
  std::string name;
  enum Kind { Int, Ints, Float, String } kind = Int;
  int64_t i = 0;
  std::vector<int64_t> is;
  float f = 0;
  std::string s;
};
Attr ai(const std::string& n, int64_t v) { return {n, Attr::Int, v, {}, 0.f, {}}; }
Attr ais(const std::string& n, std::vector<int64_t> v) { return {n, Attr::Ints, 0, std::move(v), 0.f, {}}; }
Attr as(const std::string& n, std::string v) { return {n, Attr::String, 0, {}, 0.f, std::move(v)}; }

// Builds the GraphProto: nodes with generated names, initializers in the compute type.
class Emitter {
 public:
  Emitter(onnx::GraphProto* g, bool half) : g_(g), half_(half) {}
  TensorProto_DataType ftype() const { return half_ ? onnx::TensorProto::FLOAT16 : onnx::TensorProto::FLOAT; }

  // One node; returns its outputs (named <op>_<n>[_k]).
  std::vector<std::string> node(const std::string& op, const std::vector<std::string>& in, int n_out,
                                const std::vector<Attr>& attrs = {}) {
    onnx::NodeProto* n = g_->add_node();
    const std::string base = op + "_" + std::to_string(count_++);
    n->set_name(base);
    n->set_op_type(op);
    for (const auto& s : in) n->add_input(s);
    std::vector<std::string> out;
    for (int k = 0; k < n_out; ++k) {
      out.push_back(n_out == 1 ? base : base + "_" + std::to_string(k));
      n->add_output(out.back());
    }
    for (const Attr& a : attrs) {
      onnx::AttributeProto* p = n->add_attribute();
      p->set_name(a.name);
      switch (a.kind) {
        case Attr::Int: p->set_type(onnx::AttributeProto::INT), p->set_i(a.i); break;
        case Attr::Ints:
          p->set_type(onnx::AttributeProto::INTS);
          for (int64_t v : a.is) p->add_ints(v);
          break;
        case Attr::Float: p->set_type(onnx::AttributeProto::FLOAT), p->set_f(a.f); break;
        case Attr::String: p->set_type(onnx::AttributeProto::STRING), p->set_s(a.s); break;
      }
    }
    return out;
  }
  std::string op(const std::string& op, const std::vector<std::string>& in, const std::vector<Attr>& attrs = {}) {
    return node(op, in, 1, attrs)[0];
  }
  // Renames the output of the last node (graph outputs carry fixed names).
  void rename_last_output(const std::string& name) { g_->mutable_node(g_->node_size() - 1)->set_output(0, name); }

  // A float initializer in the compute type (FP32, or FP16 bits rounded to nearest even).
  std::string floats(const std::vector<float>& v, const std::vector<int64_t>& dims, const std::string& hint) {
    onnx::TensorProto* t = new_init(hint, dims, ftype());
    if (half_) {
      std::string raw(v.size() * 2, '\0');
      for (size_t i = 0; i < v.size(); ++i) {
        const uint16_t h = engine::f32_to_f16(v[i]);
        std::memcpy(&raw[i * 2], &h, 2);
      }
      t->set_raw_data(raw);
    } else {
      t->set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
    }
    return t->name();
  }
  // An FP32 initializer whatever the compute type (NMS thresholds).
  std::string floats32(const std::vector<float>& v, const std::vector<int64_t>& dims, const std::string& hint) {
    onnx::TensorProto* t = new_init(hint, dims, onnx::TensorProto::FLOAT);
    t->set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
    return t->name();
  }
  // An int64 initializer, shared between nodes that need the same value.
  std::string ints(const std::vector<int64_t>& v, const std::vector<int64_t>& dims, const std::string& hint) {
    const auto key = std::make_pair(v, dims);
    auto it = ints_.find(key);
    if (it != ints_.end()) return it->second;
    onnx::TensorProto* t = new_init(hint, dims, onnx::TensorProto::INT64);
    t->set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int64_t)));
    return ints_[key] = t->name();
  }
  std::string ints(const std::vector<int64_t>& v, const std::string& hint = "shape") {
    return ints(v, {static_cast<int64_t>(v.size())}, hint);
  }
  // A parameter tensor (F32 on the CPU), stored in the compute type.
  std::string param(const engine::Tensor& t, const std::string& hint) {
    std::vector<int64_t> dims(t.shape().begin(), t.shape().end());
    return floats(t.contiguous().to_vector<float>(), dims, hint);
  }
  // A scalar in the compute type, cached by value.
  std::string scalar(float v) {
    auto it = scalars_.find(v);
    if (it != scalars_.end()) return it->second;
    return scalars_[v] = floats({v}, {}, "const");
  }

  // Slice of `x` along `axis`, [begin, end).
  std::string slice(const std::string& x, int64_t axis, int64_t begin, int64_t end) {
    return op("Slice", {x, ints({begin}, "starts"), ints({end}, "ends"), ints({axis}, "axes")});
  }
  std::string act(const std::string& x, Act a) {
    switch (a) {
      case Act::SiLU: return op("Mul", {x, op("Sigmoid", {x})});  // SiLU = x * sigmoid(x)
      case Act::ReLU: return op("Relu", {x});
      case Act::Identity: return x;
    }
    return x;
  }

 private:
  onnx::TensorProto* new_init(const std::string& hint, const std::vector<int64_t>& dims, TensorProto_DataType dt) {
    onnx::TensorProto* t = g_->add_initializer();
    t->set_name(hint + "_" + std::to_string(inits_++));
    t->set_data_type(dt);
    for (int64_t d : dims) t->add_dims(d);
    return t;
  }
  onnx::GraphProto* g_;
  bool half_;
  int64_t count_ = 0, inits_ = 0;
  std::map<float, std::string> scalars_;
  std::map<std::pair<std::vector<int64_t>, std::vector<int64_t>>, std::string> ints_;
};

// --- modules ----------------------------------------------------------------------------------------

std::string conv2d(Emitter& e, const graph::Conv2d& c, const std::string& x, const std::string& name) {
  std::vector<std::string> in{x, e.param(c.weight, name + ".weight")};
  if (c.bias.defined()) in.push_back(e.param(c.bias, name + ".bias"));
  return e.op("Conv", in,
              {ais("dilations", {c.d, c.d}), ai("group", c.g), ais("kernel_shape", {c.k, c.k}),
               ais("pads", {c.p, c.p, c.p, c.p}), ais("strides", {c.s, c.s})});
}

std::string conv(Emitter& e, const graph::Conv& c, const std::string& x, const std::string& name) {
  Y9_CHECK_T(engine::ConfigError, !c.bn, "ONNX export: ", name,
             " (Conv) still has its BatchNorm; fuse the model first");
  return e.act(conv2d(e, *c.conv, x, name + ".conv"), c.act);
}

std::string unary(Emitter& e, const graph::UnaryBlock& b, const std::string& x, const std::string& name);

std::string repconv(Emitter& e, const graph::RepConvN& r, const std::string& x, const std::string& name) {
  Y9_CHECK_T(engine::ConfigError, r.conv != nullptr, "ONNX export: ", name,
             " (RepConvN) is not fused; fuse the model first");
  return e.act(conv2d(e, *r.conv, x, name + ".conv"), r.act);
}

// chunk(x, 2, dim=1) of a map with 2c channels.
std::pair<std::string, std::string> chunk2(Emitter& e, const std::string& x, int64_t c) {
  return {e.slice(x, 1, 0, c), e.slice(x, 1, c, 2 * c)};
}

std::string unary(Emitter& e, const graph::UnaryBlock& b, const std::string& x, const std::string& name) {
  if (auto* m = dynamic_cast<const graph::Conv*>(&b)) return conv(e, *m, x, name);
  if (auto* m = dynamic_cast<const graph::Conv2d*>(&b)) return conv2d(e, *m, x, name);
  if (auto* m = dynamic_cast<const graph::RepConvN*>(&b)) return repconv(e, *m, x, name);
  if (auto* m = dynamic_cast<const graph::Sequential*>(&b)) {
    std::string y = x;
    for (size_t k = 0; k < m->items.size(); ++k) y = unary(e, *m->items[k], y, name + "." + std::to_string(k));
    return y;
  }
  if (auto* m = dynamic_cast<const graph::RepNBottleneck*>(&b)) {
    std::string y = conv(e, *m->cv2, repconv(e, *m->cv1, x, name + ".cv1"), name + ".cv2");
    return m->add ? e.op("Add", {x, y}) : y;
  }
  if (auto* m = dynamic_cast<const graph::RepNCSP*>(&b)) {
    std::string a = unary(e, *m->m, conv(e, *m->cv1, x, name + ".cv1"), name + ".m");
    std::string c = conv(e, *m->cv2, x, name + ".cv2");
    return conv(e, *m->cv3, e.op("Concat", {a, c}, {ai("axis", 1)}), name + ".cv3");
  }
  if (auto* m = dynamic_cast<const graph::RepNCSPELAN4*>(&b)) {
    auto [y0, y1] = chunk2(e, conv(e, *m->cv1, x, name + ".cv1"), m->c);
    std::string y2 = unary(e, *m->cv2, y1, name + ".cv2");
    std::string y3 = unary(e, *m->cv3, y2, name + ".cv3");
    return conv(e, *m->cv4, e.op("Concat", {y0, y1, y2, y3}, {ai("axis", 1)}), name + ".cv4");
  }
  if (auto* m = dynamic_cast<const graph::ELAN1*>(&b)) {
    auto [y0, y1] = chunk2(e, conv(e, *m->cv1, x, name + ".cv1"), m->c);
    std::string y2 = conv(e, *m->cv2, y1, name + ".cv2");
    std::string y3 = conv(e, *m->cv3, y2, name + ".cv3");
    return conv(e, *m->cv4, e.op("Concat", {y0, y1, y2, y3}, {ai("axis", 1)}), name + ".cv4");
  }
  const auto avg2 = [&](const std::string& v) {
    return e.op("AveragePool", {v}, {ais("kernel_shape", {2, 2}), ais("pads", {0, 0, 0, 0}), ais("strides", {1, 1})});
  };
  if (auto* m = dynamic_cast<const graph::AConv*>(&b)) return conv(e, *m->cv1, avg2(x), name + ".cv1");
  if (auto* m = dynamic_cast<const graph::ADown*>(&b)) {
    auto [h0, h1] = chunk2(e, avg2(x), m->cv1->conv->c1);
    std::string x1 = conv(e, *m->cv1, h0, name + ".cv1");
    std::string mp =
        e.op("MaxPool", {h1}, {ais("kernel_shape", {3, 3}), ais("pads", {1, 1, 1, 1}), ais("strides", {2, 2})});
    std::string x2 = conv(e, *m->cv2, mp, name + ".cv2");
    return e.op("Concat", {x1, x2}, {ai("axis", 1)});
  }
  if (auto* m = dynamic_cast<const graph::SP*>(&b)) {
    const int64_t p = m->k / 2;
    return e.op("MaxPool", {x},
                {ais("kernel_shape", {m->k, m->k}), ais("pads", {p, p, p, p}), ais("strides", {m->s, m->s})});
  }
  if (auto* m = dynamic_cast<const graph::SPPELAN*>(&b)) {
    std::string y0 = conv(e, *m->cv1, x, name + ".cv1");
    std::string y1 = unary(e, *m->cv2, y0, name + ".cv2");
    std::string y2 = unary(e, *m->cv3, y1, name + ".cv3");
    std::string y3 = unary(e, *m->cv4, y2, name + ".cv4");
    return conv(e, *m->cv5, e.op("Concat", {y0, y1, y2, y3}, {ai("axis", 1)}), name + ".cv5");
  }
  if (auto* m = dynamic_cast<const graph::Upsample*>(&b)) {
    const float s = static_cast<float>(m->scale);
    // nn.Upsample(scale_factor, 'nearest') as torch.onnx writes it; roi and scales as constant
    // initializers (OpenCV's importer needs constant inputs; scales stay FP32 as the spec says).
    return e.op(
        "Resize", {x, e.floats32({}, {0}, "roi"), e.floats32({1.f, 1.f, s, s}, {4}, "scales")},
        {as("coordinate_transformation_mode", "asymmetric"), as("mode", "nearest"), as("nearest_mode", "floor")});
  }
  if (dynamic_cast<const graph::Silence*>(&b)) return x;
  Y9_THROW(engine::InternalError, "ONNX export: no emitter for module ", name, " (", b.type_name(), ")");
}

// --- head ---------------------------------------------------------------------------------------------

struct Level {
  std::string map;  // raw [B, no, H, W]
  int64_t h, w;     // static sizes (trace)
};

// Anchor points and strides (ops::make_anchors, transposed as in Detect). Static: points [B, 2, A]
// as an initializer repeated over the batch (OpenCV 4.6 broadcasts a constant operand over neither
// axis 0 nor 1), no stride tensor (detect() multiplies per level by scalars). Dynamic: points
// [1, 2, A] and strides [1, 4, A] computed from the map shapes, broadcast over the batch.
std::pair<std::string, std::string> anchors(Emitter& e, const graph::Detect& d, const std::vector<Level>& lv,
                                            int64_t batch, bool dynamic) {
  if (!dynamic) {
    std::vector<float> xs, ys;
    for (size_t l = 0; l < lv.size(); ++l)
      for (int64_t y = 0; y < lv[l].h; ++y)
        for (int64_t x = 0; x < lv[l].w; ++x) {
          xs.push_back(static_cast<float>(x) + 0.5f);
          ys.push_back(static_cast<float>(y) + 0.5f);
        }
    const auto a = static_cast<int64_t>(xs.size());
    std::vector<float> pts;
    for (int64_t b = 0; b < batch; ++b) {
      pts.insert(pts.end(), xs.begin(), xs.end());
      pts.insert(pts.end(), ys.begin(), ys.end());
    }
    return {e.floats(pts, {batch, 2, a}, "anchor_points"), ""};  // static strides: per-level scalars
  }
  // Dynamic: the grid of each level from its map's shape (Range + 0.5, broadcast to H x W).
  const std::string zero = e.ints({0}, {}, "zero"), one = e.ints({1}, {}, "one");
  std::vector<std::string> pts, strs;
  for (size_t l = 0; l < lv.size(); ++l) {
    const std::string shp = e.op("Shape", {lv[l].map});
    const std::string h = e.slice(shp, 0, 2, 3), w = e.slice(shp, 0, 3, 4);  // [1] each
    const auto axis_grid = [&](const std::string& n) {
      const std::string r = e.op("Range", {zero, e.op("Squeeze", {n, e.ints({0}, "axes")}), one});
      return e.op("Add", {e.op("Cast", {r}, {ai("to", e.ftype())}), e.scalar(0.5f)});
    };
    const std::string hw = e.op("Concat", {h, w}, {ai("axis", 0)});
    const std::string gy = e.op("Expand", {e.op("Unsqueeze", {axis_grid(h), e.ints({1}, "axes")}), hw});
    const std::string gx = e.op("Expand", {e.op("Unsqueeze", {axis_grid(w), e.ints({0}, "axes")}), hw});
    const std::string flat = e.ints({1, 1, -1});
    const std::string fx = e.op("Reshape", {gx, flat}), fy = e.op("Reshape", {gy, flat});
    pts.push_back(e.op("Concat", {fx, fy}, {ai("axis", 1)}));
    strs.push_back(e.op("Add", {e.op("Mul", {fx, e.scalar(0.f)}), e.scalar(static_cast<float>(d.stride[l]))}));
  }
  const std::string st = e.op("Concat", strs, {ai("axis", 2)});
  return {e.op("Concat", pts, {ai("axis", 2)}), e.op("Concat", {st, st, st, st}, {ai("axis", 1)})};
}

// Detect::forward in eval mode for the last branch -> [B, 4 + nc, A].
std::string detect(Emitter& e, const graph::Detect& d, const std::vector<std::string>& xs,
                   const std::vector<std::pair<int64_t, int64_t>>& hw, int64_t batch, bool dynamic,
                   const std::string& name) {
  const auto b = static_cast<size_t>(d.branches - 1);
  std::vector<Level> lv;
  std::vector<std::string> flat;
  int64_t a_total = 0;
  for (int64_t l = 0; l < d.nl; ++l) {
    const auto li = static_cast<size_t>(l);
    const std::string x = xs.at(b * static_cast<size_t>(d.nl) + li);
    const std::string box =
        unary(e, *d.box_seq[b][li], x, name + ".cv" + std::to_string(2 + 2 * b) + "." + std::to_string(l));
    const std::string cls =
        unary(e, *d.cls_seq[b][li], x, name + ".cv" + std::to_string(3 + 2 * b) + "." + std::to_string(l));
    const std::string raw = e.op("Concat", {box, cls}, {ai("axis", 1)});
    lv.push_back({raw, hw[li].first, hw[li].second});
    a_total += hw[li].first * hw[li].second;
    flat.push_back(
        e.op("Reshape", {raw, dynamic ? e.ints({0, d.no, -1}) : e.ints({batch, d.no, hw[li].first * hw[li].second})}));
  }
  const std::string cat = e.op("Concat", flat, {ai("axis", 2)});  // [B, no, A]
  const std::string box = e.slice(cat, 1, 0, 4 * d.reg_max), cls = e.slice(cat, 1, 4 * d.reg_max, d.no);
  // DFL: [B, 4, 16, A] -> transpose(2, 1) -> softmax over the bins -> 1x1 conv with weights 0..15.
  const graph::DFL& dfl = *d.dfl[b];
  const std::string r4 =
      e.op("Reshape", {box, dynamic ? e.ints({0, 4, dfl.c1, -1}) : e.ints({batch, 4, dfl.c1, a_total})});
  const std::string p = e.op("Softmax", {e.op("Transpose", {r4}, {ais("perm", {0, 2, 1, 3})})}, {ai("axis", 1)});
  const std::string dist = e.op("Reshape", {conv2d(e, *dfl.conv, p, name + ".dfl.conv"),
                                            dynamic ? e.ints({0, 4, -1}) : e.ints({batch, 4, a_total})});
  const auto [pts, strides] = anchors(e, d, lv, batch, dynamic);
  // dist2bbox(xywh=True) * strides, as graph/forward.cpp computes it.
  const std::string x1y1 = e.op("Sub", {pts, e.slice(dist, 1, 0, 2)});
  const std::string x2y2 = e.op("Add", {pts, e.slice(dist, 1, 2, 4)});
  const std::string cxy = e.op("Mul", {e.op("Add", {x1y1, x2y2}), e.scalar(0.5f)});
  const std::string wh = e.op("Sub", {x2y2, x1y1});
  const std::string xywh = e.op("Concat", {cxy, wh}, {ai("axis", 1)});
  std::string dbox;
  if (dynamic) {
    dbox = e.op("Mul", {xywh, strides});
  } else {
    // One scalar Mul per level: the same products, but OpenCV 4.6 cannot multiply by a
    // non-scalar constant when the batch is > 1.
    std::vector<std::string> parts;
    int64_t a0 = 0;
    for (size_t l = 0; l < lv.size(); ++l) {
      const int64_t n = lv[l].h * lv[l].w;
      parts.push_back(e.op("Mul", {e.slice(xywh, 2, a0, a0 + n), e.scalar(static_cast<float>(d.stride[l]))}));
      a0 += n;
    }
    dbox = e.op("Concat", parts, {ai("axis", 2)});
  }
  return e.op("Concat", {dbox, e.op("Sigmoid", {cls})}, {ai("axis", 1)});
}

// The official non_max_suppression (agnostic=False, multi_label=False) on pred [B, 4 + nc, A],
// padded to K rows per image. Returns {num_dets, boxes, scores, classes}.
std::vector<std::string> nms(Emitter& e, const std::string& pred_t, int64_t nc, int64_t k, const OnnxOptions& o) {
  // ONNX NonMaxSuppression takes float32 only.
  const std::string pred = o.half ? e.op("Cast", {pred_t}, {ai("to", onnx::TensorProto::FLOAT)}) : pred_t;
  const auto f32 = [&](float v) { return e.floats32({v}, {}, "const"); };
  const std::string cxy = e.slice(pred, 1, 0, 2), wh = e.slice(pred, 1, 2, 4);
  const std::string half_wh = e.op("Mul", {wh, f32(0.5f)});
  const std::string xyxy4 = e.op("Concat", {e.op("Sub", {cxy, half_wh}), e.op("Add", {cxy, half_wh})}, {ai("axis", 1)});
  const std::string xyxy = e.op("Transpose", {xyxy4}, {ais("perm", {0, 2, 1})});  // [B, A, 4]
  // conf, j = scores.max(1): TopK keeps the lower index on ties, like torch.max.
  const auto best = e.node("TopK", {e.slice(pred, 1, 4, 4 + nc), e.ints({1}, "k")}, 2,
                           {ai("axis", 1), ai("largest", 1), ai("sorted", 1)});
  const std::string conf = best[0];                                        // [B, 1, A]
  const std::string j = e.op("Squeeze", {best[1], e.ints({1}, "axes")});   // [B, A] int64
  const std::string conf2 = e.op("Squeeze", {conf, e.ints({1}, "axes")});  // [B, A]
  // Boxes offset by class * max_wh (7680) so that one NMS never mixes classes.
  const std::string off = e.op(
      "Mul",
      {e.op("Cast", {e.op("Unsqueeze", {j, e.ints({2}, "axes")})}, {ai("to", onnx::TensorProto::FLOAT)}), f32(7680.f)});
  const std::string boxes_nms = e.op("Add", {xyxy, off});
  const std::string sel = e.op("NonMaxSuppression",
                               {boxes_nms, conf, e.ints({k}, "max_output_boxes_per_class"),
                                e.floats32({static_cast<float>(o.iou_thres)}, {1}, "iou_threshold"),
                                e.floats32({static_cast<float>(o.conf_thres)}, {1}, "score_threshold")},
                               {ai("center_point_box", 0)});  // [N, 3] (batch, class 0, box)
  // keep[b, a] = 1 for the selected boxes (ScatterND of ones into zeros).
  const std::string bi = e.op("Gather", {sel, e.ints({0, 2}, "cols")}, {ai("axis", 1)});  // [N, 2]
  const std::string zeros = e.op("Mul", {conf2, f32(0.f)});
  const std::string ones =
      e.op("Add", {e.op("Mul", {e.op("Cast", {e.op("Gather", {sel, e.ints({0}, {}, "col")}, {ai("axis", 1)})},
                                     {ai("to", onnx::TensorProto::FLOAT)}),
                                f32(0.f)}),
                   f32(1.f)});
  const std::string keep = e.op("ScatterND", {zeros, bi, ones});  // [B, A]
  const std::string keep_b = e.op("Cast", {keep}, {ai("to", onnx::TensorProto::BOOL)});
  const std::string masked = e.op("Where", {keep_b, conf2, f32(-1.f)});
  const auto top = e.node("TopK", {masked, e.ints({k}, "k")}, 2, {ai("axis", 1), ai("largest", 1), ai("sorted", 1)});
  const std::string valid = e.op("Greater", {top[0], f32(-0.5f)});  // [B, K]
  const std::string num = e.op("Cast", {e.op("ReduceSum", {keep, e.ints({1}, "axes")}, {ai("keepdims", 1)})},
                               {ai("to", onnx::TensorProto::INT32)});
  // boxes: gather rows of the unshifted xyxy; padding rows zero.
  const std::string idx4 = e.op("Expand", {e.op("Unsqueeze", {top[1], e.ints({2}, "axes")}), e.ints({1, 1, 4})});
  const std::string valid3 = e.op("Unsqueeze", {valid, e.ints({2}, "axes")});
  std::string boxes = e.op("Where", {valid3, e.op("GatherElements", {xyxy, idx4}, {ai("axis", 1)}), f32(0.f)});
  std::string scores = e.op("Where", {valid, top[0], f32(0.f)});
  const std::string cls64 = e.op("GatherElements", {j, top[1]}, {ai("axis", 1)});
  const std::string classes =
      e.op("Cast", {e.op("Where", {valid, cls64, e.ints({0}, {}, "zero")})}, {ai("to", onnx::TensorProto::INT32)});
  if (o.half) {
    boxes = e.op("Cast", {boxes}, {ai("to", onnx::TensorProto::FLOAT16)});
    scores = e.op("Cast", {scores}, {ai("to", onnx::TensorProto::FLOAT16)});
  }
  return {num, boxes, scores, classes};
}

void set_value_info(onnx::ValueInfoProto* v, const OnnxValueInfo& info, TensorProto_DataType dt) {
  v->set_name(info.name);
  onnx::TypeProto_Tensor* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(dt);
  for (const std::string& d : info.dims) {
    auto* dim = t->mutable_shape()->add_dim();
    if (!d.empty() && std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; }))
      dim->set_dim_value(std::stoll(d));
    else
      dim->set_dim_param(d);
  }
}

const char* dtype_name(TensorProto_DataType dt) {
  switch (dt) {
    case onnx::TensorProto::FLOAT: return "float32";
    case onnx::TensorProto::FLOAT16: return "float16";
    case onnx::TensorProto::INT32: return "int32";
    default: return "?";
  }
}

}  // namespace

// --- export ------------------------------------------------------------------------------------------

OnnxModelBytes export_onnx(const graph::Model& model, const OnnxOptions& o) {
  Y9_CHECK_T(engine::ConfigError, o.opset >= kMinOpset && o.opset <= kMaxOpset, "ONNX export: --opset ", o.opset,
             " is not supported (", kMinOpset, "..", kMaxOpset, ")");
  Y9_CHECK_T(engine::ConfigError, o.batch > 0 && o.img_h > 0 && o.img_w > 0, "ONNX export: batch ", o.batch,
             " and image size ", o.img_h, "x", o.img_w, " must be positive");
  const int64_t gs = model.grid_stride();
  Y9_CHECK_T(engine::ConfigError, o.img_h % gs == 0 && o.img_w % gs == 0, "ONNX export: image size ", o.img_h, "x",
             o.img_w, " must be a multiple of the grid stride ", gs);
  Y9_CHECK_T(
      engine::ConfigError,
      !o.nms || (o.topk_all > 0 && o.iou_thres >= 0 && o.iou_thres <= 1 && o.conf_thres >= 0 && o.conf_thres <= 1),
      "ONNX export: --nms needs topk_all > 0 and thresholds in [0, 1] (topk ", o.topk_all, ", iou ", o.iou_thres,
      ", conf ", o.conf_thres, ")");

  onnx::ModelProto mp;
  mp.set_ir_version(o.opset >= 19 ? 9 : 8);  // IR 8: opsets up to 18 (onnx 1.13); IR 9: opset 19 (onnx 1.14)
  mp.set_producer_name("yolov9-cpp");
  mp.set_producer_version(o.producer_version);
  onnx::OperatorSetIdProto* os = mp.add_opset_import();
  os->set_domain("");
  os->set_version(o.opset);
  onnx::GraphProto* g = mp.mutable_graph();
  g->set_name("yolov9");
  Emitter e(g, o.half);

  const graph::ModelConfig& cfg = model.config();
  const auto dims = model.trace(o.img_h, o.img_w);
  const std::string B = o.dynamic ? "batch" : std::to_string(o.batch);
  OnnxModelBytes out;
  out.inputs.push_back({"images",
                        dtype_name(e.ftype()),
                        {B, std::to_string(cfg.ch_in), o.dynamic ? "height" : std::to_string(o.img_h),
                         o.dynamic ? "width" : std::to_string(o.img_w)}});
  set_value_info(g->add_input(), out.inputs[0], e.ftype());

  std::vector<std::vector<std::string>> vals(static_cast<size_t>(model.num_layers()));
  std::string pred;
  int64_t num_anchors = 0;
  for (int64_t i = 0; i < model.num_layers(); ++i) {
    const graph::LayerSpec& L = cfg.layers[static_cast<size_t>(i)];
    const graph::Block* blk = model.layer(i);
    const std::string name = "model." + std::to_string(i);
    std::vector<std::vector<std::string>> in;
    std::vector<graph::Dims> in_dims;
    for (int f : L.from_abs) {
      in.push_back(f < 0 ? std::vector<std::string>{"images"} : vals[static_cast<size_t>(f)]);
      in_dims.push_back(f < 0 ? graph::Dims{cfg.ch_in, o.img_h, o.img_w} : dims[static_cast<size_t>(f)].at(0));
    }
    if (blk == model.head()) {
      const graph::Detect& d = *model.head();
      std::vector<std::string> xs;
      std::vector<std::pair<int64_t, int64_t>> hw;
      for (size_t k = 0; k < in.size(); ++k) {
        xs.push_back(in[k].at(0));
        hw.emplace_back(in_dims[k].h, in_dims[k].w);
      }
      const size_t first = static_cast<size_t>((d.branches - 1) * d.nl);
      hw.erase(hw.begin(), hw.begin() + static_cast<std::ptrdiff_t>(first));
      for (const auto& [h, w] : hw) num_anchors += h * w;
      pred = detect(e, d, xs, hw, o.batch, o.dynamic, name);
      break;
    }
    if (auto* c = dynamic_cast<const graph::Concat*>(blk)) {
      std::vector<std::string> xs;
      for (const auto& v : in) xs.push_back(v.at(0));
      vals[static_cast<size_t>(i)] = {e.op("Concat", xs, {ai("axis", c->d)})};
    } else if (auto* c = dynamic_cast<const graph::CBLinear*>(blk)) {
      const std::string y = conv2d(e, *c->conv, in.at(0).at(0), name + ".conv");
      int64_t off = 0;
      for (int64_t w : c->c2s) {
        vals[static_cast<size_t>(i)].push_back(e.slice(y, 1, off, off + w));
        off += w;
      }
    } else if (auto* c = dynamic_cast<const graph::CBFuse*>(blk)) {
      const graph::Dims xd = in_dims.back();
      std::string sum;
      for (size_t r = 0; r + 1 < in.size(); ++r) {
        const auto pi = static_cast<size_t>(c->idx[r]);
        std::string piece = in[r].at(pi);
        const graph::Dims pd = dims[static_cast<size_t>(L.from_abs[r])].at(pi);
        if (pd.h != xd.h) {
          const float s = static_cast<float>(xd.h / pd.h);
          piece = e.op(
              "Resize", {piece, e.floats32({}, {0}, "roi"), e.floats32({1.f, 1.f, s, s}, {4}, "scales")},
              {as("coordinate_transformation_mode", "asymmetric"), as("mode", "nearest"), as("nearest_mode", "floor")});
        }
        sum = sum.empty() ? piece : e.op("Add", {sum, piece});
      }
      vals[static_cast<size_t>(i)] = {sum.empty() ? in.back().at(0) : e.op("Add", {sum, in.back().at(0)})};
    } else if (auto* u = dynamic_cast<const graph::UnaryBlock*>(blk)) {
      vals[static_cast<size_t>(i)] = {unary(e, *u, in.at(0).at(0), name)};
    } else {
      Y9_THROW(engine::InternalError, "ONNX export: no emitter for layer ", i, " (", blk->type_name(), ")");
    }
  }
  Y9_ASSERT(!pred.empty(), "ONNX export: the model has no detection head");

  const int64_t nc = model.nc();
  if (!o.nms) {
    e.rename_last_output("output0");
    out.outputs.push_back({"output0",
                           dtype_name(e.ftype()),
                           {B, std::to_string(4 + nc), o.dynamic ? "anchors" : std::to_string(num_anchors)}});
    set_value_info(g->add_output(), out.outputs[0], e.ftype());
  } else {
    out.topk = o.dynamic ? o.topk_all : std::min(o.topk_all, num_anchors);
    const std::string K = std::to_string(out.topk);
    const auto res = nms(e, pred, nc, out.topk, o);
    const std::vector<std::string> names{"num_dets", "boxes", "scores", "classes"};
    const std::vector<TensorProto_DataType> types{onnx::TensorProto::INT32, e.ftype(), e.ftype(),
                                                  onnx::TensorProto::INT32};
    const std::vector<std::vector<std::string>> shapes{{B, "1"}, {B, K, "4"}, {B, K}, {B, K}};
    for (size_t k = 0; k < 4; ++k) {
      // Route each result to its public name with an Identity (the producing nodes are shared).
      e.node("Identity", {res[k]}, 1);
      e.rename_last_output(names[k]);
      out.outputs.push_back({names[k], dtype_name(types[k]), shapes[k]});
      set_value_info(g->add_output(), out.outputs.back(), types[k]);
    }
  }
  out.nodes = g->node_size();
  out.initializers = g->initializer_size();
  Y9_ASSERT(mp.SerializeToString(&out.bytes), "ONNX export: protobuf serialisation failed");
  return out;
}

std::string describe(const OnnxValueInfo& v) {
  std::string s = v.name + " " + v.dtype + " [";
  for (size_t i = 0; i < v.dims.size(); ++i) s += (i ? ", " : "") + v.dims[i];
  return s + "]";
}

}  // namespace onnx_export
