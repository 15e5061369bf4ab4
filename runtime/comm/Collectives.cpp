//===- Collectives.cpp - Collective instructions of a plan ----------------------------------===//
//
// all_reduce, all_gather, reduce_scatter, all_to_all and broadcast as kernels (docs/plan.md,
// "Collective instructions"), and the two local mesh queries of tensor parallelism: shard_slice
// (group rank r keeps chunk r of a dim) and axis_index (r as an int64 scalar), which name a group
// but move no data. Each runs over the group of the mesh axes named by its `axes`
// attribute, through the CommContext the executor puts into KernelCall::comm. Registered for every
// dtype (the reducing ones reject bool). Checks happen twice before anything runs: the kernel's
// verify() (shapes up to the group size, attributes) and validateCollectives() (axes against the
// plan's mesh, shapes against the exact group size).
//
//===----------------------------------------------------------------------------------------===//
#include "colossal/runtime/Communicator.h"
#include "colossal/runtime/Kernel.h"

#include "plan.pb.h"

#include <cstring>

namespace colossal::runtime {

namespace {

llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg.str());
}

bool isCollectiveOp(llvm::StringRef op) {
  return op == "all_reduce" || op == "all_gather" || op == "reduce_scatter" || op == "all_to_all" ||
         op == "broadcast" || op == "shard_slice" || op == "axis_index" ||
         op == "all_gather_in_place" || op == "reduce_scatter_in_place";
}

bool isChunkedOp(llvm::StringRef op) { return op == "all_gather_in_place" || op == "reduce_scatter_in_place"; }

/// all_gather_in_place / reduce_scatter_in_place (ZeRO, docs/parallelism.md "ZeRO"): output i is
/// input i, one dtype, dim 0 divisible by the group size (0: unknown yet).
llvm::Error checkChunked(const KernelCall &c, llvm::StringRef op, int64_t groupSize) {
  if (!c.hasAttr("axes") || c.attrString("axes", "").empty())
    return fail("missing attribute 'axes' (the mesh axes to communicate over)");
  if (c.inputs.empty() || c.inputs.size() != c.outputs.size())
    return fail(llvm::Twine(c.inputs.size()) + " inputs and " + llvm::Twine(c.outputs.size()) +
                " outputs (" + op + " writes each input in place)");
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const TensorRef &x = c.inputs[i], &y = c.outputs[i];
    if (x.data != y.data && x.data && y.data)
      return fail("output " + llvm::Twine(i) + " is not input " + llvm::Twine(i) + " (in place)");
    if (x.dtype != c.inputs[0].dtype || y.dtype != x.dtype || x.shape != y.shape)
      return fail("tensor " + llvm::Twine(i) + " is " + dtypeName(x.dtype) + " " + shapeToString(x.shape) +
                  " -> " + dtypeName(y.dtype) + " " + shapeToString(y.shape) + "; every tensor must be " +
                  dtypeName(c.inputs[0].dtype) + ", in place");
    if (x.rank() == 0) return fail("tensor " + llvm::Twine(i) + " is a scalar: no dim 0 to split");
    if (groupSize && x.shape[0] % groupSize != 0)
      return fail("tensor " + llvm::Twine(i) + " " + shapeToString(x.shape) + ": dim 0 is not divisible by the group of " +
                  llvm::Twine(groupSize) + " ranks");
  }
  if (op == "reduce_scatter_in_place" && !isReducibleDType(c.inputs[0].dtype))
    return fail("cannot reduce " + dtypeName(c.inputs[0].dtype));
  return llvm::Error::success();
}

