// CUDA-on-CPU emulator (docs/cuda_emulator.md): the runtime API of cuda_runtime_api.h and the
// fiber scheduler behind the device side of cuda_emu/device.h.
//
// Runtime: "device" memory is host memory that the emulator tracks (so copies and memsets can be
// checked against the kinds of their pointers); launches and async copies/memsets are queued per
// stream and run only at a synchronisation point (stream/event/device sync, a blocking copy,
// cudaFree), so a missing synchronisation reads stale data, as it may on a GPU. One device.
//
// Kernels: blocks run one after another; the threads of a block are fibers (glibc ucontext) on the
// calling OS thread, run in order (forward or reverse) until each finishes or waits at a barrier
// or warp intrinsic; then complete warp groups are released, else the barrier is checked and
// released. A thread that never waits runs to its end on a reused stack, so barrier-free kernels
// cost one fiber switch per thread.
#include <ucontext.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda_emu/device.h"

#if defined(__SANITIZE_ADDRESS__)
#define Y9_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define Y9_EMU_ASAN 1
#endif
#endif
#if defined(Y9_EMU_ASAN)
#include <sanitizer/common_interface_defs.h>
#endif

struct CUstream_st {
  std::deque<std::function<void()>> queue;
  unsigned flags = 0;
};
struct CUevent_st {
  CUstream_st* stream = nullptr;
  uint64_t generation = 0;
  bool done = true;
  int pending = 0;         // queued records and waits that still use this event
  bool destroyed = false;  // cudaEventDestroy came while some were queued: the last one frees it
};

// A queued record or wait of `e` is done with it: frees an event destroyed in the meantime.
static void cuda_emu_release_event(CUevent_st* e) {
  if (--e->pending == 0 && e->destroyed) delete e;
}

namespace cuda_emu {
namespace {

// --- errors ------------------------------------------------------------------------------------

/// A failed kernel (barrier divergence, missing lanes): thrown by the scheduler on the calling
/// thread's own stack (never inside a fiber), caught by the stream runner.
struct KernelFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Process-wide state behind one recursive mutex: every API call and every kernel run holds it.
struct State {
  std::recursive_mutex mu;
  std::map<uintptr_t, size_t> device;  // base -> bytes
  std::map<uintptr_t, size_t> pinned;  // base -> bytes
  CUstream_st legacy;                  // stream 0
  std::vector<CUstream_st*> streams;   // created streams
  cudaError_t last_error = cudaSuccess;
  std::map<int, std::string> messages;  // error code -> latest detailed message
  int order = -1;                       // -1: not read yet, 0 forward, 1 reverse
  uint64_t launches = 0;
  uint64_t d2h_copies = 0;  // cudaMemcpy/cudaMemcpyAsync calls from device to host memory
  uint64_t host_syncs = 0;  // calls that block the host on queued device work (see device.h)
  size_t device_bytes = 0;
};
State& st() {
  static State* s = new State();  // never destroyed: used from static destructors (allocator pools)
  return *s;
}

cudaError_t fail(cudaError_t err, const std::string& msg) {
  State& s = st();
  s.last_error = err;
  s.messages[static_cast<int>(err)] = msg;
  return err;
}

std::string hex(const void* p) {
  char b[32];
  std::snprintf(b, sizeof b, "%p", p);
  return b;
}

// --- fibers ------------------------------------------------------------------------------------

#if defined(Y9_EMU_ASAN)
constexpr size_t kStackBytes = 512 * 1024;
#else
constexpr size_t kStackBytes = 64 * 1024;
#endif

enum class FState { Ready, Barrier, Warp, Done };

// Context switch. glibc's swapcontext makes a sigprocmask system call per switch (it dominated
// the profile of the parity tests), so x86-64 uses a 20-instruction switch of the callee-saved
// registers, the stack pointer and the FPU/SSE control words; other targets use ucontext.
#if defined(__x86_64__)
#define Y9_EMU_ASM_SWITCH 1
extern "C" void y9_emu_switch(void** save_sp, void* new_sp);
__asm__(
    ".text\n"
    ".globl y9_emu_switch\n"
    ".type y9_emu_switch,@function\n"
    "y9_emu_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  subq $16, %rsp\n  stmxcsr 8(%rsp)\n  fnstcw (%rsp)\n"
    "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
    "  fldcw (%rsp)\n  ldmxcsr 8(%rsp)\n  addq $16, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size y9_emu_switch, .-y9_emu_switch\n"
    ".section .note.GNU-stack,\"\",@progbits\n"
    ".text\n");
struct Context {
  void* sp = nullptr;
};
#else
struct Context {
  ucontext_t uc;
};
#endif

struct Fiber {
  Context ctx;
  char* stack = nullptr;
  bool started = false;
  FState state = FState::Ready;
  detail::Builtins b;
  int tid = 0;  // linear thread index in the block
  const char* file = nullptr;
  int line = 0;
  // warp op
  detail::WarpOp op = detail::WarpOp::Sync;
  unsigned mask = 0;
  const void* in = nullptr;
  void* out = nullptr;
  size_t size = 0;
  int param = 0;
  int width = 32;
};

struct Block {
  Context sched;
  std::vector<Fiber> fibers;
  const std::function<void()>* body = nullptr;
#if defined(Y9_EMU_ASAN)
  const void* sched_bottom = nullptr;
  size_t sched_size = 0;
#endif
};

thread_local Block* t_block = nullptr;
thread_local Fiber* t_fiber = nullptr;
thread_local void* t_dyn_shared = nullptr;
// Free fiber stacks of this OS thread, reused across threads and launches; freed at thread exit.
struct StackPool {
  std::vector<char*> free;
  ~StackPool() {
    for (char* p : free) std::free(p);
  }
};
thread_local StackPool t_stacks;

char* take_stack() {
  if (!t_stacks.free.empty()) {
    char* p = t_stacks.free.back();
    t_stacks.free.pop_back();
    return p;
  }
  return static_cast<char*>(std::malloc(kStackBytes));
}
void give_stack(char* p) {
  if (p) t_stacks.free.push_back(p);
}

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "cuda_emu: %s\n", what);
  std::abort();
}

