//===- ShardingTest.cpp - local shapes, slicing and assembling sharded tensors --------------===//
//
// sliceShard / placeShard / assembleShards against a naive reference written the other way
// round: for every GLOBAL element, the owner chunk of each dim is computed from the doc's
// definition (block b = i / (n/k), owner r = (i % (n/k)) / m, local j = b·m + (i % (n/k)) % m),
// and the element must appear at local index j on exactly the ranks whose group rank is r.
//
//===----------------------------------------------------------------------------------------===//
#include "colossal/runtime/Sharding.h"

#include "plan.pb.h"

#include <gtest/gtest.h>

#include <numeric>

using namespace colossal::runtime;
namespace plan = colossal::plan;

namespace {

Mesh makeMesh(std::vector<MeshAxis> axes) {
  auto m = Mesh::create(std::move(axes));
  EXPECT_TRUE(static_cast<bool>(m));
  return std::move(*m);
}

plan::Sharding makeSharding(std::vector<int64_t> global, std::vector<std::vector<std::string>> axes,
                            std::vector<int64_t> blocks = {}) {
  plan::Sharding s;
  for (size_t d = 0; d < global.size(); ++d) {
    s.add_global_shape(global[d]);
    plan::DimSharding *ds = s.add_dims();
    for (const std::string &a : axes[d]) ds->add_axes(a);
    if (!blocks.empty()) ds->set_blocks(blocks[d]);
  }
  return s;
}

/// The naive reference: rank's shard built element by element from the global tensor.
std::vector<int32_t> naiveShard(const std::vector<int32_t> &global, const ShardLayout &layout, const Mesh &mesh,
                                int64_t rank) {
  Shape gs = layout.globalShape, ls = localShape(layout, mesh);
  std::vector<int32_t> local(numElements(ls), -1);
  const size_t R = gs.size();
  std::vector<int64_t> idx(R, 0);
  for (int64_t flat = 0; flat < numElements(gs); ++flat) {
    // Unflatten the global index.
    int64_t rest = flat;
    for (size_t d = R; d-- > 0;) {
      idx[d] = rest % gs[d];
      rest /= gs[d];
    }
    bool mine = true;
    int64_t lflat = 0;
    for (size_t d = 0; d < R; ++d) {
      const DimShard &ds = layout.dims[d];
      int64_t n = gs[d], k = ds.blocks, p = mesh.groupSize(ds.axes), m = n / (k * p);
      // Group rank of `rank` over the dim's axes, computed from the coordinates directly.
      llvm::SmallVector<int64_t, 4> c = mesh.coords(rank);
      int64_t r = 0;
      for (int a : ds.axes) r = r * mesh.axes()[a].size + c[a];
      int64_t b = idx[d] / (n / k), within = idx[d] % (n / k);
      if (within / m != r) {
        mine = false;
        break;
      }
      lflat = lflat * ls[d] + b * m + within % m;
    }
    if (mine) local[lflat] = global[flat];
  }
  return local;
}

std::vector<int32_t> iota(int64_t n) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

/// Every rank's slice equals the naive one, covers every local element, and the slices put
/// back (placeShard one by one, and assembleShards) rebuild the global tensor.
void checkAllRanks(const Mesh &mesh, const plan::Sharding &s) {
  auto layout = makeShardLayout(s, mesh, "t");
  ASSERT_TRUE(static_cast<bool>(layout)) << llvm::toString(layout.takeError());
  std::vector<int32_t> global = iota(numElements(layout->globalShape));
  Shape ls = localShape(*layout, mesh);
  const int64_t localN = numElements(ls);
  std::vector<int32_t> all(localN * mesh.size());
  std::vector<int32_t> placed(global.size(), -7);
  for (int64_t r = 0; r < mesh.size(); ++r) {
    std::vector<int32_t> local(localN, -1);
    sliceShard(global.data(), local.data(), sizeof(int32_t), *layout, mesh, r);
    std::vector<int32_t> want = naiveShard(global, *layout, mesh, r);
    EXPECT_EQ(local, want) << "rank " << r;
    for (int32_t v : want) EXPECT_GE(v, 0) << "rank " << r << ": a local element no global element maps to";
    std::copy(local.begin(), local.end(), all.begin() + r * localN);
    placeShard(local.data(), placed.data(), sizeof(int32_t), *layout, mesh, r);
  }
  EXPECT_EQ(placed, global);
  std::vector<int32_t> assembled(global.size(), -7);
  assembleShards(all.data(), assembled.data(), sizeof(int32_t), *layout, mesh);
  EXPECT_EQ(assembled, global);
}

TEST(Sharding, ColumnSplitOnTp) {
  Mesh mesh = makeMesh({{"tp", 2}});
  plan::Sharding s = makeSharding({3, 4}, {{}, {"tp"}});
  auto layout = makeShardLayout(s, mesh, "w");
  ASSERT_TRUE(static_cast<bool>(layout));
  EXPECT_EQ(localShape(*layout, mesh), (Shape{3, 2}));
  // Written out: rank 1 holds columns 2 and 3.
  std::vector<int32_t> global = iota(12), local(6);
  sliceShard(global.data(), local.data(), 4, *layout, mesh, 1);
  EXPECT_EQ(local, (std::vector<int32_t>{2, 3, 6, 7, 10, 11}));
  checkAllRanks(mesh, s);
}

TEST(Sharding, FusedQkvThreeBlocks) {
  // [d=2, 3d=12] with blocks 3 over tp=2: each rank holds half of each of q, k and v.
  Mesh mesh = makeMesh({{"tp", 2}});
  plan::Sharding s = makeSharding({2, 12}, {{}, {"tp"}}, {0, 3});
  auto layout = makeShardLayout(s, mesh, "qkv");
  ASSERT_TRUE(static_cast<bool>(layout));
  EXPECT_EQ(localShape(*layout, mesh), (Shape{2, 6}));
  std::vector<int32_t> global = iota(24), local(12);
  sliceShard(global.data(), local.data(), 4, *layout, mesh, 1);
  EXPECT_EQ(local, (std::vector<int32_t>{2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23}));
  checkAllRanks(mesh, s);
  checkAllRanks(makeMesh({{"tp", 3}}), makeSharding({2, 18}, {{}, {"tp"}}, {0, 3}));
}

TEST(Sharding, TwoSplitDimsAndReplicas) {
  // dp=2 x row=2 x col=3: dim 0 over row, dim 2 over col, replicated over dp.
  Mesh mesh = makeMesh({{"dp", 2}, {"row", 2}, {"col", 3}});
  checkAllRanks(mesh, makeSharding({4, 5, 6}, {{"row"}, {}, {"col"}}));
  checkAllRanks(mesh, makeSharding({4, 5, 12}, {{"row"}, {}, {"col"}}, {1, 1, 2}));
  // A 1-D and a scalar-free 4-D case.
  checkAllRanks(mesh, makeSharding({12}, {{"col", "row"}}));
  checkAllRanks(mesh, makeSharding({2, 6, 3, 4}, {{"dp"}, {"col"}, {}, {"row"}}));
}

TEST(Sharding, AxesOrderMajorToMinor) {
  Mesh mesh = makeMesh({{"a", 2}, {"b", 2}});
  // Rank 1 = (a=0, b=1). Over [a, b] its group rank is 0·2 + 1 = 1; over [b, a] it is 1·2 + 0 = 2.
  std::vector<int32_t> global = iota(8), local(2);
  auto ab = makeShardLayout(makeSharding({8}, {{"a", "b"}}), mesh, "t");
  auto ba = makeShardLayout(makeSharding({8}, {{"b", "a"}}), mesh, "t");
  ASSERT_TRUE(ab && ba);
  sliceShard(global.data(), local.data(), 4, *ab, mesh, 1);
  EXPECT_EQ(local, (std::vector<int32_t>{2, 3}));
  sliceShard(global.data(), local.data(), 4, *ba, mesh, 1);
  EXPECT_EQ(local, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(shardIndex(*ba, mesh, 1), (llvm::SmallVector<int64_t, 6>{2}));
  checkAllRanks(mesh, makeSharding({8, 2}, {{"a", "b"}, {}}));
  checkAllRanks(mesh, makeSharding({8, 2}, {{"b", "a"}, {}}));
  checkAllRanks(mesh, makeSharding({4, 6}, {{"b"}, {"a"}}, {1, 3}));
}

TEST(Sharding, Bf16ElementsAndScalars) {
  Mesh mesh = makeMesh({{"tp", 2}});
  auto layout = makeShardLayout(makeSharding({2, 4}, {{}, {"tp"}}), mesh, "t");
  ASSERT_TRUE(static_cast<bool>(layout));
  std::vector<uint16_t> global(8), local(4);
  std::iota(global.begin(), global.end(), 100);
  sliceShard(global.data(), local.data(), 2, *layout, mesh, 0);
  EXPECT_EQ(local, (std::vector<uint16_t>{100, 101, 104, 105}));
  auto scalar = makeShardLayout(makeSharding({}, {}), mesh, "s");
  ASSERT_TRUE(static_cast<bool>(scalar));
  float g = 3.5f, l = 0;
  sliceShard(&g, &l, 4, *scalar, mesh, 1);
  EXPECT_EQ(l, 3.5f);
  EXPECT_FALSE(scalar->splits(mesh));
  EXPECT_TRUE(layout->splits(mesh));
}

TEST(Sharding, Errors) {
  Mesh mesh = makeMesh({{"dp", 2}, {"tp", 2}});
  auto err = [&](const plan::Sharding &s) {
    auto l = makeShardLayout(s, mesh, "state 'w'");
    EXPECT_FALSE(static_cast<bool>(l));
    return l ? std::string() : llvm::toString(l.takeError());
  };
  EXPECT_EQ(err(makeSharding({4, 6}, {{}, {"xx"}})),
            "state 'w': sharding dim 1 names mesh axis 'xx', which is not on the plan's mesh (its axes: dp, tp)");
  EXPECT_EQ(err(makeSharding({4, 6}, {{"tp"}, {"tp"}})), "state 'w': sharding names mesh axis 'tp' twice");
  EXPECT_EQ(err(makeSharding({4, 5}, {{}, {"tp"}})),
            "state 'w': global dim 1 of size 5 is not divisible by group size 2 of its mesh axes");
  EXPECT_EQ(err(makeSharding({4, 8}, {{}, {"tp"}}, {0, 3})),
            "state 'w': global dim 1 of size 8 is not divisible by 3 blocks x group size 2 of its mesh axes");
  plan::Sharding s = makeSharding({4, 6}, {{}, {"tp"}});
  s.add_global_shape(2);
  EXPECT_EQ(err(s), "state 'w': sharding has 2 dims but its global_shape [4, 6, 2] has rank 3");
  EXPECT_EQ(err(makeSharding({4, 6}, {{}, {"tp"}}, {0, -1})),
            "state 'w': sharding dim 1 has blocks -1 (expected >= 0)");
}

}  // namespace
