//===- PlanEmitterFixture.h - emit hand-written modules to plans and read them back --*- C++ -*-===//
//
// Shared by PlanEmitterTest.cpp (inference plans) and TrainPlanEmitterTest.cpp (train plans): a
// GoogleTest fixture that parses a `colossal` module, emits it into a fresh folder and reads the
// plan back, and an independent checker of a program's arena layout.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_TEST_UNIT_PLANEMITTERFIXTURE_H
#define COLOSSAL_TEST_UNIT_PLANEMITTERFIXTURE_H

#include "colossal/Target/Plan.h"
#include "dialects/Colossal/ColossalOps.h"

#include "plan.pb.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace colossal::test {

/// A fresh folder per test; `emit` writes `model.cplan` (+ weights) there.
class PlanEmitterFixture : public ::testing::Test {
protected:
  void SetUp() override {
    registry.insert<colossal::ColossalDialect, mlir::func::FuncDialect>();
    context = std::make_unique<mlir::MLIRContext>(registry);
    context->loadAllAvailableDialects();
    context->allowUnregisteredDialects();
    ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("plan-emitter-test", dir));
  }
  void TearDown() override { llvm::sys::fs::remove_directories(dir); }

  std::string path(llvm::StringRef name) {
    llvm::SmallString<256> p = dir;
    llvm::sys::path::append(p, name);
    return p.str().str();
  }

  /// Emits `source` to `model.cplan`; collects diagnostics into `diagnostics` and, when `report`
  /// is given, the --report text into it.
  mlir::LogicalResult emit(llvm::StringRef source, std::string *report = nullptr,
                           colossal::PlanOptions options = {}) {
    diagnostics.clear();
    mlir::ScopedDiagnosticHandler handler(context.get(), [&](mlir::Diagnostic &d) {
      diagnostics += d.str() + "\n";
      return mlir::success();
    });
    mlir::OwningOpRef<mlir::ModuleOp> module =
        mlir::parseSourceString<mlir::ModuleOp>(source, context.get());
    if (!module)
      return mlir::failure();
    std::string text;
    llvm::raw_string_ostream os(text);
    mlir::LogicalResult result =
        colossal::emitPlan(*module, path("model.cplan"), options, report ? &os : nullptr);
    if (report)
      *report = text;
    return result;
  }

  plan::Plan readPlan() {
    plan::Plan p;
    auto buf = llvm::MemoryBuffer::getFile(path("model.cplan"));
    EXPECT_TRUE(bool(buf));
    if (buf)
      EXPECT_TRUE(p.ParseFromArray((*buf)->getBufferStart(), (*buf)->getBufferSize()));
    return p;
  }

  /// The folder's file names, sorted.
  std::vector<std::string> files() {
    std::vector<std::string> names;
    std::error_code ec;
    for (llvm::sys::fs::directory_iterator it(dir, ec), end; it != end && !ec; it.increment(ec))
      names.push_back(llvm::sys::path::filename(it->path()).str());
    std::sort(names.begin(), names.end());
    return names;
  }

  mlir::DialectRegistry registry;
  std::unique_ptr<mlir::MLIRContext> context;
  llvm::SmallString<256> dir;
  std::string diagnostics;
};

/// Independent of the planner, from the program alone:
/// - no two arena buffers live at the same time (from their first writer, or 0 for inputs, to
///   their last reader, or the end for outputs) share a byte, unless they are the same storage
///   (same offset and size: aliases and in-place results);
/// - within one storage, a buffer written by an instruction (other than in place, from its first
///   input) comes after every earlier holder's last read;
/// - offsets are 64-aligned and inside the arena; bindings are ARENA buffers;
/// - STATE buffers name their state and have no offset, and no instruction but an update (whose
///   outputs are among its inputs) writes a non-arena buffer.
inline void expectSoundLayout(const plan::Program &p) {
  size_t n = p.buffers_size();
  const uint32_t kEnd = p.instructions_size() + 1, kNever = ~0u;
  std::vector<uint32_t> def(n, kNever), last(n, 0);
  for (const plan::Binding &b : p.inputs()) {
    def[b.buffer()] = 0;
    EXPECT_EQ(p.buffers(b.buffer()).storage(), plan::ARENA) << b.name();
  }
  for (int k = 0; k < p.instructions_size(); ++k) {
    const plan::Instruction &inst = p.instructions(k);
    for (uint32_t in : inst.inputs())
      last[in] = std::max<uint32_t>(last[in], k + 1);
    for (uint32_t out : inst.outputs()) {
      const plan::Buffer &b = p.buffers(out);
      if (b.storage() != plan::ARENA) {
        EXPECT_EQ(b.storage(), plan::STATE) << inst.op() << " writes " << b.name();
        EXPECT_TRUE(llvm::is_contained(inst.inputs(), out))
            << inst.op() << " writes state " << b.name() << " without reading it";
        continue;
      }
      def[out] = std::min<uint32_t>(def[out], k + 1);
    }
  }
  for (const plan::Binding &b : p.outputs()) {
    last[b.buffer()] = kEnd;
    EXPECT_EQ(p.buffers(b.buffer()).storage(), plan::ARENA) << b.name();
  }
  // Storages: arena buffers grouped by (offset, size), with the union of their live ranges.
  std::map<std::pair<uint64_t, uint64_t>, std::pair<uint32_t, uint32_t>> storages;
  for (size_t i = 0; i < n; ++i) {
    const plan::Buffer &b = p.buffers(i);
    EXPECT_EQ(b.id(), i);
    if (b.storage() == plan::STATE) {
      EXPECT_FALSE(b.state_name().empty()) << b.name();
      EXPECT_EQ(b.offset(), 0u) << b.name();
    }
    if (b.storage() != plan::ARENA || b.size_bytes() == 0)
      continue;
    EXPECT_EQ(b.offset() % 64, 0u) << b.name();
    EXPECT_LE(b.offset() + b.size_bytes(), p.arena_bytes()) << b.name();
    auto [it, inserted] = storages.try_emplace({b.offset(), b.size_bytes()}, kNever, 0);
    uint32_t start = def[i] == kNever ? last[i] : def[i];
    it->second.first = std::min(it->second.first, start);
    it->second.second = std::max({it->second.second, last[i], start});
  }
  for (auto a = storages.begin(); a != storages.end(); ++a)
    for (auto b = std::next(a); b != storages.end(); ++b) {
      bool bytes = a->first.first < b->first.first + b->first.second &&
                   b->first.first < a->first.first + a->first.second;
      bool time = a->second.first <= b->second.second && b->second.first <= a->second.second;
      EXPECT_FALSE(bytes && time) << p.name() << ": offsets " << a->first.first << " and "
                                  << b->first.first;
    }
  for (int k = 0; k < p.instructions_size(); ++k)
    for (uint32_t out : p.instructions(k).outputs()) {
      const plan::Buffer &o = p.buffers(out);
      if (o.storage() != plan::ARENA || o.size_bytes() == 0)
        continue;
      for (size_t i = 0; i < n; ++i) {
        const plan::Buffer &b = p.buffers(i);
        if (i == out || b.storage() != plan::ARENA || b.offset() != o.offset() ||
            b.size_bytes() != o.size_bytes())
          continue;
        bool isInPlaceInput =
            p.instructions(k).inputs_size() && p.instructions(k).inputs(0) == i;
        if (def[i] != kNever && def[i] < uint32_t(k + 1) && !isInPlaceInput)
          EXPECT_LT(last[i], uint32_t(k + 1)) << o.name() << " overwrites " << b.name();
      }
    }
}

} // namespace colossal::test

#endif