void switch_to(Context* from, Context* to) {
#if defined(Y9_EMU_ASM_SWITCH)
  y9_emu_switch(&from->sp, to->sp);
#else
  swapcontext(&from->uc, &to->uc);
#endif
}

// Switch from the running fiber back to the scheduler (the fiber waits or has finished).
void yield_to_scheduler(Fiber* f, bool finished) {
  Block* b = t_block;
#if defined(Y9_EMU_ASAN)
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(finished ? nullptr : &fake, b->sched_bottom, b->sched_size);
#endif
  switch_to(&f->ctx, &b->sched);
#if defined(Y9_EMU_ASAN)
  __sanitizer_finish_switch_fiber(fake, &b->sched_bottom, &b->sched_size);
#endif
  (void)finished;
}

void fiber_entry() {
  Fiber* f = t_fiber;
#if defined(Y9_EMU_ASAN)
  __sanitizer_finish_switch_fiber(nullptr, &t_block->sched_bottom, &t_block->sched_size);
#endif
  (*t_block->body)();
  f = t_fiber;
  f->state = FState::Done;
  yield_to_scheduler(f, true);
  die("a finished fiber was resumed");
}

void run_fiber(Block& b, Fiber& f) {
  if (!f.started) {
    f.stack = take_stack();
#if defined(Y9_EMU_ASM_SWITCH)
    // The frame y9_emu_switch pops: control words, 6 registers, then `ret` into fiber_entry
    // with the stack aligned as at a call (rsp % 16 == 8 at entry).
    uintptr_t top = (reinterpret_cast<uintptr_t>(f.stack) + kStackBytes) & ~uintptr_t(15);
    auto* w = reinterpret_cast<uint64_t*>(top);
    w[-1] = 0;                                             // fake return address of fiber_entry
    w[-2] = reinterpret_cast<uint64_t>(&fiber_entry);      // popped by ret
    for (int r = 3; r <= 8; ++r) w[-r] = 0;                // rbp rbx r12 r13 r14 r15
    uint32_t mxcsr;
    uint16_t fpucw;
    __asm__ volatile("stmxcsr %0" : "=m"(mxcsr));
    __asm__ volatile("fnstcw %0" : "=m"(fpucw));
    w[-10] = 0;
    w[-9] = 0;
    std::memcpy(&w[-10], &fpucw, sizeof fpucw);
    std::memcpy(&w[-9], &mxcsr, sizeof mxcsr);
    f.ctx.sp = &w[-10];
#else
    getcontext(&f.ctx.uc);
    f.ctx.uc.uc_stack.ss_sp = f.stack;
    f.ctx.uc.uc_stack.ss_size = kStackBytes;
    f.ctx.uc.uc_link = nullptr;
    makecontext(&f.ctx.uc, &fiber_entry, 0);
#endif
    f.started = true;
  }
  t_fiber = &f;
#if defined(Y9_EMU_ASAN)
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, f.stack, kStackBytes);
#endif
  switch_to(&b.sched, &f.ctx);
#if defined(Y9_EMU_ASAN)
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  t_fiber = nullptr;
  if (f.state == FState::Done) {
    give_stack(f.stack);
    f.stack = nullptr;
  }
}

const char* op_name(detail::WarpOp op) {
  switch (op) {
    case detail::WarpOp::Sync: return "__syncwarp";
    case detail::WarpOp::Shfl: return "__shfl_sync";
    case detail::WarpOp::ShflUp: return "__shfl_up_sync";
    case detail::WarpOp::ShflDown: return "__shfl_down_sync";
    case detail::WarpOp::ShflXor: return "__shfl_xor_sync";
    case detail::WarpOp::Ballot: return "__ballot_sync";
    case detail::WarpOp::Any: return "__any_sync";
    case detail::WarpOp::All: return "__all_sync";
  }
  return "?";
}

