//===- misc.cpp - det, reverse_sequence, grid_sample, roi_align CPU kernels -----------------===//
//
// Semantics: docs/plan.md and the ONNX operators Det, ReverseSequence, GridSample (opset 16) and
// RoiAlign (opset 16). det, grid_sample and roi_align are templated over f32 and f64;
// reverse_sequence moves element bytes and is registered for every dtype. Each kernel is
// parallel over its independent outer loop (matrices, output planes, rois).
//
//===----------------------------------------------------------------------------------------===//
#include "CpuCommon.h"

#include <cmath>
#include <cstring>

namespace colossal::runtime::cpu {
namespace {

template <typename F> llvm::Error withFloat(DType dt, F &&f) {
  switch (dt) {
  case DType::F32: f(float{}); return llvm::Error::success();
  case DType::F64: f(double{}); return llvm::Error::success();
  default: return kernelError("dtype " + dtypeName(dt).str() + " is not supported");
  }
}

llvm::Error verifyIndexDType(const TensorRef &t, llvm::StringRef what) {
  if (t.dtype != DType::I64 && t.dtype != DType::I32)
    return kernelError(what + " must be i64 or i32, got " + dtypeName(t.dtype).str());
  return llvm::Error::success();
}

int64_t indexAt(const TensorRef &t, int64_t k) {
  return t.dtype == DType::I64 ? t.as<const int64_t>()[k] : t.as<const int32_t>()[k];
}

// ---------------------------------------------------------------- det
// LU factorization with partial pivoting per matrix, accumulated in double.

llvm::Error verifyDet(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &Y = c.outputs[0];
  if (X.rank() < 2 || X.shape[X.rank() - 1] != X.shape[X.rank() - 2])
    return kernelError("det needs [..., M, M], got " + shapeToString(X.shape));
  if (llvm::ArrayRef<int64_t>(Y.shape) != llvm::ArrayRef<int64_t>(X.shape).drop_back(2))
    return kernelError("det output shape " + shapeToString(Y.shape) + " does not match " +
                       shapeToString(X.shape));
  if (X.dtype != Y.dtype) return kernelError("det input and output dtypes differ");
  return llvm::Error::success();
}

size_t detWorkspace(const KernelCall &c, int threads) {
  int64_t m = c.inputs[0].shape.back();
  return static_cast<size_t>(m * m) * sizeof(double) * static_cast<size_t>(std::max(threads, 1));
}

llvm::Error runDet(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &Y = c.outputs[0];
  const int64_t m = X.shape.back(), batch = Y.numel();
  double *scratch = static_cast<double *>(c.workspace);
  return withFloat(X.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *x = X.as<const T>();
    T *y = Y.as<T>();
    // One matrix per iteration; each thread owns one m*m slice of the workspace.
    auto one = [&](int64_t b, double *a) {
      for (int64_t k = 0; k < m * m; ++k) a[k] = static_cast<double>(x[b * m * m + k]);
      double det = 1.0;
      for (int64_t col = 0; col < m; ++col) {
        int64_t pivot = col;
        for (int64_t r = col + 1; r < m; ++r)
          if (std::abs(a[r * m + col]) > std::abs(a[pivot * m + col])) pivot = r;
        if (a[pivot * m + col] == 0.0) {
          det = 0.0;
          break;
        }
        if (pivot != col) {
          for (int64_t j = 0; j < m; ++j) std::swap(a[pivot * m + j], a[col * m + j]);
          det = -det;
        }
        double p = a[col * m + col];
        det *= p;
        for (int64_t r = col + 1; r < m; ++r) {
          double f = a[r * m + col] / p;
          for (int64_t j = col + 1; j < m; ++j) a[r * m + j] -= f * a[col * m + j];
        }
      }
      y[b] = static_cast<T>(det);
    };
    parallelFor(batch, std::max<int64_t>(1, 4096 / std::max<int64_t>(m * m * m, 1)),
                [&](int64_t b, int64_t e) {
                  double *a = scratch + static_cast<int64_t>(omp_get_thread_num()) * m * m;
                  for (int64_t i = b; i < e; ++i) one(i, a);
                });
  });
}

// ---------------------------------------------------------------- reverse_sequence

llvm::Error verifyReverseSequence(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &L = c.inputs[1], &Y = c.outputs[0];
  if (llvm::Error e = verifySameShape(X, Y, "input and output")) return e;
  if (X.dtype != Y.dtype) return kernelError("input and output dtypes differ");
  int64_t batchAxis = c.attrInt("batch_axis", 1), timeAxis = c.attrInt("time_axis", 0);
  if (X.rank() < 2 || batchAxis + timeAxis != 1 || batchAxis < 0 || timeAxis < 0)
    return kernelError("batch_axis and time_axis must be 0 and 1 of an input of rank >= 2");
  if (llvm::Error e = verifyIndexDType(L, "sequence_lens")) return e;
  if (L.rank() != 1 || L.shape[0] != X.shape[batchAxis])
    return kernelError("sequence_lens has shape " + shapeToString(L.shape) + ", expected [" +
                       llvm::Twine(X.shape[batchAxis]) + "]");
  return llvm::Error::success();
}

llvm::Error runReverseSequence(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &L = c.inputs[1], &Y = c.outputs[0];
  const int64_t batchAxis = c.attrInt("batch_axis", 1);
  const int64_t T = X.shape[1 - batchAxis], B = X.shape[batchAxis];
  const size_t row = static_cast<size_t>(X.numel() / std::max<int64_t>(T * B, 1)) * dtypeSize(X.dtype);
  for (int64_t b = 0; b < B; ++b) {
    int64_t len = indexAt(L, b);
    if (len < 0 || len > T)
      return kernelError("sequence_lens[" + llvm::Twine(b) + "] = " + llvm::Twine(len) +
                         " is outside [0, " + llvm::Twine(T) + "]");
  }
  const char *x = X.as<const char>();
  char *y = Y.as<char>();
  // Offset of (time t, batch b) in rows.
  auto at = [&](int64_t t, int64_t b) {
    return static_cast<size_t>(batchAxis == 0 ? b * T + t : t * B + b) * row;
  };
  parallelFor(B, 1, [&](int64_t bb, int64_t be) {
    for (int64_t b = bb; b < be; ++b) {
      int64_t len = indexAt(L, b);
      for (int64_t t = 0; t < T; ++t)
        std::memcpy(y + at(t, b), x + at(t < len ? len - 1 - t : t, b), row);
    }
  });
  return llvm::Error::success();
}

// ---------------------------------------------------------------- grid_sample
// Follows ONNX GridSample-16: denormalize, then for an out-of-range coordinate clamp (border) or
// reflect (reflection) it; taps outside the image read 0 (zeros), the nearest edge (border) or
// the reflected pixel (reflection). Bicubic uses Keys' kernel with A = -0.75.

enum class Pad { Zeros, Border, Reflection };

double reflect(double x, double lo, double hi) {
  double range = hi - lo;
  if (range <= 0) return lo;
  if (x < lo) {
    double d = lo - x;
    int64_t n = static_cast<int64_t>(d / range);
    double r = d - static_cast<double>(n) * range;
    return n % 2 == 0 ? lo + r : hi - r;
  }
  if (x > hi) {
    double d = x - hi;
    int64_t n = static_cast<int64_t>(d / range);
    double r = d - static_cast<double>(n) * range;
    return n % 2 == 0 ? hi - r : lo + r;
  }
  return x;
}

void cubicWeights(double t, double w[4]) {
  // Distances of the taps at floor(x) - 1 .. floor(x) + 2 from x, t = x - floor(x).
  constexpr double A = -0.75;
  auto near = [&](double d) { return ((A + 2) * d - (A + 3)) * d * d + 1; };        // |d| <= 1
  auto far = [&](double d) { return ((A * d - 5 * A) * d + 8 * A) * d - 4 * A; };  // 1 < |d| < 2
  w[0] = far(1 + t);
  w[1] = near(t);
  w[2] = near(1 - t);
  w[3] = far(2 - t);
}

llvm::Error verifyGridSample(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &G = c.inputs[1], &Y = c.outputs[0];
  if (X.rank() != 4 || G.rank() != 4 || G.shape[3] != 2 || G.shape[0] != X.shape[0])
    return kernelError("grid_sample needs x [N, C, H, W] and grid [N, Ho, Wo, 2], got " +
                       shapeToString(X.shape) + " and " + shapeToString(G.shape));
  Shape want = {X.shape[0], X.shape[1], G.shape[1], G.shape[2]};
  if (Y.shape != want)
    return kernelError("output shape " + shapeToString(Y.shape) + ", expected " + shapeToString(want));
  if (X.dtype != Y.dtype || G.dtype != Y.dtype) return kernelError("operand dtypes differ");
  std::string mode = c.attrString("mode", "bilinear"), pad = c.attrString("padding_mode", "zeros");
  if (mode != "bilinear" && mode != "nearest" && mode != "bicubic")
    return kernelError("unknown mode '" + mode + "'");
  if (pad != "zeros" && pad != "border" && pad != "reflection")
    return kernelError("unknown padding_mode '" + pad + "'");
  return llvm::Error::success();
}

llvm::Error runGridSample(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &G = c.inputs[1], &Y = c.outputs[0];
  const int64_t N = X.shape[0], C = X.shape[1], H = X.shape[2], W = X.shape[3];
  const int64_t Ho = G.shape[1], Wo = G.shape[2];
  const std::string mode = c.attrString("mode", "bilinear");
  const std::string padName = c.attrString("padding_mode", "zeros");
  const Pad pad = padName == "border" ? Pad::Border : padName == "reflection" ? Pad::Reflection : Pad::Zeros;
  const bool align = c.attrInt("align_corners", 0) != 0;
  // The coordinate range that counts as inside: pixel centres (align_corners) or pixel edges.
  const double xmin = align ? 0.0 : -0.5, xmax = align ? double(W - 1) : double(W) - 0.5;
  const double ymin = align ? 0.0 : -0.5, ymax = align ? double(H - 1) : double(H) - 0.5;
  auto denorm = [&](double v, int64_t size) {
    return align ? (v + 1) / 2 * double(size - 1) : ((v + 1) * double(size) - 1) / 2;
  };
  return withFloat(X.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *x = X.as<const T>(), *g = G.as<const T>();
    T *y = Y.as<T>();
    parallelFor(N * C, 1, [&](int64_t b, int64_t e) {
      for (int64_t nc = b; nc < e; ++nc) {
        const int64_t n = nc / C;
        const T *img = x + nc * H * W;
        auto pixel = [&](int64_t r, int64_t col) -> double {
          switch (pad) {
          case Pad::Zeros:
            return (r >= 0 && r < H && col >= 0 && col < W) ? double(img[r * W + col]) : 0.0;
          case Pad::Border:
            r = std::clamp<int64_t>(r, 0, H - 1);
            col = std::clamp<int64_t>(col, 0, W - 1);
            return double(img[r * W + col]);
          case Pad::Reflection:
            r = static_cast<int64_t>(reflect(double(r), ymin, ymax));
            col = static_cast<int64_t>(reflect(double(col), xmin, xmax));
            r = std::clamp<int64_t>(r, 0, H - 1);
            col = std::clamp<int64_t>(col, 0, W - 1);
            return double(img[r * W + col]);
          }
          return 0.0;
        };
        for (int64_t oy = 0; oy < Ho; ++oy)
          for (int64_t ox = 0; ox < Wo; ++ox) {
            const T *gp = g + ((n * Ho + oy) * Wo + ox) * 2;
            double px = denorm(double(gp[0]), W), py = denorm(double(gp[1]), H);
            if (mode == "nearest") {
              px = std::nearbyint(px);
              py = std::nearbyint(py);
            }
            if (px < xmin || px > xmax || py < ymin || py > ymax) {
              if (pad == Pad::Border) {
                px = std::clamp(px, 0.0, double(W - 1));
                py = std::clamp(py, 0.0, double(H - 1));
              } else if (pad == Pad::Reflection) {
                px = reflect(px, xmin, xmax);
                py = reflect(py, ymin, ymax);
              }
            }
            double v;
            if (mode == "nearest") {
              v = pixel(static_cast<int64_t>(py), static_cast<int64_t>(px));
            } else if (mode == "bilinear") {
              double fx = std::floor(px), fy = std::floor(py);
              int64_t x1 = static_cast<int64_t>(fx), y1 = static_cast<int64_t>(fy);
              double dx = px - fx, dy = py - fy;
              v = (1 - dy) * ((1 - dx) * pixel(y1, x1) + dx * pixel(y1, x1 + 1)) +
                  dy * ((1 - dx) * pixel(y1 + 1, x1) + dx * pixel(y1 + 1, x1 + 1));
            } else {
              double fx = std::floor(px), fy = std::floor(py);
              int64_t x0 = static_cast<int64_t>(fx) - 1, y0 = static_cast<int64_t>(fy) - 1;
              double wx[4], wy[4];
              cubicWeights(px - fx, wx);
              cubicWeights(py - fy, wy);
              v = 0;
              for (int64_t i = 0; i < 4; ++i) {
                double rowv = 0;
                for (int64_t j = 0; j < 4; ++j) rowv += wx[j] * pixel(y0 + i, x0 + j);
                v += wy[i] * rowv;
              }
            }
            y[(nc * Ho + oy) * Wo + ox] = static_cast<T>(v);
          }
      }
    });
  });
}

