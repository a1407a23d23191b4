// The NCCL communicator (apps/training/dist/nccl_comm.h) on one GPU with world size 1, over a
// one-process bootstrap: construction (unique id over the bootstrap, non-blocking init polled to
// completion), our ring, halving-doubling and auto against ncclAllReduce on the same data for every
// payload type (on one rank a sum leaves the data as it is and an average divides by 1: both must
// equal the input bitwise), broadcast, all-gather, barrier, duplicate (a second NCCL communicator), and the
// errors for a non-CUDA device and a bad GPU index. Label gpu: skips without a device (fails with
// Y9_REQUIRE_GPU=1), and skips in a build without NCCL. Several ranks need several GPUs: the
// bench's --backend nccl under mpirun covers them.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "apps/training/dist/allreduce.h"
#include "apps/training/dist/nccl_comm.h"
#include "engine/cuda_runtime.h"
#include "engine/half.h"
#include "engine/tensor.h"
#include "tests/testutil.h"

namespace {

using engine::DType;
using training::dist::AllReduceAlgo;
using training::dist::Communicator;
using training::dist::ReduceOp;

// World size 1 on the host: the bootstrap of a single-process run.
class SelfCommunicator final : public Communicator {
 public:
  SelfCommunicator() : Communicator(0, 1) {}
  const char* backend() const override { return "self"; }
  engine::Device device() const override { return engine::Device::cpu(); }
  void send(const void*, size_t, int peer) override { Y9_THROW(training::dist::CommError, "no peer ", peer); }
  void recv(void*, size_t, int peer) override { Y9_THROW(training::dist::CommError, "no peer ", peer); }
  training::dist::Pending start_sendrecv(const void*, size_t, int dst, void*, size_t, int) override {
    Y9_THROW(training::dist::CommError, "no peer ", dst);
  }
  void wait(training::dist::Pending) override {}
  void broadcast(void*, size_t, int) override {}
  void barrier() override {}
  void all_gather(const void* s, size_t bytes, void* r) override { std::memcpy(r, s, bytes); }
  void all_reduce_library(void*, int64_t, DType, ReduceOp) override {}
  std::unique_ptr<Communicator> duplicate() override { return std::make_unique<SelfCommunicator>(); }
  [[noreturn]] void abort(int code) override { std::_Exit(code); }
};

#define SKIP_WITHOUT_NCCL()                                                              \
  do {                                                                                   \
    Y9_SKIP_WITHOUT_GPU();                                                               \
    if (!training::dist::nccl_compiled()) GTEST_SKIP() << "built without NCCL (Y9_WITH_NCCL)"; \
  } while (0)

#if defined(Y9_WITH_NCCL)
std::vector<uint8_t> random_payload(DType dt, int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-100.0f, 100.0f);
  const size_t esz = engine::dtype_size(dt);
  std::vector<uint8_t> out(static_cast<size_t>(n) * esz);
  for (int64_t i = 0; i < n; ++i) {
    const float v = u(rng);
    uint8_t* p = &out[static_cast<size_t>(i) * esz];
    switch (dt) {
      case DType::F32: std::memcpy(p, &v, 4); break;
      case DType::F64: { const double d = v; std::memcpy(p, &d, 8); break; }
      case DType::F16: { const uint16_t h = engine::f32_to_f16(v); std::memcpy(p, &h, 2); break; }
      default: { const uint16_t h = engine::f32_to_bf16(v); std::memcpy(p, &h, 2); }
    }
  }
  return out;
}

std::vector<uint8_t> download(const engine::Tensor& t) {
  std::vector<uint8_t> out(static_cast<size_t>(t.numel()) * engine::dtype_size(t.dtype()));
  engine::memcpy_between_devices(out.data(), engine::Device::cpu(), t.data_ptr(), t.device(), out.size());
  return out;
}

engine::Tensor upload(const std::vector<uint8_t>& host, DType dt, int64_t n, engine::Device d) {
  engine::Tensor t = engine::Tensor::empty({n}, dt, d);
  engine::memcpy_between_devices(t.data_ptr(), d, host.data(), engine::Device::cpu(), host.size());
  return t;
}
#endif

