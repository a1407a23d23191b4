# The GPU device kit (Y9_KIT=ON; tests/gpu/kit.sh, docs/gpu_kit.md), included after
# cmake/inference.cmake: the inference build without OpenCV plus
#   yolov9           detect (as in the inference build) and `info` (--backends, --self-check, --cfg)
#   <name>_cuda_test the gpu-labelled tests that need neither OpenCV nor MPI (label gpu)
#   cuda_*_bench     the CUDA benchmarks that need neither (Google Benchmark)
# Left out: tests/io/loader_cuda_test.cpp (the data loader decodes and augments through OpenCV) and
# tests/apps/device_e2e_cuda_test.cpp (it runs `yolov9 train`, which the kit's yolov9 lacks).
target_sources(yolov9 PRIVATE ${CMAKE_SOURCE_DIR}/apps/selfcheck.cpp)
target_compile_definitions(yolov9 PRIVATE Y9_KIT=1)

# Things that the CUDA code links from the training library: the NCCL communicator and our
# all-reduce algorithms (no MPI in them).
add_library(y9_kit_dist STATIC ${CMAKE_SOURCE_DIR}/apps/training/dist/communicator.cpp
                               ${CMAKE_SOURCE_DIR}/apps/training/dist/allreduce.cpp
                               ${CMAKE_SOURCE_DIR}/apps/training/dist/nccl_comm.cpp)
target_include_directories(y9_kit_dist PUBLIC ${CMAKE_SOURCE_DIR})
target_link_libraries(y9_kit_dist PUBLIC y9_ops)

set(Y9_KIT_TEST_EXCLUDE loader_cuda_test device_e2e_cuda_test)
enable_testing()
find_package(GTest REQUIRED)
add_library(y9_testutil STATIC ${CMAKE_SOURCE_DIR}/tests/testutil.cpp)
target_link_libraries(y9_testutil PUBLIC y9_graph y9_io y9_ops GTest::gtest)
target_include_directories(y9_testutil PUBLIC ${CMAKE_SOURCE_DIR})
target_compile_definitions(y9_testutil PRIVATE Y9_TESTUTIL_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
file(GLOB_RECURSE Y9_KIT_TEST_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/*_cuda_test.cpp)
set(Y9_KIT_TESTS)
foreach(src ${Y9_KIT_TEST_SOURCES})
  get_filename_component(name ${src} NAME_WE)
  if(name IN_LIST Y9_KIT_TEST_EXCLUDE)
    continue()
  endif()
  add_executable(${name} ${src})
  target_link_libraries(${name} PRIVATE y9_testutil y9_kit_dist GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE Y9_SOURCE_DIR="${CMAKE_SOURCE_DIR}" Y9_BINARY_DIR="${CMAKE_BINARY_DIR}")
  add_test(NAME ${name} COMMAND ${name} WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(${name} PROPERTIES LABELS gpu TIMEOUT 900)
  list(APPEND Y9_KIT_TESTS ${name})
endforeach()

find_package(benchmark QUIET)
set(Y9_KIT_BENCHES)
if(benchmark_FOUND)
  foreach(name cuda_elementwise_bench)
    add_executable(${name} ${CMAKE_SOURCE_DIR}/bench/${name}.cpp)
    target_link_libraries(${name} PRIVATE y9_ops benchmark::benchmark)
    target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR})
    target_compile_definitions(${name} PRIVATE Y9_BENCH_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
                                               Y9_BENCH_BINARY_DIR="${CMAKE_BINARY_DIR}")
    list(APPEND Y9_KIT_BENCHES ${name})
  endforeach()
endif()
# `ninja kit`: everything that goes into the bundle (and nothing of the inference build's extras).
add_custom_target(kit DEPENDS yolov9 ${Y9_KIT_TESTS} ${Y9_KIT_BENCHES})