// ---------------------------------------------------------------- roi_align
// He et al. 2017 (Mask R-CNN) as ONNX RoiAlign-16 defines it: bins of the roi are sampled on a
// grid of bilinear samples; "avg" averages them, "max" takes the largest weighted corner value
// over the samples (ONNX's definition).

llvm::Error verifyRoiAlign(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &R = c.inputs[1], &I = c.inputs[2], &Y = c.outputs[0];
  if (X.rank() != 4) return kernelError("x must be [N, C, H, W], got " + shapeToString(X.shape));
  if (R.rank() != 2 || R.shape[1] != 4) return kernelError("rois must be [R, 4], got " + shapeToString(R.shape));
  if (llvm::Error e = verifyIndexDType(I, "batch_indices")) return e;
  if (I.rank() != 1 || I.shape[0] != R.shape[0])
    return kernelError("batch_indices must be [" + llvm::Twine(R.shape[0]) + "], got " + shapeToString(I.shape));
  int64_t oh = c.attrInt("output_height", 1), ow = c.attrInt("output_width", 1);
  Shape want = {R.shape[0], X.shape[1], oh, ow};
  if (Y.shape != want)
    return kernelError("output shape " + shapeToString(Y.shape) + ", expected " + shapeToString(want));
  if (X.dtype != Y.dtype || R.dtype != Y.dtype) return kernelError("operand dtypes differ");
  std::string mode = c.attrString("mode", "avg");
  if (mode != "avg" && mode != "max") return kernelError("unknown mode '" + mode + "'");
  if (c.attrInt("sampling_ratio", 0) < 0) return kernelError("sampling_ratio must be >= 0");
  return llvm::Error::success();
}