/// The checks shared by verify() (groupSize 0: unknown) and validateCollectives() (the exact size).
llvm::Error checkShapes(const KernelCall &c, llvm::StringRef op, int64_t groupSize) {
  if (isChunkedOp(op)) return checkChunked(c, op, groupSize);
  if (op == "axis_index") {
    if (!c.hasAttr("axes") || c.attrString("axes", "").empty())
      return fail("missing attribute 'axes' (the mesh axes whose group index it gives)");
    const TensorRef &y = c.outputs[0];
    if (y.dtype != DType::I64 || y.rank() != 0)
      return fail("output is " + dtypeName(y.dtype) + " " + shapeToString(y.shape) +
                  "; it must be an int64 scalar []");
    return llvm::Error::success();
  }
  if (op == "all_reduce" && (c.inputs.size() > 1 || c.outputs.size() > 1)) {
    // A bucket (docs/plan.md "Collective instructions"): input i and output i are one tensor.
    if (c.inputs.size() != c.outputs.size())
      return fail(llvm::Twine(c.inputs.size()) + " inputs but " + llvm::Twine(c.outputs.size()) +
                  " outputs (a bucketed all_reduce pairs input i with output i)");
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      const TensorRef &x = c.inputs[i], &y = c.outputs[i];
      if (x.dtype != c.inputs[0].dtype || y.dtype != x.dtype)
        return fail("input " + llvm::Twine(i) + " is " + dtypeName(x.dtype) + " and output " + llvm::Twine(i) +
                    " " + dtypeName(y.dtype) + "; every tensor of a bucket must be " +
                    dtypeName(c.inputs[0].dtype));
      if (x.shape != y.shape)
        return fail("input " + llvm::Twine(i) + " " + shapeToString(x.shape) + " and output " + llvm::Twine(i) +
                    " " + shapeToString(y.shape) + " differ (they must be equal)");
    }
  }
  const TensorRef &x = c.inputs[0], &y = c.outputs[0];
  if (x.dtype != y.dtype)
    return fail("input is " + dtypeName(x.dtype) + " but output is " + dtypeName(y.dtype));
  if (!c.hasAttr("axes") || c.attrString("axes", "").empty())
    return fail("missing attribute 'axes' (the mesh axes to communicate over)");
  const int64_t rank = x.rank();
  auto dimAttr = [&](const char *name, int64_t &dim) -> llvm::Error {
    dim = c.attrInt(name, 0);
    if (dim < 0 || dim >= std::max<int64_t>(rank, 1) || rank == 0)
      return fail("'" + llvm::Twine(name) + "' " + llvm::Twine(dim) + " is outside the input's dims [0, " +
                  llvm::Twine(rank) + ")");
    return llvm::Error::success();
  };
  auto mismatch = [&](llvm::StringRef why) {
    return fail("input " + shapeToString(x.shape) + " and output " + shapeToString(y.shape) + " " + why);
  };
  if (op == "all_reduce" || op == "reduce_scatter") {
    std::optional<ReduceOp> red = parseReduceOp(c.attrString("reduction", "sum"));
    if (!red) return fail("unknown reduction '" + c.attrString("reduction", "") + "' (sum, max, min)");
    if (!isReducibleDType(x.dtype)) return fail("cannot reduce " + dtypeName(x.dtype));
  }
  if (op == "all_reduce" || op == "broadcast") {
    if (x.shape != y.shape) return mismatch("differ (they must be equal)");
    if (op == "broadcast") {
      int64_t root = c.attrInt("root", 0);
      if (root < 0 || (groupSize && root >= groupSize))
        return fail("root " + llvm::Twine(root) + " is outside the group of " + llvm::Twine(groupSize) + " ranks");
    }
    return llvm::Error::success();
  }
  if (op == "all_gather" || op == "reduce_scatter" || op == "shard_slice") {
    int64_t dim;
    if (llvm::Error e = dimAttr("dim", dim)) return e;
    if (y.rank() != rank) return mismatch("differ in rank");
    for (int64_t d = 0; d < rank; ++d)
      if (d != dim && x.shape[d] != y.shape[d]) return mismatch("differ outside dim " + std::to_string(dim));
    bool gather = op == "all_gather";
    int64_t small = gather ? x.shape[dim] : y.shape[dim], large = gather ? y.shape[dim] : x.shape[dim];
    if (groupSize) {
      if (large != small * groupSize)
        return mismatch("do not fit a group of " + std::to_string(groupSize) + " ranks along dim " +
                        std::to_string(dim) + " (the " + (gather ? "output" : "input") + " must be " +
                        std::to_string(groupSize) + "x the " + (gather ? "input" : "output") + ")");
    } else if (small == 0 ? large != 0 : large % small != 0) {
      return mismatch("do not fit any group size along dim " + std::to_string(dim));
    }
    return llvm::Error::success();
  }
  // all_to_all
  int64_t split, concat;
  if (llvm::Error e = dimAttr("split_dim", split)) return e;
  if (llvm::Error e = dimAttr("concat_dim", concat)) return e;
  if (y.rank() != rank) return mismatch("differ in rank");
  if (x.numel() != y.numel()) return mismatch("differ in element count");
  for (int64_t d = 0; d < rank; ++d)
    if (d != split && d != concat && x.shape[d] != y.shape[d])
      return mismatch("differ outside the split and concat dims");
  if (groupSize) {
    Shape want(x.shape.begin(), x.shape.end());
    if (want[split] % groupSize != 0)
      return fail("split dim " + llvm::Twine(split) + " of input " + shapeToString(x.shape) +
                  " is not divisible by the group size " + llvm::Twine(groupSize));
    want[split] /= groupSize;
    want[concat] *= groupSize;
    if (y.shape != want)
      return mismatch("do not fit a group of " + std::to_string(groupSize) + " ranks (expected output " +
                      shapeToString(want) + ")");
  }
  return llvm::Error::success();
}

