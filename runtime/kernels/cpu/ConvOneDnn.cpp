//===- ConvOneDnn.cpp - 2-D f32 convolution through oneDNN primitives ---------------------===//
//
// oneDNN's C API (dnnl.h): the runtime is built without C++ exceptions, which dnnl.hpp needs.
// The primitive is created with format `any` for x, w and y so that oneDNN picks its fastest
// layout; x and y are reordered from and to the plan's NCHW around it, inside the workspace.
//
//===----------------------------------------------------------------------------------------===//
#include "ConvOneDnn.h"
#include "OneDnn.h"

#include <algorithm>
#include <string>

namespace colossal::runtime::cpu {

namespace {

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

/// The memory descriptors of a conv's x, y and w, in the plan's plain layouts and as `any` (the
/// primitive's choice), and its window.
struct ConvDescs {
  dnnl_memory_desc_t srcPlain, dstPlain, wPlain, srcAny, dstAny, wAny, bMd;
  dnnl_dims_t strides, dil, padL, padR;
};

llvm::Error initDescs(const ConvGeometry2D &g, ConvDescs &d) {
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
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&d.srcPlain, 4, srcDims, dnnl_f32, dnnl_nchw), "x desc");
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&d.dstPlain, 4, dstDims, dnnl_f32, dnnl_nchw), "y desc");
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&d.wPlain, wRank, wDims, dnnl_f32, wTag), "w desc");
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&d.srcAny, 4, srcDims, dnnl_f32, dnnl_format_tag_any), "x desc");
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&d.dstAny, 4, dstDims, dnnl_f32, dnnl_format_tag_any), "y desc");
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&d.wAny, wRank, wDims, dnnl_f32, dnnl_format_tag_any), "w desc");
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&d.bMd, 1, bDims, dnnl_f32, dnnl_x), "bias desc");
  dnnl_dims_t strides = {g.strideH, g.strideW}, dil = {g.dilH - 1, g.dilW - 1};
  dnnl_dims_t padL = {g.padTop, g.padLeft}, padR = {g.padBottom, g.padRight};
  std::copy(strides, strides + 2, d.strides);
  std::copy(dil, dil + 2, d.dil);
  std::copy(padL, padL + 2, d.padL);
  std::copy(padR, padR + 2, d.padR);
  return llvm::Error::success();
}

/// The primitive's copy of a tensor whose plan layout is `plain`: none (`mem` stays null) when the
/// primitive takes the plain layout, else a memory of `want` placed in the workspace (`bytes`) and
/// the reorder into it (`toPrimitive`) or out of it.
llvm::Error layoutCopy(const dnnl_memory_desc_t *want, const dnnl_memory_desc_t &plain, bool toPrimitive,
                       dnnl_memory_t &mem, size_t &bytes, dnnl_primitive_t &reorder) {
  if (dnnl_memory_desc_equal(want, &plain)) return llvm::Error::success();
  bytes = align64(dnnl_memory_desc_get_size(want));
  DNNL_TRY(dnnl_memory_create(&mem, want, cpuEngine(), DNNL_MEMORY_NONE), "memory");
  return toPrimitive ? makeReorder(&plain, want, reorder) : makeReorder(want, &plain, reorder);
}