std::string site(const char* file, int line) {
  std::string f = file ? file : "?";
  size_t slash = f.find_last_of('/');
  if (slash != std::string::npos) f = f.substr(slash + 1);
  return f + ":" + std::to_string(line);
}

std::string where(const Fiber& f) {
  switch (f.state) {
    case FState::Done: return "it has exited";
    case FState::Barrier: return "it waits at __syncthreads at " + site(f.file, f.line);
    case FState::Warp: {
      char m[16];
      std::snprintf(m, sizeof m, "0x%08x", f.mask);
      return std::string("it waits at ") + op_name(f.op) + " at " + site(f.file, f.line) + " with mask " + m;
    }
    case FState::Ready: return "it is running";
  }
  return "?";
}

std::string block_name(const detail::Builtins& b) {
  std::ostringstream o;
  o << "block (" << b.block_idx.x << "," << b.block_idx.y << "," << b.block_idx.z << ")";
  return o.str();
}

std::string thread_list(const std::vector<int>& ids) {
  std::ostringstream o;
  for (size_t i = 0; i < ids.size() && i < 8; ++i) o << (i ? ", " : "") << ids[i];
  if (ids.size() > 8) o << ", ... (" << ids.size() << " threads)";
  return o.str();
}

// Tries to release warp groups. Returns true when at least one group was released; sets
// `problem` to the first group that cannot complete.
bool resolve_warps(Block& b, std::string& problem) {
  const int n = static_cast<int>(b.fibers.size());
  bool any = false;
  for (int base = 0; base < n; base += 32) {
    for (int l = 0; l < 32 && base + l < n; ++l) {
      Fiber& f = b.fibers[base + l];
      if (f.state != FState::Warp) continue;
      char mbuf[16];
      std::snprintf(mbuf, sizeof mbuf, "0x%08x", f.mask);
      std::string head = std::string(op_name(f.op)) + " at " + site(f.file, f.line) + " (mask " + mbuf + ") in " +
                         block_name(f.b) + ", warp " + std::to_string(base / 32) + ": ";
      if (!(f.mask & (1u << l))) {
        throw KernelFailure(head + "lane " + std::to_string(l) + " calls it but is not in the mask");
      }
      if (f.width < 1 || f.width > 32 || (f.width & (f.width - 1)))
        throw KernelFailure(head + "width " + std::to_string(f.width) + " is not a power of 2 up to 32");
      bool complete = true;
      for (int k = 0; k < 32 && complete; ++k) {
        if (!(f.mask & (1u << k))) continue;
        if (base + k >= n) {
          throw KernelFailure(head + "the mask names lane " + std::to_string(k) + ", which does not exist (" +
                              std::to_string(n) + " threads per block)");
        }
        const Fiber& g = b.fibers[base + k];
        if (g.state != FState::Warp || g.op != f.op || g.line != f.line || g.file != f.file || g.mask != f.mask) {
          complete = false;
          if (problem.empty())
            problem = head + "lane " + std::to_string(k) + " named in the mask never arrives (" + where(g) + ")";
        }
      }
      if (!complete) continue;
      // Release the group: compute every lane's result from the published inputs.
      unsigned ballot = 0;
      for (int k = 0; k < 32; ++k) {
        if (!(f.mask & (1u << k))) continue;
        const Fiber& g = b.fibers[base + k];
        if ((f.op == detail::WarpOp::Ballot || f.op == detail::WarpOp::Any || f.op == detail::WarpOp::All) &&
            *static_cast<const int*>(g.in))
          ballot |= 1u << k;
      }
      for (int k = 0; k < 32; ++k) {
        if (!(f.mask & (1u << k))) continue;
        Fiber& g = b.fibers[base + k];
        const int w = f.width;
        const int seg = k & ~(w - 1);
        int src = k;
        switch (f.op) {
          case detail::WarpOp::Shfl: src = seg + (g.param & (w - 1)); break;
          case detail::WarpOp::ShflUp: src = (k - seg) >= g.param ? k - g.param : k; break;
          case detail::WarpOp::ShflDown: src = (k - seg) + g.param < w ? k + g.param : k; break;
          case detail::WarpOp::ShflXor: {
            int x = k ^ g.param;
            src = (x & ~(w - 1)) == seg ? x : k;
            break;
          }
          default: break;
        }
        switch (f.op) {
          case detail::WarpOp::Sync: break;
          case detail::WarpOp::Ballot: *static_cast<unsigned*>(g.out) = ballot; break;
          case detail::WarpOp::Any: *static_cast<unsigned*>(g.out) = ballot != 0; break;
          case detail::WarpOp::All: *static_cast<unsigned*>(g.out) = ballot == f.mask; break;
          default:
            if (!(f.mask & (1u << src)))
              throw KernelFailure(head + "lane " + std::to_string(k) + " reads lane " + std::to_string(src) +
                                  ", which is not in the mask");
            std::memcpy(g.out, b.fibers[base + src].in, g.size);
        }
      }
      for (int k = 0; k < 32; ++k)
        if (f.mask & (1u << k)) b.fibers[base + k].state = FState::Ready;
      any = true;
    }
  }
  return any;
}

