// MPI communicator (apps/training/dist/mpi_comm.h). Requests are completed by polling (MPI_Testall)
// that spins briefly and then sleeps with a growing period, so that ranks oversubscribing the
// cores (the dist tests run 4 ranks on 2 cores) do not steal the CPU from each other.
#include "apps/training/dist/mpi_comm.h"

// The C API only: OpenMPI's deprecated C++ bindings need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "engine/half.h"
#include "kernels/common/comm.h"

namespace training::dist {

namespace {

std::string mpi_error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(buf, static_cast<size_t>(len));
}

bool env_set(const char* name) {
  const char* v = std::getenv(name);
  return v && *v;
}

// MPI_Finalize at exit, once, when we initialised MPI.
struct MpiFinalizer {
  bool active = false;
  ~MpiFinalizer() {
    int fin = 0;
    if (active && MPI_Finalized(&fin) == MPI_SUCCESS && !fin) MPI_Finalize();
  }
};
MpiFinalizer g_finalizer;
std::mutex g_init_mu;

// Polls until every request in [reqs, reqs + n) is complete: spins ~200 us, then sleeps 20 us
// growing to `max_sleep_us`.
void poll_wait(MPI_Request* reqs, int n, const char* what, const std::string& who, int max_sleep_us = 500) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  int sleep_us = 20;
  for (;;) {
    int done = 0;
    const int rc = MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) Y9_THROW(CommError, who, ": MPI ", what, " failed: ", mpi_error_string(rc));
    if (done) return;
    if (clock::now() - t0 < std::chrono::microseconds(200)) {
      sched_yield();
      continue;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
    sleep_us = std::min(sleep_us * 2, max_sleep_us);
  }
}

// F16 / BF16 sums in FP32 for MPI_Allreduce.
void sum_f16(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = engine::f32_to_f16(engine::f16_to_f32(a[i]) + engine::f16_to_f32(b[i]));
}
void sum_bf16(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = engine::f32_to_bf16(engine::bf16_to_f32(a[i]) + engine::bf16_to_f32(b[i]));
}

constexpr size_t kMaxMsg = size_t(1) << 30;  // per MPI call (int counts)

}  // namespace

bool launched_by_mpi() {
  if (env_set("OMPI_COMM_WORLD_SIZE") || env_set("PMI_SIZE") || env_set("PMIX_RANK")) return true;
  const char* nt = std::getenv("SLURM_NTASKS");
  return env_set("SLURM_PROCID") && nt && std::atoi(nt) > 1;
}

struct MpiCommunicator::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  std::array<std::array<MPI_Request, 2>, 4> pending{};
  std::array<int, 4> npending{};
  int next_id = 0;
  MPI_Op op_f16 = MPI_OP_NULL, op_bf16 = MPI_OP_NULL;
};

MpiCommunicator::MpiCommunicator(std::unique_ptr<Impl> impl, int rank, int world)
    : Communicator(rank, world), impl_(std::move(impl)) {}

MpiCommunicator::~MpiCommunicator() {
  int fin = 0;
  MPI_Finalized(&fin);
  if (fin || !impl_) return;
  if (impl_->op_f16 != MPI_OP_NULL) MPI_Op_free(&impl_->op_f16);
  if (impl_->op_bf16 != MPI_OP_NULL) MPI_Op_free(&impl_->op_bf16);
  if (impl_->comm != MPI_COMM_NULL) MPI_Comm_free(&impl_->comm);
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::world() {
  {
    std::lock_guard<std::mutex> lock(g_init_mu);
    int init = 0;
    MPI_Initialized(&init);
    if (!init) {
      int provided = 0;
      const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
      if (rc != MPI_SUCCESS) Y9_THROW(CommError, "MPI_Init_thread failed: ", mpi_error_string(rc));
      g_finalizer.active = true;
      if (provided < MPI_THREAD_MULTIPLE)
        Y9_THROW(CommError, "this MPI library gives thread level ", provided,
                 " but the gradient reducer needs MPI_THREAD_MULTIPLE (", MPI_THREAD_MULTIPLE,
                 "); use an MPI built with thread support (Debian's OpenMPI is)");
    }
  }
  auto impl = std::make_unique<Impl>();
  MPI_Comm_dup(MPI_COMM_WORLD, &impl->comm);
  MPI_Comm_set_errhandler(impl->comm, MPI_ERRORS_RETURN);
  int rank = 0, world = 1;
  MPI_Comm_rank(impl->comm, &rank);
  MPI_Comm_size(impl->comm, &world);
  return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(std::move(impl), rank, world));
}