llvm::Error build(OneDnnConv &c, const ConvGeometry2D &g, const ConvActivation &act, bool hasBias,
                  const float *constantWeights) {
  if (!cpuEngine()) return dnnlError(dnnl_runtime_error, "engine creation");
  DNNL_TRY(dnnl_stream_create(&c.stream, cpuEngine(), dnnl_stream_default_flags), "stream creation");
  ConvDescs d;
  if (llvm::Error e = initDescs(g, d)) return e;
  dnnl_memory_desc_t &srcPlain = d.srcPlain, &dstPlain = d.dstPlain, &wPlain = d.wPlain, &srcAny = d.srcAny,
                     &dstAny = d.dstAny, &wAny = d.wAny, &bMd = d.bMd;
  dnnl_dims_t &strides = d.strides, &dil = d.dil, &padL = d.padL, &padR = d.padR;
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
  if (llvm::Error err = layoutCopy(srcMd, srcPlain, true, c.src, c.srcBytes, c.srcReorder)) return err;
  if (llvm::Error err = layoutCopy(dstMd, dstPlain, false, c.dst, c.dstBytes, c.dstReorder)) return err;
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

//===----------------------------------------------------------------------------------------===//
// Backward weights (conv_grad_weight)
//===----------------------------------------------------------------------------------------===//

class OneDnnConvGradWeight {
public:
  ~OneDnnConvGradWeight() {
    for (dnnl_primitive_t p : {prim, srcReorder, diffDstReorder, diffWReorder})
      if (p) dnnl_primitive_destroy(p);
    for (dnnl_memory_t m : {userSrc, userDiffDst, userDiffW, src, diffDst, diffW, scratch})
      if (m) dnnl_memory_destroy(m);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (stream) dnnl_stream_destroy(stream);
  }

  dnnl_primitive_desc_t pd = nullptr;
  dnnl_primitive_t prim = nullptr, srcReorder = nullptr, diffDstReorder = nullptr, diffWReorder = nullptr;
  // user*: the plan's x, dy and dw; src/diffDst/diffW: the primitive's layouts in the workspace
  // (null when it takes the plain one).
  dnnl_memory_t userSrc = nullptr, userDiffDst = nullptr, userDiffW = nullptr;
  dnnl_memory_t src = nullptr, diffDst = nullptr, diffW = nullptr, scratch = nullptr;
  dnnl_stream_t stream = nullptr;
  size_t srcBytes = 0, diffDstBytes = 0, diffWBytes = 0, scratchBytes = 0;
};

namespace {

llvm::Error buildGradWeight(OneDnnConvGradWeight &c, const ConvGeometry2D &g) {
  if (!cpuEngine()) return dnnlError(dnnl_runtime_error, "engine creation");
  DNNL_TRY(dnnl_stream_create(&c.stream, cpuEngine(), dnnl_stream_default_flags), "stream creation");
  ConvDescs d;
  if (llvm::Error e = initDescs(g, d)) return e;
  // The backward primitive is chosen against the forward one it differentiates (its hint).
  dnnl_convolution_desc_t fd, bd;
  DNNL_TRY(dnnl_dilated_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct, &d.srcAny,
                                                      &d.wAny, nullptr, &d.dstAny, d.strides, d.dil, d.padL, d.padR),
           "convolution desc");
  DNNL_TRY(dnnl_dilated_convolution_backward_weights_desc_init(&bd, dnnl_convolution_direct, &d.srcAny, &d.wAny,
                                                               nullptr, &d.dstAny, d.strides, d.dil, d.padL, d.padR),
           "backward-weights desc");
  dnnl_primitive_desc_t hint = nullptr;
  DNNL_TRY(dnnl_primitive_desc_create(&hint, &fd, nullptr, cpuEngine(), nullptr), "convolution primitive desc");
  dnnl_primitive_attr_t attr = nullptr;
  dnnl_status_t st = dnnl_primitive_attr_create(&attr);
  if (st == dnnl_success) st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
  if (st == dnnl_success) st = dnnl_primitive_desc_create(&c.pd, &bd, attr, cpuEngine(), hint);
  if (attr) dnnl_primitive_attr_destroy(attr);
  dnnl_primitive_desc_destroy(hint);
  if (st != dnnl_success) return dnnlError(st, "backward-weights primitive desc");
  DNNL_TRY(dnnl_primitive_create(&c.prim, c.pd), "backward-weights primitive");

  const dnnl_memory_desc_t *srcMd = dnnl_primitive_desc_query_md(c.pd, dnnl_query_src_md, 0);
  const dnnl_memory_desc_t *diffDstMd = dnnl_primitive_desc_query_md(c.pd, dnnl_query_diff_dst_md, 0);
  const dnnl_memory_desc_t *diffWMd = dnnl_primitive_desc_query_md(c.pd, dnnl_query_diff_weights_md, 0);
  const dnnl_memory_desc_t *spMd = dnnl_primitive_desc_query_md(c.pd, dnnl_query_scratchpad_md, 0);
  DNNL_TRY(dnnl_memory_create(&c.userSrc, &d.srcPlain, cpuEngine(), DNNL_MEMORY_NONE), "x memory");
  DNNL_TRY(dnnl_memory_create(&c.userDiffDst, &d.dstPlain, cpuEngine(), DNNL_MEMORY_NONE), "dy memory");
  DNNL_TRY(dnnl_memory_create(&c.userDiffW, &d.wPlain, cpuEngine(), DNNL_MEMORY_NONE), "dw memory");
  if (llvm::Error e = layoutCopy(srcMd, d.srcPlain, true, c.src, c.srcBytes, c.srcReorder)) return e;
  if (llvm::Error e = layoutCopy(diffDstMd, d.dstPlain, true, c.diffDst, c.diffDstBytes, c.diffDstReorder)) return e;
  if (llvm::Error e = layoutCopy(diffWMd, d.wPlain, false, c.diffW, c.diffWBytes, c.diffWReorder)) return e;
  if (spMd && dnnl_memory_desc_get_size(spMd)) {
    c.scratchBytes = align64(dnnl_memory_desc_get_size(spMd));
    DNNL_TRY(dnnl_memory_create(&c.scratch, spMd, cpuEngine(), DNNL_MEMORY_NONE), "scratchpad memory");
  }
  return llvm::Error::success();
}

/// Runs `reorder` (when there is one) from `from` to `to`.
llvm::Error reorderIf(OneDnnConvGradWeight &c, dnnl_primitive_t reorder, dnnl_memory_t from, dnnl_memory_t to,
                      const char *what) {
  if (!reorder) return llvm::Error::success();
  dnnl_exec_arg_t args[] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
  DNNL_TRY(dnnl_primitive_execute(reorder, c.stream, 2, args), what);
  return llvm::Error::success();
}

}  // namespace

