//===- ConvOneDnn.cpp - 2-D f32 convolution through oneDNN primitives ---------------------===//
//
// oneDNN's C API (dnnl.h): the runtime is built without C++ exceptions, which dnnl.hpp needs.
// The primitive is created with format `any` for x, w and y so that oneDNN picks its fastest
// layout; x and y are reordered from and to the plan's NCHW around it, inside the workspace.
//
//===----------------------------------------------------------------------------------------===//
#include "ConvOneDnn.h"

#include <dnnl.h>

#include <string>

namespace colossal::runtime::cpu {

namespace {

llvm::Error dnnlError(dnnl_status_t st, const char *what) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 std::string("oneDNN ") + what + " failed (status " + std::to_string(int(st)) + ")");
}

#define DNNL_TRY(call, what)                                                                    \
  do {                                                                                          \
    dnnl_status_t st_ = (call);                                                                 \
    if (st_ != dnnl_success) return dnnlError(st_, what);                                       \
  } while (0)

/// One CPU engine for the process (oneDNN engines are thread-safe and cheap to share).
dnnl_engine_t cpuEngine() {
  static dnnl_engine_t engine = [] {
    dnnl_engine_t e = nullptr;
    if (dnnl_engine_create(&e, dnnl_cpu, 0) != dnnl_success) e = nullptr;
    return e;
  }();
  return engine;
}

size_t align64(size_t n) { return (n + 63) / 64 * 64; }

}  // namespace

class OneDnnConv {
public:
  ~OneDnnConv() {
    for (dnnl_primitive_t p : {conv, srcReorder, dstReorder, wReorder})
      if (p) dnnl_primitive_destroy(p);
    for (dnnl_memory_t m : {userSrc, userDst, userW, src, dst, w, bias, scratch})
      if (m) dnnl_memory_destroy(m);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (stream) dnnl_stream_destroy(stream);
  }

  dnnl_primitive_desc_t pd = nullptr;
  dnnl_primitive_t conv = nullptr, srcReorder = nullptr, dstReorder = nullptr, wReorder = nullptr;
  // user*: the plan's plain tensors; src/dst/w: the primitive's layouts (the same objects as the
  // user ones when no reorder is needed); w owns its bytes when it is a reordered copy.
  dnnl_memory_t userSrc = nullptr, userDst = nullptr, userW = nullptr;
  dnnl_memory_t src = nullptr, dst = nullptr, w = nullptr, bias = nullptr, scratch = nullptr;
  dnnl_stream_t stream = nullptr;
  size_t srcBytes = 0, dstBytes = 0, scratchBytes = 0;
  bool weightsReady = false;
  const char *impl = "";
};

