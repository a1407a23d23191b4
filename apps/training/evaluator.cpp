// run_validation: the official val_dual.py loop (WongKinYiu/yolov9 5b1ea9a) over a rect-batched
// validation dataset, with the official console table, txt/JSON outputs and plots
// (shared/spec/eval.md sections 3-5, 7).
#include "apps/training/strfmt.h"
#include "apps/training/evaluator.h"

#include <algorithm>
#include <cstdlib>
#include <chrono>
#include <cstdarg>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>
#include <utility>

#include "engine/autograd.h"
#include "engine/error.h"
#include "graph/model.h"
#include "io/plots.h"
#include "ops/nms.h"
#include "ops/ops.h"

namespace fs = std::filesystem;

namespace training {

using engine::DType;
using engine::Tensor;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}


std::string class_name(const std::vector<std::string>& names, int64_t c) {
  return c >= 0 && c < static_cast<int64_t>(names.size()) ? names[static_cast<size_t>(c)] : std::to_string(c);
}

// Python's round(x, n) for the JSON (round half to even on the decimal value; doubles).
double py_round(double x, int n) {
  const double s = std::pow(10.0, n);
  return std::nearbyint(x * s) / s;
}

// Official shapes[si] = (h0, w0), ((h / h0, w / w0), (dw, dh)) for a validation sample: load_image
// resizes the long side to img_size (int truncation), letterbox (no up-scaling) pads to the batch
// shape H x W; reproduced here from the record's size so the loader batch needs no extra fields.
struct RatioPad {
  int h0 = 0, w0 = 0;
  double gain = 1, pad_w = 0, pad_h = 0;
};

int round_half_even(double v) { return static_cast<int>(std::nearbyint(v)); }

RatioPad ratio_pad(const io::ImageRecord& rec, int img_size, int H, int W) {
  RatioPad rp;
  rp.h0 = rec.height;
  rp.w0 = rec.width;
  const double r = static_cast<double>(img_size) / std::max(rp.h0, rp.w0);
  int h = rp.h0, w = rp.w0;
  if (r != 1.0) {
    h = static_cast<int>(rp.h0 * r);
    w = static_cast<int>(rp.w0 * r);
  }
  const double r2 = std::min({static_cast<double>(H) / h, static_cast<double>(W) / w, 1.0});
  const int nw = round_half_even(w * r2), nh = round_half_even(h * r2);
  rp.gain = static_cast<double>(h) / rp.h0;
  rp.pad_w = (W - nw) / 2.0;
  rp.pad_h = (H - nh) / 2.0;
  return rp;
}

Tensor host_f32(const Tensor& t) { return t.to(engine::Device::cpu()).to(DType::F32).contiguous(); }

}  // namespace

// ---------------------------------------------------------------------------------------------
// Helpers

const std::vector<int>& coco80_to_coco91() {
  static const std::vector<int> m = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 13, 14, 15, 16, 17, 18, 19, 20, 21,
                                     22, 23, 24, 25, 27, 28, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44,
                                     46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65,
                                     67, 70, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 84, 85, 86, 87, 88, 89, 90};
  return m;
}

bool is_coco_val(const std::vector<std::string>& val_entries) {
  if (val_entries.size() != 1) return false;
  const std::string suffix = (fs::path("coco") / "val2017.txt").string();
  const std::string& v = val_entries[0];
  return v.size() >= suffix.size() && v.compare(v.size() - suffix.size(), suffix.size(), suffix) == 0;
}

