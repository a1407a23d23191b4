// The subcommand table. Subcommands not implemented yet say so and exit with status 2.
#include "apps/commands.h"

#include <cstdio>
#include <map>

#include "engine/device.h"
#include "engine/tensor.h"
#include "apps/detect.h"
#ifndef Y9_INFERENCE_ONLY
#include "apps/dataset.h"
#include "apps/export.h"
#include "apps/selfcheck.h"
#include "apps/synth.h"
#include "apps/train.h"
#include "apps/val.h"
#endif

namespace apps {

namespace {
std::map<std::string, std::function<int()>>& runners() {
  static std::map<std::string, std::function<int()>> r;  // filled once at start-up
  return r;
}

[[maybe_unused]] void add_pending(CLI::App& app, const std::string& name, const std::string& description, const char* issue) {
  add_command(app, name, description, [](CLI::App& sub) { sub.allow_extras(); },
              [name, issue]() {
                std::fprintf(stderr, "yolov9 %s: not implemented yet (%s)\n", name.c_str(), issue);
                return 2;
              });
}
}  // namespace

void add_command(CLI::App& app, const std::string& name, const std::string& description,
                 const std::function<void(CLI::App&)>& setup, std::function<int()> run) {
  CLI::App* sub = app.add_subcommand(name, description);
  setup(*sub);
  runners()[name] = std::move(run);
}

int run_selected(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands()) {
    auto it = runners().find(sub->get_name());
    if (it != runners().end()) return it->second();
  }
  return 2;
}

void register_commands(CLI::App& app) {
#ifdef Y9_INFERENCE_ONLY
  register_detect(app);  // the embedded inference build (preset `inference`): detect only
#else
  register_train(app);
  register_val(app);
  register_detect(app);
  register_export(app);
  register_dataset(app);
  register_synth(app);
  add_pending(app, "bench", "(not implemented yet: run the build/*_bench programs)", "run the build/*_bench programs");
  register_info(app);
#endif
}

}  // namespace apps
