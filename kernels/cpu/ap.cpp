// Detection metrics core (see ap.h). The NumPy pieces (argsort, interp, trapz, pairwise sum,
// round-half-even) are re-implemented on purpose: the official numbers come from NumPy, and its
// tie orders and summation orders decide the last bits and, at ties, which pair/index wins.
#include "kernels/cpu/ap.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/common/box.h"

namespace kernels::cpu {

// --- PyTorch / NumPy primitives ----------------------------------------------------------------
void linspace_f32(float start, float end, int64_t n, float* out) {
  if (n == 1) {
    out[0] = start;
    return;
  }
  const float step = (end - start) / static_cast<float>(n - 1);
  const int64_t halfway = n / 2;
  for (int64_t i = 0; i < n; ++i)
    out[i] = i < halfway ? start + step * static_cast<float>(i) : end - step * static_cast<float>(n - i - 1);
}

namespace {
inline bool np_less(float a, float b) { return a < b || (b != b && a == a); }

int msb(uint64_t n) {
  int d = 0;
  while (n >>= 1) ++d;
  return d;
}

void np_aheapsort(const float* v, int64_t* tosort, int64_t n) {
  int64_t* a = tosort - 1;  // 1-based heap indexing, as NumPy
  int64_t i, j, l, tmp;
  for (l = n >> 1; l > 0; --l) {
    tmp = a[l];
    for (i = l, j = l << 1; j <= n;) {
      if (j < n && np_less(v[a[j]], v[a[j + 1]])) j += 1;
      if (np_less(v[tmp], v[a[j]])) {
        a[i] = a[j];
        i = j;
        j += j;
      } else break;
    }
    a[i] = tmp;
  }
  for (; n > 1;) {
    tmp = a[n];
    a[n] = a[1];
    n -= 1;
    for (i = 1, j = 2; j <= n;) {
      if (j < n && np_less(v[a[j]], v[a[j + 1]])) j++;
      if (np_less(v[tmp], v[a[j]])) {
        a[i] = a[j];
        i = j;
        j += j;
      } else break;
    }
    a[i] = tmp;
  }
}

/// NumPy pairwise summation (umath loops: blocks of 128, 8 partial sums).
double np_pairwise_sum(const double* a, int64_t n) {
  if (n < 8) {
    double res = 0.;
    for (int64_t i = 0; i < n; ++i) res += a[i];
    return res;
  }
  if (n <= 128) {
    double r[8];
    for (int k = 0; k < 8; ++k) r[k] = a[k];
    int64_t i;
    for (i = 8; i < n - (n % 8); i += 8)
      for (int k = 0; k < 8; ++k) r[k] += a[i + k];
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += a[i];
    return res;
  }
  int64_t n2 = n / 2;
  n2 -= n2 % 8;
  return np_pairwise_sum(a, n2) + np_pairwise_sum(a + n2, n - n2);
}

/// numpy.linspace(0, 1, n) (n >= 2): i * (1 / (n - 1)), last element exactly 1.
std::vector<double> np_linspace01(int64_t n) {
  std::vector<double> x(static_cast<size_t>(n));
  const double step = 1.0 / static_cast<double>(n - 1);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<double>(i) * step + 0.0;
  x[n - 1] = 1.0;
  return x;
}
}  // namespace

void np_argsort(const float* v, int64_t num, int64_t* tosort) {
  for (int64_t i = 0; i < num; ++i) tosort[i] = i;
  if (num < 2) return;
  constexpr int64_t kSmall = 16;  // NumPy SMALL_QUICKSORT
  int64_t* pl = tosort;
  int64_t* pr = tosort + num - 1;
  int64_t* stack[128];
  int64_t** sptr = stack;
  int depth[128];
  int* psdepth = depth;
  int cdepth = msb(static_cast<uint64_t>(num)) * 2;
  int64_t *pm, *pi, *pj, *pk, vi;
  float vp;
  for (;;) {
    if (cdepth < 0) {
      np_aheapsort(v, pl, pr - pl + 1);
      goto stack_pop;
    }
    while ((pr - pl) > kSmall) {
      pm = pl + ((pr - pl) >> 1);
      if (np_less(v[*pm], v[*pl])) std::swap(*pm, *pl);
      if (np_less(v[*pr], v[*pm])) std::swap(*pr, *pm);
      if (np_less(v[*pm], v[*pl])) std::swap(*pm, *pl);
      vp = v[*pm];
      pi = pl;
      pj = pr - 1;
      std::swap(*pm, *pj);
      for (;;) {
        do ++pi;
        while (np_less(v[*pi], vp));
        do --pj;
        while (np_less(vp, v[*pj]));
        if (pi >= pj) break;
        std::swap(*pi, *pj);
      }
      pk = pr - 1;
      std::swap(*pi, *pk);
      if (pi - pl < pr - pi) {
        *sptr++ = pi + 1;
        *sptr++ = pr;
        pr = pi - 1;
      } else {
        *sptr++ = pl;
        *sptr++ = pi - 1;
        pl = pi + 1;
      }
      *psdepth++ = --cdepth;
    }
    for (pi = pl + 1; pi <= pr; ++pi) {
      vi = *pi;
      vp = v[vi];
      pj = pi;
      pk = pi - 1;
      while (pj > pl && np_less(vp, v[*pk])) *pj-- = *pk--;
      *pj = vi;
    }
  stack_pop:
    if (sptr == stack) break;
    pr = *(--sptr);
    pl = *(--sptr);
    cdepth = *(--psdepth);
  }
}

double np_interp(double x, const double* xp, const double* fp, int64_t n, double left, double right) {
  if (std::isnan(x)) return x;
  if (n == 1) return x < xp[0] ? left : (x > xp[0] ? right : fp[0]);
  if (x > xp[n - 1]) return right;
  if (x < xp[0]) return left;
  // j = last index with xp[j] <= x (what NumPy's binary_search_with_guess returns).
  const int64_t j = static_cast<int64_t>(std::upper_bound(xp, xp + n, x) - xp) - 1;
  if (j == n - 1) return fp[j];
  if (xp[j] == x) return fp[j];
  const double slope = (fp[j + 1] - fp[j]) / (xp[j + 1] - xp[j]);
  double r = slope * (x - xp[j]) + fp[j];
  if (std::isnan(r)) {
    r = slope * (x - xp[j + 1]) + fp[j + 1];
    if (std::isnan(r) && fp[j] == fp[j + 1]) r = fp[j];
  }
  return r;
}

// --- process_batch -------------------------------------------------------------------------------
void process_batch_cpu(const float* det, int64_t n_det, const float* labels, int64_t n_lab, const float* iouv,
                       int64_t niou, uint8_t* correct) {
  std::fill(correct, correct + n_det * niou, uint8_t(0));
  if (n_det == 0 || n_lab == 0) return;
  std::vector<float> iou(static_cast<size_t>(n_lab * n_det));
  for (int64_t i = 0; i < n_lab; ++i)
    for (int64_t j = 0; j < n_det; ++j) iou[i * n_det + j] = box_iou_xyxy(labels + 5 * i + 1, det + 6 * j);
  std::vector<int64_t> ml, md, order;
  std::vector<float> mi;
  for (int64_t k = 0; k < niou; ++k) {
    ml.clear();
    md.clear();
    mi.clear();
    for (int64_t i = 0; i < n_lab; ++i)  // torch.where: row-major (label, detection)
      for (int64_t j = 0; j < n_det; ++j)
        if (iou[i * n_det + j] >= iouv[k] && labels[5 * i] == det[6 * j + 5]) {
          ml.push_back(i);
          md.push_back(j);
          mi.push_back(iou[i * n_det + j]);
        }
    const int64_t m = static_cast<int64_t>(mi.size());
    if (m == 0) continue;
    if (m == 1) {
      correct[md[0] * niou + k] = 1;
      continue;
    }
    // matches[matches[:, 2].argsort()[::-1]]
    order.resize(static_cast<size_t>(m));
    np_argsort(mi.data(), m, order.data());
    std::reverse(order.begin(), order.end());
    // np.unique(matches[:, 1], return_index=True): first occurrence per detection, by detection.
    std::vector<int64_t> first_det(static_cast<size_t>(n_det), -1);
    for (int64_t q = 0; q < m; ++q)
      if (first_det[md[order[q]]] < 0) first_det[md[order[q]]] = order[q];
    // np.unique(matches[:, 0], return_index=True) on that detection-ordered list.
    std::vector<uint8_t> label_used(static_cast<size_t>(n_lab), 0);
    for (int64_t j = 0; j < n_det; ++j) {
      const int64_t p = first_det[j];
      if (p < 0 || label_used[ml[p]]) continue;
      label_used[ml[p]] = 1;
      correct[j * niou + k] = 1;
    }
  }
}

// --- ap_per_class ------------------------------------------------------------------------------
namespace {
// Official compute_ap's sentinel-padded curve: mrec = [0, recall, 1], mpre = [1, precision, 0]
// with the precision envelope (np.flip(np.maximum.accumulate(np.flip(mpre)))), NaN-free here.
void ap_envelope(const double* recall, const double* precision, int64_t n, std::vector<double>& mrec,
                 std::vector<double>& mpre) {
  mrec.assign(static_cast<size_t>(n + 2), 0.0);
  mpre.assign(static_cast<size_t>(n + 2), 0.0);
  mrec[0] = 0.0;
  mpre[0] = 1.0;
  for (int64_t i = 0; i < n; ++i) {
    mrec[i + 1] = recall[i];
    mpre[i + 1] = precision[i];
  }
  mrec[n + 1] = 1.0;
  mpre[n + 1] = 0.0;
  for (int64_t i = n; i >= 0; --i) mpre[i] = std::max(mpre[i], mpre[i + 1]);
}
}  // namespace

double compute_ap_cpu(const double* recall, const double* precision, int64_t n) {
  std::vector<double> mrec, mpre;
  ap_envelope(recall, precision, n, mrec, mpre);
  static constexpr int64_t kPts = 101;                                       // COCO 101-point
  const std::vector<double> x = np_linspace01(kPts);
  std::vector<double> y(kPts), terms(kPts - 1);
  for (int64_t i = 0; i < kPts; ++i) y[i] = np_interp(x[i], mrec.data(), mpre.data(), n + 2, mpre[0], mpre[n + 1]);
  for (int64_t i = 0; i < kPts - 1; ++i) terms[i] = (x[i + 1] - x[i]) * (y[i + 1] + y[i]) / 2.0;  // np.trapz
  return np_pairwise_sum(terms.data(), kPts - 1);
}

ApStats ap_per_class_cpu(const uint8_t* tp, const float* conf, const float* pred_cls, int64_t n_pred, int64_t niou,
                         const float* target_cls, int64_t n_tgt) {
  constexpr double kEps = 1e-16;
  constexpr int64_t kGrid = 1000;
  ApStats st;
  // i = np.argsort(-conf)
  std::vector<float> neg(static_cast<size_t>(n_pred));
  for (int64_t i = 0; i < n_pred; ++i) neg[i] = -conf[i];
  std::vector<int64_t> order(static_cast<size_t>(n_pred));
  np_argsort(neg.data(), n_pred, order.data());
  // unique target classes with counts
  std::vector<float> tc(target_cls, target_cls + n_tgt);
  std::sort(tc.begin(), tc.end());
  for (size_t i = 0; i < tc.size(); ++i) {
    if (i == 0 || tc[i] != tc[i - 1]) {
      st.classes.push_back(tc[i]);
      st.nt.push_back(0);
    }
    st.nt.back() += 1;
  }
  const int64_t nc = static_cast<int64_t>(st.classes.size());
  const std::vector<double> px = np_linspace01(kGrid);
  st.ap.assign(static_cast<size_t>(nc * niou), 0.0);
  st.p_curve.assign(static_cast<size_t>(nc * kGrid), 0.0);
  st.r_curve.assign(static_cast<size_t>(nc * kGrid), 0.0);
  st.pr_curve.assign(static_cast<size_t>(nc * kGrid), 0.0);
  std::vector<int64_t> idx;
  std::vector<double> xp, recall, precision, rec_j, prec_j;
  for (int64_t ci = 0; ci < nc; ++ci) {
    idx.clear();
    for (int64_t q = 0; q < n_pred; ++q)
      if (static_cast<double>(pred_cls[order[q]]) == st.classes[ci]) idx.push_back(order[q]);
    const int64_t n_l = st.nt[ci], n_p = static_cast<int64_t>(idx.size());
    if (n_p == 0 || n_l == 0) continue;
    xp.resize(n_p);
    for (int64_t q = 0; q < n_p; ++q) xp[q] = -static_cast<double>(conf[idx[q]]);
    recall.resize(n_p * niou);
    precision.resize(n_p * niou);
    for (int64_t j = 0; j < niou; ++j) {
      int64_t tpc = 0, fpc = 0;
      for (int64_t q = 0; q < n_p; ++q) {
        if (tp[idx[q] * niou + j]) ++tpc;
        else ++fpc;
        recall[q * niou + j] = static_cast<double>(tpc) / (static_cast<double>(n_l) + kEps);
        precision[q * niou + j] = static_cast<double>(tpc) / static_cast<double>(tpc + fpc);
      }
    }
    rec_j.resize(n_p);
    prec_j.resize(n_p);
    for (int64_t q = 0; q < n_p; ++q) {
      rec_j[q] = recall[q * niou];
      prec_j[q] = precision[q * niou];
    }
    for (int64_t g = 0; g < kGrid; ++g) {
      st.r_curve[ci * kGrid + g] = np_interp(-px[g], xp.data(), rec_j.data(), n_p, 0.0, rec_j[n_p - 1]);
      st.p_curve[ci * kGrid + g] = np_interp(-px[g], xp.data(), prec_j.data(), n_p, 1.0, prec_j[n_p - 1]);
    }
    for (int64_t j = 0; j < niou; ++j) {
      for (int64_t q = 0; q < n_p; ++q) {
        rec_j[q] = recall[q * niou + j];
        prec_j[q] = precision[q * niou + j];
      }
      st.ap[ci * niou + j] = compute_ap_cpu(rec_j.data(), prec_j.data(), n_p);
      if (j == 0) {  // PR curve for plots: interp(px, mrec, mpre) with the envelope
        std::vector<double> mrec, mpre;
        ap_envelope(rec_j.data(), prec_j.data(), n_p, mrec, mpre);
        for (int64_t g = 0; g < kGrid; ++g)
          st.pr_curve[ci * kGrid + g] = np_interp(px[g], mrec.data(), mpre.data(), n_p + 2, mpre[0], mpre[n_p + 1]);
      }
    }
  }
  // F1 curves, class mean (sequential over classes, as NumPy's axis-0 mean), box-filter smoothing.
  st.f1_curve.assign(static_cast<size_t>(nc * kGrid), 0.0);
  std::vector<double> mean_f1(kGrid, 0.0);
  for (int64_t ci = 0; ci < nc; ++ci)
    for (int64_t g = 0; g < kGrid; ++g) {
      const double p = st.p_curve[ci * kGrid + g], r = st.r_curve[ci * kGrid + g];
      st.f1_curve[ci * kGrid + g] = 2 * p * r / (p + r + kEps);
      mean_f1[g] += st.f1_curve[ci * kGrid + g];
    }
  for (auto& v : mean_f1) v /= static_cast<double>(nc > 0 ? nc : 1);
  if (nc == 0)
    std::fill(mean_f1.begin(), mean_f1.end(), NAN);  // NumPy mean of an empty axis; argmax -> 0
  // smooth(y, 0.1): nf = round(1000 * 0.1 * 2) // 2 + 1 = 101 taps, 50 edge copies each side.
  const int64_t nf = static_cast<int64_t>(std::nearbyint(kGrid * 0.1 * 2)) / 2 + 1, half = nf / 2;
  std::vector<double> yp(static_cast<size_t>(kGrid + 2 * half));
  for (int64_t i = 0; i < half; ++i) {
    yp[i] = mean_f1[0];
    yp[half + kGrid + i] = mean_f1[kGrid - 1];
  }
  std::copy(mean_f1.begin(), mean_f1.end(), yp.begin() + half);
  const double w = 1.0 / static_cast<double>(nf);
  int64_t best = 0;
  double best_v = -INFINITY;
  for (int64_t g = 0; g < kGrid; ++g) {
    double s = 0;
    for (int64_t k = 0; k < nf; ++k) s += yp[g + k] * w;
    if (std::isnan(s)) {  // np.argmax returns the first NaN
      best = g;
      break;
    }
    if (s > best_v) {
      best_v = s;
      best = g;
    }
  }
  st.best_index = best;
  st.p.resize(nc);
  st.r.resize(nc);
  st.f1.resize(nc);
  st.tp.resize(nc);
  st.fp.resize(nc);
  for (int64_t ci = 0; ci < nc; ++ci) {
    st.p[ci] = st.p_curve[ci * kGrid + best];
    st.r[ci] = st.r_curve[ci * kGrid + best];
    st.f1[ci] = st.f1_curve[ci * kGrid + best];
    st.tp[ci] = std::nearbyint(st.r[ci] * static_cast<double>(st.nt[ci]));  // np.round: half to even
    st.fp[ci] = std::nearbyint(st.tp[ci] / (st.p[ci] + kEps) - st.tp[ci]);
  }
  return st;
}

// --- ConfusionMatrix ---------------------------------------------------------------------------
void confusion_matrix_update_cpu(double* matrix, int64_t nc, const float* det, int64_t n_det, const float* labels,
                                 int64_t n_lab, float conf, float iou_thres) {
  const int64_t w = nc + 1;
  if (det == nullptr) {
    for (int64_t i = 0; i < n_lab; ++i) matrix[nc * w + static_cast<int64_t>(labels[5 * i])] += 1;
    return;
  }
  std::vector<int64_t> keep;
  for (int64_t j = 0; j < n_det; ++j)
    if (det[6 * j + 4] > conf) keep.push_back(j);
  const int64_t nd = static_cast<int64_t>(keep.size());
  std::vector<int64_t> ml, md;
  std::vector<float> mi;
  for (int64_t i = 0; i < n_lab; ++i)
    for (int64_t q = 0; q < nd; ++q) {
      const float v = box_iou_xyxy(labels + 5 * i + 1, det + 6 * keep[q]);
      if (v > iou_thres) {
        ml.push_back(i);
        md.push_back(q);
        mi.push_back(v);
      }
    }
  int64_t m = static_cast<int64_t>(mi.size());
  std::vector<int64_t> sel(static_cast<size_t>(m));
  std::iota(sel.begin(), sel.end(), 0);
  if (m > 1) {
    // sort by IoU desc, unique per detection; sort by IoU desc again, unique per label.
    auto dedup = [&](std::vector<int64_t> cur, const std::vector<int64_t>& key) {
      std::vector<float> v(cur.size());
      for (size_t q = 0; q < cur.size(); ++q) v[q] = mi[cur[q]];
      std::vector<int64_t> o(cur.size());
      np_argsort(v.data(), static_cast<int64_t>(v.size()), o.data());
      std::reverse(o.begin(), o.end());
      std::vector<int64_t> sorted(cur.size());
      for (size_t q = 0; q < cur.size(); ++q) sorted[q] = cur[o[q]];
      // np.unique(..., return_index=True): first occurrence, output ordered by key value.
      std::vector<std::pair<int64_t, int64_t>> firsts;  // (key, match)
      for (int64_t s : sorted) {
        bool seen = false;
        for (auto& f : firsts) seen |= f.first == key[s];
        if (!seen) firsts.emplace_back(key[s], s);
      }
      std::sort(firsts.begin(), firsts.end());
      std::vector<int64_t> out;
      for (auto& f : firsts) out.push_back(f.second);
      return out;
    };
    sel = dedup(sel, md);
    sel = dedup(sel, ml);
    m = static_cast<int64_t>(sel.size());
  }
  const bool any = m > 0;
  for (int64_t i = 0; i < n_lab; ++i) {
    const int64_t gc = static_cast<int64_t>(labels[5 * i]);
    int64_t count = 0, which = -1;
    for (int64_t s : sel)
      if (ml[s] == i) {
        ++count;
        which = s;
      }
    if (any && count == 1) matrix[static_cast<int64_t>(det[6 * keep[md[which]] + 5]) * w + gc] += 1;
    else matrix[nc * w + gc] += 1;
  }
  if (any)
    for (int64_t q = 0; q < nd; ++q) {
      bool matched = false;
      for (int64_t s : sel) matched |= md[s] == q;
      if (!matched) matrix[static_cast<int64_t>(det[6 * keep[q] + 5]) * w + nc] += 1;
    }
}

}  // namespace kernels::cpu
