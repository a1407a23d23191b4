// End-to-end tests of how `yolov9 train` survives interruptions (issue 16, items 1 to 6): kill -9
// at random points, SIGTERM, a full disk (a small tmpfs), two Ctrl-C presses, a data error in
// mid-epoch; resume in the recorded run folder, bare --resume refusing a run without checkpoint,
// results.csv never repeating an epoch, stale temporaries removed, a changed dataset reported.
// Every recovered run must end with the results.csv of an uninterrupted --deterministic run.
// Runs the built program (Y9_BINARY_DIR/yolov9) on a tiny synthetic dataset (64 px images).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "io/synth.h"

namespace fs = std::filesystem;

namespace {

fs::path g_root;

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// Exit status as a shell reports it: the exit code, or 128 + signal when killed by one.
int status_code(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1; }

struct RunResult {
  int code = -1;  ///< exit code, or 128 + signal
  bool signaled = false;
  int signal = 0;
  std::string out;
};

std::string exe() { return std::string(Y9_BINARY_DIR) + "/yolov9"; }

/// Starts `yolov9 args` (one OpenMP thread: bitwise comparisons need a fixed thread count) with
/// stdout and stderr to `log`; the pid is the program's own (sh execs it).
pid_t spawn(const std::string& args, const fs::path& log, const std::string& env = "") {
  const std::string cmd =
      "exec env OMP_NUM_THREADS=1 " + env + " '" + exe() + "' " + args + " > '" + log.string() + "' 2>&1";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

RunResult wait_for(pid_t pid, const fs::path& log) {
  int st = 0;
  ::waitpid(pid, &st, 0);
  RunResult r;
  r.code = status_code(st);
  r.signaled = WIFSIGNALED(st);
  r.signal = r.signaled ? WTERMSIG(st) : 0;
  r.out = read_file(log);
  return r;
}

RunResult run(const std::string& args, const std::string& env = "") {
  const fs::path log = g_root / "cmd.log";
  return wait_for(spawn(args, log, env), log);
}

/// Waits until `log` contains `text` (or `timeout_s` pass); true when seen.
bool wait_for_text(const fs::path& log, const std::string& text, double timeout_s) {
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < timeout_s) {
    if (read_file(log).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

std::string data_yaml() { return (g_root / "data" / "data.yaml").string(); }

/// 16 images / batch 8 = 2 batches per epoch.
std::string base_args(const fs::path& project, const std::string& name, int epochs, int img = 64) {
  return "train --cfg gelan-t.yaml --data " + data_yaml() + " --img " + std::to_string(img) +
         " --batch 8 --workers 2 --deterministic --epochs " + std::to_string(epochs) + " --project " + project.string() +
         " --name " + name + " --exist-ok";
}

std::vector<std::string> temporaries(const fs::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string().find(".tmp.") != std::string::npos) out.push_back(e.path().string());
  return out;
}

/// After an interruption: resume while there is a checkpoint, start again while there is none,
/// until the run completes (at most `tries` commands). Returns the last command's output.
std::string recover(const fs::path& project, const std::string& name, int epochs, int tries = 4) {
  const fs::path last = project / name / "weights" / "last.safetensors";
  std::string out;
  for (int k = 0; k < tries; ++k) {
    if (fs::exists(last)) {
      // A finished checkpoint is refused ("complete"), after putting results.csv in order.
      const RunResult r = run("train --resume " + last.string());
      out += r.out;
      if (r.code == 0 || r.out.find("training of this run is complete") != std::string::npos) return out;
    } else {
      const RunResult r = run(base_args(project, name, epochs));
      out += r.out;
      if (r.code == 0) return out;
    }
  }
  ADD_FAILURE() << "run " << name << " did not complete after " << tries << " tries:\n" << out;
  return out;
}

constexpr int kEpochs = 3;

class TrainRecoveryE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g_root = fs::temp_directory_path() / ("y9_recovery_e2e_" + std::to_string(::getpid()));
    fs::create_directories(g_root);
    io::SynthOptions so;
    so.out_dir = (g_root / "data").string();
    so.n_train = 16;
    so.n_val = 8;
    so.img_size = 64;
    so.seed = 1;
    io::write_synth_dataset(so);
    // The uninterrupted run every recovered run must reproduce.
    const auto t0 = std::chrono::steady_clock::now();
    const RunResult r = run(base_args(g_root / "ref", "straight", kEpochs));
    straight_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_EQ(r.code, 0) << r.out;
    ref_csv_ = read_file(g_root / "ref" / "straight" / "results.csv");
    ASSERT_EQ(std::count(ref_csv_.begin(), ref_csv_.end(), '\n'), kEpochs + 1) << ref_csv_;
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    if (!std::getenv("Y9_KEEP_TEST_DIRS")) fs::remove_all(g_root, ec);
  }
  static double straight_s_;
  static std::string ref_csv_;
};
double TrainRecoveryE2E::straight_s_ = 0;
std::string TrainRecoveryE2E::ref_csv_;

}  // namespace

