// Our all-reduce algorithms, written once against the Communicator interface
// (apps/training/dist/communicator.h) so that they run on MPI (CPU, tested under mpirun), sockets
// and NCCL (GPU) alike:
//  - ring (bandwidth-optimal for large messages): reduce-scatter then all-gather around the ring
//    0 -> 1 -> ... -> n-1 -> 0. The buffer is split into n chunks (sizes differ by at most one
//    element); each of the 2(n-1) steps sends one chunk to the right neighbour and receives one
//    from the left, pipelined in slices with two (AllReduceOptions::slices_in_flight) in flight,
//    so that the local reduction of slice j overlaps the transfer of the next ones.
//    Cost 2(n-1) alpha + 2 (n-1)/n * bytes * beta (+ (n-1)/n * bytes * gamma reduced).
//    Sources: Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for clusters of
//    workstations" (JPDC 2009); Baidu's ring all-reduce (Gibiansky, 2017).
//  - recursive halving-doubling (latency-optimal for small messages): reduce-scatter by recursive
//    halving, all-gather by recursive doubling, among the largest power of two p of ranks; the
//    first 2(n - p) ranks fold in pairs before and unfold after. Cost 2 log2(p) alpha +
//    2 (p-1)/p * bytes * beta (+ 2 alpha + 2 bytes beta when n is not a power of two).
//    Source: Rabenseifner, "Optimization of collective reduction operations" (ICCS 2004);
//    Thakur, Rabenseifner & Gropp, "Optimization of collective communication operations in
//    MPICH" (IJHPCA 2005).
// Payloads F32, F64, F16, BF16; F16/BF16 are accumulated in FP32 by the comm_accumulate kernel
// (kernels/common/comm.h), which rounds once per hop. Every rank ends with the bitwise same
// result (each element's final value is computed by one rank and copied to the others).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "apps/training/dist/communicator.h"

namespace training::dist {

/// Which all-reduce to run: ours picked by size (Auto), one of ours forced, or the library's
/// (MPI_Allreduce / ncclAllReduce: `--allreduce nccl`, the baseline).
enum class AllReduceAlgo { Auto, Ring, HalvingDoubling, Library };

/// "ring" (ours: Auto), "ring-only", "hd", "nccl" / "mpi" / "library" (the library's). Throws
/// engine::ConfigError naming the value and the accepted ones.
AllReduceAlgo parse_allreduce_algo(const std::string& s);
const char* allreduce_algo_name(AllReduceAlgo a);

/// The most slices of one exchange in flight (the Communicator contract allows 4 started and
/// not yet waited exchanges).
inline constexpr int kMaxSlicesInFlight = 4;

struct AllReduceOptions {
  /// Pipelining slice of both algorithms (bytes, rounded down to whole elements, at least one).
  /// 1 MiB: measured with bench/allreduce --slice-sweep (64 KiB to 16 MiB, 1, 2 and 4 in flight)
  /// on 2 and 4 MPI ranks: at 2 MiB, 256 KiB slices reached 0.6-0.8x MPI_Allreduce's busbw where
  /// 1 MiB slices matched it; at 64 MiB 1 MiB with 2 in flight was the best on 4 ranks and within
  /// the noise of the best on 2. A GPU (NCCL) likely wants larger slices: measure there.
  size_t slice_bytes = size_t(1) << 20;
  /// Slices of one exchange in flight, 1 to kMaxSlicesInFlight (the scratch holds one slice per
  /// slice in flight); 2 measured as good as 4 above.
  int slices_in_flight = 2;
  /// Auto: halving-doubling below this many bytes, the ring from it on, when the world size is a
  /// power of two; cutover_bytes_non_pow2 otherwise (there halving-doubling's fold sends the whole
  /// buffer twice more). Measured with bench/allreduce (its "cut-over" line: the first payload
  /// from which halving-doubling is not more than 10% faster at three consecutive payloads) on MPI
  /// on one 2-core machine, three runs per world size: 4 ranks 512 KiB, 128 KiB, 512 KiB
  /// (halving-doubling 11-30% faster below 128 KiB in every run; at 256 KiB 18% and 11% faster in
  /// two runs, 6% slower in one), 3 ranks 256 KiB, 128 KiB, 256 KiB (from 512 KiB on 1.5-4.9x
  /// slower), none on 2 (the same two exchanges). docs/distributed.md has the tables.
  /// Y9_ALLREDUCE_CUTOVER (bytes) overrides both for experiments.
  size_t cutover_bytes = size_t(512) << 10;
  size_t cutover_bytes_non_pow2 = size_t(256) << 10;
};

/// The algorithm Auto picks for `bytes` on `world_size` ranks: HalvingDoubling below
/// opts.cutover_bytes (opts.cutover_bytes_non_pow2 when world_size is not a power of two; the
/// Y9_ALLREDUCE_CUTOVER environment value for both when set), Ring from it on. On 2 ranks both
/// run the same two exchanges and the ring is used.
AllReduceAlgo pick_algo(size_t bytes, int world_size, const AllReduceOptions& opts);

/// Ring all-reduce in place over `count` dense elements of `dtype` at `data` (on comm.device()).
/// Collective: every rank calls it with the same count, dtype, op and options. count 0 is a
/// no-op. Throws CommError when a transfer fails, engine::ShapeError on an unsupported dtype,
/// engine::Error on options out of range.
void ring_all_reduce(Communicator& comm, void* data, int64_t count, engine::DType dtype, ReduceOp op,
                     const AllReduceOptions& opts);
/// The same with the default options but `slice_bytes`.
void ring_all_reduce(Communicator& comm, void* data, int64_t count, engine::DType dtype, ReduceOp op,
                     size_t slice_bytes = AllReduceOptions{}.slice_bytes);

/// Recursive halving-doubling all-reduce; same contract as ring_all_reduce.
void halving_doubling_all_reduce(Communicator& comm, void* data, int64_t count, engine::DType dtype, ReduceOp op,
                                 const AllReduceOptions& opts);
void halving_doubling_all_reduce(Communicator& comm, void* data, int64_t count, engine::DType dtype, ReduceOp op,
                                 size_t slice_bytes = AllReduceOptions{}.slice_bytes);

/// Runs `algo` (Auto: pick_algo); returns the algorithm that ran.
AllReduceAlgo all_reduce(Communicator& comm, void* data, int64_t count, engine::DType dtype, ReduceOp op,
                         AllReduceAlgo algo = AllReduceAlgo::Auto, const AllReduceOptions& opts = {});

/// Tensor form: `t` dense on comm.device().
AllReduceAlgo all_reduce(Communicator& comm, engine::Tensor& t, ReduceOp op, AllReduceAlgo algo = AllReduceAlgo::Auto,
                         const AllReduceOptions& opts = {});

}  // namespace training::dist
