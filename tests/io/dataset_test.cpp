// Dataset scan and label validation: every broken kind of the data issue on tiny datasets built
// in a temp folder, the label cache, data.yaml forms, and the coco128 counts.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <thread>

#include "apps/training/evaluator.h"
#include "engine/error.h"
#include "io/data_yaml.h"
#include "io/dataset.h"
#include "io/image.h"
#include "tests/testutil.h"
#include "tests/io/tiny_dataset.h"

namespace fs = std::filesystem;
using tiny::TempDir;

namespace {

const io::Finding* find_for(const io::ScanResult& r, const std::string& file) {
  for (const auto& f : r.findings)
    if (f.file == file) return &f;
  return nullptr;
}

int count_for(const io::ScanResult& r, const std::string& file) {
  return static_cast<int>(std::count_if(r.findings.begin(), r.findings.end(),
                                        [&](const io::Finding& f) { return f.file == file; }));
}

const io::ImageRecord* record_for(const io::ScanResult& r, const std::string& img) {
  for (const auto& x : r.records)
    if (x.image_path == img) return &x;
  return nullptr;
}

// A dataset folder with one good image (so scans never end empty) plus the case under test.
struct Case {
  TempDir dir{"ds"};
  fs::path images = dir.path / "images" / "train";
  fs::path labels = dir.path / "labels" / "train";
  Case() {
    tiny::write_image(images / "good.jpg", tiny::make_image(64, 48));
    tiny::write_text(labels / "good.txt", "0 0.5 0.5 0.2 0.2\n");
  }
  io::ScanResult scan(int nc = 3) const {
    io::ScanOptions o;
    o.nc = nc;
    o.threads = 2;
    return io::scan_dataset({images.string()}, o);
  }
};

}  // namespace

TEST(LabelPath, OfficialRule) {
  EXPECT_EQ(io::image_to_label_path("/d/coco/images/train2017/0001.jpg"), "/d/coco/labels/train2017/0001.txt");
  // last /images/ only; extension after the last dot
  EXPECT_EQ(io::image_to_label_path("/images/x/images/a.b.PNG"), "/images/x/labels/a.b.txt");
  EXPECT_TRUE(io::is_image_file("a/b.JPG"));
  EXPECT_FALSE(io::is_image_file("a/b.gif"));
  EXPECT_FALSE(io::is_image_file("a.jpg/b"));
}

TEST(Scan, GoodImageFoundAndSummary) {
  Case c;
  auto r = c.scan();
  EXPECT_EQ(r.stats.found, 1);
  EXPECT_EQ(r.stats.images, 1);
  EXPECT_EQ(r.stats.boxes, 1);
  EXPECT_TRUE(r.findings.empty());
  EXPECT_NE(r.summary_line().find("1 found, 0 missing, 0 empty, 0 corrupt"), std::string::npos);
  EXPECT_EQ(r.cache_path, (c.dir.path / "labels" / "train.cache").string());
  EXPECT_TRUE(r.trainable());
}

TEST(Scan, MissingAndEmptyLabelsAreBackgrounds) {
  Case c;
  tiny::write_image(c.images / "nolabel.png", tiny::make_image(32, 32));
  tiny::write_image(c.images / "empty.png", tiny::make_image(32, 32));
  tiny::write_text(c.labels / "empty.txt", "\n  \n");
  auto r = c.scan();
  EXPECT_EQ(r.stats.missing, 1);
  EXPECT_EQ(r.stats.empty, 1);
  EXPECT_EQ(r.stats.backgrounds, 2);
  EXPECT_EQ(r.stats.images, 3);
  EXPECT_EQ(r.stats.corrupt, 0);
  EXPECT_TRUE(r.findings.empty());
}

