// Tensor-level detection metrics (see metrics.h): validation, host staging and dispatch to the
// numeric core in kernels/cpu/ap.
#include "ops/metrics.h"

#include <cstring>

#include "kernels/cpu/ap.h"

namespace ops {

using engine::DType;
using engine::Tensor;

namespace {
Tensor host_f32(const Tensor& t) { return t.detach().to(engine::Device::cpu()).to(DType::F32).contiguous(); }
std::vector<float> host_vec(const Tensor& t) { return t.detach().to_vector<float>(); }
Tensor f64(const std::vector<double>& v, const engine::Shape& s) { return Tensor::from_vector<double>(v, s); }

void check_rows(const Tensor& t, int64_t width, const char* what) {
  Y9_CHECK_SHAPE(t.dim() == 2 && t.size(1) == width, what, ": expected [n, ", width, "], got ", t.str());
}
}  // namespace

Tensor iou_vector() {
  std::vector<float> v(10);
  kernels::cpu::linspace_f32(0.5f, 0.95f, 10, v.data());
  return Tensor::from_vector<float>(v, {10});
}

Tensor process_batch(const Tensor& detections, const Tensor& labels, const Tensor& iouv) {
  check_rows(detections, 6, "process_batch detections");
  check_rows(labels, 5, "process_batch labels");
  Y9_CHECK_SHAPE(iouv.dim() == 1, "process_batch: iouv must be [K], got ", iouv.str());
  Tensor d = host_f32(detections), l = host_f32(labels), t = host_f32(iouv);
  const int64_t n = d.size(0), k = t.size(0);
  std::vector<uint8_t> correct(static_cast<size_t>(n * k));
  kernels::cpu::process_batch_cpu(d.data<float>(), n, l.data<float>(), l.size(0), t.data<float>(), k, correct.data());
  Tensor out = Tensor::empty({n, k}, DType::Bool);
  std::copy(correct.begin(), correct.end(), static_cast<uint8_t*>(out.data_ptr()));
  return out;
}

namespace {
ApResult to_result(const kernels::cpu::ApStats& st, int64_t niou) {
  const int64_t c = static_cast<int64_t>(st.classes.size());
  ApResult r;
  std::vector<int64_t> cls(st.classes.size());
  for (size_t i = 0; i < cls.size(); ++i) cls[i] = static_cast<int64_t>(st.classes[i]);
  r.ap_class = Tensor::from_vector<int64_t>(cls, {c});
  r.nt = Tensor::from_vector<int64_t>(st.nt, {c});
  r.p = f64(st.p, {c});
  r.r = f64(st.r, {c});
  r.f1 = f64(st.f1, {c});
  r.tp = f64(st.tp, {c});
  r.fp = f64(st.fp, {c});
  r.ap = f64(st.ap, {c, niou});
  r.best_index = st.best_index;
  r.p_curve = f64(st.p_curve, {c, 1000});
  r.r_curve = f64(st.r_curve, {c, 1000});
  r.f1_curve = f64(st.f1_curve, {c, 1000});
  r.pr_curve = f64(st.pr_curve, {c, 1000});
  return r;
}
}  // namespace

ApResult ap_per_class(const Tensor& tp, const Tensor& conf, const Tensor& pred_cls, const Tensor& target_cls) {
  Y9_CHECK_SHAPE(tp.dim() == 2 && conf.dim() == 1 && pred_cls.dim() == 1 && target_cls.dim() == 1 &&
                     conf.size(0) == tp.size(0) && pred_cls.size(0) == tp.size(0),
                 "ap_per_class: expected tp [D, K], conf [D], pred_cls [D], target_cls [T], got ", tp.str(), ", ",
                 conf.str(), ", ", pred_cls.str(), ", ", target_cls.str());
  auto tpv = tp.detach().to_vector<double>();
  std::vector<uint8_t> tp8(tpv.size());
  for (size_t i = 0; i < tpv.size(); ++i) tp8[i] = tpv[i] != 0;
  auto cv = host_vec(conf), pv = host_vec(pred_cls), tv = host_vec(target_cls);
  auto st = kernels::cpu::ap_per_class_cpu(tp8.data(), cv.data(), pv.data(), tp.size(0), tp.size(1), tv.data(),
                                           static_cast<int64_t>(tv.size()));
  return to_result(st, tp.size(1));
}

// --- DetectionMetrics --------------------------------------------------------------------------
DetectionMetrics::DetectionMetrics(int64_t nc) : nc_(nc) { Y9_CHECK(nc > 0, "DetectionMetrics: nc must be > 0"); }

void DetectionMetrics::add_image(const Tensor& pred, const Tensor& labels, bool single_cls) {
  check_rows(pred, 6, "DetectionMetrics::add_image pred");
  check_rows(labels, 5, "DetectionMetrics::add_image labels");
  ++seen_;
  const int64_t npr = pred.size(0), nl = labels.size(0);
  Tensor l = host_f32(labels);
  const float* lp = l.data<float>();
  for (int64_t i = 0; i < nl; ++i) target_cls_.push_back(lp[5 * i]);
  if (npr == 0) return;
  Tensor p = host_f32(pred).clone();
  float* pp = p.data<float>();
  if (single_cls)
    for (int64_t j = 0; j < npr; ++j) pp[6 * j + 5] = 0.f;
  const size_t base = correct_.size();
  correct_.resize(base + static_cast<size_t>(npr * 10), 0);
  if (nl) {
    float iouv[10];
    kernels::cpu::linspace_f32(0.5f, 0.95f, 10, iouv);
    kernels::cpu::process_batch_cpu(pp, npr, lp, nl, iouv, 10, correct_.data() + base);
  }
  for (int64_t j = 0; j < npr; ++j) {
    conf_.push_back(pp[6 * j + 4]);
    pred_cls_.push_back(pp[6 * j + 5]);
  }
}

namespace {
template <typename T>
void put_vec(std::string& out, const std::vector<T>& v) {
  const uint64_t n = v.size();
  out.append(reinterpret_cast<const char*>(&n), sizeof n);
  out.append(reinterpret_cast<const char*>(v.data()), n * sizeof(T));
}
template <typename T>
void get_vec(const std::string& in, size_t& pos, std::vector<T>& v) {
  uint64_t n = 0;
  Y9_CHECK(pos + sizeof n <= in.size(), "DetectionMetrics: truncated statistics");
  std::memcpy(&n, in.data() + pos, sizeof n);
  pos += sizeof n;
  Y9_CHECK(n <= (in.size() - pos) / sizeof(T), "DetectionMetrics: truncated statistics");
  const size_t base = v.size();
  v.resize(base + n);
  std::memcpy(v.data() + base, in.data() + pos, n * sizeof(T));
  pos += n * sizeof(T);
}
}  // namespace

std::string DetectionMetrics::serialize() const {
  std::string out;
  const int64_t head[2] = {nc_, seen_};
  out.append(reinterpret_cast<const char*>(head), sizeof head);
  put_vec(out, correct_);
  put_vec(out, conf_);
  put_vec(out, pred_cls_);
  put_vec(out, target_cls_);
  return out;
}

void DetectionMetrics::merge_serialized(const std::string& bytes) {
  int64_t head[2];
  Y9_CHECK(bytes.size() >= sizeof head, "DetectionMetrics: truncated statistics");
  std::memcpy(head, bytes.data(), sizeof head);
  Y9_CHECK(head[0] == nc_, "DetectionMetrics: merging statistics of ", head[0], " classes into ", nc_);
  size_t pos = sizeof head;
  get_vec(bytes, pos, correct_);
  get_vec(bytes, pos, conf_);
  get_vec(bytes, pos, pred_cls_);
  get_vec(bytes, pos, target_cls_);
  seen_ += head[1];
}

ValMetrics DetectionMetrics::compute() const {
  ValMetrics m;
  m.seen = seen_;
  m.nt_per_class.assign(static_cast<size_t>(nc_), 0);
  for (float c : target_cls_) {
    const int64_t ci = static_cast<int64_t>(c);
    if (ci >= 0 && ci < nc_) m.nt_per_class[ci] += 1;
  }
  bool any = false;
  for (uint8_t v : correct_) any |= v != 0;
  if (any) {
    const int64_t d = static_cast<int64_t>(conf_.size());
    auto st = kernels::cpu::ap_per_class_cpu(correct_.data(), conf_.data(), pred_cls_.data(), d, 10,
                                             target_cls_.data(), static_cast<int64_t>(target_cls_.size()));
    const size_t c = st.classes.size();
    std::vector<double> ap50(c), ap(c);
    for (size_t i = 0; i < c; ++i) {
      ap50[i] = st.ap[i * 10];
      double s = 0;  // ap.mean(1): NumPy pairwise over 10 values (8 partial sums, then the rest)
      double r8[8];
      for (int k = 0; k < 8; ++k) r8[k] = st.ap[i * 10 + k];
      s = ((r8[0] + r8[1]) + (r8[2] + r8[3])) + ((r8[4] + r8[5]) + (r8[6] + r8[7]));
      s += st.ap[i * 10 + 8];
      s += st.ap[i * 10 + 9];
      ap[i] = s / 10.0;
    }
    auto mean = [](const std::vector<double>& v) {
      // NumPy pairwise sum (sequential below 8 elements, 8 partial sums up to 128).
      const size_t n = v.size();
      double res = 0;
      if (n < 8) {
        for (double x : v) res += x;
      } else {
        double r[8];
        size_t i;
        for (int k = 0; k < 8; ++k) r[k] = v[k];
        for (i = 8; i < n - (n % 8); i += 8)
          for (int k = 0; k < 8; ++k) r[k] += v[i + k];
        res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; ++i) res += v[i];
      }
      return n ? res / static_cast<double>(n) : 0.0;
    };
    m.mp = mean(st.p);
    m.mr = mean(st.r);
    m.map50 = mean(ap50);
    m.map = mean(ap);
    m.per_class = to_result(st, 10);
    m.maps.assign(static_cast<size_t>(nc_), m.map);
    for (size_t i = 0; i < c; ++i) {
      const int64_t ci = static_cast<int64_t>(st.classes[i]);
      if (ci >= 0 && ci < nc_) m.maps[ci] = ap[i];
    }
  } else {
    m.maps.assign(static_cast<size_t>(nc_), 0.0);
  }
  m.fitness = 0.1 * m.map50 + 0.9 * m.map;
  return m;
}