// All threads wait or have exited and no warp group can complete: release the barrier or report.
void resolve_barrier(Block& b, const std::string& warp_problem) {
  if (!warp_problem.empty()) throw KernelFailure(warp_problem);
  std::map<std::pair<std::string, int>, std::vector<int>> at;  // site -> threads
  std::vector<int> exited;
  const Fiber* first = nullptr;
  for (Fiber& f : b.fibers) {
    if (f.state == FState::Barrier) {
      at[{f.file ? f.file : "", f.line}].push_back(f.tid);
      if (!first) first = &f;
    } else if (f.state == FState::Done) {
      exited.push_back(f.tid);
    }
  }
  const std::string blk = block_name(b.fibers[0].b);
  if (at.size() > 1) {
    // Name the smallest group, then "the others".
    auto smallest = at.begin();
    for (auto it = at.begin(); it != at.end(); ++it)
      if (it->second.size() < smallest->second.size()) smallest = it;
    std::string others;
    for (auto it = at.begin(); it != at.end(); ++it)
      if (it != smallest) others += (others.empty() ? "" : ", ") + site(it->first.first.c_str(), it->first.second);
    throw KernelFailure("__syncthreads divergence in " + blk + ": thread" + (smallest->second.size() > 1 ? "s " : " ") +
                        thread_list(smallest->second) + " at " +
                        site(smallest->first.first.c_str(), smallest->first.second) + ", the others at " + others);
  }
  if (!exited.empty()) {
    throw KernelFailure("__syncthreads at " + site(first->file, first->line) + " in " + blk + ": thread" +
                        (exited.size() > 1 ? "s " : " ") + thread_list(exited) +
                        " exited while the others wait at the barrier");
  }
  for (Fiber& f : b.fibers) f.state = FState::Ready;
}

void run_block(Block& b) {
  const int n = static_cast<int>(b.fibers.size());
  const bool rev = reverse_order();
  for (;;) {
    bool ran = false;
    for (int i = 0; i < n; ++i) {
      Fiber& f = b.fibers[rev ? n - 1 - i : i];
      if (f.state != FState::Ready) continue;
      run_fiber(b, f);
      ran = true;
    }
    bool all_done = true;
    for (const Fiber& f : b.fibers) all_done = all_done && f.state == FState::Done;
    if (all_done) return;
    std::string problem;
    if (resolve_warps(b, problem)) continue;
    resolve_barrier(b, problem);
    (void)ran;
  }
}

void abandon(Block& b) {
  for (Fiber& f : b.fibers) {
    give_stack(f.stack);  // the waiting frames hold only trivially destructible kernel state
    f.stack = nullptr;
  }
}

void run_grid(dim3 grid, dim3 block, size_t shmem, const std::function<void()>& body, const char* file, int line) {
  const int64_t nb = int64_t(grid.x) * grid.y * grid.z;
  const int nt = static_cast<int>(block.x * block.y * block.z);
  std::vector<unsigned char> dyn;
  if (shmem) dyn.resize(shmem + 16);
  void* dyn_aligned = shmem ? reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(dyn.data()) + 15) & ~uintptr_t(15))
                            : nullptr;
  const bool rev = reverse_order();
  Block* saved_block = t_block;
  void* saved_dyn = t_dyn_shared;
  for (int64_t bi = 0; bi < nb; ++bi) {
    const int64_t lin = rev ? nb - 1 - bi : bi;
    Block b;
    b.body = &body;
    b.fibers.resize(static_cast<size_t>(nt));
    uint3 bidx{static_cast<unsigned>(lin % grid.x), static_cast<unsigned>((lin / grid.x) % grid.y),
               static_cast<unsigned>(lin / (int64_t(grid.x) * grid.y))};
    for (int t = 0; t < nt; ++t) {
      Fiber& f = b.fibers[t];
      f.tid = t;
      f.b.thread_idx = uint3{static_cast<unsigned>(t % block.x), static_cast<unsigned>((t / block.x) % block.y),
                             static_cast<unsigned>(t / (block.x * block.y))};
      f.b.block_idx = bidx;
      f.b.block_dim = block;
      f.b.grid_dim = grid;
    }
    if (shmem) std::memset(dyn_aligned, kSharedPoison, shmem);
    t_block = &b;
    t_dyn_shared = dyn_aligned;
    try {
      run_block(b);
    } catch (KernelFailure& e) {
      abandon(b);
      t_block = saved_block;
      t_dyn_shared = saved_dyn;
      throw KernelFailure(std::string("kernel launched at ") + site(file, line) + ": " + e.what());
    }
    t_block = saved_block;
    t_dyn_shared = saved_dyn;
  }
}

