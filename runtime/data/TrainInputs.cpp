//===- TrainInputs.cpp - train_step's inputs from .npy arrays and a seeded RNG -------------===//
#include "colossal/runtime/TrainInputs.h"

#include "colossal/runtime/Plan.h"
#include "colossal/runtime/TensorFileName.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <cmath>
#include <cstring>
#include <numeric>

namespace colossal::runtime {

namespace {

llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg.str());
}

/// NumPy's name of `dtype` (what a user wrote in `np.save`).
std::string numpyName(DType dtype) {
  switch (dtype) {
  case DType::F32: return "float32";
  case DType::F16: return "float16";
  case DType::F64: return "float64";
  case DType::I64: return "int64";
  case DType::I32: return "int32";
  case DType::I16: return "int16";
  case DType::I8: return "int8";
  case DType::U8: return "uint8";
  case DType::Bool: return "bool";
  default: return dtypeName(dtype).str();
  }
}

/// "float32 [N, 1, 8, 8]": dtype and shape with the rows as N.
std::string describe(DType dtype, llvm::ArrayRef<int64_t> shape, bool rowsAsN) {
  std::string s = numpyName(dtype) + " [";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + (i == 0 && rowsAsN ? std::string("N") : std::to_string(shape[i]));
  return s + "]";
}

uint64_t nameKey(uint64_t seed, llvm::StringRef name) {
  return splitMix64(seed ^ fnv1a64(name.data(), name.size()));
}

/// u(i) = (w(K, i) >> 11)·2⁻⁵³ ∈ [0, 1).
double uniform01(uint64_t key, uint64_t i) {
  return static_cast<double>(splitMix64(key + i) >> 11) * 0x1.0p-53;
}

}  // namespace

uint64_t splitMix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

llvm::Expected<std::unique_ptr<TrainInputs>> TrainInputs::open(const plan::TrainConfig &config,
                                                               llvm::ArrayRef<BindingInfo> bindings,
                                                               uint64_t seed, bool shuffle) {
  std::unique_ptr<TrainInputs> t(new TrainInputs());
  t->seed_ = seed;
  t->shuffle_ = shuffle;
  t->batch_ = config.global_batch();
  std::string firstNpy;
  for (const plan::DataInput &d : config.data_inputs()) {
    const BindingInfo *b = nullptr;
    for (const BindingInfo &x : bindings)
      if (x.name == d.name()) b = &x;
    if (!b) return fail("train.inputs." + d.name() + ": the program has no input '" + d.name() + "'");
    Input in;
    in.source = &d;
    in.dtype = b->tensor.dtype;
    in.globalShape.assign(b->tensor.shape.begin(), b->tensor.shape.end());
    in.globalShape[0] = t->batch_;
    const int64_t rowElems = numElements(llvm::ArrayRef<int64_t>(in.globalShape).drop_front());
    in.rowBytes = static_cast<size_t>(rowElems) * dtypeSize(in.dtype);
    const std::string where = "train.inputs." + d.name();
    if (d.kind() == plan::DataInput::NPY) {
      llvm::Expected<NpyArray> arr = readNpy(d.path());
      if (!arr) return fail(where + ": " + llvm::toString(arr.takeError()));
      const std::vector<int64_t> &got = arr->shape;
      const bool fits = arr->dtype == in.dtype && got.size() == in.globalShape.size() &&
                        std::equal(got.begin() + (got.empty() ? 0 : 1), got.end(), in.globalShape.begin() + 1);
      if (!fits)
        return fail(where + ": " + d.path() + " does not fit the model's input '" + d.name() + "': expected " +
                    describe(in.dtype, in.globalShape, true) + ", got " + describe(arr->dtype, got, false));
      if (got[0] < 1) return fail(where + ": " + d.path() + " has no rows");
      if (t->rows_ != 0 && got[0] != t->rows_)
        return fail(where + ": " + d.path() + " has " + llvm::Twine(got[0]) + " rows but " + firstNpy + " has " +
                    llvm::Twine(t->rows_) + "; every npy input is read at the same row index");
      t->rows_ = got[0];
      firstNpy = d.path();
      in.array = std::move(*arr);
    } else if (d.kind() == plan::DataInput::NORMAL) {
      if (in.dtype != DType::F32 && in.dtype != DType::F64)
        return fail(where + ": normal draws need a float32 or float64 input; '" + d.name() + "' is " +
                    numpyName(in.dtype));
    } else {
      if (in.dtype != DType::I64 && in.dtype != DType::I32)
        return fail(where + ": uniform_int draws need an int64 or int32 input; '" + d.name() + "' is " +
                    numpyName(in.dtype));
      const int64_t lim = in.dtype == DType::I32 ? INT32_MAX : INT64_MAX;
      if (d.low() < -lim - 1 || d.high() - 1 > lim)
        return fail(where + ": uniform_int [" + llvm::Twine(d.low()) + ", " + llvm::Twine(d.high()) +
                    ") does not fit the int32 input '" + d.name() + "'");
    }
    in.batch.resize(in.rowBytes * static_cast<size_t>(t->batch_));
    t->inputs_.push_back(std::move(in));
  }
  return t;
}