TEST(Scan, ClassOutOfRangeRefusesTraining) {
  Case c;
  tiny::write_image(c.images / "a.jpg", tiny::make_image(32, 32));
  tiny::write_text(c.labels / "a.txt", "1 0.5 0.5 0.1 0.1\n7 0.5 0.5 0.2 0.2\n");
  auto r = c.scan(3);
  const auto* f = find_for(r, (c.labels / "a.txt").string());
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->line, 2);
  EXPECT_EQ(f->action, "refuse");
  EXPECT_NE(f->reason.find("class id 7"), std::string::npos);
  std::string why;
  EXPECT_FALSE(r.trainable(&why));
  // The refusal names the first offending file, line and class.
  EXPECT_NE(why.find((c.labels / "a.txt").string() + ":2: class id 7"), std::string::npos) << why;
  const std::string text = r.findings_text("train: ");
  EXPECT_NE(text.find("train: WARNING " + (c.labels / "a.txt").string() + ":2: class id 7"), std::string::npos)
      << text;
  EXPECT_EQ(r.stats.images, 2);  // official: kept by the scan, refused by train.py's assert
  // --single-cls maps every class to 0, which is in range.
  io::ScanOptions o;
  o.nc = 3;
  o.single_cls = true;
  auto r2 = io::scan_dataset({c.images.string()}, o);
  EXPECT_TRUE(r2.trainable());
  EXPECT_EQ(record_for(r2, (c.images / "a.jpg").string())->labels[1][0], 0.0f);
}

TEST(Scan, CoordinatesOutsideUnitAndNegativeSizeDropImage) {
  Case c;
  tiny::write_image(c.images / "big.jpg", tiny::make_image(32, 32));
  tiny::write_text(c.labels / "big.txt", "0 0.5 0.5 0.1 0.1\n0 1.2 0.5 0.1 0.1\n");
  tiny::write_image(c.images / "neg.jpg", tiny::make_image(32, 32));
  tiny::write_text(c.labels / "neg.txt", "0 0.5 0.5 -0.1 0.1\n");
  tiny::write_image(c.images / "cols.jpg", tiny::make_image(32, 32));
  tiny::write_text(c.labels / "cols.txt", "0 0.5 0.5 0.1\n");
  tiny::write_image(c.images / "text.jpg", tiny::make_image(32, 32));
  tiny::write_text(c.labels / "text.txt", "0 0.5 abc 0.1 0.1\n");
  auto r = c.scan();
  EXPECT_EQ(r.stats.corrupt, 4);
  EXPECT_EQ(r.stats.images, 1);
  const auto* f = find_for(r, (c.labels / "big.txt").string());
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->line, 2);
  EXPECT_EQ(f->action, "dropped");
  EXPECT_NE(f->reason.find("out of bounds"), std::string::npos);
  f = find_for(r, (c.labels / "neg.txt").string());
  ASSERT_NE(f, nullptr);
  EXPECT_NE(f->reason.find("negative box size"), std::string::npos);
  f = find_for(r, (c.labels / "cols.txt").string());
  ASSERT_NE(f, nullptr);
  EXPECT_NE(f->reason.find("5 columns"), std::string::npos);
  ASSERT_NE(find_for(r, (c.labels / "text.txt").string()), nullptr);
  EXPECT_EQ(r.findings.size(), 4u);  // each file reported once
  EXPECT_NE(r.summary_line().find("4 corrupt"), std::string::npos);
}

TEST(Scan, DuplicateRowsRemovedAndSorted) {
  Case c;
  tiny::write_image(c.images / "d.jpg", tiny::make_image(32, 32));
  tiny::write_text(c.labels / "d.txt",
                   "2 0.5 0.5 0.1 0.1\n1 0.3 0.3 0.2 0.2\n2 0.5 0.5 0.1 0.1\n1 0.3 0.3 0.2 0.2\n2 0.5 0.5 0.1 0.1\n");
  auto r = c.scan();
  EXPECT_EQ(r.stats.duplicates_removed, 3);
  const auto* rec = record_for(r, (c.images / "d.jpg").string());
  ASSERT_NE(rec, nullptr);
  ASSERT_EQ(rec->labels.size(), 2u);
  EXPECT_EQ(rec->labels[0][0], 1.0f);  // np.unique order: lexicographic
  EXPECT_EQ(rec->label_lines[0], 2);
  EXPECT_EQ(rec->label_lines[1], 1);
  const auto* f = find_for(r, (c.labels / "d.txt").string());
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->action, "rows removed");
  EXPECT_EQ(f->line, 3);
  EXPECT_EQ(count_for(r, (c.labels / "d.txt").string()), 1);
}

