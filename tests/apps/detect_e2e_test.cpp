// End-to-end tests of detection: source listing (folder, glob, .txt list, missing paths), the
// library loop with a fixed predictor (boxes mapped to the original image and rounded, txt
// labels in reverse NMS order, crops), and `yolov9 detect` on a folder holding an unreadable
// file (the rest is processed, the error names the file) and on a short mp4v video.
#include "apps/training/detector.h"
#include "apps/training/evaluator.h"

#include <gtest/gtest.h>

#include <opencv2/videoio.hpp>

#include <fstream>
#include <regex>

#include "tests/apps/e2e_util.h"

namespace {

namespace fs = std::filesystem;
using engine::Tensor;

struct Fixture {
  std::string dir, images, weights, video;
};

const Fixture& fixture() {
  static Fixture f = [] {
    Fixture x;
    x.dir = e2e::temp_dir("detect");
    e2e::make_dataset(x.dir + "/ds", 3, 128);
    x.images = x.dir + "/imgs";
    fs::create_directories(x.images);
    for (const auto& e : fs::directory_iterator(x.dir + "/ds/images/val"))
      fs::copy_file(e.path(), fs::path(x.images) / e.path().filename());
    std::ofstream(x.images + "/broken.jpg") << "this is not a JPEG";
    std::ofstream(x.images + "/notes.md") << "ignored: not an image";
    x.weights = x.dir + "/gelan-t.safetensors";
    e2e::make_checkpoint("gelan-t", 3, x.weights);
    // a 6-frame 160x96 video
    x.video = x.dir + "/clip.mp4";
    cv::VideoWriter vw(x.video, cv::VideoWriter::fourcc('m', 'p', '4', 'v'), 10, cv::Size(160, 96));
    for (int k = 0; k < 6; ++k) {
      cv::Mat fr(96, 160, CV_8UC3, cv::Scalar(40, 80, 120));
      cv::rectangle(fr, cv::Rect(10 + 10 * k, 20, 40, 30), cv::Scalar(0, 200, 255), -1);
      vw.write(fr);
    }
    return x;
  }();
  return f;
}

TEST(DetectE2E, ListSources) {
  const auto& f = fixture();
  auto all = training::list_sources(f.images);
  ASSERT_EQ(all.size(), 4u);  // 3 images + broken.jpg, not notes.md
  EXPECT_TRUE(std::is_sorted(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.path < b.path; }));
  auto g = training::list_sources(f.images + "/0*.jpg");
  EXPECT_EQ(g.size(), 3u);
  const std::string list = f.dir + "/list.txt";
  std::ofstream(list) << all[0].path << "\n" << f.video << "\n";
  auto l = training::list_sources(list);
  ASSERT_EQ(l.size(), 2u);
  EXPECT_FALSE(l[0].video);
  EXPECT_TRUE(l[1].video);
  try {
    training::list_sources(f.dir + "/nothing_here.jpg");
    FAIL() << "expected IoError";
  } catch (const engine::IoError& e) {
    EXPECT_NE(std::string(e.what()).find("nothing_here.jpg does not exist"), std::string::npos) << e.what();
  }
  EXPECT_THROW(training::list_sources(f.dir + "/*.nomatch"), engine::IoError);
}

// One box at a known letterboxed position, class 1, score 0.9, plus a weaker class-0 box.
TEST(DetectE2E, LibraryLoopMapsBoxes) {
  const auto& f = fixture();
  const fs::path img = training::list_sources(f.images + "/0*.jpg")[1].path;  // 128 x 96 (w x h)
  cv::Mat im0 = cv::imread(img.string());
  ASSERT_EQ(im0.cols, 128);
  ASSERT_EQ(im0.rows, 96);
  training::Predictor pred = [](const Tensor& im, const io::Batch&) {
    // imgsz 256: gain 2, letterbox 256 x 192 (auto pad to 32), no padding
    EXPECT_EQ(im.size(2), 192);
    EXPECT_EQ(im.size(3), 256);
    std::vector<float> p(4 * (4 + 3), 0.f);
    auto put = [&](int a, float cx, float cy, float w, float h, int c, float s) {
      float v[4] = {cx, cy, w, h};
      for (int k = 0; k < 4; ++k) p[k * 4 + a] = v[k];
      p[(4 + c) * 4 + a] = s;
    };
    put(0, 100.6f, 80.f, 40.f, 60.f, 1, 0.9f);
    put(1, 200.f, 120.f, 20.f, 20.f, 0, 0.5f);
    return Tensor::from_vector(p, {1, 7, 4});
  };
  training::DetectOptions o;
  o.imgsz = 256;
  o.save_txt = true;
  o.save_conf = true;
  o.save_crop = true;
  o.names = {"a", "b", "c"};
  o.save_dir = f.dir + "/lib_run";
  training::DetectSummary s = training::run_detect(pred, img.string(), o);
  EXPECT_EQ(s.images, 1);
  EXPECT_EQ(s.detections, 2);
  EXPECT_EQ(s.failed, 0);
  ASSERT_EQ(s.outputs.size(), 1u);
  EXPECT_TRUE(fs::exists(s.outputs[0]));
  std::ifstream t(fs::path(o.save_dir) / "labels" / (img.stem().string() + ".txt"));
  std::string l1, l2;
  std::getline(t, l1);
  std::getline(t, l2);
  // reverse NMS order: the weaker class-0 box first. Box 1 in the original: (80.6, 50, 120.6, 110)
  // / 2 = (40.3, 25, 60.3, 55), rounded to (40, 25, 60, 55).
  EXPECT_EQ(l1, "0 0.78125 0.625 0.078125 0.104167 0.5");
  EXPECT_EQ(l2, "1 0.390625 0.416667 0.15625 0.3125 0.9");
  EXPECT_TRUE(fs::exists(fs::path(o.save_dir) / "crops" / "b" / (img.stem().string() + ".jpg")));
  EXPECT_TRUE(fs::exists(fs::path(o.save_dir) / "crops" / "a" / (img.stem().string() + ".jpg")));
}