TEST(NcclComm, OursEqualsNcclAllReduceOnWorldOne) {
  SKIP_WITHOUT_NCCL();
#if defined(Y9_WITH_NCCL)
  SelfCommunicator boot;
  const engine::Device gpu = engine::Device::cuda(0);
  training::dist::NcclCommunicator nccl(boot, gpu);
  EXPECT_EQ(nccl.rank(), 0);
  EXPECT_EQ(nccl.world_size(), 1);
  EXPECT_STREQ(nccl.backend(), "nccl");
  unsigned seed = 1;
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64})
    for (int64_t n : {int64_t(0), int64_t(1), int64_t(1000), int64_t(65543)})
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
        SCOPED_TRACE(std::string(engine::dtype_name(dt)) + " count " + std::to_string(n) +
                     (op == ReduceOp::Sum ? " sum" : " avg"));
        const auto input = random_payload(dt, n, seed++);
        engine::Tensor lib = upload(input, dt, n, gpu);
        nccl.all_reduce_library(lib.data_ptr(), n, dt, op);
        nccl.synchronize();
        const auto want = download(lib);
        EXPECT_EQ(want, input) << "ncclAllReduce on one rank changed the data";
        for (AllReduceAlgo a : {AllReduceAlgo::Ring, AllReduceAlgo::HalvingDoubling, AllReduceAlgo::Auto}) {
          engine::Tensor ours = upload(input, dt, n, gpu);
          training::dist::all_reduce(nccl, ours.data_ptr(), n, dt, op, a);
          nccl.synchronize();
          EXPECT_EQ(download(ours), want) << training::dist::allreduce_algo_name(a) << " differs from ncclAllReduce";
        }
      }
#endif
}

TEST(NcclComm, BroadcastAllGatherBarrierDuplicate) {
  SKIP_WITHOUT_NCCL();
#if defined(Y9_WITH_NCCL)
  SelfCommunicator boot;
  const engine::Device gpu = engine::Device::cuda(0);
  training::dist::NcclCommunicator nccl(boot, gpu);
  const auto input = random_payload(DType::F32, 4097, 99);
  engine::Tensor a = upload(input, DType::F32, 4097, gpu);
  nccl.broadcast(a.data_ptr(), input.size(), 0);
  engine::Tensor gathered = engine::Tensor::zeros({4097}, DType::F32, gpu);
  // The zero fill runs on the compute stream; NCCL writes on the Communication stream.
  engine::backend(engine::DeviceType::CUDA).context(gpu).synchronize(engine::StreamKind::Compute);
  nccl.all_gather(a.data_ptr(), input.size(), gathered.data_ptr());
  nccl.barrier();  // drains the stream, then the bootstrap's barrier
  EXPECT_EQ(download(a), input);
  EXPECT_EQ(download(gathered), input);
  auto dup = nccl.duplicate();
  EXPECT_EQ(dup->world_size(), 1);
  EXPECT_STREQ(dup->backend(), "nccl");
  engine::Tensor b = upload(input, DType::F32, 4097, gpu);
  dup->all_reduce_library(b.data_ptr(), 4097, DType::F32, ReduceOp::Sum);
  training::dist::ring_all_reduce(*dup, b.data_ptr(), 4097, DType::F32, ReduceOp::Sum);
  dup->barrier();
  EXPECT_EQ(download(b), input);
#endif
}

TEST(NcclComm, RejectsCpuAndMissingDevices) {
  SKIP_WITHOUT_NCCL();
#if defined(Y9_WITH_NCCL)
  SelfCommunicator boot;
  EXPECT_THROW(training::dist::NcclCommunicator(boot, engine::Device::cpu()), engine::Error);
  EXPECT_THROW(training::dist::NcclCommunicator(boot, engine::Device::cuda(engine::cuda_device_count() + 7)),
               engine::Error);
#endif
}

}  // namespace
