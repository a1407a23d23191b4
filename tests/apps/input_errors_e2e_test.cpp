// End-to-end tests of bad and travelling inputs (issue 16, items 7 to 12): model YAMLs with edge
// argument values, messages that must name the input and not leak internals (a folder as
// --weights, damaged checkpoint metadata, --freeze of every layer, absurd --epochs, detect --img
// -5, a PyTorch .pt, --device foo, Y9_DEBUG), detect going on past bad images and missing list
// entries, fine-tuning from an exported file, val/detect with the YAML embedded in a checkpoint,
// and bare config names in every command. Runs the built program (Y9_BINARY_DIR/yolov9).
#include <gtest/gtest.h>

#include <opencv2/imgcodecs.hpp>

#include <array>
#include <fstream>
#include <sstream>
#include <vector>

#include "engine/device.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "tests/apps/e2e_util.h"

namespace {

namespace fs = std::filesystem;

struct Fixture {
  std::string dir, data, weights;  ///< weights: a gelan-t checkpoint (random init, official names)
  std::string ckpt;                ///< a mid-epoch `yolov9 train` checkpoint (resumable)
};

const Fixture& fixture() {
  static Fixture f = [] {
    Fixture x;
    x.dir = e2e::temp_dir("inputs");
    x.data = e2e::make_dataset(x.dir + "/ds", 4, 64);
    x.weights = x.dir + "/gelan-t.safetensors";
    e2e::make_checkpoint("gelan-t", 3, x.weights);
    const auto r = e2e::run_cli("train --cfg gelan-t.yaml --data " + x.data + " --img 64 --batch 2 --workers 1 "
                                "--epochs 2 --stop-after-batches 1 --noplots --exist-ok --project " + x.dir +
                                "/runs --name ck");
    EXPECT_EQ(r.rc, 0) << r.out;
    x.ckpt = x.dir + "/runs/ck/weights/last.safetensors";
    return x;
  }();
  return f;
}

/// The input is named, the exit is an ordinary failure (not a signal), and no internal detail
/// shows: no check expression, no source location, no C++ library message.
void expect_clear_error(const e2e::RunResult& r, const std::string& names, const std::string& what = "") {
  EXPECT_GT(r.rc, 0) << r.out;
  EXPECT_LT(r.rc, 128) << r.out;
  EXPECT_NE(r.out.find(names), std::string::npos) << "message must name '" << names << "':\n" << r.out;
  if (!what.empty()) EXPECT_NE(r.out.find(what), std::string::npos) << "message must say '" << what << "':\n" << r.out;
  for (const char* leak : {".cpp:", "bad_alloc", "map::at", "stoll", "json.exception", "type_error", "pack_flat",
                           "empty tensor list", "letterbox:", "unexpected failure"})
    EXPECT_EQ(r.out.find(leak), std::string::npos) << "leaks '" << leak << "':\n" << r.out;
}

std::string cfg_with(const std::string& from, const std::string& to) {
  std::ifstream f(e2e::cfg_path("gelan-t"));
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  s.replace(at, from.size(), to);
  return s;
}

}  // namespace

// Item 7: stride 0 and groups 0 crashed info, train and val with SIGFPE (exit 136).
TEST(InputErrorsE2E, ModelYamlEdgeValuesNameTheLayer) {
  const auto& f = fixture();
  // gelan-t layer 1 (the first "[32, 3, 2]]"): [-1, 1, Conv, [32, 3, 2]]
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"[32, 3, 2]]", "[32, 3, 0]]"},              // stride 0
      {"[32, 3, 2]]", "[32, 3, 2, None, 0]]"},     // groups 0
      {"[32, 3, 2]]", "[32, 0, 2]]"},              // kernel 0
      {"[32, 3, 2]]", "[32, 3, -2]]"},             // negative stride
      {"[32, 3, 2]]", "[99999999999, 3, 2]]"},     // absurd channels
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    const std::string yaml = f.dir + "/bad" + std::to_string(k) + ".yaml";
    std::ofstream(yaml) << cfg_with(cases[k].first, cases[k].second);
    SCOPED_TRACE(cases[k].second);
    expect_clear_error(e2e::run_cli("info --cfg " + yaml), yaml, "layer 1 (Conv)");
    expect_clear_error(e2e::run_cli("train --cfg " + yaml + " --data " + f.data + " --img 64 --epochs 1 --project " +
                                    f.dir + "/runs_bad"),
                       "layer 1 (Conv)");
    expect_clear_error(e2e::run_cli("val --cfg " + yaml + " --data " + f.data + " --weights " + f.weights +
                                    " --img 64 --project " + f.dir + "/val_bad"),
                       "layer 1 (Conv)");
  }
  // A stride that fits the parser but not the 256 px probe: the layer is named too.
  const std::string yaml = f.dir + "/bad_fit.yaml";
  std::ofstream(yaml) << cfg_with("[32, 3, 2]]", "[32, 3, 64]]");
  expect_clear_error(e2e::run_cli("info --cfg " + yaml), "layer ", "does not fit");
}

