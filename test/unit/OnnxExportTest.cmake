# colossal-onnx-export-tests (label `unit`): `export --onnx` (runtime/checkpoint/OnnxExport.cpp) on
# a hand-built plan and an ONNX model written with libonnx's protobuf. A separate executable so
# the main unit tests do not link libonnx.
add_executable(colossal-onnx-export-tests OnnxExportTest.cpp)
target_link_libraries(colossal-onnx-export-tests PRIVATE colossal_onnx_export GTest::gtest_main)
gtest_discover_tests(colossal-onnx-export-tests
  PROPERTIES LABELS unit
  DISCOVERY_TIMEOUT 60)