// Item 1: a crash after results.csv got a row but before its checkpoint (the old order) made the
// resumed run write that epoch again. Resume now restores results.csv to the checkpoint's epochs,
// and removes the temporary a killed save left behind.
TEST_F(TrainRecoveryE2E, ResumeNeverRepeatsAnEpochAndRemovesStaleTemporaries) {
  const fs::path proj = g_root / "dup";
  const RunResult a = run(base_args(proj, "r", kEpochs) + " --stop-after-batches 2");  // stops after epoch 0
  ASSERT_EQ(a.code, 0) << a.out;
  const fs::path csv = proj / "r" / "results.csv";
  // The row of epoch 1 as a run killed right after it would have left it (no checkpoint of epoch
  // 1), and a half-written checkpoint of a dead process.
  const size_t row1 = ref_csv_.find('\n', ref_csv_.find('\n') + 1) + 1;
  std::ofstream(csv, std::ios::app) << ref_csv_.substr(row1, ref_csv_.find('\n', row1) + 1 - row1);
  const fs::path stale = proj / "r" / "weights" / "last.safetensors.tmp.999999999";
  std::ofstream(stale) << "half a checkpoint";
  const RunResult b = run("train --resume " + (proj / "r" / "weights" / "last.safetensors").string());
  ASSERT_EQ(b.code, 0) << b.out;
  EXPECT_EQ(read_file(csv), ref_csv_) << "results.csv after resume differs from the uninterrupted run";
  EXPECT_FALSE(fs::exists(stale)) << b.out;
  EXPECT_NE(b.out.find("left by an interrupted save"), std::string::npos) << b.out;
  EXPECT_TRUE(temporaries(proj / "r" / "weights").empty());
}

// --resume from best.safetensors (or epochN) of a finished run would train over its final
// weights and results.csv: refused, as the official code refuses a stripped best.pt. Nothing of
// the run changes.
TEST_F(TrainRecoveryE2E, ResumeFromBestOfAFinishedRunIsRefusedAndChangesNothing) {
  const fs::path run_dir = g_root / "ref" / "straight";
  const fs::path last = run_dir / "weights" / "last.safetensors";
  const std::string last_before = read_file(last);
  const RunResult r = run("train --resume " + (run_dir / "weights" / "best.safetensors").string());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("is complete"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("best.safetensors"), std::string::npos) << r.out;
  EXPECT_EQ(read_file(run_dir / "results.csv"), ref_csv_);
  EXPECT_TRUE(read_file(last) == last_before) << "last.safetensors changed";
}

// A kill during the final plots (after the last checkpoint) leaves a plot's temporary: the
// refused --resume of the complete run is the next run, and removes it (Y9_KILL_SEED=258034923 of
// the kill test once hit this window).
TEST_F(TrainRecoveryE2E, RefusedResumeOfACompleteRunRemovesStaleTemporaries) {
  const fs::path run_dir = g_root / "ref" / "straight";
  const fs::path stale = run_dir / "results.png.tmp.999999999";
  std::ofstream(stale) << "half a plot";
  const RunResult r = run("train --resume " + (run_dir / "weights" / "last.safetensors").string());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("is complete"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(stale)) << r.out;
  EXPECT_EQ(read_file(run_dir / "results.csv"), ref_csv_);
}

