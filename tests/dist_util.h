// Helpers of the multi-process tests (tests/dist_main.cpp runs them under mpirun).
#pragma once
#include "apps/training/dist/communicator.h"

namespace dist_test {
/// The MPI world communicator of this test process.
training::dist::Communicator& world();
}  // namespace dist_test