llvm::Error runRoiAlign(const KernelCall &c) {
  const TensorRef &X = c.inputs[0], &R = c.inputs[1], &I = c.inputs[2], &Y = c.outputs[0];
  const int64_t N = X.shape[0], C = X.shape[1], H = X.shape[2], W = X.shape[3];
  const int64_t numRois = R.shape[0];
  const int64_t oh = c.attrInt("output_height", 1), ow = c.attrInt("output_width", 1);
  const int64_t ratio = c.attrInt("sampling_ratio", 0);
  const double scale = c.attrFloat("spatial_scale", 1.0);
  const bool halfPixel = c.attrInt("half_pixel", 1) != 0;
  const bool maxMode = c.attrString("mode", "avg") == "max";
  for (int64_t r = 0; r < numRois; ++r) {
    int64_t b = indexAt(I, r);
    if (b < 0 || b >= N)
      return kernelError("batch_indices[" + llvm::Twine(r) + "] = " + llvm::Twine(b) +
                         " is outside [0, " + llvm::Twine(N) + ")");
  }
  return withFloat(X.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *x = X.as<const T>(), *rois = R.as<const T>();
    T *y = Y.as<T>();
    parallelFor(numRois * C, 1, [&](int64_t begin, int64_t end) {
      for (int64_t rc = begin; rc < end; ++rc) {
        const int64_t r = rc / C, ch = rc % C;
        const T *img = x + (indexAt(I, r) * C + ch) * H * W;
        const double offset = halfPixel ? 0.5 : 0.0;
        double x1 = double(rois[r * 4 + 0]) * scale - offset, y1 = double(rois[r * 4 + 1]) * scale - offset;
        double x2 = double(rois[r * 4 + 2]) * scale - offset, y2 = double(rois[r * 4 + 3]) * scale - offset;
        double rw = x2 - x1, rh = y2 - y1;
        if (!halfPixel) {
          rw = std::max(rw, 1.0);
          rh = std::max(rh, 1.0);
        }
        const double binH = rh / double(oh), binW = rw / double(ow);
        const int64_t gridH = ratio > 0 ? ratio : static_cast<int64_t>(std::ceil(rh / double(oh)));
        const int64_t gridW = ratio > 0 ? ratio : static_cast<int64_t>(std::ceil(rw / double(ow)));
        const double count = double(std::max<int64_t>(gridH * gridW, 1));
        for (int64_t ph = 0; ph < oh; ++ph)
          for (int64_t pw = 0; pw < ow; ++pw) {
            double acc = 0;
            bool any = false;
            for (int64_t iy = 0; iy < gridH; ++iy)
              for (int64_t ix = 0; ix < gridW; ++ix) {
                double sy = y1 + double(ph) * binH + (double(iy) + 0.5) * binH / double(gridH);
                double sx = x1 + double(pw) * binW + (double(ix) + 0.5) * binW / double(gridW);
                double v = 0;
                if (!(sy < -1.0 || sy > double(H) || sx < -1.0 || sx > double(W))) {
                  sy = std::max(sy, 0.0);
                  sx = std::max(sx, 0.0);
                  int64_t ylo = static_cast<int64_t>(sy), xlo = static_cast<int64_t>(sx), yhi, xhi;
                  if (ylo >= H - 1) {
                    yhi = ylo = H - 1;
                    sy = double(ylo);
                  } else {
                    yhi = ylo + 1;
                  }
                  if (xlo >= W - 1) {
                    xhi = xlo = W - 1;
                    sx = double(xlo);
                  } else {
                    xhi = xlo + 1;
                  }
                  double ly = sy - double(ylo), lx = sx - double(xlo), hy = 1 - ly, hx = 1 - lx;
                  double v1 = hy * hx * double(img[ylo * W + xlo]), v2 = hy * lx * double(img[ylo * W + xhi]);
                  double v3 = ly * hx * double(img[yhi * W + xlo]), v4 = ly * lx * double(img[yhi * W + xhi]);
                  v = maxMode ? std::max(std::max(v1, v2), std::max(v3, v4)) : v1 + v2 + v3 + v4;
                }
                if (maxMode)
                  acc = any ? std::max(acc, v) : v;
                else
                  acc += v;
                any = true;
              }
            y[(rc * oh + ph) * ow + pw] = static_cast<T>(maxMode ? acc : acc / count);
          }
      }
    });
  });
}

