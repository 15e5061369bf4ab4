# colossal-spec-tests (label `unit`): the spec parser's `train:` section (defaults, values) and the
# pipeline text it generates (lib/Spec). Included only when the compiler is built.
add_executable(colossal-spec-tests SpecTest.cpp)
target_link_libraries(colossal-spec-tests PRIVATE ColossalSpec GTest::gtest_main)
gtest_discover_tests(colossal-spec-tests
  PROPERTIES LABELS unit
  DISCOVERY_TIMEOUT 60)
