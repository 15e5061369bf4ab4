//===- Mesh.cpp - Named mesh axes, rank layout and axis groups -------------------------------===//
#include "colossal/runtime/Mesh.h"

#include "plan.pb.h"

#include "llvm/ADT/StringExtras.h"

namespace colossal::runtime {

namespace {
llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg.str());
}

bool validName(llvm::StringRef name) {
  if (name.empty() || !(llvm::isAlpha(name[0]) || name[0] == '_')) return false;
  for (char c : name)
    if (!(llvm::isAlnum(c) || c == '_')) return false;
  return true;
}
}  // namespace

llvm::Expected<Mesh> Mesh::create(std::vector<MeshAxis> axes) {
  Mesh m;
  for (size_t i = 0; i < axes.size(); ++i) {
    const MeshAxis &a = axes[i];
    if (!validName(a.name))
      return fail("mesh axis " + llvm::Twine(i) + ": invalid name '" + a.name +
                  "' (expected [A-Za-z_][A-Za-z0-9_]*)");
    for (size_t j = 0; j < i; ++j)
      if (axes[j].name == a.name) return fail("mesh axis '" + a.name + "' is listed twice");
    if (a.size < 1)
      return fail("mesh axis '" + a.name + "' has size " + llvm::Twine(a.size) + " (must be >= 1)");
    if (a.size > kMaxMeshRanks || m.size_ * a.size > kMaxMeshRanks)
      return fail("the mesh has more than " + llvm::Twine(kMaxMeshRanks) + " ranks");
    m.size_ *= a.size;
  }
  m.axes_ = std::move(axes);
  return m;
}

llvm::Expected<Mesh> Mesh::fromPlan(const plan::Plan &plan, llvm::StringRef planPath) {
  std::vector<MeshAxis> axes;
  for (const plan::MeshAxis &a : plan.mesh()) {
    // plan.proto's Role numbers follow AxisRole's order (ROLE_UNSPECIFIED = 0).
    int role = static_cast<int>(a.role());
    if (role < 0 || role > static_cast<int>(AxisRole::GridDepth))
      return fail(planPath + ": mesh axis '" + a.name() + "' has an unknown role " + llvm::Twine(role));
    axes.push_back({a.name(), a.size(), static_cast<AxisRole>(role)});
  }
  llvm::Expected<Mesh> m = create(std::move(axes));
  if (!m) return fail(planPath + ": " + llvm::toString(m.takeError()));
  return m;
}

int Mesh::axisIndex(llvm::StringRef name) const {
  for (size_t i = 0; i < axes_.size(); ++i)
    if (axes_[i].name == name) return static_cast<int>(i);
  return -1;
}

std::string Mesh::dataAxes() const {
  std::string names;
  for (const MeshAxis &a : axes_)
    if (a.role == AxisRole::Data) names += (names.empty() ? "" : ",") + a.name;
  return names;
}

int64_t Mesh::dataSize() const {
  int64_t n = 1;
  for (const MeshAxis &a : axes_)
    if (a.role == AxisRole::Data) n *= a.size;
  return n;
}

std::string Mesh::toString() const {
  if (axes_.empty()) return "one rank";
  std::string s;
  for (const MeshAxis &a : axes_) s += (s.empty() ? "" : " x ") + a.name + "=" + std::to_string(a.size);
  return s;
}

llvm::SmallVector<int64_t, 4> Mesh::coords(int64_t rank) const {
  llvm::SmallVector<int64_t, 4> c(axes_.size());
  for (size_t i = axes_.size(); i-- > 0;) {
    c[i] = rank % axes_[i].size;
    rank /= axes_[i].size;
  }
  return c;
}

int64_t Mesh::rankOf(llvm::ArrayRef<int64_t> coords) const {
  int64_t r = 0;
  for (size_t i = 0; i < axes_.size(); ++i) r = r * axes_[i].size + coords[i];
  return r;
}

llvm::Expected<llvm::SmallVector<int, 4>> Mesh::parseAxes(llvm::StringRef list) const {
  llvm::SmallVector<int, 4> out;
  llvm::SmallVector<llvm::StringRef, 4> names;
  list.split(names, ',');
  std::string known;
  for (const MeshAxis &a : axes_) known += (known.empty() ? "" : ", ") + a.name;
  if (known.empty()) known = "none: the mesh has one rank";
  for (llvm::StringRef n : names) {
    n = n.trim();
    if (n.empty()) return fail("empty axis name in '" + list + "'");
    int i = axisIndex(n);
    if (i < 0) return fail("unknown mesh axis '" + n + "' (the mesh's axes: " + known + ")");
    if (llvm::is_contained(out, i)) return fail("mesh axis '" + n + "' is named twice in '" + list + "'");
    out.push_back(i);
  }
  return out;
}

int64_t Mesh::groupSize(llvm::ArrayRef<int> axes) const {
  int64_t n = 1;
  for (int a : axes) n *= axes_[a].size;
  return n;
}

std::vector<int64_t> Mesh::groupRanks(int64_t rank, llvm::ArrayRef<int> axes) const {
  llvm::SmallVector<int64_t, 4> c = coords(rank);
  int64_t n = groupSize(axes);
  std::vector<int64_t> ranks(n);
  for (int64_t g = 0; g < n; ++g) {
    int64_t rest = g;
    for (size_t k = axes.size(); k-- > 0;) {
      c[axes[k]] = rest % axes_[axes[k]].size;
      rest /= axes_[axes[k]].size;
    }
    ranks[g] = rankOf(c);
  }
  return ranks;
}

int64_t Mesh::groupRank(int64_t rank, llvm::ArrayRef<int> axes) const {
  llvm::SmallVector<int64_t, 4> c = coords(rank);
  int64_t g = 0;
  for (int a : axes) g = g * axes_[a].size + c[a];
  return g;
}

int64_t Mesh::groupId(int64_t rank, llvm::ArrayRef<int> axes) const {
  llvm::SmallVector<int64_t, 4> c = coords(rank);
  int64_t id = 0;
  for (size_t i = 0; i < axes_.size(); ++i)
    if (!llvm::is_contained(axes, static_cast<int>(i))) id = id * axes_[i].size + c[i];
  return id;
}

}  // namespace colossal::runtime