template <const char *Op> llvm::Error verifyCollective(const KernelCall &c) {
  return checkShapes(c, Op, 0);
}

llvm::Error groupOf(const KernelCall &c, Communicator *&group) {
  if (!c.comm)
    return fail("collective instruction without a communicator (the executor was created without a "
                "CommContext)");
  llvm::Expected<Communicator *> g = c.comm->axes(c.attrString("axes", ""));
  if (!g) return g.takeError();
  group = *g;
  return llvm::Error::success();
}

ReduceOp reductionOf(const KernelCall &c) {
  return parseReduceOp(c.attrString("reduction", "sum")).value_or(ReduceOp::Sum);
}

/// Group sizes are checked again at run time: a plan run without validateCollectives() (a test,
/// another mesh) must not write out of bounds.
llvm::Error checkAtRun(const KernelCall &c, llvm::StringRef op, Communicator *g) {
  if (llvm::Error e = checkShapes(c, op, g->size())) return fail(llvm::toString(std::move(e)));
  return llvm::Error::success();
}

/// The packed size of a bucketed all_reduce (more than one input): the sum of its inputs' bytes.
/// A single-tensor all_reduce works on its own buffers and needs none.
size_t allReduceWorkspace(const KernelCall &c, int) {
  if (c.inputs.size() < 2) return 0;
  size_t bytes = 0;
  for (const TensorRef &x : c.inputs) bytes += x.bytes();
  return bytes;
}

/// all_reduce: one tensor is reduced from its input into its output (in place when they are the
/// same buffer). A bucket of N tensors is packed in input order into the executor's workspace
/// (allocated once, allReduceWorkspace bytes), reduced by ONE collective call in place, and
/// unpacked into the outputs. Element k of tensor i is reduced with the same element of the other
/// ranks either way; only its offset in the message changes (docs/parallelism.md "Gradient buckets").
llvm::Error runAllReduce(const KernelCall &c) {
  Communicator *g;
  if (llvm::Error e = groupOf(c, g)) return e;
  if (c.inputs.size() == 1) {
    const TensorRef &x = c.inputs[0], &y = c.outputs[0];
    return g->allReduce(x.data, y.data, x.numel(), x.dtype, reductionOf(c));
  }
  if (llvm::Error e = checkAtRun(c, "all_reduce", g)) return e;
  const size_t need = allReduceWorkspace(c, 0);
  if (!c.workspace || c.workspaceBytes < need)
    return fail("bucketed all_reduce needs a workspace of " + llvm::Twine(need) + " bytes, has " +
                llvm::Twine(c.workspaceBytes));
  char *packed = static_cast<char *>(c.workspace);
  int64_t count = 0;
  size_t off = 0;
  for (const TensorRef &x : c.inputs) {
    std::memcpy(packed + off, x.data, x.bytes());
    off += x.bytes();
    count += x.numel();
  }
  if (llvm::Error e = g->allReduce(packed, packed, count, c.inputs[0].dtype, reductionOf(c))) return e;
  off = 0;
  for (const TensorRef &y : c.outputs) {
    std::memcpy(y.data, packed + off, y.bytes());
    off += y.bytes();
  }
  return llvm::Error::success();
}

llvm::Error runAllGather(const KernelCall &c) {
  Communicator *g;
  if (llvm::Error e = groupOf(c, g)) return e;
  if (llvm::Error e = checkAtRun(c, "all_gather", g)) return e;
  const TensorRef &x = c.inputs[0], &y = c.outputs[0];
  return g->allGather(x.data, y.data, x.shape, c.attrInt("dim", 0), x.dtype);
}

