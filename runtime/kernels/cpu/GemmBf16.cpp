//===- GemmBf16.cpp - bf16 GEMM through oneDNN's matmul primitive ---------------------------===//
//
// oneDNN's C API (dnnl.h; the runtime is built without C++ exceptions, which dnnl.hpp needs).
// Operands and result are described by strides in the plan's row-major layout (a transpose is a
// swapped pair of strides), so nothing is reordered outside the primitive: its brgemm kernels
// pack blocks of A and B into the scratchpad, which the kernel's workspace provides
// (scratchpad mode `user`, so running allocates nothing).
//
//===----------------------------------------------------------------------------------------===//
#include "GemmBf16.h"

#include <cstdlib>
#include <cstring>

#if defined(COLOSSAL_GEMM_ONEDNN)
#include "OneDnn.h"

#include <cpuid.h>

#include <mutex>
#include <string>

namespace colossal::runtime::cpu {

bool oneDnnBf16Available() {
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  return (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
}

namespace {

struct CpuChoice {
  bool onednn;
  const char *why;
};

/// The CPU's choice (GemmBf16.h): oneDNN where bf16 dot products outrun f32 FMAs.
CpuChoice cpuChoice() {
  static const CpuChoice choice = [] {
    if (!oneDnnBf16Available()) return CpuChoice{false, "widen (no AVX512-BF16)"};
    const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    if ((isa & dnnl_cpu_isa_avx512_core_amx) == dnnl_cpu_isa_avx512_core_amx)
      return CpuChoice{true, "onednn (AMX-BF16)"};
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    __get_cpuid(0, &eax, &ebx, &ecx, &edx);
    char vendor[13] = {};
    std::memcpy(vendor, &ebx, 4);
    std::memcpy(vendor + 4, &edx, 4);
    std::memcpy(vendor + 8, &ecx, 4);
    __get_cpuid(1, &eax, &ebx, &ecx, &edx);
    const unsigned family = ((eax >> 8) & 0xf) + (((eax >> 8) & 0xf) == 0xf ? (eax >> 20) & 0xff : 0);
    // AMD family 0x19 with AVX-512 is Zen 4 (a zmm vdpbf16ps at the zmm FMA rate, twice the
    // work), 0x1A Zen 5.
    if (std::strcmp(vendor, "AuthenticAMD") == 0 && family >= 0x19)
      return CpuChoice{true, "onednn (AMD Zen 4+ AVX512-BF16)"};
    return CpuChoice{false, "widen (AVX512-BF16 slower than f32 FMA on this CPU)"};
  }();
  return choice;
}

}  // namespace

llvm::Expected<bool> useOneDnnBf16Gemm() {
  if (const char *env = std::getenv("COLOSSAL_BF16_GEMM")) {
    if (std::strcmp(env, "widen") == 0) return false;
    if (std::strcmp(env, "onednn") == 0) {
      if (!oneDnnBf16Available())
        return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                       "COLOSSAL_BF16_GEMM=onednn: this CPU has no AVX512-BF16 (oneDNN "
                                       "would emulate it); unset it or use widen");
      return true;
    }
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   std::string("COLOSSAL_BF16_GEMM=") + env +
                                       ": must be onednn or widen (unset: the CPU's choice, " + cpuChoice().why +
                                       ")");
  }
  return cpuChoice().onednn;
}

const char *bf16GemmChoice() {
  if (!std::getenv("COLOSSAL_BF16_GEMM")) return cpuChoice().why;
  llvm::Expected<bool> onednn = useOneDnnBf16Gemm();
  if (!onednn) {
    llvm::consumeError(onednn.takeError());
    return "invalid COLOSSAL_BF16_GEMM";
  }
  return *onednn ? "onednn (COLOSSAL_BF16_GEMM)" : "widen (COLOSSAL_BF16_GEMM)";
}

class OneDnnBf16Gemm {
public:
  ~OneDnnBf16Gemm() {
    for (dnnl_memory_t m : {a, b, c, scratch})
      if (m) dnnl_memory_destroy(m);
    if (prim) dnnl_primitive_destroy(prim);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (stream) dnnl_stream_destroy(stream);
  }
  dnnl_primitive_desc_t pd = nullptr;
  dnnl_primitive_t prim = nullptr;
  dnnl_memory_t a = nullptr, b = nullptr, c = nullptr, scratch = nullptr;
  dnnl_stream_t stream = nullptr;
  size_t scratchBytes = 0;
  std::mutex mutex;  // the memory objects' data handles are set per run
};

