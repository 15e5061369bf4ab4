//===- CommPlans.h - Hand-built plans with collective instructions --------------*- C++ -*-===//
#ifndef COLOSSAL_TEST_COMM_COMMPLANS_H
#define COLOSSAL_TEST_COMM_COMMPLANS_H

#include "colossal/runtime/DType.h"
#include "colossal/runtime/Mesh.h"

#include "plan.pb.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace colossal::runtime::testing {

/// One collective step of a hand-built plan: `op` from buffer `in` to a new buffer named `out`.
struct CollectiveStep {
  std::string op;
  std::string in, out;                 // buffer names ("x" is the program input)
  std::vector<int64_t> outShape;
  std::map<std::string, std::string> s;  // string attrs (axes, reduction)
  std::map<std::string, int64_t> i;      // int attrs (dim, root, split_dim, concat_dim)
  /// The output's dtype when it is not the plan's (axis_index: I64). `in` empty: no input.
  std::optional<DType> outDtype = std::nullopt;
};

/// A plan with mesh `mesh`, program "forward" with input `x` (dtype, xShape) and one buffer per
/// step, each step's output bound as a program output of the same name. No weights. A step with
/// an empty `in` has no input (axis_index).
plan::Plan makeCollectivePlan(const std::vector<MeshAxis> &mesh, DType dtype,
                              const std::vector<int64_t> &xShape,
                              const std::vector<CollectiveStep> &steps);

/// Serializes `p` to `path`; false on failure.
bool writePlanFile(const plan::Plan &p, const std::string &path);

}  // namespace colossal::runtime::testing

#endif
