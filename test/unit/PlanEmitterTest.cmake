# colossal-plan-emitter-tests (label `unit`): the compiler's plan emitter (lib/Target/Plan) and its
# memory planner; emitted plans are read back through the runtime's loader and executor. Links
# MLIR, so it is a separate executable, included only when the compiler is built.
add_executable(colossal-plan-emitter-tests PlanEmitterTest.cpp TrainPlanEmitterTest.cpp
  ShardedPlanTest.cpp CollectivePlanEmitterTest.cpp PipelineTest.cpp)
target_link_libraries(colossal-plan-emitter-tests PRIVATE
  ColossalTargetPlan ColossalPasses colossal_runtime MLIRParser GTest::gtest_main)
gtest_discover_tests(colossal-plan-emitter-tests
  PROPERTIES LABELS unit
  DISCOVERY_TIMEOUT 60)
