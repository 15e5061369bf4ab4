//===- OneDnn.h - What the oneDNN-backed CPU kernels share ------------------------*- C++ -*-===//
//
// oneDNN's C API (dnnl.h; the runtime is built without C++ exceptions, which dnnl.hpp needs):
// one CPU engine for the process and its status codes as llvm::Error. Internal to
// runtime/kernels/cpu; only with COLOSSAL_GEMM_BACKEND=onednn.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_KERNELS_CPU_ONEDNN_H
#define COLOSSAL_RUNTIME_KERNELS_CPU_ONEDNN_H

#include "llvm/Support/Error.h"

#include <dnnl.h>

#include <string>

namespace colossal::runtime::cpu {

/// "oneDNN WHAT failed (status N)".
inline llvm::Error dnnlError(dnnl_status_t st, const char *what) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 std::string("oneDNN ") + what + " failed (status " + std::to_string(int(st)) + ")");
}

/// One CPU engine for the process (oneDNN engines are thread-safe and cheap to share); null when
/// oneDNN could not create one.
inline dnnl_engine_t cpuEngine() {
  static dnnl_engine_t engine = [] {
    dnnl_engine_t e = nullptr;
    if (dnnl_engine_create(&e, dnnl_cpu, 0) != dnnl_success) e = nullptr;
    return e;
  }();
  return engine;
}

}  // namespace colossal::runtime::cpu

/// Returns dnnlError(status, what) from the enclosing function when `call` fails.
#define DNNL_TRY(call, what)                                                                    \
  do {                                                                                          \
    dnnl_status_t st_ = (call);                                                                 \
    if (st_ != dnnl_success) return ::colossal::runtime::cpu::dnnlError(st_, what);             \
  } while (0)

#endif