std::unique_ptr<Communicator> MpiCommunicator::duplicate() {
  auto impl = std::make_unique<Impl>();
  const int rc = MPI_Comm_dup(impl_->comm, &impl->comm);
  if (rc != MPI_SUCCESS) Y9_THROW(CommError, who(), ": MPI_Comm_dup failed: ", mpi_error_string(rc));
  MPI_Comm_set_errhandler(impl->comm, MPI_ERRORS_RETURN);
  return std::unique_ptr<Communicator>(new MpiCommunicator(std::move(impl), rank_, world_));
}

void MpiCommunicator::send(const void* buf, size_t bytes, int peer) {
  Y9_CHECK(peer >= 0 && peer < world_ && peer != rank_, who(), ": send to invalid peer ", peer);
  const auto* p = static_cast<const char*>(buf);
  do {
    const size_t n = std::min(bytes, kMaxMsg);
    MPI_Request r;
    int rc = MPI_Isend(p, static_cast<int>(n), MPI_BYTE, peer, 1, impl_->comm, &r);
    if (rc != MPI_SUCCESS) Y9_THROW(CommError, who(), ": MPI_Isend to rank ", peer, " failed: ", mpi_error_string(rc));
    poll_wait(&r, 1, "send", who());
    p += n;
    bytes -= n;
  } while (bytes > 0);
}

void MpiCommunicator::recv(void* buf, size_t bytes, int peer) {
  Y9_CHECK(peer >= 0 && peer < world_ && peer != rank_, who(), ": recv from invalid peer ", peer);
  auto* p = static_cast<char*>(buf);
  do {
    const size_t n = std::min(bytes, kMaxMsg);
    MPI_Request r;
    int rc = MPI_Irecv(p, static_cast<int>(n), MPI_BYTE, peer, 1, impl_->comm, &r);
    if (rc != MPI_SUCCESS)
      Y9_THROW(CommError, who(), ": MPI_Irecv from rank ", peer, " failed: ", mpi_error_string(rc));
    poll_wait(&r, 1, "recv", who());
    p += n;
    bytes -= n;
  } while (bytes > 0);
}

Pending MpiCommunicator::start_sendrecv(const void* sbuf, size_t sbytes, int dst, void* rbuf, size_t rbytes,
                                        int src) {
  Y9_CHECK(sbytes <= kMaxMsg && rbytes <= kMaxMsg, who(), ": exchange of ", std::max(sbytes, rbytes),
           " bytes is above the ", kMaxMsg, "-byte limit of one exchange (slice it)");
  const int id = impl_->next_id++;
  const int slot = id % 4;
  Y9_ASSERT(impl_->npending[slot] == 0, "more than 4 exchanges started and not waited");
  int k = 0;
  auto& reqs = impl_->pending[slot];
  if (rbytes > 0) {
    Y9_CHECK(src >= 0 && src < world_ && src != rank_, who(), ": receive from invalid peer ", src);
    int rc = MPI_Irecv(rbuf, static_cast<int>(rbytes), MPI_BYTE, src, 2, impl_->comm, &reqs[k++]);
    if (rc != MPI_SUCCESS) Y9_THROW(CommError, who(), ": MPI_Irecv from rank ", src, " failed: ", mpi_error_string(rc));
  }
  if (sbytes > 0) {
    Y9_CHECK(dst >= 0 && dst < world_ && dst != rank_, who(), ": send to invalid peer ", dst);
    int rc = MPI_Isend(sbuf, static_cast<int>(sbytes), MPI_BYTE, dst, 2, impl_->comm, &reqs[k++]);
    if (rc != MPI_SUCCESS) Y9_THROW(CommError, who(), ": MPI_Isend to rank ", dst, " failed: ", mpi_error_string(rc));
  }
  impl_->npending[slot] = k;
  return Pending{id};
}

