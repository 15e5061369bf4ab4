//===- TestUtil.cpp - Helpers for runtime unit tests ----------------------------------------===//
#include "TestUtil.h"

#include <cmath>
#include <omp.h>

namespace colossal::runtime::testing {

HostTensor randomF32(llvm::ArrayRef<int64_t> shape, std::mt19937 &rng, float lo, float hi) {
  HostTensor t(DType::F32, shape);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

HostTensor randomI64(llvm::ArrayRef<int64_t> shape, std::mt19937 &rng, int64_t lo, int64_t hi) {
  HostTensor t(DType::I64, shape);
  std::uniform_int_distribution<int64_t> dist(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<int64_t>()[i] = dist(rng);
  return t;
}

HostTensor randomBool(llvm::ArrayRef<int64_t> shape, std::mt19937 &rng, double pTrue) {
  HostTensor t(DType::Bool, shape);
  std::bernoulli_distribution dist(pTrue);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<uint8_t>()[i] = dist(rng);
  return t;
}

Attrs &Attrs::i(const std::string &name, int64_t v) {
  (*inst.mutable_attrs())[name].set_i(v);
  return *this;
}
Attrs &Attrs::f(const std::string &name, double v) {
  (*inst.mutable_attrs())[name].set_f(v);
  return *this;
}
Attrs &Attrs::s(const std::string &name, const std::string &v) {
  (*inst.mutable_attrs())[name].set_s(v);
  return *this;
}
Attrs &Attrs::ints(const std::string &name, std::vector<int64_t> v) {
  auto *list = (*inst.mutable_attrs())[name].mutable_ints();
  for (int64_t x : v) list->add_values(x);
  return *this;
}

namespace {
llvm::Error prepare(const std::string &op, std::vector<HostTensor *> &inputs,
                    std::vector<HostTensor *> &outputs, const Attrs &attrs, KernelCall &call,
                    const KernelDesc *&desc) {
  desc = KernelRegistry::cpu().find(op, outputs.at(0)->dtype, DeviceKind::CPU);
  if (!desc)
    return llvm::createStringError("no kernel for %s/%s", op.c_str(), dtypeName(outputs[0]->dtype).str().c_str());
  int nIn = static_cast<int>(inputs.size()), nOut = static_cast<int>(outputs.size());
  if (nIn < desc->minInputs || (desc->maxInputs >= 0 && nIn > desc->maxInputs) ||
      nOut < desc->minOutputs || (desc->maxOutputs >= 0 && nOut > desc->maxOutputs))
    return llvm::createStringError("wrong operand count");
  call.instruction = &attrs.inst;
  call.threads = omp_get_max_threads();
  for (HostTensor *t : inputs) call.inputs.push_back(t->ref());
  for (HostTensor *t : outputs) call.outputs.push_back(t->ref());
  if (llvm::Error e = verifyAttrKinds(*desc, call)) return e;
  if (desc->verify) return desc->verify(call);
  return llvm::Error::success();
}
}  // namespace

llvm::Error verifyKernel(const std::string &op, std::vector<HostTensor *> inputs,
                         std::vector<HostTensor *> outputs, const Attrs &attrs) {
  KernelCall call;
  const KernelDesc *desc;
  return prepare(op, inputs, outputs, attrs, call, desc);
}

llvm::Error runKernel(const std::string &op, std::vector<HostTensor *> inputs,
                      std::vector<HostTensor *> outputs, const Attrs &attrs, uint64_t constantInputs) {
  KernelCall call;
  const KernelDesc *desc = nullptr;
  if (llvm::Error e = prepare(op, inputs, outputs, attrs, call, desc)) return e;
  call.constantInputs = constantInputs;
  if (desc->prepare)
    if (llvm::Error e = desc->prepare(call)) return e;
  AlignedBuffer ws;
  if (desc->workspace) {
    ws = AlignedBuffer(desc->workspace(call, call.threads));
    call.workspace = ws.data();
    call.workspaceBytes = ws.size();
  }
  return desc->run(call);
}

std::vector<int64_t> unravel(int64_t index, llvm::ArrayRef<int64_t> shape) {
  std::vector<int64_t> idx(shape.size());
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    idx[d] = index % shape[d];
    index /= shape[d];
  }
  return idx;
}

int64_t broadcastIndex(llvm::ArrayRef<int64_t> outIndex, llvm::ArrayRef<int64_t> shape) {
  int64_t flat = 0;
  size_t off = outIndex.size() - shape.size();
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + (shape[d] == 1 ? 0 : outIndex[off + d]);
  return flat;
}

void expectClose(const float *got, const float *want, int64_t n, float atol, float rtol) {
  int reported = 0;
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    bool ok = (std::isnan(got[i]) && std::isnan(want[i])) ||
              (got[i] == want[i]) ||
              std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i]);
    if (!ok) {
      ++bad;
      if (reported++ < 5) ADD_FAILURE() << "index " << i << ": got " << got[i] << ", want " << want[i];
    }
  }
  EXPECT_EQ(bad, 0) << "of " << n << " elements";
}

std::string errorMessage(llvm::Error err) {
  if (!err) {
    ADD_FAILURE() << "expected an error, got success";
    return "";
  }
  return llvm::toString(std::move(err));
}

}  // namespace colossal::runtime::testing