namespace {

llvm::Error makeReorder(const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to, dnnl_primitive_t &out) {
  dnnl_primitive_desc_t rpd = nullptr;
  DNNL_TRY(dnnl_reorder_primitive_desc_create(&rpd, from, cpuEngine(), to, cpuEngine(), nullptr), "reorder");
  dnnl_status_t st = dnnl_primitive_create(&out, rpd);
  dnnl_primitive_desc_destroy(rpd);
  if (st != dnnl_success) return dnnlError(st, "reorder creation");
  return llvm::Error::success();
}

llvm::Error appendActivation(dnnl_post_ops_t po, const ConvActivation &act) {
  switch (act.kind) {
  case ConvActivation::None: break;
  case ConvActivation::Relu: DNNL_TRY(dnnl_post_ops_append_eltwise(po, 1.f, dnnl_eltwise_relu, 0.f, 0.f), "relu"); break;
  case ConvActivation::Clip:
    DNNL_TRY(dnnl_post_ops_append_eltwise(po, 1.f, dnnl_eltwise_clip, act.alpha, act.beta), "clip");
    break;
  case ConvActivation::HardSigmoid:  // max(0, min(1, αx + β)): linear, then clip
    DNNL_TRY(dnnl_post_ops_append_eltwise(po, 1.f, dnnl_eltwise_linear, act.alpha, act.beta), "linear");
    DNNL_TRY(dnnl_post_ops_append_eltwise(po, 1.f, dnnl_eltwise_clip, 0.f, 1.f), "clip");
    break;
  case ConvActivation::HardSwish:
    DNNL_TRY(dnnl_post_ops_append_eltwise(po, 1.f, dnnl_eltwise_hardswish, 0.f, 0.f), "hardswish");
    break;
  case ConvActivation::Sigmoid:
    DNNL_TRY(dnnl_post_ops_append_eltwise(po, 1.f, dnnl_eltwise_logistic, 0.f, 0.f), "logistic");
    break;
  }
  if (act.scale != 1.f || act.shift != 0.f)
    DNNL_TRY(dnnl_post_ops_append_eltwise(po, 1.f, dnnl_eltwise_linear, act.scale, act.shift), "linear");
  return llvm::Error::success();
}

llvm::Error build(OneDnnConv &c, const ConvGeometry2D &g, const ConvActivation &act, bool hasBias,
                  const float *constantWeights) {
  if (!cpuEngine()) return dnnlError(dnnl_runtime_error, "engine creation");
  DNNL_TRY(dnnl_stream_create(&c.stream, cpuEngine(), dnnl_stream_default_flags), "stream creation");
  dnnl_dims_t srcDims = {g.N, g.C, g.H, g.W}, dstDims = {g.N, g.M, g.OH, g.OW};
  dnnl_dims_t wDims = {g.G, g.M / g.G, g.C / g.G, g.KH, g.KW}, bDims = {g.M};
  const int wRank = g.G > 1 ? 5 : 4;
  if (g.G == 1) {
    wDims[0] = g.M;
    wDims[1] = g.C;
    wDims[2] = g.KH;
    wDims[3] = g.KW;
  }
  // oneDNN's weights are (out, in, ...) for both; ONNX ConvTranspose stores (in, out, ...): iohw.
  dnnl_format_tag_t wTag = g.transposed ? (g.G > 1 ? dnnl_giohw : dnnl_iohw) : (g.G > 1 ? dnnl_goihw : dnnl_oihw);
  dnnl_memory_desc_t srcPlain, dstPlain, wPlain, srcAny, dstAny, wAny, bMd;
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&srcPlain, 4, srcDims, dnnl_f32, dnnl_nchw), "x desc");
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&dstPlain, 4, dstDims, dnnl_f32, dnnl_nchw), "y desc");
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&wPlain, wRank, wDims, dnnl_f32, wTag), "w desc");
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&srcAny, 4, srcDims, dnnl_f32, dnnl_format_tag_any), "x desc");
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&dstAny, 4, dstDims, dnnl_f32, dnnl_format_tag_any), "y desc");
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&wAny, wRank, wDims, dnnl_f32, dnnl_format_tag_any), "w desc");
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&bMd, 1, bDims, dnnl_f32, dnnl_x), "bias desc");

  dnnl_dims_t strides = {g.strideH, g.strideW}, dil = {g.dilH - 1, g.dilW - 1};
  dnnl_dims_t padL = {g.padTop, g.padLeft}, padR = {g.padBottom, g.padRight};
  dnnl_convolution_desc_t cd;
  dnnl_deconvolution_desc_t dd;
  if (g.transposed)
    DNNL_TRY(dnnl_dilated_deconvolution_forward_desc_init(&dd, dnnl_forward_inference, dnnl_deconvolution_direct,
                                                          &srcAny, &wAny, hasBias ? &bMd : nullptr, &dstAny,
                                                          strides, dil, padL, padR),
             "deconvolution desc");
  else
    DNNL_TRY(dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct,
                                                        &srcAny, &wAny, hasBias ? &bMd : nullptr, &dstAny,
                                                        strides, dil, padL, padR),
             "convolution desc");
  dnnl_primitive_attr_t attr = nullptr;
  dnnl_post_ops_t po = nullptr;
  DNNL_TRY(dnnl_primitive_attr_create(&attr), "attr");
  DNNL_TRY(dnnl_post_ops_create(&po), "post-ops");
  llvm::Error e = appendActivation(po, act);
  dnnl_status_t st = dnnl_success;
  if (!e) st = dnnl_primitive_attr_set_post_ops(attr, po);
  if (!e && st == dnnl_success) st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
  if (!e && st == dnnl_success)
    st = dnnl_primitive_desc_create(&c.pd, g.transposed ? static_cast<const_dnnl_op_desc_t>(&dd) : &cd, attr,
                                    cpuEngine(), nullptr);
  dnnl_post_ops_destroy(po);
  dnnl_primitive_attr_destroy(attr);
  if (e) return e;
  if (st != dnnl_success) return dnnlError(st, "convolution primitive desc");
  DNNL_TRY(dnnl_primitive_create(&c.conv, c.pd), "convolution primitive");
  dnnl_primitive_desc_query(c.pd, dnnl_query_impl_info_str, 0, &c.impl);

  const dnnl_memory_desc_t *srcMd = dnnl_primitive_desc_query_md(c.pd, dnnl_query_src_md, 0);
  const dnnl_memory_desc_t *dstMd = dnnl_primitive_desc_query_md(c.pd, dnnl_query_dst_md, 0);
  const dnnl_memory_desc_t *wMd = dnnl_primitive_desc_query_md(c.pd, dnnl_query_weights_md, 0);
  const dnnl_memory_desc_t *spMd = dnnl_primitive_desc_query_md(c.pd, dnnl_query_scratchpad_md, 0);

  DNNL_TRY(dnnl_memory_create(&c.userSrc, &srcPlain, cpuEngine(), DNNL_MEMORY_NONE), "x memory");
  DNNL_TRY(dnnl_memory_create(&c.userDst, &dstPlain, cpuEngine(), DNNL_MEMORY_NONE), "y memory");
  DNNL_TRY(dnnl_memory_create(&c.userW, &wPlain, cpuEngine(), DNNL_MEMORY_NONE), "w memory");
  if (hasBias) DNNL_TRY(dnnl_memory_create(&c.bias, &bMd, cpuEngine(), DNNL_MEMORY_NONE), "bias memory");
  if (!dnnl_memory_desc_equal(srcMd, &srcPlain)) {
    c.srcBytes = align64(dnnl_memory_desc_get_size(srcMd));
    DNNL_TRY(dnnl_memory_create(&c.src, srcMd, cpuEngine(), DNNL_MEMORY_NONE), "x memory");
    if (llvm::Error err = makeReorder(&srcPlain, srcMd, c.srcReorder)) return err;
  }
  if (!dnnl_memory_desc_equal(dstMd, &dstPlain)) {
    c.dstBytes = align64(dnnl_memory_desc_get_size(dstMd));
    DNNL_TRY(dnnl_memory_create(&c.dst, dstMd, cpuEngine(), DNNL_MEMORY_NONE), "y memory");
    if (llvm::Error err = makeReorder(dstMd, &dstPlain, c.dstReorder)) return err;
  }
  if (!dnnl_memory_desc_equal(wMd, &wPlain)) {
    DNNL_TRY(dnnl_memory_create(&c.w, wMd, cpuEngine(), DNNL_MEMORY_ALLOCATE), "w memory");
    if (llvm::Error err = makeReorder(&wPlain, wMd, c.wReorder)) return err;
  }
  if (spMd && dnnl_memory_desc_get_size(spMd)) {
    c.scratchBytes = align64(dnnl_memory_desc_get_size(spMd));
    DNNL_TRY(dnnl_memory_create(&c.scratch, spMd, cpuEngine(), DNNL_MEMORY_NONE), "scratchpad memory");
  }
  if (constantWeights) {
    DNNL_TRY(dnnl_memory_set_data_handle(c.userW, const_cast<float *>(constantWeights)), "w handle");
    if (c.wReorder) {
      dnnl_exec_arg_t args[] = {{DNNL_ARG_FROM, c.userW}, {DNNL_ARG_TO, c.w}};
      DNNL_TRY(dnnl_primitive_execute(c.wReorder, c.stream, 2, args), "weights reorder");
      DNNL_TRY(dnnl_stream_wait(c.stream), "stream wait");
    }
    c.weightsReady = true;
  }
  return llvm::Error::success();
}

}  // namespace