TEST(Scan, PolygonRowsConvertedToBoxes) {
  Case c;
  tiny::write_image(c.images / "p.jpg", tiny::make_image(32, 32));
  tiny::write_text(c.labels / "p.txt", "1 0.1 0.2 0.5 0.2 0.5 0.6 0.1 0.6\n0 0.3 0.3 0.4 0.4 0.3 0.5\n");
  auto r = c.scan();
  const auto* rec = record_for(r, (c.images / "p.jpg").string());
  ASSERT_NE(rec, nullptr);
  ASSERT_EQ(rec->labels.size(), 2u);
  ASSERT_EQ(rec->segments.size(), 2u);
  EXPECT_NEAR(rec->labels[0][1], 0.3f, 1e-6);
  EXPECT_NEAR(rec->labels[0][2], 0.4f, 1e-6);
  EXPECT_NEAR(rec->labels[0][3], 0.4f, 1e-6);
  EXPECT_NEAR(rec->labels[0][4], 0.4f, 1e-6);
  EXPECT_EQ(rec->segments[1].size(), 6u);
  const auto* f = find_for(r, (c.labels / "p.txt").string());
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->action, "converted");
}

TEST(Scan, PngVariantsDecodeAsBgr) {
  Case c;
  tiny::write_image(c.images / "gray.png", tiny::make_image(20, 30, 1, CV_8UC1));
  tiny::write_image(c.images / "g16.png", tiny::make_image(20, 30, 2, CV_16UC1));
  tiny::write_image(c.images / "c16.png", tiny::make_image(20, 30, 2, CV_16UC3));
  tiny::write_image(c.images / "rgba.png", tiny::make_image(20, 30, 3, CV_8UC4));
  tiny::write_image(c.images / "b.bmp", tiny::make_image(20, 30, 4));
  tiny::write_image(c.images / "t.tiff", tiny::make_image(20, 30, 5));
  tiny::write_image(c.images / "w.webp", tiny::make_image(20, 30, 6));
  auto r = c.scan();
  EXPECT_EQ(r.stats.corrupt, 0) << (r.findings.empty() ? "" : r.findings[0].file + ": " + r.findings[0].reason);
  EXPECT_EQ(r.stats.images, 8);
  for (const char* n : {"gray.png", "g16.png", "c16.png", "rgba.png", "b.bmp", "t.tiff", "w.webp"}) {
    cv::Mat m = io::read_image_bgr((c.images / n).string());
    EXPECT_EQ(m.type(), CV_8UC3) << n;
    EXPECT_EQ(m.cols, 20) << n;
    EXPECT_EQ(m.rows, 30) << n;
  }
  // 16-bit is reduced to 8 bits by dropping the low byte
  cv::Mat src16 = cv::imread((c.images / "g16.png").string(), cv::IMREAD_UNCHANGED);
  cv::Mat m = io::read_image_bgr((c.images / "g16.png").string());
  EXPECT_EQ(m.at<cv::Vec3b>(5, 7)[0], src16.at<uint16_t>(5, 7) >> 8);
}

