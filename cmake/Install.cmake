# What `cmake --install` puts where (docs/install.md), in two components that the Debian packages
# follow (cmake/Packaging.cmake):
#   runtime   bin/colossal-run, share/doc/colossal (README and docs/), share/colossal/plan.proto
#   compiler  bin/colossal-opt, include/colossal/runtime (the runtime API, plan.pb.h beside it),
#             share/colossal/examples (the README's example scripts and model exporters)
# Nothing installed names the build or source tree: the tools find their libraries in the system's
# library path and the examples find the tools beside them or on PATH (test/install checks both).

install(TARGETS colossal-run RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
install(FILES ${PROJECT_SOURCE_DIR}/runtime/plan/plan.proto
        DESTINATION ${CMAKE_INSTALL_DATADIR}/colossal COMPONENT runtime)
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT runtime)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT runtime
        FILES_MATCHING PATTERN "*.md")

if(TARGET colossal-opt)
  # add_llvm_executable sets INSTALL_RPATH to $ORIGIN/../lib, where nothing of ours lives; Debian's
  # libllvm22 puts libLLVM.so.22.1 in the loader's default path, so the installed tool needs none.
  set_target_properties(colossal-opt PROPERTIES INSTALL_RPATH "")
  install(TARGETS colossal-opt RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT compiler)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/colossal/runtime
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/colossal COMPONENT compiler)
  # runtime/Plan.h includes "plan.pb.h" (the generated plan schema) from its own folder.
  install(FILES ${PLAN_PROTO_HDRS} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/colossal/runtime
          COMPONENT compiler)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/examples/ DESTINATION ${CMAKE_INSTALL_DATADIR}/colossal/examples
          COMPONENT compiler USE_SOURCE_PERMISSIONS
          PATTERN __pycache__ EXCLUDE
          # its reference is onnxruntime through test/e2e/ort_reference.js, which is not installed
          PATTERN run_inference_example.sh EXCLUDE)
endif()