llvm::Expected<std::shared_ptr<OneDnnConv>> createOneDnnConv(const ConvGeometry2D &g, const ConvActivation &act,
                                                             bool hasBias, const float *constantWeights) {
  auto conv = std::make_shared<OneDnnConv>();
  if (llvm::Error e = build(*conv, g, act, hasBias, constantWeights)) return std::move(e);
  return conv;
}

size_t oneDnnConvWorkspace(const OneDnnConv &c) { return c.srcBytes + c.dstBytes + c.scratchBytes; }

const char *oneDnnConvImpl(const OneDnnConv &c) { return c.impl; }

llvm::Error runOneDnnConv(OneDnnConv &c, const float *x, const float *w, const float *bias, float *y,
                          void *workspace) {
  char *ws = static_cast<char *>(workspace);
  DNNL_TRY(dnnl_memory_set_data_handle(c.userSrc, const_cast<float *>(x)), "x handle");
  DNNL_TRY(dnnl_memory_set_data_handle(c.userDst, y), "y handle");
  if (c.bias) DNNL_TRY(dnnl_memory_set_data_handle(c.bias, const_cast<float *>(bias)), "bias handle");
  if (c.src) DNNL_TRY(dnnl_memory_set_data_handle(c.src, ws), "x handle");
  if (c.dst) DNNL_TRY(dnnl_memory_set_data_handle(c.dst, ws + c.srcBytes), "y handle");
  if (c.scratch) DNNL_TRY(dnnl_memory_set_data_handle(c.scratch, ws + c.srcBytes + c.dstBytes), "scratchpad handle");
  if (!c.weightsReady) {
    DNNL_TRY(dnnl_memory_set_data_handle(c.userW, const_cast<float *>(w)), "w handle");
    if (c.wReorder) {
      dnnl_exec_arg_t args[] = {{DNNL_ARG_FROM, c.userW}, {DNNL_ARG_TO, c.w}};
      DNNL_TRY(dnnl_primitive_execute(c.wReorder, c.stream, 2, args), "weights reorder");
    }
  }
  dnnl_memory_t src = c.src ? c.src : c.userSrc, dst = c.dst ? c.dst : c.userDst, wm = c.w ? c.w : c.userW;
  if (c.srcReorder) {
    dnnl_exec_arg_t args[] = {{DNNL_ARG_FROM, c.userSrc}, {DNNL_ARG_TO, c.src}};
    DNNL_TRY(dnnl_primitive_execute(c.srcReorder, c.stream, 2, args), "x reorder");
  }
  dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, dst}};
  int nargs = 3;
  if (c.bias) args[nargs++] = {DNNL_ARG_BIAS, c.bias};
  if (c.scratch) args[nargs++] = {DNNL_ARG_SCRATCHPAD, c.scratch};
  DNNL_TRY(dnnl_primitive_execute(c.conv, c.stream, nargs, args), "convolution");
  if (c.dstReorder) {
    dnnl_exec_arg_t out[] = {{DNNL_ARG_FROM, c.dst}, {DNNL_ARG_TO, c.userDst}};
    DNNL_TRY(dnnl_primitive_execute(c.dstReorder, c.stream, 2, out), "y reorder");
  }
  DNNL_TRY(dnnl_stream_wait(c.stream), "stream wait");
  return llvm::Error::success();
}

}  // namespace colossal::runtime::cpu