TEST(Scan, BrokenImageFilesDropped) {
  Case c;
  auto jpg = [&] {
    std::vector<unsigned char> b;
    cv::imencode(".jpg", tiny::make_image(40, 40), b);
    return b;
  }();
  tiny::write_bytes(c.images / "trunc.jpg", std::vector<unsigned char>(jpg.begin(), jpg.begin() + jpg.size() / 2));
  tiny::write_bytes(c.images / "zero.jpg", {});
  tiny::write_text(c.images / "text.jpg", "this is not an image\n");
  tiny::write_image(c.images / "tiny.png", tiny::make_image(9, 40));
  for (const char* n : {"trunc", "zero", "text", "tiny"}) tiny::write_text(c.labels / (std::string(n) + ".txt"), "0 0.5 0.5 0.1 0.1\n");
  auto r = c.scan();
  EXPECT_EQ(r.stats.corrupt, 4);
  EXPECT_EQ(r.stats.images, 1);
  for (const char* n : {"trunc.jpg", "zero.jpg", "text.jpg", "tiny.png"}) {
    const auto* f = find_for(r, (c.images / n).string());
    ASSERT_NE(f, nullptr) << n;
    EXPECT_EQ(f->action, "dropped");
    EXPECT_EQ(count_for(r, (c.images / n).string()), 1);
  }
  EXPECT_NE(find_for(r, (c.images / "trunc.jpg").string())->reason.find("truncated"), std::string::npos);
  EXPECT_NE(find_for(r, (c.images / "zero.jpg").string())->reason.find("zero-byte"), std::string::npos);
  EXPECT_NE(find_for(r, (c.images / "tiny.png").string())->reason.find("<10 pixels"), std::string::npos);
  EXPECT_THROW(io::read_image_bgr((c.images / "text.jpg").string()), engine::IoError);
}

TEST(Scan, ExifOrientationApplied) {
  Case c;
  tiny::write_exif_jpeg(c.images / "rot.jpg", 40, 20, 6);
  auto r = c.scan();
  const auto* rec = record_for(r, (c.images / "rot.jpg").string());
  ASSERT_NE(rec, nullptr);
  EXPECT_EQ(rec->width, 20);
  EXPECT_EQ(rec->height, 40);
  cv::Mat m = io::read_image_bgr((c.images / "rot.jpg").string());
  EXPECT_EQ(m.cols, 20);
  EXPECT_EQ(m.rows, 40);
}

TEST(Scan, MinItemsFilter) {
  Case c;
  tiny::write_image(c.images / "two.jpg", tiny::make_image(32, 32));
  tiny::write_text(c.labels / "two.txt", "0 0.5 0.5 0.1 0.1\n1 0.2 0.2 0.1 0.1\n");
  tiny::write_image(c.images / "bg.jpg", tiny::make_image(32, 32));
  io::ScanOptions o;
  o.min_items = 2;
  auto r = io::scan_dataset({c.images.string()}, o);
  EXPECT_EQ(r.stats.images, 1);
  EXPECT_EQ(r.records[0].image_path, (c.images / "two.jpg").string());
  o.min_items = 3;
  try {
    io::scan_dataset({c.images.string()}, o);
    FAIL() << "expected IoError";
  } catch (const engine::IoError& e) {
    EXPECT_NE(std::string(e.what()).find(c.images.string()), std::string::npos);
  }
}

TEST(Scan, ZeroUsableImagesIsAnErrorNamingPaths) {
  TempDir d("empty");
  tiny::write_bytes(d.path / "images" / "x.jpg", {});
  try {
    io::scan_dataset({(d.path / "images").string()}, {});
    FAIL() << "expected IoError";
  } catch (const engine::IoError& e) {
    EXPECT_NE(std::string(e.what()).find((d.path / "images").string()), std::string::npos);
  }
  TempDir d2("none");
  fs::create_directories(d2.path / "images");
  EXPECT_THROW(io::scan_dataset({(d2.path / "images").string()}, {}), engine::IoError);
}

TEST(Scan, ResultsIndependentOfThreadCount) {
  Case c;
  for (int i = 0; i < 12; ++i) {
    tiny::write_image(c.images / ("i" + std::to_string(i) + ".png"), tiny::make_image(16 + i, 16, i));
    if (i % 3) tiny::write_text(c.labels / ("i" + std::to_string(i) + ".txt"), "0 0.5 0.5 0.1 0.1\n");
  }
  io::ScanOptions o;
  o.use_cache = false;
  o.threads = 1;
  auto a = io::scan_dataset({c.images.string()}, o);
  o.threads = 4;
  auto b = io::scan_dataset({c.images.string()}, o);
  ASSERT_EQ(a.records.size(), b.records.size());
  for (size_t i = 0; i < a.records.size(); ++i) EXPECT_EQ(a.records[i].image_path, b.records[i].image_path);
}

