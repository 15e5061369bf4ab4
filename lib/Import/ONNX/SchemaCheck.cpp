//===- SchemaCheck.cpp - a node against its ONNX operator schema ---------===//
//
// Compiled with C++ exceptions: libonnx's schema headers need them (TOOLCHAIN.md). No MLIR here.
//===----------------------------------------------------------------------===//
#include "SchemaCheck.h"

#include <onnx/defs/schema.h>

#include <algorithm>

namespace colossal::onnx_import {

namespace {
const char *attrTypeName(int t) {
  using A = onnx::AttributeProto;
  switch (t) {
  case A::FLOAT: return "float";
  case A::INT: return "int";
  case A::STRING: return "string";
  case A::TENSOR: return "tensor";
  case A::GRAPH: return "graph";
  case A::FLOATS: return "floats";
  case A::INTS: return "ints";
  case A::STRINGS: return "strings";
  case A::TENSORS: return "tensors";
  case A::GRAPHS: return "graphs";
  case A::SPARSE_TENSOR: return "sparse tensor";
  case A::TYPE_PROTO: return "type";
  default: return "undefined";
  }
}
} // namespace

std::string checkNodeAgainstSchema(const onnx::NodeProto &node, int64_t opset,
                                   const std::string &domain) {
  const onnx::OpSchema *schema = nullptr;
  try {
    // Schemas of opsets newer than this libonnx knows would be the wrong (older) version: their
    // new inputs and attributes would look unknown. Those nodes are left to the op importers.
    const auto &ranges = onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
    auto range = ranges.find(domain.empty() ? std::string("") : domain);
    if (range == ranges.end() || opset > range->second.second)
      return "";
    schema = onnx::OpSchemaRegistry::Schema(node.op_type(), int(opset), domain);
  } catch (...) {
    return "";
  }
  if (!schema)
    return "";
  // Trailing blank names are absent optional inputs/outputs.
  int inputs = node.input_size(), outputs = node.output_size();
  while (inputs > 0 && node.input(inputs - 1).empty())
    --inputs;
  while (outputs > 0 && node.output(outputs - 1).empty())
    --outputs;
  if (inputs < schema->min_input() || inputs > schema->max_input())
    return "takes " + std::to_string(schema->min_input()) +
           (schema->max_input() == schema->min_input()
                ? ""
                : " to " + (schema->max_input() == std::numeric_limits<int>::max()
                                ? std::string("any number of")
                                : std::to_string(schema->max_input()))) +
           (schema->max_input() == 1 ? " input" : " inputs") + ", got " + std::to_string(inputs);
  if (outputs < schema->min_output() || outputs > schema->max_output())
    return "produces " + std::to_string(schema->min_output()) +
           (schema->max_output() == schema->min_output()
                ? ""
                : " to " + (schema->max_output() == std::numeric_limits<int>::max()
                                ? std::string("any number of")
                                : std::to_string(schema->max_output()))) +
           (schema->max_output() == 1 ? " output" : " outputs") + ", got " +
           std::to_string(outputs);
  const auto &known = schema->attributes();
  for (const auto &a : node.attribute()) {
    auto it = known.find(a.name());
    if (it == known.end())
      return "unknown attribute '" + a.name() + "'";
    if (a.type() != onnx::AttributeProto::UNDEFINED && a.type() != int(it->second.type))
      return "attribute '" + a.name() + "' is a " + attrTypeName(a.type()) + ", expected " +
             attrTypeName(int(it->second.type));
  }
  for (const auto &[name, attr] : known) {
    if (!attr.required)
      continue;
    bool present = false;
    for (const auto &a : node.attribute())
      present |= a.name() == name;
    if (!present)
      return "missing required attribute '" + name + "'";
  }
  return "";
}

std::string schemaInputName(const std::string &opType, int64_t opset, int index) {
  try {
    const auto &ranges = onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
    auto range = ranges.find("");
    if (range == ranges.end() || opset > range->second.second)
      return "";
    const onnx::OpSchema *schema = onnx::OpSchemaRegistry::Schema(opType, int(opset), "");
    if (!schema || schema->inputs().empty() || index < 0)
      return "";
    const auto &formals = schema->inputs();
    // Past the last formal: the last one is variadic (Concat's inputs, Sum's data_0).
    const auto &formal = formals[std::min<size_t>(size_t(index), formals.size() - 1)];
    return formal.GetName();
  } catch (...) {
    return "";
  }
}

} // namespace colossal::onnx_import