// --- streams -------------------------------------------------------------------------------------

CUstream_st* resolve(cudaStream_t s) {
  if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return &st().legacy;
  return s;
}

bool known_stream(cudaStream_t s) {
  CUstream_st* r = resolve(s);
  if (r == &st().legacy) return true;
  for (CUstream_st* x : st().streams)
    if (x == r) return true;
  return false;
}

// Runs the queued work of `s` until it is empty or `until` says stop; a failed kernel drops the
// rest of that stream's queue and returns cudaErrorLaunchFailure with the message.
cudaError_t drain(CUstream_st* s, const std::function<bool()>& until = {}) {
  while (!s->queue.empty() && !(until && until())) {
    std::function<void()> op = std::move(s->queue.front());
    s->queue.pop_front();
    try {
      op();
    } catch (KernelFailure& e) {
      // Reported by this synchronisation only (not left as the "last error" for the next
      // launch's check), and the device stays usable: tests go on after an expected failure.
      s->queue.clear();
      st().messages[static_cast<int>(cudaErrorLaunchFailure)] = e.what();
      return cudaErrorLaunchFailure;
    }
  }
  return cudaSuccess;
}

cudaError_t drain_all() {
  cudaError_t r = drain(&st().legacy);
  for (CUstream_st* s : st().streams) {
    cudaError_t e = drain(s);
    if (r == cudaSuccess) r = e;
  }
  return r;
}

// --- pointer kinds -------------------------------------------------------------------------------

// The allocation of `m` that holds `p` (base, bytes), or {0, 0}.
std::pair<uintptr_t, size_t> find(const std::map<uintptr_t, size_t>& m, const void* p) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = m.upper_bound(a);
  if (it == m.begin()) return {0, 0};
  --it;
  if (a >= it->first && a < it->first + std::max<size_t>(it->second, 1)) return *it;
  return {0, 0};
}
bool is_device(const void* p) { return find(st().device, p).second != 0; }

const char* kind_name(cudaMemcpyKind k) {
  switch (k) {
    case cudaMemcpyHostToHost: return "cudaMemcpyHostToHost";
    case cudaMemcpyHostToDevice: return "cudaMemcpyHostToDevice";
    case cudaMemcpyDeviceToHost: return "cudaMemcpyDeviceToHost";
    case cudaMemcpyDeviceToDevice: return "cudaMemcpyDeviceToDevice";
    case cudaMemcpyDefault: return "cudaMemcpyDefault";
  }
  return "?";
}

// A device range must lie inside one allocation.
cudaError_t check_range(const char* fn, const char* what, const void* p, size_t n) {
  auto a = find(st().device, p);
  if (!a.second) return cudaSuccess;
  uintptr_t end = reinterpret_cast<uintptr_t>(p) + n;
  if (end > a.first + a.second)
    return fail(cudaErrorInvalidValue, std::string(fn) + ": " + what + " " + hex(p) + " + " + std::to_string(n) +
                                           " bytes runs past the end of its device allocation of " +
                                           std::to_string(a.second) + " bytes");
  return cudaSuccess;
}

cudaError_t check_copy(const char* fn, void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  const bool dd = is_device(dst), sd = is_device(src);
  bool want_dd = false, want_sd = false;
  switch (kind) {
    case cudaMemcpyHostToHost: break;
    case cudaMemcpyHostToDevice: want_dd = true; break;
    case cudaMemcpyDeviceToHost: want_sd = true; break;
    case cudaMemcpyDeviceToDevice: want_dd = want_sd = true; break;
    case cudaMemcpyDefault: want_dd = dd; want_sd = sd; break;
    default: return fail(cudaErrorInvalidMemcpyDirection, std::string(fn) + ": unknown copy kind");
  }
  if (dd != want_dd || sd != want_sd) {
    return fail(cudaErrorInvalidMemcpyDirection,
                std::string(fn) + ": " + kind_name(kind) + " but dst " + hex(dst) + " is " +
                    (dd ? "device" : "host") + " memory and src " + hex(src) + " is " + (sd ? "device" : "host") +
                    " memory");
  }
  if (cudaError_t e = check_range(fn, "dst", dst, n)) return e;
  return check_range(fn, "src", src, n);
}

}  // namespace

// --- public emulator API --------------------------------------------------------------------------

void set_thread_order(bool reverse) {
  std::lock_guard<std::recursive_mutex> lock(st().mu);
  st().order = reverse ? 1 : 0;
}

bool reverse_order() {
  State& s = st();
  if (s.order < 0) {
    const char* v = std::getenv("Y9_EMU_REVERSE");
    s.order = v && std::strcmp(v, "1") == 0 ? 1 : 0;
  }
  return s.order == 1;
}