// Item 8: messages name the input and hide the internals (shown with Y9_DEBUG=1).
TEST(InputErrorsE2E, MessagesNameTheInputAndHideInternals) {
  const auto& f = fixture();
  const std::string train = "train --cfg gelan-t.yaml --data " + f.data + " --img 64 --batch 2 --workers 1 --epochs 1 "
                            "--noplots --project " + f.dir + "/runs_err";
  // A folder as --weights.
  fs::create_directories(f.dir + "/a_folder");
  expect_clear_error(e2e::run_cli(train + " --weights " + f.dir + "/a_folder"), f.dir + "/a_folder", "directory");
  expect_clear_error(e2e::run_cli("val --data " + f.data + " --weights " + f.dir + "/a_folder"), f.dir + "/a_folder",
                     "directory");
  // Checkpoints with missing or broken metadata.
  const io::Checkpoint good = io::load_checkpoint(f.ckpt);
  auto damaged = [&](const std::string& key, const std::string* value) {
    io::Checkpoint ck = good;
    if (value) ck.meta[key] = *value;
    else ck.meta.erase(key);
    const std::string p = f.dir + "/damaged_" + key + ".safetensors";
    io::save_checkpoint(p, ck);
    return p;
  };
  const std::string abc = "abc", huge = "1000000", bad_opt = R"({"epochs": "many"})", bad_json = "{not json";
  std::string p = damaged("epoch", nullptr);
  expect_clear_error(e2e::run_cli("train --resume " + p), p, "'epoch' is missing");
  p = damaged("epoch", &abc);
  expect_clear_error(e2e::run_cli("train --resume " + p), p, "'epoch' is not an integer");
  p = damaged("updates", &abc);
  expect_clear_error(e2e::run_cli("train --resume " + p), p, "'updates'");
  p = damaged("opt", &bad_opt);
  expect_clear_error(e2e::run_cli("train --resume " + p), p, "'epochs' has the wrong type");
  p = damaged("hyp", &bad_json);
  expect_clear_error(e2e::run_cli("train --resume " + p), p, "'hyp' is not valid JSON");
  p = damaged("mloss", &bad_json);
  expect_clear_error(e2e::run_cli("train --resume " + p), p, "'mloss'");
  p = damaged("next_batch", &huge);
  expect_clear_error(e2e::run_cli("train --resume " + p), p, "next_batch' is 1000000");
  // --freeze of every layer.
  expect_clear_error(e2e::run_cli(train + " --freeze 100"), "--freeze 100", "nothing is left to train");
  // Absurd numbers.
  expect_clear_error(e2e::run_cli(train + " --epochs 99999999999999999999"), "99999999999999999999", "--epochs");
  // Data-parallel options are checked on one process too (not only under a launcher), and a
  // --trace folder before any work.
  expect_clear_error(e2e::run_cli(train + " --grad-dtype fp8"), "--grad-dtype fp8", "expected fp32, fp16 or bf16");
  expect_clear_error(e2e::run_cli(train + " --allreduce foo"), "--allreduce foo", "expected ring");
  expect_clear_error(e2e::run_cli(train + " --bucket-mb 0"), "--bucket-mb", "got 0");
  // The cap of CPU training's block cache (engine/cpu_cache.h).
  expect_clear_error(e2e::run_cli(train, "Y9_CPU_TRAIN_CACHE_MB=12x"), "Y9_CPU_TRAIN_CACHE_MB", "'12x'");
  expect_clear_error(e2e::run_cli(train + " --trace " + f.dir + "/no/such/dir/t.json"), f.dir + "/no/such/dir",
                     "does not exist");
  expect_clear_error(e2e::run_cli("detect --img -5 --weights " + f.weights + " --source " + f.dir), "-5", "--img");
  // A PyTorch checkpoint.
  const std::string pt = f.dir + "/yolov9-c.pt";
  std::ofstream(pt, std::ios::binary) << std::string("PK\x03\x04", 4) << std::string(200, 'x');
  expect_clear_error(e2e::run_cli("detect --weights " + pt + " --source " + f.dir), pt, "PyTorch checkpoint");
  expect_clear_error(e2e::run_cli(train + " --weights " + pt), pt, "PyTorch checkpoint");
  // --device.
  expect_clear_error(e2e::run_cli(train + " --device foo"), "'foo'", "--device");
  expect_clear_error(e2e::run_cli("val --device foo --data " + f.data + " --weights " + f.weights), "'foo'");
  expect_clear_error(e2e::run_cli("detect --device foo --weights " + f.weights + " --source " + f.dir), "'foo'");
  expect_clear_error(e2e::run_cli(train + " --device cpu:0,1"), "'cpu:0,1'", "CPU ranks such as --device cpu:0,cpu:1");
  // --device 0 without a usable GPU (issue 11): the official "Invalid CUDA" error, with the cause,
  // before anything runs; the CPU-rank spawner is not started either.
  if (engine::cuda_device_count() == 0) {
    const std::string why = engine::cuda_unavailable_reason(0);
    for (const std::string& cmd : {train + " --device 0", train + " --device 0,1",
                                   "val --device 0 --data " + f.data + " --weights " + f.weights,
                                   "detect --device cuda:0 --weights " + f.weights + " --source " + f.dir}) {
      SCOPED_TRACE(cmd);
      const auto r = e2e::run_cli(cmd);
      expect_clear_error(r, "Invalid CUDA '--device", why);
      EXPECT_NE(r.out.find("--device cpu"), std::string::npos) << r.out;
      EXPECT_EQ(r.out.find("Epoch"), std::string::npos) << r.out;
    }
  }
  // Hyperparameters that would train to NaN weights without a word.
  std::string hyp_text;
  {
    std::ifstream in(e2e::hyp_path());
    std::stringstream ss;
    ss << in.rdbuf();
    hyp_text = ss.str();
  }
  for (const auto& [from, to, what] : std::vector<std::array<std::string, 3>>{
           {"lr0: 0.01", "lr0: .nan", "'lr0' is .nan"}, {"lr0: 0.01", "lr0: -1", "'lr0' is -1"},
           {"mosaic: 1.0", "mosaic: .inf", "'mosaic' is .inf"}}) {
    const size_t at = hyp_text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    const std::string hp = f.dir + "/bad_hyp.yaml";
    std::ofstream(hp) << std::string(hyp_text).replace(at, from.size(), to);
    expect_clear_error(e2e::run_cli(train + " --hyp " + hp), hp, what);
  }
  // Thresholds out of [0, 1] are refused once, before any image; command-line errors exit 1.
  const auto thr = e2e::run_cli("detect --conf-thres 1.5 --weights " + f.weights + " --source " + f.dir);
  expect_clear_error(thr, "--conf-thres", "1.5");
  EXPECT_EQ(thr.rc, 1) << thr.out;
  EXPECT_EQ(thr.out.find("non_max_suppression"), std::string::npos) << thr.out;
  EXPECT_EQ(e2e::run_cli(train + " --no-such-flag").rc, 1);
  // Y9_DEBUG=1 shows the check and its source location.
  const auto dbg = e2e::run_cli("detect --device foo --weights " + f.weights + " --source " + f.dir, "Y9_DEBUG=1");
  EXPECT_NE(dbg.out.find(".cpp:"), std::string::npos) << dbg.out;
}

