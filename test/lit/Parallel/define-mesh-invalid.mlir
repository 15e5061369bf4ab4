// colossal-define-mesh errors: a malformed axis option, a role the dialect does not know, and a
// module that already has another mesh.
// RUN: colossal-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(colossal-define-mesh{axes=dp=2:data,tp=2:tensor})'
// RUN: not colossal-opt %s --split-input-file --pass-pipeline='builtin.module(colossal-define-mesh{axes=dp=two:data})' 2>&1 | FileCheck %s --check-prefix=FORM
// RUN: not colossal-opt %s --split-input-file --pass-pipeline='builtin.module(colossal-define-mesh{axes=dp=2:batch})' 2>&1 | FileCheck %s --check-prefix=ROLE
// FORM: error: colossal-define-mesh: axis 'dp=two:data' is not NAME=SIZE:ROLE
// ROLE: error: 'colossal.mesh' op axis 'dp' has role "batch"; roles are data, tensor, pipeline, grid_row, grid_col, grid_depth

// expected-error @below {{colossal-define-mesh: the module already has a different mesh (dp=4 data); wanted dp=2 data, tp=2 tensor}}
colossal.mesh @mesh axes = ["dp"] shape = [4] roles = ["data"]