llvm::Expected<std::shared_ptr<OneDnnConvGradWeight>> createOneDnnConvGradWeight(const ConvGeometry2D &g) {
  if (g.transposed) return dnnlError(dnnl_unimplemented, "backward weights of a transposed conv");
  auto c = std::make_shared<OneDnnConvGradWeight>();
  if (llvm::Error e = buildGradWeight(*c, g)) return std::move(e);
  return c;
}

size_t oneDnnConvGradWeightWorkspace(const OneDnnConvGradWeight &c) {
  return c.srcBytes + c.diffDstBytes + c.diffWBytes + c.scratchBytes;
}

llvm::Error runOneDnnConvGradWeight(OneDnnConvGradWeight &c, const float *x, const float *dy, float *dw,
                                    void *workspace) {
  char *ws = static_cast<char *>(workspace);
  DNNL_TRY(dnnl_memory_set_data_handle(c.userSrc, const_cast<float *>(x)), "x handle");
  DNNL_TRY(dnnl_memory_set_data_handle(c.userDiffDst, const_cast<float *>(dy)), "dy handle");
  DNNL_TRY(dnnl_memory_set_data_handle(c.userDiffW, dw), "dw handle");
  size_t off = 0;
  for (auto [mem, bytes] : {std::pair{c.src, c.srcBytes}, {c.diffDst, c.diffDstBytes}, {c.diffW, c.diffWBytes},
                            {c.scratch, c.scratchBytes}}) {
    if (mem) DNNL_TRY(dnnl_memory_set_data_handle(mem, ws + off), "workspace handle");
    off += bytes;
  }
  if (llvm::Error e = reorderIf(c, c.srcReorder, c.userSrc, c.src, "x reorder")) return e;
  if (llvm::Error e = reorderIf(c, c.diffDstReorder, c.userDiffDst, c.diffDst, "dy reorder")) return e;
  dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, c.src ? c.src : c.userSrc},
                             {DNNL_ARG_DIFF_DST, c.diffDst ? c.diffDst : c.userDiffDst},
                             {DNNL_ARG_DIFF_WEIGHTS, c.diffW ? c.diffW : c.userDiffW}};
  int nargs = 3;
  if (c.scratch) args[nargs++] = {DNNL_ARG_SCRATCHPAD, c.scratch};
  DNNL_TRY(dnnl_primitive_execute(c.prim, c.stream, nargs, args), "backward weights");
  if (llvm::Error e = reorderIf(c, c.diffWReorder, c.diffW, c.userDiffW, "dw reorder")) return e;
  DNNL_TRY(dnnl_stream_wait(c.stream), "stream wait");
  return llvm::Error::success();
}

}  // namespace colossal::runtime::cpu