// Item 9: one bad image does not stop detect; a missing list entry is skipped with a warning
// naming the list, the line and the entry.
TEST(InputErrorsE2E, DetectGoesOnPastExtremeImagesAndMissingListEntries) {
  const auto& f = fixture();
  const std::string imgs = f.dir + "/extreme";
  fs::create_directories(imgs);
  cv::imwrite(imgs + "/wide.png", cv::Mat(50, 10000, CV_8UC3, cv::Scalar(20, 120, 220)));
  cv::imwrite(imgs + "/tall.png", cv::Mat(10000, 50, CV_8UC3, cv::Scalar(220, 120, 20)));
  cv::imwrite(imgs + "/tiny.png", cv::Mat(3, 2, CV_8UC3, cv::Scalar(0, 0, 0)));
  auto r = e2e::run_cli("detect --img 64 --weights " + f.weights + " --source " + imgs + " --project " + f.dir +
                        "/det --name x --exist-ok");
  EXPECT_EQ(r.rc, 0) << r.out;
  for (const char* n : {"wide.png", "tall.png", "tiny.png"}) EXPECT_TRUE(fs::exists(f.dir + "/det/x/" + n)) << n << r.out;
  // A list with a missing entry between two good ones, relative to the list's folder.
  const std::string list = imgs + "/list.txt";
  std::ofstream(list) << "wide.png\r\n\r\n  gone.png  \r\ntall.png\r\n";
  r = e2e::run_cli("detect --img 64 --weights " + f.weights + " --source " + list + " --project " + f.dir +
                   "/det --name y --exist-ok");
  EXPECT_LT(r.rc, 128) << r.out;
  EXPECT_NE(r.out.find(list + ":3: gone.png does not exist"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(f.dir + "/det/y/wide.png")) << r.out;
  EXPECT_TRUE(fs::exists(f.dir + "/det/y/tall.png")) << r.out;
}

// Item 10: a file written by `yolov9 export` fine-tunes (train --weights); a fused one is
// refused with the reason.
TEST(InputErrorsE2E, TrainFineTunesFromAnExportedFile) {
  const auto& f = fixture();
  const std::string out = f.dir + "/exported.safetensors";
  auto r = e2e::run_cli("export --weights " + f.ckpt + " --cfg " + e2e::cfg_path("gelan-t") + " --out " + out);
  ASSERT_EQ(r.rc, 0) << r.out;
  r = e2e::run_cli("train --cfg gelan-t.yaml --data " + f.data + " --img 64 --batch 2 --workers 1 --epochs 1 "
                   "--stop-after-batches 1 --noplots --exist-ok --project " + f.dir + "/runs --name ft --weights " + out);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("Transferred"), std::string::npos) << r.out;
  // Without --cfg: the model YAML the exported file carries (as official Model(cfg or ckpt yaml)).
  r = e2e::run_cli("train --data " + f.data + " --img 64 --batch 2 --workers 1 --epochs 1 --stop-after-batches 1 "
                   "--noplots --exist-ok --project " + f.dir + "/runs --name ft_nocfg --weights " + out);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("Transferred"), std::string::npos) << r.out;
  const std::string fused = f.dir + "/fused.safetensors";
  ASSERT_EQ(e2e::run_cli("export --fuse --weights " + f.ckpt + " --cfg " + e2e::cfg_path("gelan-t") + " --out " + fused).rc,
            0);
  expect_clear_error(e2e::run_cli("train --cfg gelan-t.yaml --data " + f.data + " --img 64 --epochs 1 --project " +
                                  f.dir + "/runs --name ft2 --weights " + fused),
                     fused, "--fuse");
}