// --- ConfusionMatrix ---------------------------------------------------------------------------
ConfusionMatrix::ConfusionMatrix(int64_t nc, double conf, double iou_thres)
    : nc_(nc), conf_(static_cast<float>(conf)), iou_thres_(static_cast<float>(iou_thres)),
      m_(static_cast<size_t>((nc + 1) * (nc + 1)), 0.0) {
  Y9_CHECK(nc > 0, "ConfusionMatrix: nc must be > 0");
}

void ConfusionMatrix::process_batch(const Tensor& detections, const Tensor& labels) {
  check_rows(detections, 6, "ConfusionMatrix::process_batch detections");
  check_rows(labels, 5, "ConfusionMatrix::process_batch labels");
  Tensor d = host_f32(detections), l = host_f32(labels);
  kernels::cpu::confusion_matrix_update_cpu(m_.data(), nc_, d.data<float>(), d.size(0), l.data<float>(), l.size(0),
                                            conf_, iou_thres_);
}

void ConfusionMatrix::process_background(const Tensor& label_classes) {
  auto c = host_vec(label_classes.reshape({-1}));
  std::vector<float> rows(c.size() * 5, 0.f);
  for (size_t i = 0; i < c.size(); ++i) rows[5 * i] = c[i];
  kernels::cpu::confusion_matrix_update_cpu(m_.data(), nc_, nullptr, 0, rows.data(), static_cast<int64_t>(c.size()),
                                            conf_, iou_thres_);
}

Tensor ConfusionMatrix::matrix() const { return f64(m_, {nc_ + 1, nc_ + 1}); }

std::pair<Tensor, Tensor> ConfusionMatrix::tp_fp() const {
  std::vector<double> tp(static_cast<size_t>(nc_)), fp(static_cast<size_t>(nc_));
  for (int64_t i = 0; i < nc_; ++i) {
    double row = 0;
    for (int64_t j = 0; j <= nc_; ++j) row += m_[i * (nc_ + 1) + j];
    tp[i] = m_[i * (nc_ + 1) + i];
    fp[i] = row - tp[i];
  }
  return {f64(tp, {nc_}), f64(fp, {nc_})};
}

}  // namespace ops