// Item 2: --resume PATH continues in the run folder recorded in the checkpoint, wherever the
// checkpoint file has been copied to.
TEST_F(TrainRecoveryE2E, ResumeFromACopiedCheckpointContinuesInTheRecordedRunFolder) {
  const fs::path proj = g_root / "loose_proj";
  const RunResult a = run(base_args(proj, "r", kEpochs) + " --stop-after-batches 3");  // mid epoch 1
  ASSERT_EQ(a.code, 0) << a.out;
  const fs::path loose = g_root / "loose" / "sub" / "ck.safetensors";
  fs::create_directories(loose.parent_path());
  fs::copy_file(proj / "r" / "weights" / "last.safetensors", loose);
  const RunResult b = run("train --resume " + loose.string());
  ASSERT_EQ(b.code, 0) << b.out;
  EXPECT_NE(b.out.find("in run folder " + (proj / "r").string()), std::string::npos) << b.out;
  EXPECT_EQ(read_file(proj / "r" / "results.csv"), ref_csv_);
  EXPECT_FALSE(fs::exists(g_root / "loose" / "results.csv"));
  EXPECT_FALSE(fs::exists(g_root / "loose" / "sub" / "results.csv"));
}

// Item 3: bare --resume says which run it resumes, and refuses when the newest run has no
// checkpoint instead of silently picking an older unfinished run.
TEST_F(TrainRecoveryE2E, BareResumeNamesTheRunAndRefusesANewestRunWithoutCheckpoint) {
  const fs::path proj = g_root / "bare" / "train";
  const RunResult a = run(base_args(proj, "older", kEpochs) + " --stop-after-batches 2");
  ASSERT_EQ(a.code, 0) << a.out;
  // A newer run killed before its first checkpoint: its folder and opt.yaml, no weights.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  fs::create_directories(proj / "newer" / "weights");
  fs::copy_file(proj / "older" / "opt.yaml", proj / "newer" / "opt.yaml");
  fs::last_write_time(proj / "newer" / "opt.yaml", fs::file_time_type::clock::now() + std::chrono::seconds(5));
  RunResult r = run("train --resume --project " + proj.string());
  EXPECT_GT(r.code, 0) << r.out;
  EXPECT_LT(r.code, 128) << r.out;
  EXPECT_NE(r.out.find((proj / "newer").string()), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("no checkpoint"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("Resuming training from"), std::string::npos) << "must not resume another run:\n" << r.out;
  fs::remove_all(proj / "newer");
  r = run("train --resume --project " + proj.string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("the newest run is " + (proj / "older").string()), std::string::npos) << r.out;
  EXPECT_EQ(read_file(proj / "older" / "results.csv"), ref_csv_);
}

// Item 4: the first Ctrl-C stops cleanly (checkpoint, exit 130); a second one kills at once.
TEST_F(TrainRecoveryE2E, TwoCtrlCKillAtOnce) {
  const fs::path proj = g_root / "ctrlc";
  const fs::path log = g_root / "ctrlc.log";
  // 160 px: a batch lasts long enough for the second press to land before the clean stop ends.
  const pid_t pid = spawn(base_args(proj, "r", 200, 160), log);
  ASSERT_TRUE(wait_for_text(log, "Starting training", 120)) << read_file(log);
  ASSERT_TRUE(wait_for_text(log, "Epoch", 60)) << read_file(log);  // inside the loop: handlers installed
  ::kill(pid, SIGINT);
  // The second press once the first has been handled (two pending SIGINTs are one signal).
  EXPECT_TRUE(wait_for_text(log, "press Ctrl-C again", 60)) << read_file(log);
  ::kill(pid, SIGINT);
  const RunResult r = wait_for(pid, log);
  EXPECT_TRUE(r.signaled && r.signal == SIGINT) << "exit code " << r.code << " (want killed by SIGINT)\n" << r.out;
  // One Ctrl-C: a clean stop with a resumable checkpoint.
  const fs::path log2 = g_root / "ctrlc_one.log";
  const pid_t pid2 = spawn(base_args(proj, "one", 200), log2);
  ASSERT_TRUE(wait_for_text(log2, "Epoch", 120)) << read_file(log2);
  ::kill(pid2, SIGINT);
  const RunResult r2 = wait_for(pid2, log2);
  EXPECT_FALSE(r2.signaled) << r2.out;
  EXPECT_EQ(r2.code, 130) << r2.out;
  EXPECT_NE(r2.out.find("Interrupted (SIGINT)"), std::string::npos) << r2.out;
  EXPECT_TRUE(fs::exists(proj / "one" / "weights" / "last.safetensors"));
}

// Items 5 and 6: images that break after the scan (same size and mtime, so the label cache is
// trusted) beyond what the loader can replace (issue 12: an unreadable training image is replaced
// by another sample with a warning; here every image of batch 1 is broken) stop training in
// mid-epoch with a resumable checkpoint naming the image; after the images are fixed (a new
// mtime: the dataset changed) --resume warns that the data changed, and completes.
TEST_F(TrainRecoveryE2E, DataErrorInMidEpochSavesACheckpointAndResumeWarnsTheDataChanged) {
  const fs::path data = g_root / "data_err";
  io::SynthOptions so;
  so.out_dir = data.string();
  so.n_train = 16;
  so.n_val = 4;
  so.img_size = 64;
  so.seed = 3;
  io::write_synth_dataset(so);
  const fs::path proj = g_root / "dataerr";
  // --rect: no mosaic, no shuffle, batches in path order, so the last 8 images are batch 1 (rect
  // mode replaces a sample only within its batch, whose shape it shares).
  const std::string args = "train --cfg gelan-t.yaml --data " + (data / "data.yaml").string() +
                           " --img 64 --batch 8 --workers 2 --deterministic --rect --epochs 2 --project " +
                           proj.string() + " --name r --exist-ok";
  RunResult r = run("dataset --data " + (data / "data.yaml").string());  // writes the label cache
  ASSERT_EQ(r.code, 0) << r.out;
  std::vector<fs::path> imgs;
  for (const auto& e : fs::directory_iterator(data / "images" / "train")) imgs.push_back(e.path());
  std::sort(imgs.begin(), imgs.end());
  ASSERT_EQ(imgs.size(), 16u);
  const std::vector<fs::path> broken(imgs.begin() + 8, imgs.end());
  std::vector<std::string> good_bytes;
  const auto mtime = fs::last_write_time(broken[0]);
  for (const fs::path& bad : broken) {
    good_bytes.push_back(read_file(bad));
    const auto t = fs::last_write_time(bad);
    std::ofstream(bad, std::ios::binary | std::ios::trunc) << std::string(good_bytes.back().size(), '\0');
    fs::last_write_time(bad, t);
  }
  r = run(args);
  EXPECT_GT(r.code, 0) << r.out;
  EXPECT_LT(r.code, 128) << r.out;
  bool named = false;
  for (const fs::path& bad : broken) named = named || r.out.find(bad.string()) != std::string::npos;
  EXPECT_TRUE(named) << "the message names the broken image:\n" << r.out;
  // A warning is printed only for a replacement that was read; none could be here.
  EXPECT_EQ(r.out.find("sample replaced by"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Data error at epoch"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--resume"), std::string::npos) << r.out;
  const fs::path last = proj / "r" / "weights" / "last.safetensors";
  ASSERT_TRUE(fs::exists(last)) << "no checkpoint after the data error:\n" << r.out;
  const io::Checkpoint ck = io::load_checkpoint(last.string());
  EXPECT_EQ(ck.meta.at("epoch"), "-1");
  EXPECT_EQ(ck.meta.at("next_batch"), "1") << "batch 0 was trained; batch 1 hit the broken image";
  // Fix the images (they get a new mtime: the dataset changed since the checkpoint).
  for (size_t k = 0; k < broken.size(); ++k) {
    std::ofstream(broken[k], std::ios::binary | std::ios::trunc) << good_bytes[k];
    fs::last_write_time(broken[k], mtime + std::chrono::seconds(10));
  }
  r = run("train --resume " + last.string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("training data changed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("continues at batch 1"), std::string::npos) << r.out;
}

// Issue 12 (QA): a validation image damaged after the scan (validation never substitutes an image)
// stops training after the epoch's batches with a checkpoint that has them all done; after the
// image is fixed, --resume runs only that validation and the run ends with the uninterrupted
// run's results.csv.
TEST_F(TrainRecoveryE2E, DataErrorInValidationKeepsTheEpochAndResumeGivesTheUninterruptedResults) {
  const fs::path data = g_root / "data_valerr";
  fs::copy(g_root / "data", data, fs::copy_options::recursive);
  for (const auto& e : fs::recursive_directory_iterator(data))
    if (e.path().extension() == ".cache") fs::remove(e.path());
  {  // the copy's data.yaml points at the copy
    std::string y = read_file(data / "data.yaml");
    const std::string from = (g_root / "data").string(), to = data.string();
    for (size_t at = y.find(from); at != std::string::npos; at = y.find(from, at + to.size())) y.replace(at, from.size(), to);
    std::ofstream(data / "data.yaml") << y;
  }
  RunResult r = run("dataset --data " + (data / "data.yaml").string());  // writes the label caches
  ASSERT_EQ(r.code, 0) << r.out;
  std::vector<fs::path> vals;
  for (const auto& e : fs::directory_iterator(data / "images" / "val")) vals.push_back(e.path());
  std::sort(vals.begin(), vals.end());
  ASSERT_FALSE(vals.empty());
  const fs::path bad = vals.front();
  const std::string good_bytes = read_file(bad);
  const auto mtime = fs::last_write_time(bad);
  std::ofstream(bad, std::ios::binary | std::ios::trunc) << std::string(good_bytes.size(), '\0');
  fs::last_write_time(bad, mtime);
  const fs::path proj = g_root / "valerr";
  std::string args = base_args(proj, "r", kEpochs);
  args.replace(args.find(data_yaml()), data_yaml().size(), (data / "data.yaml").string());
  r = run(args);
  EXPECT_GT(r.code, 0) << r.out;
  EXPECT_LT(r.code, 128) << r.out;
  EXPECT_NE(r.out.find(bad.string()), std::string::npos) << "the message names the image:\n" << r.out;
  EXPECT_NE(r.out.find("Data error in validation after epoch 0"), std::string::npos) << r.out;
  const fs::path last = proj / "r" / "weights" / "last.safetensors";
  ASSERT_TRUE(fs::exists(last)) << "no checkpoint after the validation data error:\n" << r.out;
  const io::Checkpoint ck = io::load_checkpoint(last.string());
  EXPECT_EQ(ck.meta.at("epoch"), "-1");
  EXPECT_EQ(ck.meta.at("next_batch"), "2") << "both batches of epoch 0 were trained";
  std::ofstream(bad, std::ios::binary | std::ios::trunc) << good_bytes;
  fs::last_write_time(bad, mtime);
  r = run("train --resume " + last.string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(read_file(proj / "r" / "results.csv"), ref_csv_) << "results.csv after resume differs from the uninterrupted run";
}

// The kill test: kill -9 at random points of 10 runs, then recover (--resume, or a new start
// when no checkpoint was written yet): results.csv always equals the uninterrupted run's.
// SIGTERM likewise (a clean stop, exit 143). Y9_KILL_RUNS and Y9_KILL_SEED change the count and
// the points.
TEST_F(TrainRecoveryE2E, KillMinus9AndSigtermAtRandomPointsThenResumeGivesTheUninterruptedResults) {
  const int runs = std::getenv("Y9_KILL_RUNS") ? std::atoi(std::getenv("Y9_KILL_RUNS")) : 10;
  const unsigned seed = std::getenv("Y9_KILL_SEED") ? static_cast<unsigned>(std::atoi(std::getenv("Y9_KILL_SEED")))
                                                    : std::random_device{}();
  std::mt19937 rng(seed);
  // Kill points are drawn over the run's length; a run that ends before its signal does not
  // count, and the window shrinks to the shortest such run.
  double window = straight_s_;
  std::printf("kill test: seed %u, uninterrupted run %.2f s\n", seed, straight_s_);
  const fs::path proj = g_root / "kill";
  int killed = 0, termed = 0, with_ckpt = 0, mid_epoch = 0, attempts = 0;
  while ((killed < runs || termed < 3) && attempts < 3 * (runs + 3)) {
    const bool term = killed >= runs;  // after the kill -9 runs, three with SIGTERM
    const std::string name = (term ? "term" : "kill") + std::to_string(attempts++);
    const fs::path log = g_root / (name + ".log");
    const double t = std::uniform_real_distribution<double>(0.0, window)(rng);
    const pid_t pid = spawn(base_args(proj, name, kEpochs), log);
    std::this_thread::sleep_for(std::chrono::duration<double>(t));
    ::kill(pid, term ? SIGTERM : SIGKILL);
    const RunResult r = wait_for(pid, log);
    if (r.code == 0) {  // finished before the signal
      window = std::min(window, t);
      continue;
    }
    (term ? termed : killed)++;
    const fs::path last = proj / name / "weights" / "last.safetensors";
    std::string state = "no checkpoint";
    if (fs::exists(last)) {
      const io::Checkpoint ck = io::load_checkpoint(last.string());
      state = "checkpoint epoch " + ck.meta.at("epoch") + " next_batch " + ck.meta.at("next_batch");
      ++with_ckpt;
      mid_epoch += ck.meta.at("next_batch") != "0";
    }
    std::printf("  %s at %.3f s: exit %d%s, %s, %zu temporaries left\n", term ? "SIGTERM" : "kill -9", t, r.code,
                r.signaled ? " (by the signal)" : "", state.c_str(),
                temporaries(proj / name / "weights").size() + temporaries(proj / name).size());
    if (term) {
      // Inside the loop: a clean stop (exit 143) with its checkpoint; during set-up, before the
      // handler is installed: the default action.
      EXPECT_TRUE(r.signaled ? r.signal == SIGTERM : r.code == 143) << r.out;
      if (!r.signaled) EXPECT_NE(r.out.find("Terminated (SIGTERM)"), std::string::npos) << r.out;
      if (!r.signaled) EXPECT_TRUE(fs::exists(last)) << r.out;
    } else {
      EXPECT_TRUE(r.signaled && r.signal == SIGKILL) << r.out;
    }
    const std::string out = recover(proj, name, kEpochs);
    EXPECT_EQ(read_file(proj / name / "results.csv"), ref_csv_) << name << " stopped at " << t << " s (" << state
                                                                  << "), recovery output:\n" << out;
    for (const fs::path& d : {proj / name / "weights", proj / name})
      for (const auto& t : temporaries(d)) ADD_FAILURE() << name << ": temporary left after recovery: " << t;
  }
  EXPECT_EQ(killed, runs);
  EXPECT_EQ(termed, 3);
  std::printf("kill test: %d kill -9 and %d SIGTERM runs recovered to the uninterrupted results.csv; %d had a "
              "checkpoint when stopped (%d in mid-epoch)\n", killed, termed, with_ckpt, mid_epoch);
}

// The full-disk test: the run folder on a small tmpfs (a private mount namespace: `unshare`) with
// a filler file leaving a random amount of space, so writes fail at different points (hyp.yaml,
// a plot, a checkpoint, results.csv). The error says "No space left on device" and names the
// file; after the filler is removed, recovery gives the uninterrupted results.csv.
TEST_F(TrainRecoveryE2E, FullDiskThenResumeGivesTheUninterruptedResults) {
  const fs::path mnt = g_root / "tmpfs";
  fs::create_directories(mnt);
  const std::string probe = "unshare --mount sh -c 'mount -t tmpfs -o size=1m tmpfs " + mnt.string() + "' 2>/dev/null";
  const std::string probe_user =
      "unshare --user --map-root-user --mount sh -c 'mount -t tmpfs -o size=1m tmpfs " + mnt.string() + "' 2>/dev/null";
  std::string unshare;
  if (std::system(probe.c_str()) == 0) unshare = "unshare --mount";
  else if (std::system(probe_user.c_str()) == 0) unshare = "unshare --user --map-root-user --mount";
  else GTEST_SKIP() << "cannot mount a tmpfs here (no root and no unprivileged user namespaces)";

  const int runs = std::getenv("Y9_DISKFULL_RUNS") ? std::atoi(std::getenv("Y9_DISKFULL_RUNS")) : 5;
  std::mt19937 rng(std::getenv("Y9_KILL_SEED") ? static_cast<unsigned>(std::atoi(std::getenv("Y9_KILL_SEED"))) : 7u);
  // A checkpoint of gelan-t (model, EMA, optimizer) is about 23 MB; the free space ranges from
  // nothing to enough for a few of them.
  // every other run gets under 1.5 MB, so the set-up files, plots and results.csv fail too.
  std::uniform_int_distribution<int64_t> free_kb(0, 80 * 1024), little_kb(0, 1536);
  const int64_t size_mb = 128;
  for (int k = 0; k < runs; ++k) {
    const int64_t free = (k % 2 == 0 ? little_kb(rng) : free_kb(rng)) * 1024;
    const fs::path out = g_root / ("diskfull" + std::to_string(k));
    fs::create_directories(out);
    const fs::path script = out / "scenario.sh";
    const fs::path proj = mnt / "runs";
    const std::string train = "env OMP_NUM_THREADS=1 '" + exe() + "' " + base_args(proj, "r", kEpochs);
    const std::string resume = "env OMP_NUM_THREADS=1 '" + exe() + "' train --resume " +
                               (proj / "r" / "weights" / "last.safetensors").string();
    std::ofstream(script) << "set -u\n"
                          << "mount -t tmpfs -o size=" << size_mb << "m tmpfs '" << mnt.string() << "' || exit 99\n"
                          << "head -c " << (size_mb * 1024 * 1024 - free) << " /dev/zero > '" << mnt.string()
                          << "/filler' 2>/dev/null\n"
                          << train << " > '" << (out / "full.log").string() << "' 2>&1; echo $? > '"
                          << (out / "full.rc").string() << "'\n"
                          << "rm -f '" << mnt.string() << "/filler'\n"
                          << "for i in 1 2 3; do\n"
                          << "  if [ -f '" << (proj / "r" / "results.csv").string() << "' ] && [ $(wc -l < '"
                          << (proj / "r" / "results.csv").string() << "') -eq " << (kEpochs + 1) << " ]; then break; fi\n"
                          << "  if [ -f '" << (proj / "r" / "weights" / "last.safetensors").string() << "' ]; then "
                          << resume << "; else " << train << "; fi >> '" << (out / "recover.log").string()
                          << "' 2>&1\n"
                          << "done\n"
                          << "cp '" << (proj / "r" / "results.csv").string() << "' '" << (out / "results.csv").string()
                          << "'\n"
                          << "ls -a '" << (proj / "r" / "weights").string() << "' > '" << (out / "weights.txt").string()
                          << "'\n";
    const int st = std::system((unshare + " sh " + script.string()).c_str());
    ASSERT_EQ(status_code(st), 0) << "scenario " << k << " failed to run";
    const int rc = std::atoi(read_file(out / "full.rc").c_str());
    const std::string full = read_file(out / "full.log");
    const size_t at = full.find("yolov9: error: ");
    const std::string err = at == std::string::npos ? "" : full.substr(at + 15, full.find('\n', at) - at - 15);
    std::printf("  disk full, %lld kB free: exit %d%s%s\n", static_cast<long long>(free / 1024), rc,
                rc == 0 ? " (enough space)" : ": ", err.c_str());
    if (rc != 0) {
      EXPECT_LT(rc, 128) << full;
      EXPECT_NE(full.find("No space left on device"), std::string::npos) << full;
      EXPECT_NE(full.find(proj.string()), std::string::npos) << "the message names the file:\n" << full;
    }
    EXPECT_EQ(read_file(out / "results.csv"), ref_csv_) << "free " << free << " B; first run:\n"
                                                          << full << "\nrecovery:\n" << read_file(out / "recover.log");
    EXPECT_EQ(read_file(out / "weights.txt").find(".tmp."), std::string::npos) << read_file(out / "weights.txt");
  }
}
