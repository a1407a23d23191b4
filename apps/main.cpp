// The `yolov9` program: version/backends report and the subcommand skeleton (train, val, detect,
// export, info, dataset, synth, bench). Each subcommand's driver lives in apps/<name>.cpp.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <new>
#include <string>
#include <typeinfo>

#include "apps/commands.h"
#include "engine/backend.h"
#include "engine/build_info.h"
#include "engine/device.h"
#include "engine/error.h"

namespace {

void print_version() {
  std::printf("yolov9 %s (git %s, %s)\n", Y9_VERSION_STRING, Y9_GIT_SHA, Y9_BUILD_TYPE);
  std::printf("  compiler: %s\n", Y9_CXX_COMPILER);
  std::printf("  backends: cpu (oneDNN convolutions, OpenBLAS GEMM, OpenMP)");
  if (engine::cuda_compiled()) std::printf(", cuda (%s, sm %s)", Y9_CUDA_COMPILER, Y9_CUDA_ARCHITECTURES);
  std::printf("\n");
  for (engine::Backend* b : engine::present_backends())
    std::printf("  %s kernel entries: %zu (yolov9 info --backends lists them with their dtypes)\n", b->name(),
                b->entries().size());
  int n = engine::cuda_device_count();
  if (!engine::cuda_compiled())
    std::printf("  gpu: not compiled in\n");
  else if (n == 0)
    std::printf("  gpu: none visible (no CUDA driver or device)\n");
  else
    std::printf("  gpu: %d visible\n", n);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"yolov9: a YOLOv9 training engine in C++ and CUDA (train, val, detect, export)"};
  app.require_subcommand(0, 1);
  bool version = false;
  app.add_flag("-V,--version", version, "print version, compiled backends and visible GPUs");

  apps::register_commands(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help prints and exits 0; every command-line error exits 1, like every other error
    // (CLI11's own codes, 105-114, would tell a script nothing more).
    return app.exit(e) == 0 ? 0 : 1;
  }
  if (version) {
    print_version();
    return 0;
  }
  if (app.get_subcommands().empty()) {
    std::cout << app.help();
    return 0;
  }
  const bool debug = engine::debug_messages();
  try {
    return apps::run_selected(app);
  } catch (...) {
    std::fflush(stdout);  // the error line after everything printed so far, not inside a line
    try {
      throw;
    } catch (const engine::InternalError& e) {
      std::fprintf(stderr, "\nyolov9: internal error (a bug in yolov9, please report it%s): %s\n",
                   debug ? "" : "; Y9_DEBUG=1 adds the source location", debug ? e.what() : e.message().c_str());
    } catch (const engine::Error& e) {
      std::fprintf(stderr, "\nyolov9: error: %s\n", debug ? e.what() : e.message().c_str());
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr, "\nyolov9: error: out of memory (the model, batch size or image size is too large for this "
                           "machine, or an input file declares an absurd size)\n");
    } catch (const std::exception& e) {
      // Not an engine::Error: a library message that names no input. Say so, keep the text.
      std::fprintf(stderr, "\nyolov9: error: unexpected failure (%s%s%s)\n", e.what(), debug ? "; type " : "",
                   debug ? typeid(e).name() : "");
    } catch (...) {
      std::fprintf(stderr, "\nyolov9: error: unexpected failure (an exception of unknown type)\n");
    }
    return 1;
  }
}
