// Detect objects in images with libyolov9_infer.a (docs/inference.md shows this file verbatim).
// Usage: yolov9_infer_example WEIGHTS.safetensors IMAGE... [--conf 0.25]
#include <yolov9/detector.h>

#include <cstdio>
#include <exception>
#include <string>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s WEIGHTS IMAGE... [--conf X]\n", argv[0]);
    return 2;
  }
  yolov9::DetectorOptions opts;  // img_size 640, conf 0.25, iou 0.45, max_det 1000: detect's defaults
  for (int i = 3; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--conf") opts.conf_thres = std::stof(argv[i + 1]);
  try {
    const yolov9::Detector detector(argv[1], opts);  // safetensors from `yolov9 train` / `export`
    for (int i = 2; i < argc && std::string(argv[i]) != "--conf"; ++i)
      for (const yolov9::Box& b : detector.detect(argv[i]))  // xyxy in the image's pixels
        std::printf("%s %d %.5f %.0f %.0f %.0f %.0f %s\n", argv[i], b.class_id, b.score, b.x1, b.y1, b.x2, b.y2,
                    detector.names()[b.class_id].c_str());
  } catch (const std::exception& e) {  // bad weights file, unreadable image: the message names it
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