int64_t TrainInputs::arrayRow(int64_t g) {
  const int64_t N = rows_;
  if (!shuffle_) return g % N;
  const int64_t epoch = g / N;
  if (epoch != permEpoch_) {
    static const char kTag[] = "train.inputs shuffle";
    const uint64_t key = splitMix64(splitMix64(seed_ ^ fnv1a64(kTag, sizeof kTag - 1)) + static_cast<uint64_t>(epoch));
    perm_.resize(N);
    std::iota(perm_.begin(), perm_.end(), int64_t{0});
    for (int64_t i = N - 1; i >= 1; --i) {
      const uint64_t j = splitMix64(key + static_cast<uint64_t>(i)) % static_cast<uint64_t>(i + 1);
      std::swap(perm_[i], perm_[j]);
    }
    permEpoch_ = epoch;
  }
  return perm_[g % N];
}

void TrainInputs::prepare(int64_t step) {
  const uint64_t s = static_cast<uint64_t>(step);
  for (Input &in : inputs_) {
    const plan::DataInput &d = *in.source;
    if (d.kind() == plan::DataInput::NPY) {
      const char *src = static_cast<const char *>(in.array.data.data());
      for (int64_t r = 0; r < batch_; ++r)
        std::memcpy(in.batch.data() + r * in.rowBytes, src + arrayRow(step * batch_ + r) * in.rowBytes, in.rowBytes);
      continue;
    }
    const uint64_t key = splitMix64(nameKey(seed_, d.name()) + s);
    const int64_t n = static_cast<int64_t>(in.batch.size() / dtypeSize(in.dtype));
    if (d.kind() == plan::DataInput::NORMAL) {
      for (int64_t j = 0; j < n; ++j) {
        const double u1 = uniform01(key, 2 * static_cast<uint64_t>(j));
        const double u2 = uniform01(key, 2 * static_cast<uint64_t>(j) + 1);
        const double x = d.mean() + d.std() * std::sqrt(-2.0 * std::log(1.0 - u1)) * std::cos(2.0 * M_PI * u2);
        if (in.dtype == DType::F32) reinterpret_cast<float *>(in.batch.data())[j] = static_cast<float>(x);
        else reinterpret_cast<double *>(in.batch.data())[j] = x;
      }
    } else {
      const uint64_t range = static_cast<uint64_t>(d.high()) - static_cast<uint64_t>(d.low());
      for (int64_t j = 0; j < n; ++j) {
        const int64_t v = static_cast<int64_t>(static_cast<uint64_t>(d.low()) +
                                               splitMix64(key + static_cast<uint64_t>(j)) % range);
        if (in.dtype == DType::I64) reinterpret_cast<int64_t *>(in.batch.data())[j] = v;
        else reinterpret_cast<int32_t *>(in.batch.data())[j] = static_cast<int32_t>(v);
      }
    }
  }
}

llvm::Error TrainInputs::feed(Executor &ex, int64_t firstRow, int64_t rows) const {
  for (const Input &in : inputs_) {
    std::vector<int64_t> shape = in.globalShape;
    shape[0] = rows;
    if (llvm::Error e = ex.setInput(in.source->name(), in.dtype, shape, in.batch.data() + firstRow * in.rowBytes))
      return e;
  }
  return llvm::Error::success();
}

llvm::Error TrainInputs::dump(llvm::StringRef dir, int64_t step) const {
  std::string digits = std::to_string(step);
  if (digits.size() < 8) digits.insert(0, 8 - digits.size(), '0');
  llvm::SmallString<256> folder(dir);
  llvm::sys::path::append(folder, "step-" + digits);
  if (std::error_code ec = llvm::sys::fs::create_directories(folder))
    return fail("--dump-inputs " + folder + ": cannot create the folder: " + ec.message());
  std::vector<std::string> names;
  for (const Input &in : inputs_) names.push_back(in.source->name());
  llvm::Expected<std::vector<std::string>> files = tensorFileNames(names, ".npy", "train inputs");
  if (!files) return files.takeError();
  for (size_t i = 0; i < inputs_.size(); ++i) {
    llvm::SmallString<256> path(folder);
    llvm::sys::path::append(path, (*files)[i]);
    if (llvm::Error e = writeNpy(path, inputs_[i].dtype, inputs_[i].globalShape, inputs_[i].batch.data()))
      return fail("--dump-inputs: " + llvm::toString(std::move(e)));
  }
  return llvm::Error::success();
}

}  // namespace colossal::runtime