void MpiCommunicator::wait(Pending p) {
  Y9_ASSERT(p.id >= 0 && p.id < impl_->next_id && p.id + 4 >= impl_->next_id, "wait on an unknown exchange ", p.id);
  const int slot = p.id % 4;
  if (impl_->npending[slot] > 0) poll_wait(impl_->pending[slot].data(), impl_->npending[slot], "sendrecv", who());
  impl_->npending[slot] = 0;
}

void MpiCommunicator::broadcast(void* buf, size_t bytes, int root) {
  Y9_CHECK(root >= 0 && root < world_, who(), ": broadcast from invalid root ", root);
  auto* p = static_cast<char*>(buf);
  do {
    const size_t n = std::min(bytes, kMaxMsg);
    MPI_Request r;
    int rc = MPI_Ibcast(p, static_cast<int>(n), MPI_BYTE, root, impl_->comm, &r);
    if (rc != MPI_SUCCESS) Y9_THROW(CommError, who(), ": MPI_Ibcast failed: ", mpi_error_string(rc));
    poll_wait(&r, 1, "broadcast", who(), 2000);
    p += n;
    bytes -= n;
  } while (bytes > 0);
}

void MpiCommunicator::barrier() {
  MPI_Request r;
  int rc = MPI_Ibarrier(impl_->comm, &r);
  if (rc != MPI_SUCCESS) Y9_THROW(CommError, who(), ": MPI_Ibarrier failed: ", mpi_error_string(rc));
  poll_wait(&r, 1, "barrier", who(), 2000);
}

void MpiCommunicator::all_gather(const void* sbuf, size_t bytes, void* rbuf) {
  Y9_CHECK(bytes <= kMaxMsg, who(), ": all_gather of ", bytes, " bytes per rank is above ", kMaxMsg);
  MPI_Request r;
  int rc = MPI_Iallgather(sbuf, static_cast<int>(bytes), MPI_BYTE, rbuf, static_cast<int>(bytes), MPI_BYTE,
                          impl_->comm, &r);
  if (rc != MPI_SUCCESS) Y9_THROW(CommError, who(), ": MPI_Iallgather failed: ", mpi_error_string(rc));
  poll_wait(&r, 1, "all_gather", who(), 2000);
}

void MpiCommunicator::all_reduce_library(void* buf, int64_t count, engine::DType dtype, ReduceOp op) {
  if (count <= 0) return;
  MPI_Datatype t = MPI_BYTE;
  MPI_Op mop = MPI_SUM;
  switch (dtype) {
    case engine::DType::F32: t = MPI_FLOAT; break;
    case engine::DType::F64: t = MPI_DOUBLE; break;
    case engine::DType::F16:
      if (impl_->op_f16 == MPI_OP_NULL) MPI_Op_create(&sum_f16, 1, &impl_->op_f16);
      t = MPI_UINT16_T, mop = impl_->op_f16;
      break;
    case engine::DType::BF16:
      if (impl_->op_bf16 == MPI_OP_NULL) MPI_Op_create(&sum_bf16, 1, &impl_->op_bf16);
      t = MPI_UINT16_T, mop = impl_->op_bf16;
      break;
    default: Y9_THROW(engine::ShapeError, "all_reduce: dtype ", engine::dtype_name(dtype), " is not F32, F64, F16 or BF16");
  }
  const size_t esz = engine::dtype_size(dtype);
  auto* p = static_cast<char*>(buf);
  int64_t left = count;
  const int64_t max_elems = static_cast<int64_t>(kMaxMsg / esz);
  while (left > 0) {
    const int64_t n = std::min(left, max_elems);
    // The blocking call: the library's tuned algorithm (coll/tuned), the honest baseline.
    int rc = MPI_Allreduce(MPI_IN_PLACE, p, static_cast<int>(n), t, mop, impl_->comm);
    if (rc != MPI_SUCCESS) Y9_THROW(CommError, who(), ": MPI_Allreduce failed: ", mpi_error_string(rc));
    p += n * static_cast<int64_t>(esz);
    left -= n;
  }
  if (op == ReduceOp::Avg) {
    auto k = engine::kernel(kernels::kCommScale, dtype, device());
    k.fn(k.ctx, dtype, buf, count, 1.0 / world_);
  }
}

void MpiCommunicator::abort(int exit_code) {
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

}  // namespace training::dist
