// NCCL communicator (apps/training/dist/nccl_comm.h). The communicator is created non-blocking, so
// that every call (init included) returns at once and completion is polled with
// ncclCommGetAsyncError under a deadline: a rank that never joins or dies makes the others fail
// within 60 s with a message, instead of NCCL's silent hang. This file is compiled by the host
// compiler; without Y9_WITH_NCCL only nccl_compiled() remains.
#include "apps/training/dist/nccl_comm.h"

namespace training::dist {

bool nccl_compiled() {
#if defined(Y9_WITH_NCCL)
  return true;
#else
  return false;
#endif
}

}  // namespace training::dist

#if defined(Y9_WITH_NCCL)
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <thread>

#include "engine/cuda_runtime.h"

namespace training::dist {

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kCallDeadline = std::chrono::seconds(60);

std::string env_value(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string("(unset)");
}

// The variables users check first when NCCL cannot connect (the trap list).
std::string nccl_hints() {
  return "check NCCL_P2P_DISABLE=" + env_value("NCCL_P2P_DISABLE") + ", NCCL_IB_DISABLE=" +
         env_value("NCCL_IB_DISABLE") + ", NCCL_SOCKET_IFNAME=" + env_value("NCCL_SOCKET_IFNAME") +
         " (NCCL_DEBUG=" + env_value("NCCL_DEBUG") + "; rerun with NCCL_DEBUG=INFO to see why)";
}

ncclDataType_t nccl_type(engine::DType dt) {
  switch (dt) {
    case engine::DType::F32: return ncclFloat32;
    case engine::DType::F64: return ncclFloat64;
    case engine::DType::F16: return ncclFloat16;
    case engine::DType::BF16: return ncclBfloat16;
    default:
      Y9_THROW(engine::ShapeError, "all_reduce: dtype ", engine::dtype_name(dt), " is not F32, F64, F16 or BF16");
  }
}

// Polls ncclCommGetAsyncError until the communicator leaves ncclInProgress. Returns the final
// state (ncclSuccess or the error), or ncclInProgress when `deadline` passed first.
ncclResult_t poll_ready(ncclComm_t comm, std::chrono::milliseconds deadline) {
  const auto t0 = Clock::now();
  int sleep_us = 1;
  for (;;) {
    ncclResult_t st = ncclInProgress;
    const ncclResult_t q = ncclCommGetAsyncError(comm, &st);
    if (q != ncclSuccess) return q;
    if (st != ncclInProgress) return st;
    if (Clock::now() - t0 > deadline) return ncclInProgress;
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
    sleep_us = std::min(sleep_us * 2, 1000);
  }
}

}  // namespace

struct NcclCommunicator::Impl {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int next_id = 0;
  bool aborted = false;
};

NcclCommunicator::NcclCommunicator(Communicator& bootstrap, engine::Device gpu, std::chrono::milliseconds init_timeout)
    : Communicator(bootstrap.rank(), bootstrap.world_size()), bootstrap_(bootstrap), gpu_(gpu),
      impl_(std::make_unique<Impl>()) {
  // Local setup first; rank 0 sends a failure flag with the id so that the others do not wait in
  // the broadcast for an id that never comes.
  struct IdMessage {
    int ok = 0;
    ncclUniqueId id{};
  } msg;
  std::exception_ptr local_error;
  try {
    Y9_CHECK(gpu.is_cuda(), who(), ": the NCCL communicator needs a CUDA device, not ", gpu.str());
    // The calling thread's device stays `gpu`: our reduction kernels are launched on its stream.
    CUDA_CHECK(cudaSetDevice(gpu.index));
    impl_->stream = static_cast<cudaStream_t>(context().stream(engine::StreamKind::Communication));
    if (rank_ == 0) {
      const ncclResult_t r = ncclGetUniqueId(&msg.id);
      if (r != ncclSuccess)
        Y9_THROW(CommError, who(), ": ncclGetUniqueId failed: ", ncclGetErrorString(r), " (",
                 ncclGetLastError(nullptr), "); ", nccl_hints());
      msg.ok = 1;
    }
  } catch (...) {
    local_error = std::current_exception();
  }
  bootstrap.broadcast(&msg, sizeof msg, 0);
  if (local_error) std::rethrow_exception(local_error);
  if (!msg.ok) Y9_THROW(CommError, who(), ": rank 0 could not set up NCCL (see its message); no NCCL communicator");

  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclResult_t r = ncclCommInitRankConfig(&impl_->comm, world_, msg.id, rank_, &cfg);
  if ((r == ncclSuccess || r == ncclInProgress) && impl_->comm) r = poll_ready(impl_->comm, init_timeout);
  if (r != ncclSuccess) {
    const std::string last = ncclGetLastError(impl_->comm);
    if (impl_->comm) ncclCommAbort(impl_->comm);
    impl_->comm = nullptr;
    if (r == ncclInProgress)
      Y9_THROW(CommError, who(), ": ncclCommInitRankConfig on ", gpu.str(), " did not complete within ",
               init_timeout.count() / 1000.0, " s (a rank that never joined, or ranks that cannot reach each other); ",
               nccl_hints());
    Y9_THROW(CommError, who(), ": ncclCommInitRankConfig on ", gpu.str(), " failed: ", ncclGetErrorString(r),
             last.empty() ? "" : " (" + last + ")", "; ", nccl_hints());
  }
}

