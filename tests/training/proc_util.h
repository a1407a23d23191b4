// Child processes for the launch and failure tests: a test binary re-executes itself
// (/proc/self/exe) with Y9_TEST_ROLE set, so each rank is a fresh process (no fork of a process
// that may hold library threads). stdout and stderr of a child go to one pipe that the test reads.
#pragma once
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

extern char** environ;

namespace proc_test {

using Clock = std::chrono::steady_clock;

inline double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Proc {
  pid_t pid = -1;
  int out_fd = -1;      // read end of the child's stdout + stderr
  std::string out;      // what it printed so far
  bool done = false;
  int status = 0;       // waitpid status once done
  double exit_s = -1;   // seconds from the wait's reference time to the end of its output
  bool killed_by_test = false;

  bool exited_ok() const { return done && WIFEXITED(status) && WEXITSTATUS(status) == 0; }
  std::string describe() const {
    if (!done) return "still running";
    if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
    return "signal " + std::to_string(WTERMSIG(status));
  }
};

/// Variables a test must not pass on to its children by accident.
inline bool dropped_var(const std::string& name) {
  static const char* k[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                            "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE", "Y9_LAUNCHED_BY", "Y9_RUN_ID",
                            "Y9_MASTER_FD", "Y9_TEST_ROLE", "Y9_DIST_TIMEOUT_S"};
  for (const char* n : k)
    if (name == n) return true;
  return name.rfind("OMPI_", 0) == 0 || name.rfind("PMIX_", 0) == 0 || name.rfind("PMI_", 0) == 0 ||
         name.rfind("SLURM_", 0) == 0;
}

/// Starts `argv` (argv[0] = program; "" = this test binary) with the environment of this process
/// minus dropped_var() plus `vars`.
inline Proc start(std::vector<std::string> argv, const std::map<std::string, std::string>& vars) {
  if (argv.empty() || argv[0].empty()) {
    if (argv.empty()) argv.push_back("");
    argv[0] = "/proc/self/exe";
  }
  std::vector<std::string> envs;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    if (!dropped_var(kv.substr(0, kv.find('=')))) envs.push_back(kv);
  }
  for (const auto& [k, v] : vars) envs.push_back(k + "=" + v);
  std::vector<char*> av, ev;
  for (auto& a : argv) av.push_back(a.data());
  av.push_back(nullptr);
  for (auto& e : envs) ev.push_back(e.data());
  ev.push_back(nullptr);
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) std::abort();
  const std::string exe = argv[0];
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(p[1], 1);
    ::dup2(p[1], 2);
    ::execvpe(exe.c_str(), av.data(), ev.data());
    ::_exit(127);
  }
  ::close(p[1]);
  ::fcntl(p[0], F_SETFL, O_NONBLOCK);
  Proc pr;
  pr.pid = pid;
  pr.out_fd = p[0];
  return pr;
}

/// Reads what is available from every running child, waiting at most `ms`; reaps the ones whose
/// output ended. Returns when something happened or the time is up.
inline void pump(std::vector<Proc*> ps, int ms, Clock::time_point t0) {
  std::vector<pollfd> pfd;
  std::vector<Proc*> who;
  for (Proc* p : ps)
    if (!p->done) pfd.push_back({p->out_fd, POLLIN, 0}), who.push_back(p);
  if (pfd.empty()) return;
  ::poll(pfd.data(), pfd.size(), ms);
  for (size_t i = 0; i < pfd.size(); ++i) {
    if (!pfd[i].revents) continue;
    Proc* p = who[i];
    char buf[4096];
    ssize_t k;
    while ((k = ::read(p->out_fd, buf, sizeof buf)) > 0) p->out.append(buf, static_cast<size_t>(k));
    if (k == 0) {  // the child's output ended: it exited (or closed it); reap it
      ::close(p->out_fd);
      p->out_fd = -1;
      ::waitpid(p->pid, &p->status, 0);
      p->done = true;
      p->exit_s = since(t0);
    }
  }
}

/// Waits until every child ended or `timeout_s` passed (then SIGKILLs the rest and marks them).
inline void wait_all(std::vector<Proc*> ps, Clock::time_point t0, double timeout_s) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  for (;;) {
    bool all = true;
    for (Proc* p : ps) all = all && p->done;
    if (all) return;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) break;
    pump(ps, static_cast<int>(std::min<long long>(left, 1000)), t0);
  }
  for (Proc* p : ps) {
    if (p->done) continue;
    p->killed_by_test = true;
    ::kill(p->pid, SIGKILL);
  }
  for (Proc* p : ps)
    while (!p->done) pump({p}, 1000, t0);
}

/// Waits until `p` printed `text` (true) or ended / `timeout_s` passed (false).
inline bool wait_for_text(Proc& p, const std::string& text, double timeout_s) {
  const auto t0 = Clock::now();
  while (p.out.find(text) == std::string::npos) {
    if (p.done || since(t0) > timeout_s) return false;
    pump({&p}, 200, t0);
  }
  return true;
}

inline std::vector<Proc*> ptrs(std::vector<Proc>& v) {
  std::vector<Proc*> out;
  for (auto& p : v) out.push_back(&p);
  return out;
}

}  // namespace proc_test