void launch(dim3 grid, dim3 block, size_t shmem, cudaStream_t stream, std::function<void()> body, const char* file,
            int line) {
  std::lock_guard<std::recursive_mutex> lock(st().mu);
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  std::string bad;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || threads == 0) bad = "an empty grid or block";
  else if (threads > 1024) bad = std::to_string(threads) + " threads per block (at most 1024)";
  else if (block.z > 64) bad = "blockDim.z > 64";
  else if (grid.y > 65535 || grid.z > 65535) bad = "gridDim.y or .z > 65535";
  else if (shmem > 48 * 1024) bad = std::to_string(shmem) + " bytes of dynamic shared memory (at most 49152)";
  else if (!known_stream(stream)) bad = "an unknown stream";
  if (!bad.empty()) {
    fail(cudaErrorInvalidConfiguration, "launch at " + site(file, line) + ": " + bad);
    return;
  }
  resolve(stream)->queue.push_back([grid, block, shmem, body = std::move(body), file, line] {
    ++st().launches;
    run_grid(grid, block, shmem, body, file, line);
  });
}

void* dynamic_shared() { return t_dyn_shared; }

uint64_t launches_run() {
  std::lock_guard<std::recursive_mutex> lock(st().mu);
  return st().launches;
}

uint64_t device_to_host_copies() {
  std::lock_guard<std::recursive_mutex> lock(st().mu);
  return st().d2h_copies;
}

uint64_t host_synchronizations() {
  std::lock_guard<std::recursive_mutex> lock(st().mu);
  return st().host_syncs;
}

namespace detail {

const Builtins& builtins() {
  if (!t_fiber) die("threadIdx/blockIdx/blockDim/gridDim read outside an emulated kernel");
  return t_fiber->b;
}

void barrier(const char* file, int line) {
  Fiber* f = t_fiber;
  if (!f) die("__syncthreads called outside an emulated kernel");
  f->state = FState::Barrier;
  f->file = file;
  f->line = line;
  yield_to_scheduler(f, false);
}

void warp_op(WarpOp op, unsigned mask, const void* in, void* out, size_t size, int param, int width, const char* file,
             int line) {
  Fiber* f = t_fiber;
  if (!f) die("a warp intrinsic was called outside an emulated kernel");
  f->state = FState::Warp;
  f->op = op;
  f->mask = mask;
  f->in = in;
  f->out = out;
  f->size = size;
  f->param = param;
  f->width = width;
  f->file = file;
  f->line = line;
  yield_to_scheduler(f, false);
}

}  // namespace detail
}  // namespace cuda_emu

// --- the runtime API ------------------------------------------------------------------------------

using cuda_emu::st;
using Lock = std::lock_guard<std::recursive_mutex>;

cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return cuda_emu::fail(cudaErrorInvalidValue, "cudaGetDeviceCount: null pointer");
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  Lock lock(st().mu);
  if (device != 0)
    return cuda_emu::fail(cudaErrorInvalidDevice,
                          "cudaSetDevice(" + std::to_string(device) + "): the emulator has one device (0)");
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (!device) return cuda_emu::fail(cudaErrorInvalidValue, "cudaGetDevice: null pointer");
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  Lock lock(st().mu);
  if (!prop) return cuda_emu::fail(cudaErrorInvalidValue, "cudaGetDeviceProperties: null pointer");
  if (device != 0) return cuda_emu::fail(cudaErrorInvalidDevice, "cudaGetDeviceProperties: one device (0)");
  std::memset(prop, 0, sizeof *prop);
  std::snprintf(prop->name, sizeof prop->name, "CUDA emulator (CPU)");
  prop->totalGlobalMem = size_t(16) << 30;
  prop->sharedMemPerBlock = 48 * 1024;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 0x7fffffff;
  prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 1;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  Lock lock(st().mu);
  ++st().host_syncs;
  return cuda_emu::drain_all();
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  Lock lock(st().mu);
  size_t t = size_t(16) << 30;
  if (total) *total = t;
  if (free) *free = st().device_bytes < t ? t - st().device_bytes : 0;
  return cudaSuccess;
}