llvm::Error runReduceScatter(const KernelCall &c) {
  Communicator *g;
  if (llvm::Error e = groupOf(c, g)) return e;
  if (llvm::Error e = checkAtRun(c, "reduce_scatter", g)) return e;
  const TensorRef &x = c.inputs[0], &y = c.outputs[0];
  return g->reduceScatter(x.data, y.data, x.shape, c.attrInt("dim", 0), x.dtype, reductionOf(c));
}

llvm::Error runAllToAll(const KernelCall &c) {
  Communicator *g;
  if (llvm::Error e = groupOf(c, g)) return e;
  if (llvm::Error e = checkAtRun(c, "all_to_all", g)) return e;
  const TensorRef &x = c.inputs[0], &y = c.outputs[0];
  return g->allToAll(x.data, y.data, x.shape, c.attrInt("split_dim", 0), c.attrInt("concat_dim", 0), x.dtype);
}

llvm::Error runBroadcast(const KernelCall &c) {
  Communicator *g;
  if (llvm::Error e = groupOf(c, g)) return e;
  if (llvm::Error e = checkAtRun(c, "broadcast", g)) return e;
  const TensorRef &x = c.inputs[0], &y = c.outputs[0];
  return g->broadcast(x.data, y.data, x.numel(), x.dtype, static_cast<int>(c.attrInt("root", 0)));
}

/// shard_slice: group rank r of P keeps elements [r·m, (r+1)·m) of `dim`, m = x.shape[dim] / P
/// (docs/parallelism.md "Sharded tensors"): for each of the prod(shape[:dim]) outer rows, one
/// contiguous copy of m·prod(shape[dim+1:]) elements. Any dtype (a byte copy). No communication:
/// r comes from the group's communicator, created by CommContext::prepare like every group.
llvm::Error runShardSlice(const KernelCall &c) {
  Communicator *g;
  if (llvm::Error e = groupOf(c, g)) return e;
  if (llvm::Error e = checkAtRun(c, "shard_slice", g)) return e;
  const TensorRef &x = c.inputs[0], &y = c.outputs[0];
  const int64_t dim = c.attrInt("dim", 0);
  const size_t elem = dtypeSize(x.dtype);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= x.shape[d];
  for (int64_t d = dim + 1; d < x.rank(); ++d) inner *= x.shape[d];
  const int64_t n = x.shape[dim], m = y.shape[dim];
  const size_t chunk = static_cast<size_t>(m * inner) * elem;
  const char *src = static_cast<const char *>(x.data);
  char *dst = static_cast<char *>(y.data);
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(dst + o * chunk, src + static_cast<size_t>((o * n + g->rank() * m) * inner) * elem, chunk);
  return llvm::Error::success();
}

/// The workspace of all_gather_in_place and reduce_scatter_in_place: one packed message of every
/// rank's chunks (P · Σ chunk bytes = Σ bytes) and one of this rank's (Σ bytes / P). The group
/// size is not known when the workspace is sized, so 2 · Σ bytes bounds it for any P >= 1.
size_t chunkedWorkspace(const KernelCall &c, int) {
  size_t bytes = 0;
  for (const TensorRef &x : c.inputs) bytes += x.bytes();
  return 2 * bytes;
}

/// A chunked collective's group and layout: per tensor its chunk bytes and offset in a packed
/// row (one rank's part of the message, `row` = Σ chunk bytes), rows in elements, and the
/// workspace checked to hold P + 1 rows.
struct Chunks {
  Communicator *group = nullptr;
  int64_t p = 1, r = 0;
  std::vector<size_t> bytes, offset;
  size_t row = 0;
  int64_t rowElements = 0;
  char *workspace = nullptr;
};
llvm::Expected<Chunks> prepareChunks(const KernelCall &c, llvm::StringRef op) {
  Chunks k;
  if (llvm::Error e = groupOf(c, k.group)) return std::move(e);
  if (llvm::Error e = checkAtRun(c, op, k.group)) return std::move(e);
  k.p = k.group->size();
  k.r = k.group->rank();
  for (const TensorRef &x : c.inputs) {
    k.offset.push_back(k.row);
    k.bytes.push_back(x.bytes() / static_cast<size_t>(k.p));
    k.row += k.bytes.back();
  }
  k.rowElements = static_cast<int64_t>(k.row / dtypeSize(c.inputs[0].dtype));
  const size_t need = k.row * static_cast<size_t>(k.p + 1);
  if (!c.workspace || c.workspaceBytes < need)
    return fail(llvm::Twine(op) + " needs a workspace of " + llvm::Twine(need) + " bytes, has " + llvm::Twine(c.workspaceBytes));
  k.workspace = static_cast<char *>(c.workspace);
  return k;
}

