// OpProfile (colossal-run --profile): FLOP counts from operand shapes, and the table's rows,
// order, shares and rates.
#include "colossal/runtime/Kernel.h"
#include "colossal/runtime/OpProfile.h"

#include <gtest/gtest.h>

using namespace colossal::runtime;

namespace {

TensorRef f32(Shape shape) {
  TensorRef t;
  t.dtype = DType::F32;
  t.shape = std::move(shape);
  return t;
}

TEST(OpProfile, FlopsFromShapes) {
  KernelCall mm;
  mm.inputs = {f32({2, 3, 4}), f32({4, 5})};
  mm.outputs = {f32({2, 3, 5})};
  EXPECT_EQ(OpProfile::flopsOf("matmul", mm), 2.0 * 30 * 4);
  EXPECT_EQ(OpProfile::flopsOf("linear", mm), 2.0 * 30 * 4);
  EXPECT_EQ(OpProfile::flopsOf("add", mm), 0.0);
  KernelCall attn;  // no instruction: not causal
  attn.inputs = {f32({1, 2, 3, 4}), f32({1, 2, 5, 4}), f32({1, 2, 5, 4})};
  attn.outputs = {f32({1, 2, 3, 4})};
  EXPECT_EQ(OpProfile::flopsOf("attention", attn), 4.0 * 24 * 5);
  EXPECT_EQ(OpProfile::flopsOf("attention_grad", attn), 10.0 * 24 * 5);
}

TEST(OpProfile, TableByTimeWithSharesAndRates) {
  OpProfile p;
  p.add("add", 0.001, 0);
  p.add("linear", 0.003, 6e9);
  p.add("linear", 0.003, 6e9);
  std::string text;
  llvm::raw_string_ostream os(text);
  p.print(os, "profile: test");
  os.flush();
  const size_t linear = text.find("  linear"), add = text.find("  add"), all = text.find("  all");
  ASSERT_NE(linear, std::string::npos) << text;
  ASSERT_NE(add, std::string::npos) << text;
  ASSERT_NE(all, std::string::npos) << text;
  EXPECT_LT(linear, add) << "rows by total time, largest first:\n" << text;
  EXPECT_EQ(text.rfind("profile: test\n", 0), 0u) << text;
  // linear: 2 calls, 6 ms, 6/7 of the time, 3000 us a call, 12 GFLOP in 6 ms.
  const std::string linearRow = text.substr(linear, text.find('\n', linear) - linear);
  for (const char *want : {" 2 ", " 6.000 ", " 85.7%", " 3000.0 ", " 2000.0"})
    EXPECT_NE(linearRow.find(want), std::string::npos) << want << " in: " << linearRow;
  const std::string addRow = text.substr(add, text.find('\n', add) - add);
  EXPECT_EQ(addRow.back(), '-') << "no FLOPs, no rate: " << addRow;
  const std::string allRow = text.substr(all, text.find('\n', all) - all);
  EXPECT_NE(allRow.find(" 3 "), std::string::npos) << allRow;
  EXPECT_NE(allRow.find(" 7.000 "), std::string::npos) << allRow;

  p.reset();
  text.clear();
  p.print(os, "after reset");
  os.flush();
  EXPECT_NE(text.find("(no instruction ran)"), std::string::npos) << text;
}

}  // namespace