cudaError_t cudaGetLastError() {
  Lock lock(st().mu);
  cudaError_t e = st().last_error;
  st().last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError() {
  Lock lock(st().mu);
  return st().last_error;
}

const char* cudaGetErrorName(cudaError_t err) {
  switch (err) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t err) {
  Lock lock(st().mu);
  auto it = st().messages.find(static_cast<int>(err));
  if (it != st().messages.end()) return it->second.c_str();
  switch (err) {
    case cudaSuccess: return "no error";
    case cudaErrorNotReady: return "device not ready";
    default: return "emulated CUDA error";
  }
}

cudaError_t cudaMalloc(void** ptr, size_t nbytes) {
  Lock lock(st().mu);
  if (!ptr) return cuda_emu::fail(cudaErrorInvalidValue, "cudaMalloc: null pointer");
  if (nbytes > (size_t(16) << 30))
    return cuda_emu::fail(cudaErrorMemoryAllocation, "cudaMalloc: " + std::to_string(nbytes) + " bytes (16 GiB emulated)");
  // Exactly nbytes (256-aligned, as cudaMalloc): under ASan a kernel reading one element past
  // the end of its buffer is reported.
  const size_t n = nbytes ? nbytes : 1;
  void* p = nullptr;
  if (posix_memalign(&p, 256, n) != 0 || !p)
    return cuda_emu::fail(cudaErrorMemoryAllocation, "cudaMalloc: host allocation failed");
  std::memset(p, cuda_emu::kSharedPoison, n);  // fresh device memory is garbage, not zeros
  st().device[reinterpret_cast<uintptr_t>(p)] = nbytes;
  st().device_bytes += nbytes;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  Lock lock(st().mu);
  if (!ptr) return cudaSuccess;
  auto it = st().device.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == st().device.end())
    return cuda_emu::fail(cudaErrorInvalidDevicePointer, "cudaFree(" + cuda_emu::hex(ptr) +
                                                             "): not the start of a device allocation");
  cudaError_t e = cuda_emu::drain_all();  // cudaFree synchronises the device
  st().device_bytes -= it->second;
  st().device.erase(it);
  std::free(ptr);
  return e;
}

cudaError_t cudaHostAlloc(void** ptr, size_t nbytes, unsigned) {
  Lock lock(st().mu);
  if (!ptr) return cuda_emu::fail(cudaErrorInvalidValue, "cudaHostAlloc: null pointer");
  const size_t n = nbytes ? nbytes : 1;
  void* p = nullptr;
  if (posix_memalign(&p, 256, n) != 0 || !p)
    return cuda_emu::fail(cudaErrorMemoryAllocation, "cudaHostAlloc: host allocation failed");
  st().pinned[reinterpret_cast<uintptr_t>(p)] = nbytes;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t nbytes) { return cudaHostAlloc(ptr, nbytes, 0); }

cudaError_t cudaFreeHost(void* ptr) {
  Lock lock(st().mu);
  if (!ptr) return cudaSuccess;
  auto it = st().pinned.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == st().pinned.end())
    return cuda_emu::fail(cudaErrorInvalidValue, "cudaFreeHost(" + cuda_emu::hex(ptr) + "): not a pinned allocation");
  cudaError_t e = cuda_emu::drain_all();
  st().pinned.erase(it);
  std::free(ptr);
  return e;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* ptr) {
  Lock lock(st().mu);
  if (!attr) return cuda_emu::fail(cudaErrorInvalidValue, "cudaPointerGetAttributes: null pointer");
  attr->device = 0;
  attr->devicePointer = nullptr;
  attr->hostPointer = nullptr;
  if (cuda_emu::is_device(ptr)) {
    attr->type = cudaMemoryTypeDevice;
    attr->devicePointer = const_cast<void*>(ptr);
  } else if (cuda_emu::find(st().pinned, ptr).second) {
    attr->type = cudaMemoryTypeHost;
    attr->hostPointer = const_cast<void*>(ptr);
  } else {
    attr->type = cudaMemoryTypeUnregistered;
  }
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t nbytes, cudaMemcpyKind kind) {
  Lock lock(st().mu);
  if (cudaError_t e = cuda_emu::check_copy("cudaMemcpy", dst, src, nbytes, kind)) return e;
  ++st().host_syncs;
  if (cuda_emu::is_device(src) && !cuda_emu::is_device(dst)) ++st().d2h_copies;
  if (cudaError_t e = cuda_emu::drain(&st().legacy)) return e;  // the legacy stream orders it
  if (nbytes) std::memmove(dst, src, nbytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t nbytes, cudaMemcpyKind kind, cudaStream_t stream) {
  Lock lock(st().mu);
  if (!cuda_emu::known_stream(stream)) return cuda_emu::fail(cudaErrorInvalidResourceHandle, "cudaMemcpyAsync: unknown stream");
  if (cudaError_t e = cuda_emu::check_copy("cudaMemcpyAsync", dst, src, nbytes, kind)) return e;
  if (cuda_emu::is_device(src) && !cuda_emu::is_device(dst)) ++st().d2h_copies;
  if (nbytes) cuda_emu::resolve(stream)->queue.push_back([=] { std::memmove(dst, src, nbytes); });
  return cudaSuccess;
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, size_t nbytes,
                                cudaStream_t stream) {
  if (dst_device != 0 || src_device != 0)
    return cuda_emu::fail(cudaErrorInvalidDevice, "cudaMemcpyPeerAsync: the emulator has one device (0)");
  return cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, stream);
}

