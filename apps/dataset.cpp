// `yolov9 dataset --data FILE [--img 640] [--save-mosaics DIR] [--json]`: scans and validates
// every split of a data.yaml, prints the official-style summary (or one JSON object), and exits
// non-zero exactly when training on the dataset would be refused. Writes only the label cache.
#include <opencv2/imgproc.hpp>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <iostream>

#include "apps/commands.h"
#include "engine/error.h"
#include "io/augment.h"
#include "io/data_yaml.h"
#include "io/dataset.h"
#include "io/image.h"

namespace fs = std::filesystem;

namespace apps {


namespace {

struct DatasetArgs {
  std::string data;
  int img = 640;
  std::string save_mosaics;
  bool json = false;
};

std::string rel(const std::string& p, const std::string& base) {
  std::error_code ec;
  fs::path r = fs::path(p).lexically_relative(base);
  return r.empty() ? p : r.string();
}

void save_mosaics(const io::ScanResult& scan, const std::vector<std::string>& names, int img, const std::string& dir) {
  fs::create_directories(dir);
  io::AugmentOptions o;
  o.img_size = img;
  o.seed = 0;
  io::AugmentedDataset ds(scan.records, o);
  const int64_t n = std::min<int64_t>(4, ds.size());
  for (int64_t i = 0; i < n; ++i) {
    io::Sample s = ds.get(i, 0);
    for (const auto& l : s.labels) {
      const float W = static_cast<float>(s.img.cols), H = static_cast<float>(s.img.rows);
      cv::Point p1(static_cast<int>((l[1] - l[3] / 2) * W), static_cast<int>((l[2] - l[4] / 2) * H));
      cv::Point p2(static_cast<int>((l[1] + l[3] / 2) * W), static_cast<int>((l[2] + l[4] / 2) * H));
      cv::rectangle(s.img, p1, p2, cv::Scalar(0, 255, 0), 2);
      const int c = static_cast<int>(l[0]);
      const std::string label = c >= 0 && c < static_cast<int>(names.size()) ? names[c] : std::to_string(c);
      cv::putText(s.img, label, p1 + cv::Point(2, 12), cv::FONT_HERSHEY_SIMPLEX, 0.4, cv::Scalar(0, 255, 0), 1);
    }
    const std::string out = (fs::path(dir) / ("train_mosaic" + std::to_string(i) + ".jpg")).string();
    io::write_image_bgr(out, s.img);
  }
}

int run_dataset(const DatasetArgs& a) {
  nlohmann::json j;
  bool refuse = false;
  try {
    io::DataConfig cfg = io::load_data_yaml(a.data);
    j["data"] = cfg.yaml_path;
    j["nc"] = cfg.nc;
    j["names"] = cfg.names;
    j["splits"] = nlohmann::json::object();
    io::ScanResult train_scan;
    bool have_train = false;
    for (auto& [split, entries] : std::vector<std::pair<std::string, std::vector<std::string>>>{
             {"train", cfg.train}, {"val", cfg.val}, {"test", cfg.test}}) {
      if (entries.empty()) continue;
      nlohmann::json sj;
      io::ScanOptions o;
      o.nc = cfg.nc;
      o.prefix = split + ": ";
      if (split != "train") o.min_image_px = 0;  // as val and train's validation scan them
      try {
        io::ScanResult r = io::scan_dataset(entries, o);
        const auto& st = r.stats;
        sj["images"] = st.images;
        sj["backgrounds"] = st.backgrounds;
        sj["boxes"] = st.boxes;
        sj["found"] = st.found;
        sj["missing_labels"] = st.missing;
        sj["empty_labels"] = st.empty;
        sj["corrupt"] = st.corrupt;
        sj["duplicates_removed"] = st.duplicates_removed;
        sj["cache"] = rel(r.cache_path, cfg.yaml_dir);
        sj["cache_loaded"] = r.cache_loaded;
        sj["cache_note"] = r.cache_note;  // why the cache was rebuilt or not written ("" if fine)
        nlohmann::json fl = nlohmann::json::array();
        for (const auto& f : r.findings)
          fl.push_back({{"file", rel(f.file, cfg.yaml_dir)}, {"line", f.line}, {"reason", f.reason}, {"action", f.action}});
        if (!a.json) std::fputs(r.findings_text(o.prefix).c_str(), stdout);
        sj["findings"] = fl;
        std::string why;
        // Training refuses a train split without labels; every split refuses classes >= nc.
        bool ok = split == "train" ? r.trainable(&why) : !r.class_out_of_range;
        if (!ok && why.empty()) why = "label class ids exceed nc";
        if (!ok) {
          refuse = true;
          sj["error"] = why;
        }
        if (!a.json) {
          std::printf("%s%s\n", o.prefix.c_str(), r.summary_line().c_str());
          std::printf("%s%lld images, %lld backgrounds, %lld boxes, %lld duplicates removed\n", o.prefix.c_str(),
                      static_cast<long long>(st.images), static_cast<long long>(st.backgrounds),
                      static_cast<long long>(st.boxes), static_cast<long long>(st.duplicates_removed));
          if (!ok) std::printf("%sERROR %s\n", o.prefix.c_str(), why.c_str());
        }
        if (split == "train") {
          train_scan = std::move(r);
          have_train = true;
        }
      } catch (const engine::IoError& e) {
        refuse = true;
        sj["error"] = e.message();
        if (!a.json) std::printf("%sERROR %s\n", o.prefix.c_str(), e.message().c_str());
      }
      j["splits"][split] = sj;
    }
    if (!a.save_mosaics.empty() && have_train) save_mosaics(train_scan, cfg.names, a.img, a.save_mosaics);
  } catch (const engine::Error& e) {
    j["error"] = e.message();
    refuse = true;
    if (!a.json) std::fprintf(stderr, "yolov9 dataset: %s\n", e.message().c_str());
  }
  j["trainable"] = !refuse;
  if (a.json) std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
  return refuse ? 1 : 0;
}

}  // namespace

void register_dataset(CLI::App& app) {
  static DatasetArgs args;  // CLI11 binds options to storage that outlives parsing
  add_command(
      app, "dataset", "check a dataset and print its summary",
      [](CLI::App& sub) {
        sub.add_option("--data", args.data, "data.yaml")->required();
        sub.add_option("--img,--img-size", args.img, "train image size (pixels)");
        sub.add_option("--save-mosaics", args.save_mosaics, "write a few augmented training images with boxes here");
        sub.add_flag("--json", args.json, "print one JSON object for tools");
      },
      [] { return run_dataset(args); });
}

}  // namespace apps
