//===- resize.cpp - resize CPU kernel (f32) --------------------------------------------------===//
//
// x [D0..Dr) -> y [O0..Or), ONNX Resize (and Upsample) with nearest / linear / cubic modes and
// every coordinate_transformation_mode (formulas in ColossalNNOps.td). Interpolation is separable:
// per dim and output index we precompute up to 4 taps (input index, weight) — 1 for nearest, 2 for
// linear, 4 for cubic (Keys 1981, parameter A) — with neighbour indices clamped to the input
// (edge padding, as the ONNX reference does); each output element is the sum over the tensor
// product of its dims' taps (nearest: a gather per row, repeated rows copied).
// tf_crop_and_resize yields extrapolation_value where any dim's source
// coordinate falls outside [0, D − 1]. Weights are computed in double. Parallel over outputs.
// resize_grad (the VJP): dx = Aᵀ·dy with the same taps, scattered back from each output element.
//
//===----------------------------------------------------------------------------------------===//
#include "NN.h"

#include "plan.pb.h"

#include <algorithm>

#include <cmath>
#include <cstring>
#include <vector>

namespace colossal::runtime::cpu {
namespace {

struct Taps {
  int count = 1;                // taps per output index (same for every index of a dim)
  std::vector<int64_t> index;   // [O · count]
  std::vector<float> weight;    // [O · count]
  std::vector<uint8_t> outside; // [O]: tf_crop_and_resize extrapolation
};

/// Calls f(w, off) for each tap of the product over the leading `rank - 1` dims at output index
/// `idx` (w: the taps' weight product, off: the input offset they address), in one fixed order
/// shared by resize and resize_grad; the last dim is applied per output element by the caller.
template <typename F>
void forEachLeadingTap(const std::vector<Taps> &taps, const int64_t *idx, const int64_t *inStride,
                       int64_t rank, F &&f) {
  int tap[kMaxRank] = {0};
  while (true) {
    float w = 1;
    int64_t off = 0;
    for (int64_t d = 0; d < rank - 1; ++d) {
      const Taps &t = taps[d];
      w *= t.weight[idx[d] * t.count + tap[d]];
      off += t.index[idx[d] * t.count + tap[d]] * inStride[d];
    }
    if (w != 0) f(w, off);
    int64_t d = rank - 2;
    for (; d >= 0; --d) {
      if (++tap[d] < taps[d].count) break;
      tap[d] = 0;
    }
    if (d < 0) return;
  }
}

/// A `floats` attribute (empty when absent).
std::vector<double> floatsAttr(const KernelCall &c, llvm::StringRef name) {
  std::vector<double> out;
  if (!c.instruction) return out;
  auto it = c.instruction->attrs().find(name.str());
  if (it != c.instruction->attrs().end() && it->second.has_floats())
    out.assign(it->second.floats().values().begin(), it->second.floats().values().end());
  return out;
}

double sourceCoord(const std::string &ctm, double o, double scale, int64_t in, int64_t out,
                   double roiStart, double roiEnd) {
  double len = scale * double(in); // the reference's "output_width": scale·D, not O
  if (ctm == "asymmetric") return o / scale;
  if (ctm == "align_corners") return len == 1 ? 0.0 : o * double(in - 1) / (len - 1);
  if (ctm == "pytorch_half_pixel") return out > 1 ? (o + 0.5) / scale - 0.5 : -0.5;
  if (ctm == "tf_half_pixel_for_nn") return (o + 0.5) / scale;
  if (ctm == "half_pixel_symmetric") {
    double adjustment = double(out) / len, center = double(in) / 2;
    return center * (1 - adjustment) + (o + 0.5) / scale - 0.5;
  }
  if (ctm == "tf_crop_and_resize")
    return len == 1 ? (roiEnd - roiStart) * double(in - 1) / 2 + roiStart * double(in - 1)
                    : o * (roiEnd - roiStart) * double(in - 1) / (len - 1) + roiStart * double(in - 1);
  return (o + 0.5) / scale - 0.5; // half_pixel
}

Taps makeTaps(const KernelCall &c, int64_t in, int64_t out, double scale, double roiStart, double roiEnd) {
  const std::string mode = c.attrString("mode", "nearest");
  const std::string ctm = c.attrString("coordinate_transformation_mode", "half_pixel");
  const std::string nearest = c.attrString("nearest_mode", "round_prefer_floor");
  const double A = c.attrFloat("cubic_coeff_a", -0.75);
  const bool exclude = c.attrInt("exclude_outside", 0) != 0;
  Taps t;
  t.count = mode == "nearest" ? 1 : mode == "linear" ? 2 : 4;
  t.index.resize(out * t.count);
  t.weight.resize(out * t.count);
  t.outside.assign(out, 0);
  auto clampIdx = [&](int64_t i) { return std::min<int64_t>(std::max<int64_t>(i, 0), in - 1); };
  // Identity dims copy (the common case of N and C in an image resize).
  if (in == out && scale == 1.0 && ctm != "tf_crop_and_resize") {
    t.count = 1;
    t.index.resize(out);
    t.weight.assign(out, 1.0f);
    for (int64_t o = 0; o < out; ++o) t.index[o] = o;
    return t;
  }
  for (int64_t o = 0; o < out; ++o) {
    double x = sourceCoord(ctm, double(o), scale, in, out, roiStart, roiEnd);
    if (ctm == "tf_crop_and_resize" && (x < 0 || x > double(in - 1))) t.outside[o] = 1;
    double x0 = std::floor(x), r = x - x0;
    int64_t i0 = int64_t(x0);
    int64_t *idx = &t.index[o * t.count];
    float *wt = &t.weight[o * t.count];
    if (mode == "nearest") {
      int64_t pick = i0;
      if (r != 0) {
        if (nearest == "ceil") pick = i0 + 1;
        else if (nearest == "round_prefer_ceil") pick = r >= 0.5 ? i0 + 1 : i0;
        else if (nearest == "round_prefer_floor") pick = r > 0.5 ? i0 + 1 : i0;
      }
      idx[0] = clampIdx(pick);
      wt[0] = 1.0f;
    } else if (mode == "linear") {
      idx[0] = clampIdx(i0);
      idx[1] = clampIdx(i0 + 1);
      wt[0] = float(1 - r);
      wt[1] = float(r);
    } else {
      double s = r, u = 1 - r;
      double w[4] = {((A * (s + 1) - 5 * A) * (s + 1) + 8 * A) * (s + 1) - 4 * A,
                     ((A + 2) * s - (A + 3)) * s * s + 1,
                     ((A + 2) * u - (A + 3)) * u * u + 1,
                     ((A * (u + 1) - 5 * A) * (u + 1) + 8 * A) * (u + 1) - 4 * A};
      if (exclude) {
        double sum = 0;
        for (int k = 0; k < 4; ++k) {
          int64_t i = i0 - 1 + k;
          if (i < 0 || i >= in) w[k] = 0;
          sum += w[k];
        }
        for (double &v : w) v = sum != 0 ? v / sum : 0;
      }
      for (int k = 0; k < 4; ++k) {
        idx[k] = clampIdx(i0 - 1 + k);
        wt[k] = float(w[k]);
      }
    }
  }
  return t;
}

/// x [D...] (resize's input, resize_grad's output) and y [O...]: f32, one rank, and the attributes.
llvm::Error verifyResizeShapes(const KernelCall &c, const TensorRef &X, const TensorRef &Y) {
  if (llvm::Error e = verifyDType(X, DType::F32, "input")) return e;
  if (llvm::Error e = verifyDType(Y, DType::F32, "output")) return e;
  if (X.rank() != Y.rank() || X.rank() == 0 || X.rank() > kMaxRank)
    return kernelError("input and output must have the same rank (1 to 8)");
  std::string mode = c.attrString("mode", "nearest");
  if (mode != "nearest" && mode != "linear" && mode != "cubic")
    return kernelError("unknown mode '" + mode + "'");
  std::string ctm = c.attrString("coordinate_transformation_mode", "half_pixel");
  static const char *known[] = {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                                "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize"};
  if (std::find(std::begin(known), std::end(known), ctm) == std::end(known))
    return kernelError("unknown coordinate_transformation_mode '" + ctm + "'");
  for (int64_t d : X.shape)
    if (d < 1) return kernelError("input dims must be positive");
  std::vector<double> scales = floatsAttr(c, "scales");
  if (int64_t(scales.size()) != X.rank()) return kernelError("scales needs one entry per dim");
  for (double s : scales)
    if (!(s > 0)) return kernelError("scales must be positive");
  if (ctm == "tf_crop_and_resize" && int64_t(floatsAttr(c, "roi").size()) != 2 * X.rank())
    return kernelError("tf_crop_and_resize needs a roi of 2·rank entries");
  return llvm::Error::success();
}

llvm::Error verifyResize(const KernelCall &c) { return verifyResizeShapes(c, c.inputs[0], c.outputs[0]); }

/// The taps of every dim for x [D...] -> y [O...].
std::vector<Taps> makeAllTaps(const KernelCall &c, const TensorRef &X, const TensorRef &Y) {
  const int64_t rank = X.rank();
  std::vector<double> scales = floatsAttr(c, "scales"), roi = floatsAttr(c, "roi");
  const bool crop = c.attrString("coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize";
  std::vector<Taps> taps;
  for (int64_t d = 0; d < rank; ++d)
    taps.push_back(makeTaps(c, X.shape[d], Y.shape[d], scales[d], crop ? roi[d] : 0, crop ? roi[rank + d] : 1));
  return taps;
}

llvm::Error runResize(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &Y = c.outputs[0];
  const int64_t rank = X.rank();
  const bool crop = c.attrString("coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize";
  std::vector<Taps> taps = makeAllTaps(c, X, Y);
  const float extrapolation = static_cast<float>(c.attrFloat("extrapolation_value", 0));
  int64_t inStride[kMaxRank];
  for (int64_t d = rank - 1, s = 1; d >= 0; --d) {
    inStride[d] = s;
    s *= X.shape[d];
  }
  const float *x = X.as<const float>();
  float *y = Y.as<float>();
  const int64_t inner = Y.shape[rank - 1], rows = Y.numel() / inner;
  const Taps &last = taps[rank - 1];
  bool nearest = !crop;
  for (const Taps &t : taps) nearest &= t.count == 1;
  if (nearest) {
    // Nearest (upsampling by a factor in particular): each output row gathers one input row
    // through the last dim's indices; a row whose source row equals the previous row's (every
    // row but the first of each factor-f run when upsampling) is a copy of that row.
    parallelFor(rows, std::max<int64_t>(1, 16384 / inner), [&](int64_t b, int64_t e) {
      int64_t prevSrc = -1;
      for (int64_t row = b; row < e; ++row) {
        int64_t src = 0;
        for (int64_t d = rank - 2, r = row; d >= 0; --d) {
          src += taps[d].index[r % Y.shape[d]] * inStride[d];
          r /= Y.shape[d];
        }
        float *yr = y + row * inner;
        if (src == prevSrc) {
          std::memcpy(yr, yr - inner, size_t(inner) * sizeof(float));
          continue;
        }
        const float *xr = x + src;
        const int64_t *li = last.index.data();
        for (int64_t j = 0; j < inner; ++j) yr[j] = xr[li[j]];
        prevSrc = src;
      }
    });
    return llvm::Error::success();
  }
  parallelFor(rows, std::max<int64_t>(1, 4096 / inner), [&](int64_t b, int64_t e) {
    int64_t idx[kMaxRank];
    for (int64_t row = b; row < e; ++row) {
      bool outside = false;
      for (int64_t d = rank - 2, r = row; d >= 0; --d) {
        idx[d] = r % Y.shape[d];
        r /= Y.shape[d];
        outside |= taps[d].outside[idx[d]] != 0;
      }
      float *yr = y + row * inner;
      if (outside) {
        for (int64_t j = 0; j < inner; ++j) yr[j] = extrapolation;
        continue;
      }
      for (int64_t j = 0; j < inner; ++j) yr[j] = 0;
      // The tap product of the leading dims; the last dim is applied per output element.
      forEachLeadingTap(taps, idx, inStride, rank, [&](float w, int64_t off) {
        const float *xr = x + off;
        for (int64_t j = 0; j < inner; ++j) {
          float acc = 0;
          for (int k = 0; k < last.count; ++k) acc += last.weight[j * last.count + k] * xr[last.index[j * last.count + k]];
          yr[j] += w * acc;
        }
      });
      for (int64_t j = 0; j < inner; ++j)
        if (last.outside[j]) yr[j] = extrapolation;
    }
  });
  return llvm::Error::success();
}

/// resize_grad: dy [O...] -> dx [D...] = Aᵀ·dy for the forward's linear map A: every output
/// element's cotangent, times the tensor product of its taps' weights, is added to the input
/// elements it read (extrapolated outputs send nothing). Parallel over the leading dims the
/// forward copies (N, C of an image), whose blocks of dx are disjoint; serial within a block.
llvm::Error verifyResizeGrad(const KernelCall &c) { return verifyResizeShapes(c, c.outputs[0], c.inputs[0]); }

llvm::Error runResizeGrad(const KernelCall &c) {
  const TensorRef &DY = c.inputs[0], &DX = c.outputs[0];
  const int64_t rank = DX.rank();
  std::vector<Taps> taps = makeAllTaps(c, DX, DY);
  int64_t inStride[kMaxRank];
  for (int64_t d = rank - 1, s = 1; d >= 0; --d) {
    inStride[d] = s;
    s *= DX.shape[d];
  }
  const float *dy = DY.as<const float>();
  float *dx = DX.as<float>();
  std::memset(dx, 0, DX.bytes());
  auto copies = [&](int64_t d) {
    const Taps &t = taps[d];
    if (t.count != 1 || DX.shape[d] != DY.shape[d]) return false;
    for (int64_t o = 0; o < DY.shape[d]; ++o)
      if (t.index[o] != o || t.weight[o] != 1.0f || t.outside[o]) return false;
    return true;
  };
  int64_t lead = 0, blocks = 1;
  while (lead < rank - 1 && copies(lead)) blocks *= DY.shape[lead++];
  const int64_t inner = DY.shape[rank - 1], rows = DY.numel() / inner, rowsPerBlock = rows / blocks;
  const Taps &last = taps[rank - 1];
  parallelFor(blocks, 1, [&](int64_t b, int64_t e) {
    int64_t idx[kMaxRank];
    for (int64_t row = b * rowsPerBlock; row < e * rowsPerBlock; ++row) {
      bool outside = false;
      for (int64_t d = rank - 2, r = row; d >= 0; --d) {
        idx[d] = r % DY.shape[d];
        r /= DY.shape[d];
        outside |= taps[d].outside[idx[d]] != 0;
      }
      if (outside) continue;
      const float *dyr = dy + row * inner;
      forEachLeadingTap(taps, idx, inStride, rank, [&](float w, int64_t off) {  // as the forward walks it
        float *dxr = dx + off;
        for (int64_t j = 0; j < inner; ++j) {
          if (last.outside[j]) continue;
          const float g = w * dyr[j];
          for (int k = 0; k < last.count; ++k) dxr[last.index[j * last.count + k]] += last.weight[j * last.count + k] * g;
        }
      });
    }
  });
  return llvm::Error::success();
}

}  // namespace

void registerResizeKernels(KernelRegistry &r) {
  KernelDesc d;
  d.op = "resize";
  d.attrs = {{"mode", AttrKind::String},         {"coordinate_transformation_mode", AttrKind::String},
             {"nearest_mode", AttrKind::String}, {"cubic_coeff_a", AttrKind::Float},
             {"exclude_outside", AttrKind::Int}, {"extrapolation_value", AttrKind::Float},
             {"scales", AttrKind::Floats},       {"roi", AttrKind::Floats}};
  d.verify = verifyResize;
  d.run = runResize;
  r.add(d);

  KernelDesc g;
  g.op = "resize_grad";
  g.attrs = {{"mode", AttrKind::String},         {"coordinate_transformation_mode", AttrKind::String},
             {"nearest_mode", AttrKind::String}, {"cubic_coeff_a", AttrKind::Float},
             {"exclude_outside", AttrKind::Int}, {"scales", AttrKind::Floats},
             {"roi", AttrKind::Floats}};
  g.verify = verifyResizeGrad;
  g.run = runResizeGrad;
  r.add(g);
}

}  // namespace colossal::runtime::cpu
