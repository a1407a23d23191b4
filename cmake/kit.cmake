# The GPU device kit (Y9_KIT=ON; tests/gpu/kit.sh, docs/gpu_kit.md), included at the end of
# CMakeLists.txt after the full program (train, val, detect, info; OpenCV core/imgproc only, no
# ONNX export):
#   <name>_cuda_test  every gpu-labelled test (label gpu), device_e2e_cuda_test and
#                     loader_cuda_test included (they run `yolov9 train/val/detect` and the loader)
#   cuda_*_bench      the CUDA benchmarks (Google Benchmark)
target_compile_definitions(yolov9 PRIVATE Y9_KIT=1)

enable_testing()
find_package(GTest REQUIRED)
add_library(y9_testutil STATIC ${CMAKE_SOURCE_DIR}/tests/testutil.cpp)
target_link_libraries(y9_testutil PUBLIC y9_training GTest::gtest)
target_include_directories(y9_testutil PUBLIC ${CMAKE_SOURCE_DIR})
target_compile_definitions(y9_testutil PRIVATE Y9_TESTUTIL_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
file(GLOB_RECURSE Y9_KIT_TEST_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/*_cuda_test.cpp)
set(Y9_KIT_TESTS)
foreach(src ${Y9_KIT_TEST_SOURCES})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  target_link_libraries(${name} PRIVATE y9_testutil GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE Y9_SOURCE_DIR="${CMAKE_SOURCE_DIR}" Y9_BINARY_DIR="${CMAKE_BINARY_DIR}")
  add_test(NAME ${name} COMMAND ${name} WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(${name} PROPERTIES LABELS gpu TIMEOUT 900)
  list(APPEND Y9_KIT_TESTS ${name})
endforeach()
if(TARGET device_e2e_cuda_test)
  add_dependencies(device_e2e_cuda_test yolov9)  # it runs the program
endif()

find_package(benchmark QUIET)
set(Y9_KIT_BENCHES)
if(benchmark_FOUND)
  file(GLOB Y9_KIT_BENCH_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/bench/cuda_*_bench.cpp)
  foreach(src ${Y9_KIT_BENCH_SOURCES})
    get_filename_component(name ${src} NAME_WE)
    add_executable(${name} ${src})
    target_link_libraries(${name} PRIVATE y9_training benchmark::benchmark)
    target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR})
    target_compile_definitions(${name} PRIVATE Y9_BENCH_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
                                               Y9_BENCH_BINARY_DIR="${CMAKE_BINARY_DIR}")
    list(APPEND Y9_KIT_BENCHES ${name})
  endforeach()
endif()
# The CUPTI per-kernel profiler (bench/cupti_profile.cpp), loaded through CUDA_INJECTION64_PATH:
# built when the toolkit has CUPTI (libcupti comes from the device's toolkit at run time).
find_package(CUDAToolkit QUIET)
set(Y9_KIT_CUPTI)
if(TARGET CUDA::cupti)
  add_library(yolov9_cupti_profile SHARED ${CMAKE_SOURCE_DIR}/bench/cupti_profile.cpp)
  target_link_libraries(yolov9_cupti_profile PRIVATE CUDA::cupti)
  set(Y9_KIT_CUPTI yolov9_cupti_profile)
endif()
# `ninja kit`: everything that goes into the bundle.
add_custom_target(kit DEPENDS yolov9 ${Y9_KIT_TESTS} ${Y9_KIT_BENCHES} ${Y9_KIT_CUPTI})