/// all_gather_in_place: rank r packs chunk r of every tensor into one row, ONE all_gather over the
/// group gives every rank's row, and row q is unpacked into chunk q of every tensor (chunk r is
/// written back with its own bytes).
llvm::Error runAllGatherInPlace(const KernelCall &c) {
  llvm::Expected<Chunks> chunks = prepareChunks(c, "all_gather_in_place");
  if (!chunks) return chunks.takeError();
  const Chunks &k = *chunks;
  char *send = k.workspace, *recv = send + k.row;
  for (size_t i = 0; i < c.inputs.size(); ++i)
    std::memcpy(send + k.offset[i], static_cast<const char *>(c.inputs[i].data) + k.r * k.bytes[i], k.bytes[i]);
  if (llvm::Error e = k.group->allGather(send, recv, {k.rowElements}, 0, c.inputs[0].dtype)) return e;
  for (int64_t q = 0; q < k.p; ++q)
    for (size_t i = 0; i < c.outputs.size(); ++i)
      std::memcpy(static_cast<char *>(c.outputs[i].data) + q * k.bytes[i], recv + q * k.row + k.offset[i], k.bytes[i]);
  return llvm::Error::success();
}

/// reduce_scatter_in_place: row q of the message packs chunk q of every tensor, ONE reduce_scatter
/// over the group leaves rank r the sum of row r, which is unpacked into chunk r of every tensor;
/// the other chunks are zeroed. Element k of a tensor meets the same element of the other ranks
/// as in an all_reduce, so with P = 2 the sum a + b is bit-equal to plain data parallelism.
llvm::Error runReduceScatterInPlace(const KernelCall &c) {
  llvm::Expected<Chunks> chunks = prepareChunks(c, "reduce_scatter_in_place");
  if (!chunks) return chunks.takeError();
  const Chunks &k = *chunks;
  const int64_t r = k.r;
  char *send = k.workspace, *recv = send + k.row * static_cast<size_t>(k.p);
  for (int64_t q = 0; q < k.p; ++q)
    for (size_t i = 0; i < c.inputs.size(); ++i)
      std::memcpy(send + q * k.row + k.offset[i], static_cast<const char *>(c.inputs[i].data) + q * k.bytes[i], k.bytes[i]);
  if (llvm::Error e = k.group->reduceScatter(send, recv, {k.rowElements * k.p}, 0, c.inputs[0].dtype, reductionOf(c)))
    return e;
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    char *y = static_cast<char *>(c.outputs[i].data);
    std::memset(y, 0, c.outputs[i].bytes());
    std::memcpy(y + r * k.bytes[i], recv + k.offset[i], k.bytes[i]);
  }
  return llvm::Error::success();
}

/// axis_index: this rank's index in its group over `axes` (row-major over them in the order
/// listed), written as an int64 scalar.
llvm::Error runAxisIndex(const KernelCall &c) {
  Communicator *g;
  if (llvm::Error e = groupOf(c, g)) return e;
  *static_cast<int64_t *>(c.outputs[0].data) = g->rank();
  return llvm::Error::success();
}

constexpr char kAllReduce[] = "all_reduce";
constexpr char kAllGather[] = "all_gather";
constexpr char kReduceScatter[] = "reduce_scatter";
constexpr char kAllToAll[] = "all_to_all";
constexpr char kBroadcast[] = "broadcast";
constexpr char kShardSlice[] = "shard_slice";
constexpr char kAxisIndex[] = "axis_index";
constexpr char kAllGatherInPlace[] = "all_gather_in_place";
constexpr char kReduceScatterInPlace[] = "reduce_scatter_in_place";

TensorRef viewOf(const plan::Buffer &b) {
  TensorRef t;
  t.dtype = static_cast<DType>(b.dtype());
  t.shape.assign(b.shape().begin(), b.shape().end());
  return t;
}

}  // namespace