TEST(DetectE2E, FolderWithUnreadableFile) {
  const auto& f = fixture();
  const std::string project = f.dir + "/runs_detect";
  auto r = e2e::run_cli("detect --weights '" + f.weights + "' --source '" + f.images +
                        "' --img 128 --conf-thres 0.001 --max-det 5 --save-txt --project '" + project + "' --name exp");
  EXPECT_EQ(r.rc, 1) << r.out;  // one input failed
  EXPECT_NE(r.out.find("broken.jpg"), std::string::npos) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(image 1/4 \S+000000\.jpg: 128x128 .*[0-9.]+ms)"))) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(image 2/4 \S+000001\.jpg: 96x128 )"))) << r.out;
  EXPECT_NE(r.out.find("Speed: "), std::string::npos) << r.out;
  const fs::path run = fs::path(project) / "exp";
  int written = 0;
  for (const auto& e : fs::directory_iterator(run)) written += e.path().extension() == ".jpg";
  EXPECT_EQ(written, 3);  // every readable image annotated
  EXPECT_FALSE(fs::exists(run / "broken.jpg"));
}

TEST(DetectE2E, Video) {
  const auto& f = fixture();
  const std::string project = f.dir + "/runs_video";
  auto r = e2e::run_cli("detect --weights '" + f.weights + "' --source '" + f.video + "' --img 128 --project '" + project +
                        "' --name exp --vid-stride 2 --save-txt --conf-thres 0.01");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(video 1/1 \(3/3\) \S+clip\.mp4: 96x128 )"))) << r.out;
  const std::string out = project + "/exp/clip.mp4";
  cv::VideoCapture cap(out);
  ASSERT_TRUE(cap.isOpened()) << out;
  int frames = 0;
  cv::Mat fr;
  while (cap.read(fr)) {
    EXPECT_EQ(fr.cols, 160);
    EXPECT_EQ(fr.rows, 96);
    ++frames;
  }
  EXPECT_EQ(frames, 3);
}

// --visualize (official detect_dual.py flag): per image a folder <run>/<stem> with one feature grid
// per stage, stage<i>_<module>_features.png (issue 16 item 20).
TEST(DetectE2E, VisualizeWritesStageGrids) {
  const auto& f = fixture();
  const std::string project = f.dir + "/runs_vis";
  const fs::path img = training::list_sources(f.images + "/0*.jpg")[0].path;
  auto r = e2e::run_cli("detect --weights '" + f.weights + "' --source '" + img.string() + "' --img 128 --visualize --project '" +
                        project + "' --name exp");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.out.find("not supported"), std::string::npos) << r.out;
  const fs::path vis = fs::path(project) / "exp" / img.stem();
  ASSERT_TRUE(fs::is_directory(vis)) << r.out;
  int grids = 0;
  for (const auto& e : fs::directory_iterator(vis)) {
    EXPECT_TRUE(std::regex_match(e.path().filename().string(), std::regex(R"(stage\d+_[A-Za-z0-9]+_features\.png)")))
        << e.path();
    EXPECT_FALSE(cv::imread(e.path().string()).empty()) << e.path();
    ++grids;
  }
  EXPECT_GE(grids, 10);  // gelan-t has 22 layers before the head; at 128 px every map is > 1 x 1
  EXPECT_TRUE(fs::exists(vis / "stage0_Conv_features.png"));
  EXPECT_TRUE(fs::exists(fs::path(project) / "exp" / img.filename())) << "the annotated image is still written";
}

TEST(DetectE2E, MissingSource) {
  const auto& f = fixture();
  auto r = e2e::run_cli("detect --weights '" + f.weights + "' --source '" + f.dir + "/nope/*.jpg' --project '" + f.dir +
                        "/runs_missing'");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("No images or videos found in " + f.dir + "/nope/*.jpg"), std::string::npos) << r.out;
}

}  // namespace
