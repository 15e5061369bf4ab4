//===- ConstantEval.cpp - compile-time evaluation of colossal ops --------===//
#include "dialects/Colossal/ConstantEval.h"

#include "llvm/ADT/APFloat.h"
#include "llvm/ADT/APInt.h"

using namespace mlir;

namespace colossal {

std::optional<HostTensor> HostTensor::from(Attribute attr) {
  auto dense = llvm::dyn_cast_or_null<DenseElementsAttr>(attr);
  if (!dense)
    return std::nullopt;
  auto type = llvm::dyn_cast<RankedTensorType>(dense.getType());
  if (!type || !type.hasStaticShape() || type.getNumElements() > kMaxFoldElements)
    return std::nullopt;
  HostTensor t;
  t.type = type;
  Type et = type.getElementType();
  if (llvm::isa<FloatType>(et)) {
    t.f.reserve(type.getNumElements());
    for (APFloat v : dense.getValues<APFloat>())
      t.f.push_back(v.convertToDouble());
  } else if (auto it = llvm::dyn_cast<IntegerType>(et)) {
    t.i.reserve(type.getNumElements());
    bool zext = it.getWidth() == 1 || it.isUnsigned();
    for (APInt v : dense.getValues<APInt>()) {
      // A ui64 value above INT64_MAX has no int64 the folders could compute with: such a
      // constant is not read, and the ops that use it are left to the runtime (which computes
      // unsigned dtypes in uint64).
      if (it.isUnsigned() && it.getWidth() == 64 && v.isNegative())
        return std::nullopt;
      t.i.push_back(zext ? int64_t(v.getZExtValue()) : v.getSExtValue());
    }
  } else {
    return std::nullopt;
  }
  return t;
}

HostTensor HostTensor::zeros(RankedTensorType type) {
  HostTensor t;
  t.type = type;
  if (llvm::isa<FloatType>(type.getElementType()))
    t.f.assign(type.getNumElements(), 0.0);
  else
    t.i.assign(type.getNumElements(), 0);
  return t;
}

DenseElementsAttr HostTensor::toAttr() const {
  Type et = type.getElementType();
  if (auto ft = llvm::dyn_cast<FloatType>(et)) {
    if (ft.isF32()) {
      std::vector<float> v(f.begin(), f.end());
      return DenseElementsAttr::get(type, llvm::ArrayRef<float>(v));
    }
    if (ft.isF64())
      return DenseElementsAttr::get(type, llvm::ArrayRef<double>(f));
    llvm::SmallVector<APFloat> v;
    v.reserve(f.size());
    for (double d : f) {
      APFloat a(d);
      bool loses;
      a.convert(ft.getFloatSemantics(), APFloat::rmNearestTiesToEven, &loses);
      v.push_back(a);
    }
    return DenseElementsAttr::get(type, v);
  }
  auto it = llvm::cast<IntegerType>(et);
  unsigned w = it.getWidth();
  if (w == 1) {
    llvm::SmallVector<bool> v;
    for (int64_t x : i)
      v.push_back(x != 0);
    return DenseElementsAttr::get(type, v);
  }
  llvm::SmallVector<APInt> v;
  v.reserve(i.size());
  for (int64_t x : i)
    v.push_back(APInt(w, uint64_t(x), /*isSigned=*/!it.isUnsigned(), /*implicitTrunc=*/true));
  return DenseElementsAttr::get(type, v);
}

bool broadcastShapes(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b, llvm::SmallVectorImpl<int64_t> &out) {
  size_t rank = std::max(a.size(), b.size());
  out.assign(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      return false;
    out[i] = da == 1 ? db : da;
  }
  return true;
}

std::string shapeStr(llvm::ArrayRef<int64_t> s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i)
    r += (i ? "x" : "") + std::to_string(s[i]);
  return r + "]";
}

std::vector<int64_t> broadcastStrides(llvm::ArrayRef<int64_t> shape, llvm::ArrayRef<int64_t> out) {
  std::vector<int64_t> strides(out.size(), 0);
  int64_t stride = 1;
  for (int64_t d = int64_t(shape.size()) - 1, o = int64_t(out.size()) - 1; d >= 0; --d, --o) {
    strides[o] = shape[d] == 1 ? 0 : stride;
    stride *= shape[d];
  }
  return strides;
}

void unflatten(int64_t k, llvm::ArrayRef<int64_t> shape, llvm::SmallVectorImpl<int64_t> &idx) {
  idx.assign(shape.size(), 0);
  for (int64_t d = int64_t(shape.size()) - 1; d >= 0; --d) {
    if (shape[d] == 0)
      return;
    idx[d] = k % shape[d];
    k /= shape[d];
  }
}

HostTensor evalBroadcast(RankedTensorType resultType, llvm::ArrayRef<const HostTensor *> ins,
                         const std::function<double(llvm::ArrayRef<double>)> &ffn,
                         const std::function<int64_t(llvm::ArrayRef<int64_t>)> &ifn,
                         bool computeInFloat) {
  HostTensor out = HostTensor::zeros(resultType);
  auto shape = resultType.getShape();
  std::vector<std::vector<int64_t>> strides;
  for (const HostTensor *in : ins)
    strides.push_back(broadcastStrides(in->type.getShape(), shape));
  llvm::SmallVector<int64_t> idx;
  llvm::SmallVector<double> fargs(ins.size());
  llvm::SmallVector<int64_t> iargs(ins.size());
  for (int64_t k = 0, n = resultType.getNumElements(); k < n; ++k) {
    unflatten(k, shape, idx);
    for (size_t a = 0; a < ins.size(); ++a) {
      int64_t off = 0;
      for (size_t d = 0; d < idx.size(); ++d)
        off += idx[d] * strides[a][d];
      if (computeInFloat)
        fargs[a] = ins[a]->asDouble(off);
      else
        iargs[a] = ins[a]->asInt(off);
    }
    if (computeInFloat) {
      double r = ffn(fargs);
      if (out.isFloat())
        out.f[k] = r;
      else
        out.i[k] = int64_t(r);
    } else {
      int64_t r = ifn(iargs);
      if (out.isFloat())
        out.f[k] = double(r);
      else
        out.i[k] = r;
    }
  }
  return out;
}

HostTensor evalPermute(RankedTensorType resultType, const HostTensor &src,
                       const std::function<int64_t(llvm::ArrayRef<int64_t>)> &sourceIndex) {
  HostTensor out = HostTensor::zeros(resultType);
  llvm::SmallVector<int64_t> idx;
  for (int64_t k = 0, n = resultType.getNumElements(); k < n; ++k) {
    unflatten(k, resultType.getShape(), idx);
    int64_t s = sourceIndex(idx);
    if (out.isFloat())
      out.f[k] = src.asDouble(s);
    else
      out.i[k] = src.asInt(s);
  }
  return out;
}

} // namespace colossal