nlohmann::json coco_image_id(const std::string& image_path) {
  const std::string stem = fs::path(image_path).stem().string();
  const bool numeric = !stem.empty() && std::all_of(stem.begin(), stem.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (numeric && stem.size() < 19) return std::stoll(stem);
  return stem;
}

void append_coco_json(const Tensor& detections, const std::string& image_path, bool is_coco, nlohmann::json& out) {
  Y9_CHECK_SHAPE(detections.dim() == 2 && detections.size(1) >= 6, "append_coco_json: detections must be [N, 6], got ",
                 engine::shape_str(detections.shape()));
  const Tensor d = host_f32(detections);
  const float* p = d.data<float>();
  const int64_t cols = d.size(1);
  const nlohmann::json id = coco_image_id(image_path);
  for (int64_t i = 0; i < d.size(0); ++i) {
    const float* r = p + i * cols;
    // xyxy2xywh in FP32 as the official tensor op, then centre -> top-left corner
    const float w = r[2] - r[0], h = r[3] - r[1];
    const float cx = (r[0] + r[2]) / 2, cy = (r[1] + r[3]) / 2;
    const float x = cx - w / 2, y = cy - h / 2;
    const int cls = static_cast<int>(r[5]);
    int cat = cls;
    if (is_coco) {
      Y9_CHECK(cls >= 0 && cls < 80, "append_coco_json: class ", cls, " outside the 80 COCO classes");
      cat = coco80_to_coco91()[static_cast<size_t>(cls)];
    }
    out.push_back({{"image_id", id},
                   {"category_id", cat},
                   {"bbox", {py_round(x, 3), py_round(y, 3), py_round(w, 3), py_round(h, 3)}},
                   {"score", py_round(r[4], 5)}});
  }
}

std::string yolo_txt_lines(const Tensor& detections, int h0, int w0, bool save_conf) {
  Y9_CHECK_SHAPE(detections.dim() == 2 && detections.size(1) >= 6, "yolo_txt_lines: detections must be [N, 6], got ",
                 engine::shape_str(detections.shape()));
  const Tensor d = host_f32(detections);
  const float* p = d.data<float>();
  const int64_t cols = d.size(1);
  std::string s;
  for (int64_t i = 0; i < d.size(0); ++i) {
    const float* r = p + i * cols;
    const float cx = (r[0] + r[2]) / 2 / w0, cy = (r[1] + r[3]) / 2 / h0;
    const float w = (r[2] - r[0]) / w0, h = (r[3] - r[1]) / h0;
    s += fmt("%g %g %g %g %g", r[5], cx, cy, w, h);
    if (save_conf) s += fmt(" %g", r[4]);
    s += "\n";
  }
  return s;
}

std::string format_val_table(const ops::ValMetrics& m, int64_t seen, const std::vector<std::string>& names,
                             bool per_class) {
  std::string s = fmt("%22s%11s%11s%11s%11s%11s%11s\n", "Class", "Images", "Instances", "P", "R", "mAP50", "mAP50-95");
  int64_t nt = 0;
  for (int64_t v : m.nt_per_class) nt += v;
  s += fmt("%22s%11lld%11lld%11.3g%11.3g%11.3g%11.3g\n", "all", static_cast<long long>(seen), static_cast<long long>(nt),
           m.mp, m.mr, m.map50, m.map);
  if (per_class && m.per_class.ap_class.defined()) {
    const auto& pc = m.per_class;
    const auto cls = pc.ap_class.to_vector<int64_t>();
    const auto p = pc.p.to_vector<double>(), r = pc.r.to_vector<double>();
    const auto ap = pc.ap.to_vector<double>();
    const int64_t K = pc.ap.size(1);
    for (size_t i = 0; i < cls.size(); ++i) {
      double ap50 = ap[i * K], apm = 0;
      for (int64_t k = 0; k < K; ++k) apm += ap[i * K + k];
      apm /= static_cast<double>(K);
      const int64_t c = cls[i];
      const long long ntc = c >= 0 && c < static_cast<int64_t>(m.nt_per_class.size()) ? m.nt_per_class[c] : 0;
      s += fmt("%22s%11lld%11lld%11.3g%11.3g%11.3g%11.3g\n", class_name(names, c).c_str(), static_cast<long long>(seen),
               ntc, p[i], r[i], ap50, apm);
    }
  }
  return s;
}

std::shared_ptr<io::AugmentedDataset> make_val_dataset(const std::vector<std::string>& entries, int img_size,
                                                       int batch_size, bool rect, double pad, int nc,
                                                       bool single_cls, int min_items, const std::string& prefix) {
  io::ScanOptions so;
  so.nc = nc;
  so.single_cls = single_cls;
  so.min_items = min_items;
  so.min_image_px = 0;  // Deviation: the official scan drops images under 10 px here too; letterbox handles them
  so.prefix = prefix;
  io::ScanResult scan = io::scan_dataset(entries, so);
  if (!prefix.empty()) {
    std::fputs(scan.findings_text(prefix).c_str(), stdout);
    std::printf("%s%s\n", prefix.c_str(), scan.summary_line().c_str());
  }
  io::AugmentOptions ao;
  ao.img_size = img_size;
  ao.augment = false;
  ao.rect = rect;
  ao.batch_size = batch_size;
  ao.rect_pad = pad;
  ao.seed = 0;
  return std::make_shared<io::AugmentedDataset>(std::move(scan.records), ao);
}

void scale_boxes_inplace(Tensor& boxes, double gain, double pad_w, double pad_h, int h0, int w0) {
  Y9_CHECK_SHAPE(boxes.dim() == 2 && boxes.size(1) >= 4 && boxes.dtype() == DType::F32 && boxes.is_contiguous() &&
                     boxes.device().is_cpu(),
                 "scale_boxes_inplace: need contiguous CPU F32 [N, >=4], got ", boxes.str());
  float* p = boxes.data<float>();
  const int64_t cols = boxes.size(1);
  const float g = static_cast<float>(gain), pw = static_cast<float>(pad_w), ph = static_cast<float>(pad_h);
  for (int64_t i = 0; i < boxes.size(0); ++i) {
    float* r = p + i * cols;
    r[0] = std::clamp((r[0] - pw) / g, 0.0f, static_cast<float>(w0));
    r[2] = std::clamp((r[2] - pw) / g, 0.0f, static_cast<float>(w0));
    r[1] = std::clamp((r[1] - ph) / g, 0.0f, static_cast<float>(h0));
    r[3] = std::clamp((r[3] - ph) / g, 0.0f, static_cast<float>(h0));
  }
}

std::pair<double, double> pycocotools_eval(const std::string& anno_json, const std::string& pred_json,
                                           const std::vector<nlohmann::json>& img_ids) {
  Y9_CHECK_T(engine::IoError, fs::is_regular_file(anno_json), "annotations not found: ", anno_json);
  const fs::path ids_path = fs::path(pred_json).parent_path() / "coco_img_ids.json";
  std::ofstream(ids_path) << nlohmann::json(img_ids).dump();
  const std::string script =
      "import sys, json\n"
      "from pycocotools.coco import COCO\n"
      "from pycocotools.cocoeval import COCOeval\n"
      "anno = COCO(sys.argv[1]); pred = anno.loadRes(sys.argv[2])\n"
      "e = COCOeval(anno, pred, 'bbox')\n"
      "ids = json.load(open(sys.argv[3]))\n"
      "if ids: e.params.imgIds = ids\n"
      "e.evaluate(); e.accumulate(); e.summarize()\n"
      "print('Y9_COCO_RESULT %.8f %.8f' % (e.stats[0], e.stats[1]))\n";
  const fs::path py = fs::path(pred_json).parent_path() / "coco_eval.py";
  std::ofstream(py) << script;
  const std::string cmd = "python3 '" + py.string() + "' '" + anno_json + "' '" + pred_json + "' '" + ids_path.string() + "' 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  Y9_CHECK(p != nullptr, "cannot start python3");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int rc = ::pclose(p);
  fs::remove(py);
  fs::remove(ids_path);
  const size_t k = out.find("Y9_COCO_RESULT ");
  Y9_CHECK(rc == 0 && k != std::string::npos, "python3 pycocotools failed (exit ", rc, "): ", out);
  std::fputs(out.substr(0, k).c_str(), stdout);
  double ap = 0, ap50 = 0;
  std::sscanf(out.c_str() + k, "Y9_COCO_RESULT %lf %lf", &ap, &ap50);
  return {ap, ap50};
}

// ---------------------------------------------------------------------------------------------
// The validation loop

ValResult run_validation(graph::Model& model, std::shared_ptr<const io::AugmentedDataset> ds, const ValOptions& opts) {
  return run_validation(model_predictor(model, opts.autocast), std::move(ds), opts);
}

namespace {

/// One validation pass in named steps (official val_dual.py run): per batch, predict -> NMS ->
/// per image metrics, confusion, txt/JSON outputs; then the table, plots and COCO evaluation.
class ValidationRun {
 public:
  ValidationRun(const Predictor& predictor, std::shared_ptr<const io::AugmentedDataset> ds, const ValOptions& opts)
      : predictor_(predictor), ds_(std::move(ds)), opts_(opts), img_size_(ds_->options().img_size),
        files_(!opts.save_dir.empty()), plots_(files_ && opts.plots),
        save_txt_(files_ && (opts.save_txt || opts.save_hybrid)), save_json_(files_ && opts.save_json),
        nc_(class_count()), metrics_(nc_), confusion_(nc_), jdict_(nlohmann::json::array()),
        k255_(Tensor::full({1}, 255.0, DType::F32, opts.device)) {
    if (files_) fs::create_directories(fs::path(opts.save_dir));
    if (save_txt_) fs::create_directories(fs::path(opts.save_dir) / "labels");
    nms_.conf_thres = opts.conf_thres;
    nms_.iou_thres = opts.iou_thres;
    nms_.max_det = opts.max_det;
    nms_.multi_label = true;
    nms_.agnostic = opts.single_cls;
  }

  ValResult run() {
    io::LoaderOptions lo;
    lo.batch_size = opts_.batch_size;
    const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    lo.workers = std::max(0, std::min({hw, opts_.batch_size > 1 ? opts_.batch_size : 0, opts_.workers}));
    lo.shuffle = false;
    lo.epochs = 1;  // only epoch 0 is read: no prefetch into an epoch 1
    if (opts_.device.is_cuda()) {
      // Letterbox (rect batches) on the device: the workers decode into pinned memory and the
      // loader renders each batch with one letterbox launch (kernels/common/augment.h), the
      // bytes the CPU path would produce; Batch::images is then a U8 tensor on the device.
      lo.augment_device = io::LoaderOptions::AugmentDevice::Gpu;
      lo.device = opts_.device;
    }
    io::DataLoader loader(ds_, lo);
    loader.start_epoch(0);
    io::Batch batch;
    for (int64_t bi = 0; loader.next(batch); ++bi) process_batch(batch, bi);
    if (opts_.merge_stats) opts_.merge_stats(metrics_);
    summarise();
    write_plots();
    write_json();
    return res_;
  }

 private:
  /// nc = 1 for single_cls, else max(names, label classes + 1).
  int64_t class_count() const {
    int64_t nc = opts_.single_cls ? 1 : static_cast<int64_t>(opts_.names.size());
    if (!opts_.single_cls)
      for (const auto& r : ds_->records())
        for (const auto& l : r.labels) nc = std::max<int64_t>(nc, static_cast<int64_t>(l[0]) + 1);
    return std::max<int64_t>(nc, 1);
  }

  void process_batch(const io::Batch& batch, int64_t bi) {
    // Test aid for the out-of-memory retry of the validation during training (Trainer::validate):
    // Y9_FAULT_VAL_OOM=<n> makes every batch of more than n images fail as a device out-of-memory.
    static const char* fault = std::getenv("Y9_FAULT_VAL_OOM");
    if (fault && batch.images.size(0) > std::atoll(fault))
      Y9_THROW(engine::OutOfMemoryError, "Y9_FAULT_VAL_OOM=", fault, ": simulated out of memory for a validation "
               "batch of ", batch.images.size(0), " images");
    double t0 = now_s();
    Tensor im = ops::div(batch.images.to(opts_.device).to(DType::F32), k255_);
    const int64_t nb = im.size(0), H = im.size(2), W = im.size(3);
    double t1 = now_s();
    dt_pre_ += t1 - t0;
    Tensor preds = predictor_(im, batch);
    // NMS runs batched on the predictions' device (kernels/cuda/nms.cu on CUDA); only the kept rows
    // come back to the host (host_f32 below).
    double t2 = now_s();
    dt_inf_ += t2 - t1;

    // targets to letterboxed pixels, split per image
    const Tensor tg = host_f32(batch.targets);
    const float* tp = tg.data<float>();
    std::vector<std::vector<float>> per_img(static_cast<size_t>(nb));  // rows cls, cx, cy, w, h (pixels)
    for (int64_t i = 0; i < tg.size(0); ++i) {
      const float* r = tp + 6 * i;
      const auto b = static_cast<size_t>(r[0]);
      if (b < per_img.size()) per_img[b].insert(per_img[b].end(), {r[1], r[2] * W, r[3] * H, r[4] * W, r[5] * H});
    }
    std::vector<Tensor> hybrid;
    if (opts_.save_hybrid)
      for (auto& v : per_img)
        hybrid.push_back(Tensor::from_vector(v, {static_cast<int64_t>(v.size() / 5), 5}).to(preds.device()));
    std::vector<Tensor> out = ops::non_max_suppression(preds, nms_, hybrid);
    dt_nms_ += now_s() - t2;

    std::vector<float> plot_pred;  // output_to_target rows: batch id, cls, cx, cy, w, h, conf
    for (int64_t si = 0; si < nb; ++si) {
      const io::ImageRecord& rec = ds_->records()[static_cast<size_t>(batch.indices[static_cast<size_t>(si)])];
      process_image(host_f32(out[static_cast<size_t>(si)]).clone(), per_img[static_cast<size_t>(si)], rec,
                    static_cast<int>(H), static_cast<int>(W), si, plot_pred);
    }
    if (plots_ && bi < 3) {
      const std::string base = (fs::path(opts_.save_dir) / ("val_batch" + std::to_string(bi))).string();
      Tensor tgt = tg.clone();
      io::plot_images(batch.images, tgt, opts_.names, base + "_labels.jpg", Tensor(), batch.paths);
      Tensor pt = Tensor::from_vector(plot_pred, {static_cast<int64_t>(plot_pred.size() / 7), 7});
      io::plot_images(batch.images, pt, opts_.names, base + "_pred.jpg", Tensor(), batch.paths);
    }
  }

  /// One image: detections `pred` [n, 6] in letterboxed pixels, labels `lv` (cls, cx, cy, w, h in
  /// letterboxed pixels) -> metrics, confusion matrix, txt and JSON outputs, the plot rows.
  void process_image(Tensor pred, const std::vector<float>& lv, const io::ImageRecord& rec, int H, int W, int64_t si,
                     std::vector<float>& plot_pred) {
    const int64_t nl = static_cast<int64_t>(lv.size() / 5), npr = pred.size(0);
    const RatioPad rp = ratio_pad(rec, img_size_, H, W);
    {
      const float* pp = pred.data<float>();
      for (int64_t j = 0; j < npr; ++j) {
        const float* r = pp + 6 * j;
        plot_pred.insert(plot_pred.end(), {static_cast<float>(si), r[5], (r[0] + r[2]) / 2, (r[1] + r[3]) / 2,
                                           r[2] - r[0], r[3] - r[1], r[4]});
      }
    }
    // labels -> xyxy original pixels
    std::vector<float> ln(static_cast<size_t>(nl * 5));
    for (int64_t i = 0; i < nl; ++i) {
      const float* r = lv.data() + 5 * i;
      ln[5 * i] = r[0];
      ln[5 * i + 1] = r[1] - r[3] / 2;
      ln[5 * i + 2] = r[2] - r[4] / 2;
      ln[5 * i + 3] = r[1] + r[3] / 2;
      ln[5 * i + 4] = r[2] + r[4] / 2;
    }
    Tensor labelsn = Tensor::from_vector(ln, {nl, 5});
    if (nl) {
      Tensor boxes = labelsn.slice(1, 1, 5).contiguous();
      scale_boxes_inplace(boxes, rp.gain, rp.pad_w, rp.pad_h, rp.h0, rp.w0);
      labelsn.slice(1, 1, 5).copy_(boxes);
    }
    if (npr == 0) {
      metrics_.add_image(pred.reshape({0, 6}), labelsn, opts_.single_cls);
      if (nl && plots_) confusion_.process_background(labelsn.select(1, 0).contiguous());
      return;
    }
    if (opts_.single_cls) {
      float* pp = pred.data<float>();
      for (int64_t j = 0; j < npr; ++j) pp[6 * j + 5] = 0.f;
    }
    Tensor predn = pred.clone();
    scale_boxes_inplace(predn, rp.gain, rp.pad_w, rp.pad_h, rp.h0, rp.w0);
    metrics_.add_image(predn, labelsn, opts_.single_cls);
    if (nl && plots_) confusion_.process_batch(predn, labelsn);
    if (save_txt_) {
      const fs::path f = fs::path(opts_.save_dir) / "labels" / (fs::path(rec.image_path).stem().string() + ".txt");
      const bool existed = fs::exists(f);
      std::ofstream o(f, std::ios::app);
      Y9_CHECK_T(engine::IoError, o.good(), "cannot write ", f.string());
      o << yolo_txt_lines(predn, rp.h0, rp.w0, opts_.save_conf);
      if (!existed) ++res_.label_files;
    }
    if (save_json_) append_coco_json(predn, rec.image_path, opts_.is_coco, jdict_);
  }

  /// Metrics, speeds, the table and its printing.
  void summarise() {
    res_.metrics = metrics_.compute();
    res_.seen = res_.metrics.seen;
    for (int64_t v : res_.metrics.nt_per_class) res_.instances += v;
    res_.confusion = confusion_.matrix();
    const double seen = std::max<double>(1.0, static_cast<double>(res_.seen));
    res_.pre_ms = dt_pre_ / seen * 1e3;
    res_.inf_ms = dt_inf_ / seen * 1e3;
    res_.nms_ms = dt_nms_ / seen * 1e3;
    const bool per_class = (opts_.verbose || (nc_ < 50 && !opts_.training)) && nc_ > 1 && res_.seen > 0;
    res_.table = format_val_table(res_.metrics, res_.seen, opts_.names, per_class);
    if (!opts_.print) return;
    std::fputs(res_.table.c_str(), stdout);
    if (res_.instances == 0)
      std::printf("WARNING ⚠️ no labels found in %s set, can not compute metrics without labels\n", opts_.task.c_str());
    if (!opts_.training)
      std::printf("Speed: %.1fms pre-process, %.1fms inference, %.1fms NMS per image at shape (%d, 3, %d, %d)\n",
                  res_.pre_ms, res_.inf_ms, res_.nms_ms, opts_.batch_size, img_size_, img_size_);
    std::fflush(stdout);
  }

  /// Confusion matrix and the PR / F1 / P / R curves.
  void write_plots() const {
    if (!plots_) return;
    const fs::path d(opts_.save_dir);
    io::plot_confusion_matrix(res_.confusion, opts_.names, true, (d / "confusion_matrix.png").string());
    const auto& pc = res_.metrics.per_class;
    if (!pc.ap_class.defined() || pc.ap_class.numel() == 0) return;
    std::vector<std::string> present;
    for (int64_t c : pc.ap_class.to_vector<int64_t>()) present.push_back(class_name(opts_.names, c));
    std::vector<double> grid(1000);
    for (int i = 0; i < 1000; ++i) grid[static_cast<size_t>(i)] = i / 999.0;
    const Tensor px = Tensor::from_vector(grid, {1000});
    io::plot_pr_curve(px, pc.pr_curve, pc.ap, present, (d / "PR_curve.png").string());
    io::plot_mc_curve(px, pc.f1_curve, present, "Confidence", "F1", (d / "F1_curve.png").string());
    io::plot_mc_curve(px, pc.p_curve, present, "Confidence", "Precision", (d / "P_curve.png").string());
    io::plot_mc_curve(px, pc.r_curve, present, "Confidence", "Recall", (d / "R_curve.png").string());
  }

  /// The COCO JSON (official: only when there are detections) and the pycocotools evaluation.
  void write_json() {
    if (!save_json_ || jdict_.empty()) return;
    res_.json_path = (fs::path(opts_.save_dir) / (opts_.json_stem + "_predictions.json")).string();
    if (opts_.print) std::printf("\nEvaluating pycocotools mAP... saving %s...\n", res_.json_path.c_str());
    {
      std::ofstream o(res_.json_path);
      Y9_CHECK_T(engine::IoError, o.good(), "cannot write ", res_.json_path);
      o << jdict_.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      Y9_CHECK_T(engine::IoError, o.good(), "cannot write ", res_.json_path);
    }
    if (opts_.anno_json.empty()) return;
    std::vector<nlohmann::json> ids;
    if (opts_.is_coco)
      for (const auto& r : ds_->records()) ids.push_back(coco_image_id(r.image_path));
    try {
      const auto [ap, ap50] = pycocotools_eval(opts_.anno_json, res_.json_path, ids);
      res_.metrics.map = ap;
      res_.metrics.map50 = ap50;
      res_.metrics.fitness = 0.1 * ap50 + 0.9 * ap;
      res_.coco_evaluated = true;
    } catch (const engine::Error& e) {
      if (opts_.print) std::printf("pycocotools unable to run: %s\n", e.message().c_str());
    }
  }

  const Predictor& predictor_;
  std::shared_ptr<const io::AugmentedDataset> ds_;
  const ValOptions& opts_;
  const int img_size_;
  const bool files_, plots_, save_txt_, save_json_;
  const int64_t nc_;
  ops::NmsOptions nms_;
  ops::DetectionMetrics metrics_;
  ops::ConfusionMatrix confusion_;
  nlohmann::json jdict_;
  const Tensor k255_;
  ValResult res_;
  double dt_pre_ = 0, dt_inf_ = 0, dt_nms_ = 0;
};

}  // namespace

ValResult run_validation(const Predictor& predictor, std::shared_ptr<const io::AugmentedDataset> ds,
                         const ValOptions& opts) {
  Y9_CHECK(ds != nullptr, "run_validation: no dataset");
  return ValidationRun(predictor, std::move(ds), opts).run();
}

}  // namespace training