void addFloat(KernelRegistry &r, KernelDesc d) {
  for (DType dt : {DType::F32, DType::F64}) {
    d.dtype = dt;
    r.add(d);
  }
}

}  // namespace

void registerMiscKernels(KernelRegistry &r) {
  KernelDesc det;
  det.op = "det";
  det.verify = verifyDet;
  det.workspace = detWorkspace;
  det.run = runDet;
  addFloat(r, det);

  KernelDesc gs;
  gs.op = "grid_sample";
  gs.minInputs = gs.maxInputs = 2;
  gs.attrs = {{"mode", AttrKind::String}, {"padding_mode", AttrKind::String}, {"align_corners", AttrKind::Int}};
  gs.verify = verifyGridSample;
  gs.run = runGridSample;
  addFloat(r, gs);

  KernelDesc ra;
  ra.op = "roi_align";
  ra.minInputs = ra.maxInputs = 3;
  ra.attrs = {{"mode", AttrKind::String},         {"output_height", AttrKind::Int},
              {"output_width", AttrKind::Int},    {"sampling_ratio", AttrKind::Int},
              {"spatial_scale", AttrKind::Float}, {"half_pixel", AttrKind::Int}};
  ra.verify = verifyRoiAlign;
  ra.run = runRoiAlign;
  addFloat(r, ra);

  for (int v = 1; v <= kLastDType; ++v) {
    KernelDesc rs;
    rs.op = "reverse_sequence";
    rs.dtype = static_cast<DType>(v);
    rs.minInputs = rs.maxInputs = 2;
    rs.attrs = {{"batch_axis", AttrKind::Int}, {"time_axis", AttrKind::Int}};
    rs.verify = verifyReverseSequence;
    rs.run = runReverseSequence;
    r.add(rs);
  }
}

}  // namespace colossal::runtime::cpu
