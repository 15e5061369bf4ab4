# Debian packages: `cpack -G DEB` in the build folder (docs/install.md) writes two packages from the
# install components (cmake/Install.cmake):
#   colossal-runtime  colossal-run: plans in, outputs/metrics/checkpoints out. Links no MLIR or
#                     libLLVM.so, so a machine that only runs plans (a cluster node, a container)
#                     does not install libllvm22 and what it pulls in (185 MB less in a fresh
#                     Debian 12 root, measured by test/install/deb_debian12.sh).
#   colossal          colossal-opt, the runtime API headers and the examples; depends on the first.
# Dependencies on libraries come from dpkg-shlibdeps over the installed binaries (the Debian
# packages of the shared libraries they link), plus what the tools run: mpirun (--nproc, multi-rank
# runs) for colossal-run. The kernels are compiled with -march=native unless COLOSSAL_NATIVE is OFF:
# build packages for other machines with -DCOLOSSAL_NATIVE=OFF.
set(CPACK_PACKAGE_NAME colossal)
set(CPACK_PACKAGE_VENDOR "Colossal")
set(CPACK_PACKAGE_CONTACT "Colossal developers <colossal@localhost>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "compiler-style parallelization toolchain for ONNX models")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_GENERATOR DEB)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL runtime)
if(TARGET colossal-opt)
  list(APPEND CPACK_COMPONENTS_ALL compiler)
endif()
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)

set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME colossal-runtime)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_DEPENDS "openmpi-bin")
set(CPACK_DEBIAN_RUNTIME_DESCRIPTION "Colossal runtime: colossal-run executes compiled plans
Runs a plan written by colossal-opt on one or many MPI ranks: inference, training
with checkpoints, sampling and ONNX export. No MLIR.")

set(CPACK_DEBIAN_COMPILER_PACKAGE_NAME colossal)
set(CPACK_DEBIAN_COMPILER_PACKAGE_DEPENDS "colossal-runtime (= ${PROJECT_VERSION})")
set(CPACK_DEBIAN_COMPILER_PACKAGE_SUGGESTS "python3-onnx, python3-numpy, python3-torch")
set(CPACK_DEBIAN_COMPILER_DESCRIPTION "Colossal compiler: colossal-opt compiles ONNX models into parallel plans
Imports an ONNX model into MLIR, applies the strategy of a spec file (data and
tensor parallelism, training) and writes a plan for colossal-run. Also the runtime
API headers and the examples (python3-torch exports their models).")

include(CPack)