TEST(Cache, ReusedRebuiltOnChangeAndOnGarbage) {
  Case c;
  tiny::write_image(c.images / "d.jpg", tiny::make_image(32, 32));
  tiny::write_text(c.labels / "d.txt", "0 0.5 0.5 0.1 0.1\n0 0.5 0.5 0.1 0.1\n");
  auto r1 = c.scan();
  EXPECT_FALSE(r1.cache_loaded);
  ASSERT_TRUE(fs::exists(r1.cache_path));
  auto r2 = c.scan();
  EXPECT_TRUE(r2.cache_loaded);
  EXPECT_EQ(r2.stats.duplicates_removed, 1);
  EXPECT_EQ(r2.findings.size(), r1.findings.size());
  EXPECT_EQ(r2.findings[0].file, r1.findings[0].file);
  // Same byte count, different content: the mtime part of the hash catches it.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  tiny::write_text(c.labels / "d.txt", "1 0.5 0.5 0.1 0.1\n0 0.5 0.5 0.1 0.1\n");
  auto r3 = c.scan();
  EXPECT_FALSE(r3.cache_loaded);
  EXPECT_EQ(r3.stats.duplicates_removed, 0);
  // A garbage cache is rebuilt, never trusted.
  tiny::write_text(r3.cache_path, "{not json");
  auto r4 = c.scan();
  EXPECT_FALSE(r4.cache_loaded);
  EXPECT_NE(r4.cache_note.find("unreadable"), std::string::npos);
  EXPECT_TRUE(c.scan().cache_loaded);
  // A cache with the right hash but a forged version is rebuilt too.
  std::string txt;
  {
    auto b = tiny::read_bytes(r4.cache_path);
    txt.assign(b.begin(), b.end());
  }
  auto pos = txt.find("y9-label-cache-2");
  ASSERT_NE(pos, std::string::npos);
  txt.replace(pos, 16, "y9-label-cache-0");
  tiny::write_text(r4.cache_path, txt);
  EXPECT_FALSE(c.scan().cache_loaded);
}

TEST(Cache, TxtListCacheBesideList) {
  Case c;
  tiny::write_text(c.dir.path / "train.txt", "./images/train/good.jpg\n");
  io::ScanOptions o;
  auto r = io::scan_dataset({(c.dir.path / "train.txt").string()}, o);
  EXPECT_EQ(r.cache_path, (c.dir.path / "train.cache").string());
  EXPECT_EQ(r.stats.images, 1);
}

// Item 13 of issue 16: entries of a .txt list resolve against the list's folder (the official
// code uses the working directory and loses them); blanks, CR and blank lines are stripped; a
// missing entry is a finding naming the list file and line.
TEST(Scan, TxtListRelativeToItsFolderWithBlanksCrlfAndMissingEntries) {
  Case c;
  tiny::write_image(c.images / "b.png", tiny::make_image(32, 32));
  tiny::write_text(c.labels / "b.txt", "1 0.5 0.5 0.3 0.3\n");
  const fs::path list = c.dir.path / "lists" / "train.txt";
  tiny::write_text(list, "\xEF\xBB\xBF../images/train/good.jpg\r\n\r\n   \r\n  ../images/train/b.png \t\r\n"
                         "../images/train/gone.jpg\r\n");
  io::ScanOptions o;
  o.threads = 2;
  const auto r = io::scan_dataset({list.string()}, o);  // the working directory is elsewhere
  EXPECT_EQ(r.stats.images, 2) << r.findings_text("");
  EXPECT_NE(record_for(r, (c.images / "good.jpg").string()), nullptr);
  EXPECT_NE(record_for(r, (c.images / "b.png").string()), nullptr);
  EXPECT_EQ(r.stats.corrupt, 1);
  const io::Finding* f = find_for(r, list.string());
  ASSERT_NE(f, nullptr) << r.findings_text("");
  EXPECT_EQ(f->line, 5);
  EXPECT_NE(f->reason.find("gone.jpg"), std::string::npos) << f->reason;
  EXPECT_NE(r.findings_text("train: ").find(list.string() + ":5: listed image"), std::string::npos);
}