// Item 11: val and detect use the model YAML embedded in a checkpoint when its original path is
// gone.
TEST(InputErrorsE2E, ValAndDetectUseTheEmbeddedModelYaml) {
  const auto& f = fixture();
  io::Checkpoint ck = io::load_checkpoint(f.ckpt);
  ASSERT_FALSE(ck.meta.at("cfg_yaml").empty());
  ck.meta["cfg"] = "/nonexistent/moved/gelan-custom.yaml";
  const std::string moved = f.dir + "/moved_cfg.safetensors";
  io::save_checkpoint(moved, ck);
  auto r = e2e::run_cli("val --data " + f.data + " --weights " + moved + " --img 64 --project " + f.dir +
                        "/val --name emb --exist-ok");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("gelan-custom"), std::string::npos) << r.out;
  r = e2e::run_cli("detect --img 64 --weights " + moved + " --source " + f.dir + "/ds/images/val --project " + f.dir +
                   "/det --name emb --exist-ok");
  EXPECT_EQ(r.rc, 0) << r.out;
  // export needs no --cfg either, and its output carries the YAML on.
  const std::string exported = f.dir + "/moved_export.safetensors";
  r = e2e::run_cli("export --weights " + moved + " --out " + exported);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(io::load_safetensors(exported).metadata.at("cfg_yaml"), ck.meta.at("cfg_yaml"));
  r = e2e::run_cli("val --data " + f.data + " --weights " + exported + " --img 64 --project " + f.dir +
                   "/val --name emb2 --exist-ok");
  EXPECT_EQ(r.rc, 0) << r.out;
}

// Item 12: a bare config name works in export and val as in train and info.
TEST(InputErrorsE2E, BareConfigNamesWorkInEveryCommand) {
  const auto& f = fixture();
  const std::string dual = f.dir + "/yolov9-t.safetensors";
  e2e::make_checkpoint("yolov9-t", 3, dual);
  auto r = e2e::run_cli("export --weights " + dual + " --cfg yolov9-t.yaml --reparam --out " + f.dir + "/g.safetensors");
  EXPECT_EQ(r.rc, 0) << r.out;
  r = e2e::run_cli("val --cfg gelan-t.yaml --data " + f.data + " --weights " + f.weights + " --img 64 --project " +
                   f.dir + "/val --name bare --exist-ok");
  EXPECT_EQ(r.rc, 0) << r.out;
  r = e2e::run_cli("detect --cfg gelan-t --img 64 --weights " + f.weights + " --source " + f.dir +
                   "/ds/images/val --project " + f.dir + "/det --name bare --exist-ok");
  EXPECT_EQ(r.rc, 0) << r.out;
}