void registerCollectiveKernels(KernelRegistry &r) {
  struct Entry {
    const char *op;
    std::vector<AttrSpec> attrs;
    llvm::Error (*verify)(const KernelCall &);
    llvm::Error (*run)(const KernelCall &);
  };
  const AttrSpec axes{"axes", AttrKind::String};
  const Entry entries[] = {
      {kAllReduce, {axes, {"reduction", AttrKind::String}}, verifyCollective<kAllReduce>, runAllReduce},
      {kAllGather, {axes, {"dim", AttrKind::Int}}, verifyCollective<kAllGather>, runAllGather},
      {kReduceScatter, {axes, {"dim", AttrKind::Int}, {"reduction", AttrKind::String}},
       verifyCollective<kReduceScatter>, runReduceScatter},
      {kAllToAll, {axes, {"split_dim", AttrKind::Int}, {"concat_dim", AttrKind::Int}},
       verifyCollective<kAllToAll>, runAllToAll},
      {kBroadcast, {axes, {"root", AttrKind::Int}}, verifyCollective<kBroadcast>, runBroadcast},
      {kShardSlice, {axes, {"dim", AttrKind::Int}}, verifyCollective<kShardSlice>, runShardSlice},
      {kAllGatherInPlace, {axes}, verifyCollective<kAllGatherInPlace>, runAllGatherInPlace},
      {kReduceScatterInPlace, {axes}, verifyCollective<kReduceScatterInPlace>, runReduceScatterInPlace},
  };
  for (const Entry &e : entries)
    for (int v = 1; v <= kLastDType; ++v) {
      KernelDesc d;
      d.op = e.op;
      d.dtype = static_cast<DType>(v);
      d.attrs = e.attrs;
      d.verify = e.verify;
      d.run = e.run;
      if (e.op == kAllReduce) {  // one tensor, or a bucket of several (input i -> output i)
        d.maxInputs = d.maxOutputs = -1;
        d.workspace = allReduceWorkspace;
      }
      if (e.op == kAllGatherInPlace || e.op == kReduceScatterInPlace) {  // a bucket, in place
        d.maxInputs = d.maxOutputs = -1;
        d.workspace = chunkedWorkspace;
      }
      r.add(std::move(d));
    }
  KernelDesc index;  // no inputs; the output is an int64 scalar
  index.op = kAxisIndex;
  index.dtype = DType::I64;
  index.minInputs = index.maxInputs = 0;
  index.attrs = {axes};
  index.verify = verifyCollective<kAxisIndex>;
  index.run = runAxisIndex;
  r.add(std::move(index));
}

llvm::Error validateCollectives(const plan::Plan &plan, llvm::StringRef planPath) {
  llvm::Expected<Mesh> mesh = Mesh::fromPlan(plan, planPath);
  if (!mesh) return mesh.takeError();
  for (const plan::Program &prog : plan.programs())
    for (int i = 0; i < prog.instructions_size(); ++i) {
      const plan::Instruction &inst = prog.instructions(i);
      if (!isCollectiveOp(inst.op())) continue;
      std::string what = planPath.str() + ": program '" + prog.name() + "': instruction " +
                         std::to_string(i) + " (" + inst.op() +
                         (inst.loc().empty() ? "" : " at " + inst.loc()) + ")";
      KernelCall call;
      call.instruction = &inst;
      for (uint32_t id : inst.inputs())
        if (id < static_cast<uint32_t>(prog.buffers_size())) call.inputs.push_back(viewOf(prog.buffers(id)));
      for (uint32_t id : inst.outputs())
        if (id < static_cast<uint32_t>(prog.buffers_size())) call.outputs.push_back(viewOf(prog.buffers(id)));
      const size_t wantInputs = inst.op() == "axis_index" ? 0 : 1;
      const bool bucket = (inst.op() == "all_reduce" || isChunkedOp(inst.op())) && call.inputs.size() >= 1 &&
                          call.outputs.size() >= 1 &&
                          call.inputs.size() == static_cast<size_t>(inst.inputs_size()) &&
                          call.outputs.size() == static_cast<size_t>(inst.outputs_size());
      if (!bucket && (call.inputs.size() != wantInputs || call.outputs.size() != 1))
        continue;  // reported by validatePlan
      llvm::Expected<llvm::SmallVector<int, 4>> axes = mesh->parseAxes(call.attrString("axes", ""));
      if (!axes) return fail(what + ": " + llvm::toString(axes.takeError()));
      if (llvm::Error e = checkShapes(call, inst.op(), mesh->groupSize(*axes)))
        return fail(what + ": " + llvm::toString(std::move(e)));
    }
  return llvm::Error::success();
}

}  // namespace colossal::runtime