// Item 14: a label file that starts with a UTF-8 byte-order mark parses (the official code drops
// the image as corrupt).
TEST(Scan, LabelWithUtf8BomParses) {
  Case c;
  tiny::write_image(c.images / "bom.jpg", tiny::make_image(32, 32));
  tiny::write_text(c.labels / "bom.txt", "\xEF\xBB\xBF" "2 0.5 0.5 0.25 0.5\r\n1 0.2 0.2 0.1 0.1\r\n");
  const auto r = c.scan();
  const auto* rec = record_for(r, (c.images / "bom.jpg").string());
  ASSERT_NE(rec, nullptr) << r.findings_text("");
  ASSERT_EQ(rec->labels.size(), 2u);
  EXPECT_EQ(r.stats.corrupt, 0);
  EXPECT_TRUE(r.findings.empty()) << r.findings_text("");
  const io::LabelFile lf = io::parse_labels("\xEF\xBB\xBF" "0 0.5 0.5 0.1 0.1\n", "x.txt");
  EXPECT_EQ(lf.status, io::LabelFile::Status::Found);
}

// A NUL or other control byte quoted from a label file is shown as \xNN: the findings text
// prints whole (it used to end at the NUL, hiding every later warning).
TEST(Scan, ControlBytesInALabelDoNotCutTheFindings) {
  Case c;
  tiny::write_image(c.images / "a.jpg", tiny::make_image(32, 32));
  tiny::write_text(c.labels / "a.txt", std::string("0 0.5 0.5 0.1 0.1\n\0\xff\xfe garbage\n", 30));
  tiny::write_image(c.images / "b.jpg", tiny::make_image(32, 32));
  tiny::write_text(c.labels / "b.txt", "0 0.5 0.5 inf 0.1\n");
  const auto r = c.scan();
  const std::string text = r.findings_text("");
  EXPECT_EQ(text.find('\0'), std::string::npos);
  EXPECT_NE(text.find("\\x00"), std::string::npos) << text;
  EXPECT_NE(text.find((c.labels / "b.txt").string()), std::string::npos) << text;
  EXPECT_GE(std::count(text.begin(), text.end(), '\n'), static_cast<std::ptrdiff_t>(r.findings.size())) << text;
}

// Item 15: images under 10 px are dropped from training (official) but kept for validation,
// through the same label cache.
TEST(Scan, SmallImagesDroppedForTrainingKeptForValidation) {
  Case c;
  tiny::write_image(c.images / "small.png", tiny::make_image(6, 40));
  tiny::write_text(c.labels / "small.txt", "0 0.5 0.5 0.5 0.5\n");
  const auto train = c.scan();
  EXPECT_EQ(record_for(train, (c.images / "small.png").string()), nullptr);
  EXPECT_EQ(train.stats.corrupt, 1);
  io::ScanOptions o;
  o.min_image_px = 0;
  const auto val = io::scan_dataset({c.images.string()}, o);  // from the cache the train scan wrote
  EXPECT_TRUE(val.cache_loaded);
  const auto* rec = record_for(val, (c.images / "small.png").string());
  ASSERT_NE(rec, nullptr) << val.findings_text("");
  EXPECT_EQ(rec->width, 6);
  EXPECT_EQ(val.stats.corrupt, 0);
  EXPECT_EQ(val.stats.images, 2);
  // The validation dataset of `val` and of training keeps it.
  const auto ds = training::make_val_dataset({c.images.string()}, 64, 2, true, 0.5, 3, false, 0, "");
  EXPECT_EQ(ds->size(), 2);
}

