// `yolov9 synth --out DIR [--n-train 256] [--n-val 64] [--img 320] [--seed 0] [--classes 3]`:
// the command-line driver of io/synth (shapes dataset in the YOLO layout with data.yaml).
#include "apps/synth.h"

#include <cstdio>

#include "apps/commands.h"
#include "io/synth.h"

namespace apps {


void register_synth(CLI::App& app) {
  static io::SynthOptions opt;  // CLI11 binds options to storage that outlives parsing
  add_command(
      app, "synth", "write a small synthetic detection dataset (shapes, YOLO layout, data.yaml)",
      [](CLI::App& sub) {
        sub.add_option("--out", opt.out_dir, "dataset root folder (created)")->required();
        sub.add_option("--n-train", opt.n_train, "number of training images")->capture_default_str();
        sub.add_option("--n-val", opt.n_val, "number of validation images")->capture_default_str();
        sub.add_option("--img", opt.img_size, "image size in pixels (square)")->capture_default_str();
        sub.add_option("--seed", opt.seed, "random seed (Philox)")->capture_default_str();
        sub.add_option("--classes", opt.classes, "1..4 of rectangle, ellipse, triangle, cross")
            ->capture_default_str();
      },
      []() {
        io::SynthSummary s = io::write_synth_dataset(opt);
        std::printf("synth: wrote %lld train + %lld val images (%lld objects, %d classes, %d px) to %s\n",
                    static_cast<long long>(s.train_images), static_cast<long long>(s.val_images),
                    static_cast<long long>(s.objects), opt.classes, opt.img_size, opt.out_dir.c_str());
        return 0;
      });
}

}  // namespace apps