llvm::Expected<std::shared_ptr<OneDnnBf16Gemm>> createOneDnnBf16Gemm(bool transA, bool transB, int64_t M, int64_t N,
                                                                     int64_t K, int64_t lda, int64_t ldb,
                                                                     int64_t ldc, float alpha, bool accumulate,
                                                                     bool bf16Result) {
  if (!cpuEngine()) return dnnlError(dnnl_runtime_error, "bf16 matmul engine creation");
  auto g = std::make_shared<OneDnnBf16Gemm>();
  dnnl_dims_t aDims = {M, K}, bDims = {K, N}, cDims = {M, N};
  // op(A)[m,k] at A[m·lda + k], or A[k·lda + m] when transposed; the same for B and C.
  dnnl_dims_t aStrides = {transA ? 1 : lda, transA ? lda : 1};
  dnnl_dims_t bStrides = {transB ? 1 : ldb, transB ? ldb : 1};
  dnnl_dims_t cStrides = {ldc, 1};
  dnnl_memory_desc_t amd, bmd, cmd;
  DNNL_TRY(dnnl_memory_desc_init_by_strides(&amd, 2, aDims, dnnl_bf16, aStrides), "bf16 matmul a desc");
  DNNL_TRY(dnnl_memory_desc_init_by_strides(&bmd, 2, bDims, dnnl_bf16, bStrides), "bf16 matmul b desc");
  DNNL_TRY(dnnl_memory_desc_init_by_strides(&cmd, 2, cDims, bf16Result ? dnnl_bf16 : dnnl_f32, cStrides), "bf16 matmul c desc");
  dnnl_matmul_desc_t md;
  DNNL_TRY(dnnl_matmul_desc_init(&md, &amd, &bmd, nullptr, &cmd), "bf16 matmul descriptor");
  dnnl_primitive_attr_t attr = nullptr;
  DNNL_TRY(dnnl_primitive_attr_create(&attr), "bf16 matmul attributes");
  dnnl_post_ops_t po = nullptr;
  auto build = [&]() -> llvm::Error {
    DNNL_TRY(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), "bf16 matmul scratchpad mode");
    if (alpha != 1.0f) DNNL_TRY(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha), "bf16 matmul output scale");
    if (accumulate) {
      DNNL_TRY(dnnl_post_ops_create(&po), "bf16 matmul post-ops");
      DNNL_TRY(dnnl_post_ops_append_sum(po, 1.0f), "bf16 matmul sum post-op");
      DNNL_TRY(dnnl_primitive_attr_set_post_ops(attr, po), "bf16 matmul post-ops");
    }
    DNNL_TRY(dnnl_primitive_desc_create(&g->pd, &md, attr, cpuEngine(), nullptr), "bf16 matmul primitive descriptor");
    return llvm::Error::success();
  };
  llvm::Error e = build();
  if (po) dnnl_post_ops_destroy(po);
  dnnl_primitive_attr_destroy(attr);
  if (e) return std::move(e);
  DNNL_TRY(dnnl_primitive_create(&g->prim, g->pd), "bf16 matmul primitive creation");
  DNNL_TRY(dnnl_stream_create(&g->stream, cpuEngine(), dnnl_stream_default_flags), "bf16 matmul stream creation");
  DNNL_TRY(dnnl_memory_create(&g->a, &amd, cpuEngine(), DNNL_MEMORY_NONE), "bf16 matmul a memory");
  DNNL_TRY(dnnl_memory_create(&g->b, &bmd, cpuEngine(), DNNL_MEMORY_NONE), "bf16 matmul b memory");
  DNNL_TRY(dnnl_memory_create(&g->c, &cmd, cpuEngine(), DNNL_MEMORY_NONE), "bf16 matmul c memory");
  const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(g->pd, dnnl_query_scratchpad_md, 0);
  g->scratchBytes = smd ? dnnl_memory_desc_get_size(smd) : 0;
  if (g->scratchBytes) DNNL_TRY(dnnl_memory_create(&g->scratch, smd, cpuEngine(), DNNL_MEMORY_NONE), "bf16 matmul scratchpad");
  return g;
}

size_t oneDnnBf16GemmWorkspace(const OneDnnBf16Gemm &g) { return (g.scratchBytes + 63) / 64 * 64; }

llvm::Error runOneDnnBf16Gemm(OneDnnBf16Gemm &g, const uint16_t *A, const uint16_t *B, void *C, void *workspace) {
  std::lock_guard<std::mutex> lock(g.mutex);
  DNNL_TRY(dnnl_memory_set_data_handle(g.a, const_cast<uint16_t *>(A)), "bf16 matmul a handle");
  DNNL_TRY(dnnl_memory_set_data_handle(g.b, const_cast<uint16_t *>(B)), "bf16 matmul b handle");
  DNNL_TRY(dnnl_memory_set_data_handle(g.c, C), "bf16 matmul c handle");
  dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, g.a}, {DNNL_ARG_WEIGHTS, g.b}, {DNNL_ARG_DST, g.c}};
  int nargs = 3;
  if (g.scratch) {
    DNNL_TRY(dnnl_memory_set_data_handle(g.scratch, workspace), "bf16 matmul scratchpad handle");
    args[nargs++] = {DNNL_ARG_SCRATCHPAD, g.scratch};
  }
  DNNL_TRY(dnnl_primitive_execute(g.prim, g.stream, nargs, args), "bf16 matmul execution");
  DNNL_TRY(dnnl_stream_wait(g.stream), "bf16 matmul stream wait");
  return llvm::Error::success();
}

}  // namespace colossal::runtime::cpu

#else  // built with OpenBLAS: every bf16 contraction widens

namespace colossal::runtime::cpu {
bool oneDnnBf16Available() { return false; }
llvm::Expected<bool> useOneDnnBf16Gemm() {
  if (const char *env = std::getenv("COLOSSAL_BF16_GEMM"))
    if (std::strcmp(env, "widen") != 0)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     std::string("COLOSSAL_BF16_GEMM=") + env +
                                         ": this build has no oneDNN (COLOSSAL_GEMM_BACKEND=openblas); only widen");
  return false;
}
const char *bf16GemmChoice() { return "widen (built without oneDNN)"; }
}  // namespace colossal::runtime::cpu

#endif
