//===- SchemaCheck.h - a node against its ONNX operator schema ----*- C++ -*-===//
//
// The importer's op functions read what they implement; this check rejects what they would
// otherwise ignore: too many or too few inputs/outputs, unknown attributes, missing required
// attributes and attributes of the wrong type, per ONNX's own operator schemas (libonnx).
//===----------------------------------------------------------------------===//
#ifndef COLOSSAL_LIB_IMPORT_ONNX_SCHEMACHECK_H
#define COLOSSAL_LIB_IMPORT_ONNX_SCHEMACHECK_H

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>

namespace colossal::onnx_import {

/// An empty string when `node` fits the schema of its operator at `opset` in `domain` (or when
/// libonnx has no schema for it), else the reason it does not.
std::string checkNodeAgainstSchema(const onnx::NodeProto &node, int64_t opset,
                                   const std::string &domain);

/// The schema's name of input `index` of default-domain operator `opType` at `opset`
/// ("shape" for Reshape's input 1), for messages; empty when libonnx does not know it.
std::string schemaInputName(const std::string &opType, int64_t opset, int index);

} // namespace colossal::onnx_import

#endif