cudaError_t cudaMemset(void* ptr, int value, size_t nbytes) {
  Lock lock(st().mu);
  if (!cuda_emu::is_device(ptr))
    return cuda_emu::fail(cudaErrorInvalidValue, "cudaMemset(" + cuda_emu::hex(ptr) + "): not device memory");
  if (cudaError_t e = cuda_emu::check_range("cudaMemset", "ptr", ptr, nbytes)) return e;
  if (cudaError_t e = cuda_emu::drain(&st().legacy)) return e;
  std::memset(ptr, value, nbytes);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t nbytes, cudaStream_t stream) {
  Lock lock(st().mu);
  if (!cuda_emu::known_stream(stream)) return cuda_emu::fail(cudaErrorInvalidResourceHandle, "cudaMemsetAsync: unknown stream");
  if (!cuda_emu::is_device(ptr))
    return cuda_emu::fail(cudaErrorInvalidValue, "cudaMemsetAsync(" + cuda_emu::hex(ptr) + "): not device memory");
  if (cudaError_t e = cuda_emu::check_range("cudaMemsetAsync", "ptr", ptr, nbytes)) return e;
  cuda_emu::resolve(stream)->queue.push_back([=] { std::memset(ptr, value, nbytes); });
  return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* userData) {
  Lock lock(st().mu);
  if (!fn) return cuda_emu::fail(cudaErrorInvalidValue, "cudaLaunchHostFunc: null function");
  if (!cuda_emu::known_stream(stream)) return cuda_emu::fail(cudaErrorInvalidResourceHandle, "cudaLaunchHostFunc: unknown stream");
  cuda_emu::resolve(stream)->queue.push_back([fn, userData] { fn(userData); });
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  Lock lock(st().mu);
  if (!stream) return cuda_emu::fail(cudaErrorInvalidValue, "cudaStreamCreate: null pointer");
  auto* s = new CUstream_st();
  s->flags = flags;
  st().streams.push_back(s);
  *stream = s;
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  Lock lock(st().mu);
  auto& v = st().streams;
  auto it = std::find(v.begin(), v.end(), stream);
  if (it == v.end()) return cuda_emu::fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy: unknown stream");
  cudaError_t e = cuda_emu::drain(stream);  // queued work completes, as on a GPU
  v.erase(it);
  delete stream;
  return e;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  Lock lock(st().mu);
  if (!cuda_emu::known_stream(stream))
    return cuda_emu::fail(cudaErrorInvalidResourceHandle, "cudaStreamSynchronize: unknown stream");
  ++st().host_syncs;
  return cuda_emu::drain(cuda_emu::resolve(stream));
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  Lock lock(st().mu);
  if (!cuda_emu::known_stream(stream)) return cuda_emu::fail(cudaErrorInvalidResourceHandle, "cudaStreamQuery: unknown stream");
  return cuda_emu::resolve(stream)->queue.empty() ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned) {
  if (!event) return cuda_emu::fail(cudaErrorInvalidValue, "cudaEventCreate: null pointer");
  *event = new CUevent_st();
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  Lock lock(st().mu);
  if (!event) return cuda_emu::fail(cudaErrorInvalidResourceHandle, "cudaEventDestroy: null event");
  // As in CUDA, destroying an event whose record or waits are still queued is legal and they still
  // take effect: the last of them frees it (cuda_emu_release_event).
  if (event->pending > 0) {
    event->destroyed = true;
    return cudaSuccess;
  }
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  Lock lock(st().mu);
  if (!event) return cuda_emu::fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: null event");
  if (!cuda_emu::known_stream(stream)) return cuda_emu::fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: unknown stream");
  CUstream_st* s = cuda_emu::resolve(stream);
  event->stream = s;
  event->done = false;
  const uint64_t g = ++event->generation;
  ++event->pending;
  s->queue.push_back([event, g] {
    if (event->generation == g) event->done = true;
    cuda_emu_release_event(event);
  });
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  Lock lock(st().mu);
  if (!event) return cuda_emu::fail(cudaErrorInvalidResourceHandle, "cudaEventSynchronize: null event");
  if (event->done) return cudaSuccess;
  ++st().host_syncs;
  return cuda_emu::drain(event->stream, [event] { return event->done; });
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  Lock lock(st().mu);
  if (!event) return cuda_emu::fail(cudaErrorInvalidResourceHandle, "cudaEventQuery: null event");
  return event->done ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned) {
  Lock lock(st().mu);
  if (!event) return cuda_emu::fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: null event");
  if (!cuda_emu::known_stream(stream)) return cuda_emu::fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: unknown stream");
  if (event->done) return cudaSuccess;
  // The waiting stream's later work runs only after the event's stream reached the event.
  CUstream_st* other = event->stream;
  const uint64_t g = event->generation;
  ++event->pending;
  cuda_emu::resolve(stream)->queue.push_back([event, other, g] {
    if (event->generation == g) {
      if (cudaError_t e = cuda_emu::drain(other, [event, g] { return event->done || event->generation != g; })) {
        cuda_emu_release_event(event);
        throw cuda_emu::KernelFailure(std::string("work awaited through cudaStreamWaitEvent failed: ") +
                                      cudaGetErrorString(e));
      }
    }
    cuda_emu_release_event(event);
  });
  return cudaSuccess;
}