// ---------------------------------------------------------------------------------------------
// data.yaml

TEST(DataYaml, NamesListMapAndNc) {
  TempDir d("yaml");
  tiny::write_image(d.path / "images" / "a.jpg", tiny::make_image(32, 32));
  tiny::write_text(d.path / "list.yaml", "train: images\nval: images\nnames: [cat, dog]\n");
  auto a = io::load_data_yaml((d.path / "list.yaml").string());
  EXPECT_EQ(a.nc, 2);
  EXPECT_EQ(a.names[1], "dog");
  EXPECT_EQ(a.root, d.path.string());
  EXPECT_EQ(a.train[0], (d.path / "images").string());
  tiny::write_text(d.path / "map.yaml", "path: .\ntrain: images\nval: images\nnc: 3\nnames:\n  2: c\n  0: a\n  1: b\n");
  auto m = io::load_data_yaml((d.path / "map.yaml").string());
  EXPECT_EQ(m.names, (std::vector<std::string>{"a", "b", "c"}));
  tiny::write_text(d.path / "bad_nc.yaml", "train: images\nval: images\nnc: 5\nnames: [a, b]\n");
  try {
    io::load_data_yaml((d.path / "bad_nc.yaml").string());
    FAIL();
  } catch (const engine::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("bad_nc.yaml"), std::string::npos);
  }
  tiny::write_text(d.path / "gap.yaml", "train: images\nval: images\nnames: {0: a, 2: b}\n");
  EXPECT_THROW(io::load_data_yaml((d.path / "gap.yaml").string()), engine::ConfigError);
  tiny::write_text(d.path / "strkey.yaml", "train: images\nval: images\nnames: {x: a}\n");
  EXPECT_THROW(io::load_data_yaml((d.path / "strkey.yaml").string()), engine::ConfigError);
  tiny::write_text(d.path / "nonames.yaml", "train: images\nval: images\n");
  EXPECT_THROW(io::load_data_yaml((d.path / "nonames.yaml").string()), engine::ConfigError);
  tiny::write_text(d.path / "noval.yaml", "train: images\nnames: [a]\n");
  EXPECT_THROW(io::load_data_yaml((d.path / "noval.yaml").string()), engine::ConfigError);
  EXPECT_THROW(io::load_data_yaml((d.path / "absent.yaml").string()), engine::IoError);
  // An empty list names no images (a fuzz finding: it was accepted with no training images).
  for (const char* body : {"train: []\nval: images\nnames: [a]\n", "train: images\nval: []\nnames: [a]\n"}) {
    tiny::write_text(d.path / "empty_list.yaml", body);
    try {
      io::load_data_yaml((d.path / "empty_list.yaml").string());
      ADD_FAILURE() << "expected ConfigError for " << body;
    } catch (const engine::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("empty_list.yaml: '"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("is an empty list"), std::string::npos) << e.what();
    }
  }
  // Values of the wrong type: a ConfigError naming the file and the line.
  for (const char* body : {"train: images\nval: images\nnc: 2.5\nnames: [a, b]\n",
                           "train: images\nval: images\nnames: [a, [b]]\n"}) {
    tiny::write_text(d.path / "types.yaml", body);
    try {
      io::load_data_yaml((d.path / "types.yaml").string());
      ADD_FAILURE() << "expected ConfigError for " << body;
    } catch (const engine::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("types.yaml: line"), std::string::npos) << e.what();
    }
  }
}

