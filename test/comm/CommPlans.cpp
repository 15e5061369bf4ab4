//===- CommPlans.cpp - Hand-built plans with collective instructions -------------------------===//
#include "CommPlans.h"

#include "colossal/runtime/Plan.h"
#include "colossal/runtime/Tensor.h"

#include <fstream>

namespace colossal::runtime::testing {

plan::Plan makeCollectivePlan(const std::vector<MeshAxis> &mesh, DType dtype,
                              const std::vector<int64_t> &xShape,
                              const std::vector<CollectiveStep> &steps) {
  plan::Plan p;
  p.set_version(kPlanVersion);
  p.set_producer("comm test");
  p.set_mode("inference");
  for (const MeshAxis &a : mesh) {
    plan::MeshAxis *m = p.add_mesh();
    m->set_name(a.name);
    m->set_size(a.size);
    m->set_role(static_cast<plan::MeshAxis::Role>(a.role));
  }
  plan::Program &prog = *p.add_programs();
  prog.set_name("forward");
  prog.set_role(plan::Program::FORWARD);
  prog.set_device(plan::CPU);
  std::map<std::string, uint32_t> ids;
  uint64_t offset = 0;
  auto add = [&](const std::string &name, const std::vector<int64_t> &shape, DType type) {
    plan::Buffer *b = prog.add_buffers();
    b->set_id(prog.buffers_size() - 1);
    b->set_name(name);
    b->set_dtype(static_cast<plan::DType>(type));
    for (int64_t d : shape) b->add_shape(d);
    b->set_storage(plan::ARENA);
    b->set_offset(offset);
    uint64_t bytes = numElements(shape) * dtypeSize(type);
    b->set_size_bytes(bytes);
    offset += (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
    ids[name] = b->id();
  };
  add("x", xShape, dtype);
  for (const CollectiveStep &s : steps) add(s.out, s.outShape, s.outDtype.value_or(dtype));
  prog.set_arena_bytes(std::max<uint64_t>(offset, kArenaAlignment));
  for (const CollectiveStep &s : steps) {
    plan::Instruction *inst = prog.add_instructions();
    inst->set_op(s.op);
    if (!s.in.empty()) inst->add_inputs(ids.at(s.in));
    inst->add_outputs(ids.at(s.out));
    inst->set_loc("/" + s.out);
    for (const auto &[k, v] : s.s) (*inst->mutable_attrs())[k].set_s(v);
    for (const auto &[k, v] : s.i) (*inst->mutable_attrs())[k].set_i(v);
  }
  plan::Binding *in = prog.add_inputs();
  in->set_name("x");
  in->set_buffer(ids["x"]);
  for (const CollectiveStep &s : steps) {
    plan::Binding *o = prog.add_outputs();
    o->set_name(s.out);
    o->set_buffer(ids[s.out]);
  }
  return p;
}

bool writePlanFile(const plan::Plan &p, const std::string &path) {
  std::ofstream os(path, std::ios::binary);
  const std::string bytes = colossal::runtime::serializePlan(p);
  return os && os.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace colossal::runtime::testing