NcclCommunicator::~NcclCommunicator() {
  if (!impl_ || !impl_->comm) return;
  try {
    if (!impl_->aborted) synchronize();
    const ncclResult_t r = ncclCommDestroy(impl_->comm);
    if (r != ncclSuccess && r != ncclInProgress) ncclCommAbort(impl_->comm);
  } catch (...) {
    // synchronize() aborted the communicator already, or a CUDA error: nothing more to free.
  }
}

// --- errors ------------------------------------------------------------------------------------

namespace {
// `last` is ncclGetLastError of the communicator, read before it was aborted.
[[noreturn]] void throw_nccl(const std::string& who, const char* call, ncclResult_t r, const std::string& last,
                             const std::string& what) {
  Y9_THROW(CommError, who, ": NCCL ", call, what, " failed: ", ncclGetErrorString(r),
           last.empty() ? std::string() : " (" + last + ")",
           r == ncclSystemError || r == ncclRemoteError ? "; a peer may have died; " + nccl_hints() : std::string());
}
}  // namespace

// Checks the result of an enqueueing call on the non-blocking communicator: ncclInProgress is
// polled to completion (60 s deadline); any error aborts the communicator (it is unusable after
// one) and throws CommError naming this rank, the call and NCCL's messages.
#define Y9_NCCL_CALL(expr, what)                                                                      \
  do {                                                                                                 \
    Y9_CHECK_T(CommError, !impl_->aborted, who(), ": NCCL communicator used after an error aborted it"); \
    ncclResult_t _r = (expr);                                                                          \
    if (_r == ncclInProgress) _r = poll_ready(impl_->comm, kCallDeadline);                             \
    if (_r != ncclSuccess) {                                                                           \
      const std::string _last = ncclGetLastError(impl_->comm);                                         \
      impl_->aborted = true;                                                                           \
      ncclCommAbort(impl_->comm);                                                                      \
      throw_nccl(who(), #expr, _r, _last, what);                                                       \
    }                                                                                                  \
  } while (0)

// --- point to point ----------------------------------------------------------------------------

void NcclCommunicator::send(const void* buf, size_t bytes, int peer) {
  Y9_CHECK(peer >= 0 && peer < world_ && peer != rank_, who(), ": send to invalid peer ", peer);
  if (bytes == 0) return;
  engine::CudaDeviceGuard g(gpu_.index);
  Y9_NCCL_CALL(ncclSend(buf, bytes, ncclUint8, peer, impl_->comm, impl_->stream), " to rank " + std::to_string(peer));
}

void NcclCommunicator::recv(void* buf, size_t bytes, int peer) {
  Y9_CHECK(peer >= 0 && peer < world_ && peer != rank_, who(), ": recv from invalid peer ", peer);
  if (bytes == 0) return;
  engine::CudaDeviceGuard g(gpu_.index);
  Y9_NCCL_CALL(ncclRecv(buf, bytes, ncclUint8, peer, impl_->comm, impl_->stream), " from rank " + std::to_string(peer));
}

Pending NcclCommunicator::start_sendrecv(const void* sbuf, size_t sbytes, int dst, void* rbuf, size_t rbytes,
                                         int src) {
  if (sbytes > 0) Y9_CHECK(dst >= 0 && dst < world_ && dst != rank_, who(), ": send to invalid peer ", dst);
  if (rbytes > 0) Y9_CHECK(src >= 0 && src < world_ && src != rank_, who(), ": receive from invalid peer ", src);
  const Pending p{impl_->next_id++};
  if (sbytes == 0 && rbytes == 0) return p;
  engine::CudaDeviceGuard g(gpu_.index);
  const std::string peers = " (send to rank " + std::to_string(dst) + ", receive from rank " + std::to_string(src) + ")";
  Y9_NCCL_CALL(ncclGroupStart(), peers);
  if (sbytes > 0) Y9_NCCL_CALL(ncclSend(sbuf, sbytes, ncclUint8, dst, impl_->comm, impl_->stream), peers);
  if (rbytes > 0) Y9_NCCL_CALL(ncclRecv(rbuf, rbytes, ncclUint8, src, impl_->comm, impl_->stream), peers);
  Y9_NCCL_CALL(ncclGroupEnd(), peers);
  return p;
}

void NcclCommunicator::wait(Pending p) {
  Y9_ASSERT(p.id >= 0 && p.id < impl_->next_id, "wait on an unknown exchange ", p.id);
}

// --- collectives -------------------------------------------------------------------------------

void NcclCommunicator::broadcast(void* buf, size_t bytes, int root) {
  Y9_CHECK(root >= 0 && root < world_, who(), ": broadcast from invalid root ", root);
  if (bytes == 0) return;
  engine::CudaDeviceGuard g(gpu_.index);
  Y9_NCCL_CALL(ncclBroadcast(buf, buf, bytes, ncclUint8, root, impl_->comm, impl_->stream),
               " of " + std::to_string(bytes) + " bytes from rank " + std::to_string(root));
}

void NcclCommunicator::barrier() {
  synchronize();
  bootstrap_.barrier();
}

void NcclCommunicator::all_gather(const void* sbuf, size_t bytes, void* rbuf) {
  if (bytes == 0) return;
  engine::CudaDeviceGuard g(gpu_.index);
  Y9_NCCL_CALL(ncclAllGather(sbuf, rbuf, bytes, ncclUint8, impl_->comm, impl_->stream),
               " of " + std::to_string(bytes) + " bytes per rank");
}

void NcclCommunicator::all_reduce_library(void* buf, int64_t count, engine::DType dtype, ReduceOp op) {
  const ncclDataType_t t = nccl_type(dtype);
  if (count <= 0) return;
  engine::CudaDeviceGuard g(gpu_.index);
  Y9_NCCL_CALL(ncclAllReduce(buf, buf, static_cast<size_t>(count), t, op == ReduceOp::Avg ? ncclAvg : ncclSum,
                             impl_->comm, impl_->stream),
               " of " + std::to_string(count) + " " + engine::dtype_name(dtype) + " elements");
}

std::unique_ptr<Communicator> NcclCommunicator::duplicate() {
  // A new communicator over the same ranks, set up as this one was (rank 0's unique id through the
  // bootstrap), not ncclCommSplit: on the lent H200 (NCCL of the nvidia-nccl-cu13 wheel) the split of
  // a working non-blocking communicator failed with ncclInternalError, and an error aborts the
  // parent too. Collective: every rank calls duplicate() in the same order.
  return std::make_unique<NcclCommunicator>(bootstrap_, gpu_);
}

void NcclCommunicator::abort(int exit_code) {
  if (impl_->comm && !impl_->aborted) {
    impl_->aborted = true;
    ncclCommAbort(impl_->comm);
  }
  bootstrap_.abort(exit_code);
  std::_Exit(exit_code);  // not reached: the bootstrap's abort does not return
}

void NcclCommunicator::synchronize(std::chrono::milliseconds deadline) {
  Y9_CHECK_T(CommError, !impl_->aborted, who(), ": NCCL communicator used after an error aborted it");
  engine::CudaDeviceGuard g(gpu_.index);
  const auto t0 = Clock::now();
  int sleep_us = 1;
  for (;;) {
    const cudaError_t q = cudaStreamQuery(impl_->stream);
    if (q == cudaSuccess) break;
    if (q != cudaErrorNotReady) CUDA_CHECK(q);
    ncclResult_t st = ncclSuccess;
    const ncclResult_t e = ncclCommGetAsyncError(impl_->comm, &st);
    if (e != ncclSuccess || (st != ncclSuccess && st != ncclInProgress)) {
      const std::string last = ncclGetLastError(impl_->comm);
      impl_->aborted = true;
      ncclCommAbort(impl_->comm);
      throw_nccl(who(), "communication stream", e != ncclSuccess ? e : st, last, " (asynchronous error)");
    }
    if (Clock::now() - t0 > deadline) {
      impl_->aborted = true;
      ncclCommAbort(impl_->comm);
      Y9_THROW(CommError, who(), ": the NCCL work on the communication stream of ", gpu_.str(),
               " did not complete within ", deadline.count() / 1000.0,
               " s: a peer died or stopped issuing the same collectives; communicator aborted; ", nccl_hints());
    }
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
    sleep_us = std::min(sleep_us * 2, 200);
  }
}

}  // namespace training::dist

#endif  // Y9_WITH_NCCL