TEST(DataYaml, RelativeAbsoluteListsAndTxt) {
  TempDir d("yaml2");
  fs::path root = d.path / "data" / "set";
  tiny::write_image(root / "images" / "tr" / "a.jpg", tiny::make_image(32, 32));
  tiny::write_image(root / "images" / "tr2" / "sub" / "b.png", tiny::make_image(32, 32));
  tiny::write_image(root / "images" / "va" / "c.jpg", tiny::make_image(32, 32));
  tiny::write_text(root / "images" / "va" / "notes.txt", "not an image");
  // .txt list: "./" relative to the list's folder, absolute lines verbatim
  tiny::write_text(root / "val.txt", "./images/va/c.jpg\n" + (root / "images" / "tr" / "a.jpg").string() + "\n\n");
  tiny::write_text(d.path / "cfg" / "d.yaml",
                   "path: ../data/set\ntrain: [images/tr, " + (root / "images" / "tr2").string() +
                       "]\nval: val.txt\ntest: ../images/va\nnames: [x]\n");
  auto cfg = io::load_data_yaml((d.path / "cfg" / "d.yaml").string());
  EXPECT_EQ(cfg.root, root.string());
  ASSERT_EQ(cfg.train.size(), 2u);
  auto tr = io::resolve_image_files(cfg.train);
  ASSERT_EQ(tr.size(), 2u);
  EXPECT_EQ(tr[0], (root / "images" / "tr" / "a.jpg").string());
  EXPECT_EQ(tr[1], (root / "images" / "tr2" / "sub" / "b.png").string());
  auto va = io::resolve_image_files(cfg.val);
  ASSERT_EQ(va.size(), 2u);
  EXPECT_EQ(va[1], (root / "images" / "va" / "c.jpg").string());
  // "../images/va" does not exist under root/.. -> retried without "../" (official quirk)
  ASSERT_EQ(cfg.test.size(), 1u);
  EXPECT_EQ(cfg.test[0], (root / "images" / "va").string());
  EXPECT_EQ(io::resolve_image_files(cfg.test).size(), 1u);
  try {
    io::resolve_image_files({(root / "nope").string()});
    FAIL();
  } catch (const engine::IoError& e) {
    EXPECT_NE(std::string(e.what()).find((root / "nope").string()), std::string::npos);
  }
}

// Found by fuzz/data_yaml_fuzz: a path component longer than the OS allows made
// std::filesystem throw its own error (ENAMETOOLONG) instead of the engine's IoError.
TEST(DataYaml, OverlongPathsAreOrdinaryMissingPaths) {
  const std::string longname(5000, 'n');
  const io::DataConfig c =
      io::parse_data_yaml("train: ../" + longname + "\nval: " + longname + "\nnames: [a]\n", "/nonexistent/d/data.yaml");
  ASSERT_EQ(c.train.size(), 1u);
  EXPECT_THROW(io::resolve_image_files(c.train), engine::IoError);
  EXPECT_THROW(io::load_data_yaml("/nonexistent/" + longname + ".yaml"), engine::IoError);
}

// ---------------------------------------------------------------------------------------------
// coco128: the counts the official scan reports.

TEST(Coco128, OfficialCounts) {
  const std::string dir = testutil::coco128_dir();
  if (dir.empty()) GTEST_SKIP() << "coco128 not found (set YOLOV9_COCO128)";
  auto cfg = io::load_data_yaml(dir + "/coco128.yaml");
  EXPECT_EQ(cfg.nc, 80);
  EXPECT_EQ(cfg.names[79], "toothbrush");
  io::ScanOptions o;
  o.nc = cfg.nc;
  o.use_cache = false;  // never write into the shared data folder from tests
  auto r = io::scan_dataset(cfg.train, o);
  EXPECT_EQ(r.stats.images, 128);
  EXPECT_EQ(r.stats.found, 126);
  EXPECT_EQ(r.stats.missing, 2);
  EXPECT_EQ(r.stats.empty, 0);
  EXPECT_EQ(r.stats.corrupt, 0);
  EXPECT_EQ(r.stats.backgrounds, 2);
  EXPECT_TRUE(r.trainable());
  EXPECT_NE(r.summary_line().find("126 found, 2 missing, 0 empty, 0 corrupt"), std::string::npos);
  // The 2 label files without an image are ignored: no record points at them.
  for (const auto& rec : r.records) EXPECT_TRUE(fs::exists(rec.image_path));
}
