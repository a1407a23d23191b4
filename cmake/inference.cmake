# The embedded inference build (Y9_INFERENCE_ONLY, preset `inference`; docs/inference.md), included
# by CMakeLists.txt after the engine, kernels, ops, graph and the inference part of io.
#   libyolov9_infer.a  yolov9::Detector (apps/infer/) over the detect code of apps/training/ that
#                      `yolov9 detect` runs: weights loading, the predictor, the detect loop.
#   yolov9             the same `detect` command, and nothing else (apps/{main,commands,detect}.cpp
#                      compiled with Y9_INFERENCE_ONLY).
#   yolov9_infer_example  the docs/inference.md example, verbatim (apps/infer/example.cpp).
#   yolov9_infer_raw   the model and NMS on a stored input tensor (a debugging aid for cross builds).
# Images through OpenCV, or without it (Y9_WITH_OPENCV=OFF, the default of a cross build) through
# io/image_u8.h (libjpeg-turbo, libpng).
# No optimizer, schedule, EMA, data pipeline, MPI, NCCL or GoogleTest; autograd exists in the
# engine but the predictor runs under NoGradGuard, so no tape is ever recorded.

# The detect loop: detector.cpp over OpenCV, or detect_nocv.cpp over io/image_u8.h (Y9_WITH_OPENCV=OFF:
# JPEG and PNG images, boxes without label text, no video).
if(Y9_WITH_OPENCV)
  set(_y9_detect_loop detector)
else()
  set(_y9_detect_loop detect_nocv)
endif()
set(Y9_INFER_TRAINING_SOURCES weights config_paths sources ${_y9_detect_loop} predictor option_checks)
list(TRANSFORM Y9_INFER_TRAINING_SOURCES REPLACE "(.+)" "${CMAKE_SOURCE_DIR}/apps/training/\\1.cpp")
add_library(yolov9_infer STATIC ${Y9_INFER_TRAINING_SOURCES} ${CMAKE_SOURCE_DIR}/apps/infer/detector.cpp)
y9_layer(yolov9_infer apps/training)
target_include_directories(yolov9_infer PUBLIC ${CMAKE_SOURCE_DIR}/apps/infer)  # <yolov9/detector.h>
target_compile_definitions(yolov9_infer PUBLIC Y9_INFERENCE_ONLY=1)
target_link_libraries(yolov9_infer PUBLIC y9_graph y9_io y9_ops)

add_executable(yolov9 ${CMAKE_SOURCE_DIR}/apps/main.cpp ${CMAKE_SOURCE_DIR}/apps/commands.cpp
                      ${CMAKE_SOURCE_DIR}/apps/detect.cpp)
y9_layer(yolov9 apps)
target_link_libraries(yolov9 PRIVATE yolov9_infer)
if(TARGET CLI11::CLI11)
  target_link_libraries(yolov9 PRIVATE CLI11::CLI11)
endif()

add_executable(yolov9_infer_raw ${CMAKE_SOURCE_DIR}/apps/infer/raw_main.cpp)  # cross-build check
target_link_libraries(yolov9_infer_raw PRIVATE yolov9_infer)

add_executable(yolov9_infer_example ${CMAKE_SOURCE_DIR}/apps/infer/example.cpp)
target_link_libraries(yolov9_infer_example PRIVATE yolov9_infer)

# The inference build's own test (label e2e): NEEDED libraries by readelf, then the boxes of this
# build's `yolov9 detect` and of the example against the full build's `yolov9 detect` on coco128
# images (Y9_FULL_BUILD_DIR, default build/; skipped with a reason when it has no yolov9).
set(Y9_FULL_BUILD_DIR ${CMAKE_SOURCE_DIR}/build CACHE PATH "full build whose yolov9 the inference test compares with")
enable_testing()
add_test(NAME inference_build_e2e
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/infer/inference_build_e2e.sh ${CMAKE_BINARY_DIR} ${Y9_FULL_BUILD_DIR}
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(inference_build_e2e PROPERTIES LABELS e2e TIMEOUT 900 SKIP_RETURN_CODE 77)
