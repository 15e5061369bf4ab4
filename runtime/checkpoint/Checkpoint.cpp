//===- Checkpoint.cpp - Training checkpoints: save, find, load ------------------------------===//
#include "colossal/runtime/Checkpoint.h"

#include "colossal/runtime/Communicator.h"
#include "colossal/runtime/NonFinite.h"
#include "colossal/runtime/Safetensors.h"
#include "colossal/runtime/Sharding.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <algorithm>
#include <map>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

namespace colossal::runtime {

namespace {

constexpr llvm::StringLiteral kFormat = "colossal-checkpoint";
constexpr int64_t kFormatVersion = 1;
constexpr llvm::StringLiteral kManifest = "manifest.json";
constexpr llvm::StringLiteral kModelFile = "model.safetensors";
constexpr llvm::StringLiteral kOptimizerFile = "optimizer.safetensors";

llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg.str());
}

std::string joinPath(llvm::StringRef a, llvm::StringRef b) {
  llvm::SmallString<256> p(a);
  llvm::sys::path::append(p, b);
  return std::string(p);
}

std::string stepFolderName(int64_t step) {
  std::string digits = std::to_string(step);
  if (digits.size() < 8) digits.insert(0, 8 - digits.size(), '0');
  return "step-" + digits;
}

/// The step of a folder named step-<digits>, or -1.
int64_t stepOfFolderName(llvm::StringRef name) {
  if (!name.consume_front("step-") || name.empty() || !llvm::all_of(name, llvm::isDigit)) return -1;
  int64_t step;
  return name.getAsInteger(10, step) ? -1 : step;
}

/// fsync of a file or folder, so that a rename that follows never exposes unwritten bytes.
llvm::Error syncPath(llvm::StringRef path) {
  int fd = ::open(path.str().c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail(path + ": cannot open to fsync: " + std::strerror(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return fail(path + ": fsync failed: " + std::strerror(err));
  return llvm::Error::success();
}

llvm::StringRef roleName(plan::StateTensor::Role role) {
  switch (role) {
  case plan::StateTensor::PARAM: return "param";
  case plan::StateTensor::GRAD: return "grad";
  case plan::StateTensor::OPTIMIZER: return "optimizer";
  default: return "invalid";
  }
}

/// The file a state is saved in, or "" for states that are not saved (GRAD).
llvm::StringRef fileOfRole(plan::StateTensor::Role role) {
  if (role == plan::StateTensor::PARAM) return kModelFile;
  if (role == plan::StateTensor::OPTIMIZER) return kOptimizerFile;
  return "";
}

/// Host-readable bytes of a state: the device memory itself on the CPU, else a copy in `staging`.
const void *hostBytes(const StateStore &store, const StateEntry &e, std::vector<AlignedBuffer> &staging) {
  if (store.device().kind() == DeviceKind::CPU) return e.tensor.data;
  staging.emplace_back(e.tensor.bytes());
  store.device().copyToHost(staging.back().data(), e.tensor.data, e.tensor.bytes());
  return staging.back().data();
}

/// Writes `text` to `path` through a temporary file, fsync and rename (a reader sees the old or
/// the new content, never a mix).
llvm::Error writeSmallFileDurably(llvm::StringRef path, llvm::StringRef text) {
  std::string tmp = (path + ".tmp-" + llvm::Twine(llvm::sys::Process::getProcessId())).str();
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(tmp, ec, llvm::sys::fs::OF_None);
    if (ec) return fail(tmp + ": cannot create: " + ec.message());
    os << text;
    os.close();
    if (os.has_error()) {
      std::error_code werr = os.error();
      os.clear_error();
      llvm::sys::fs::remove(tmp);
      return fail(tmp + ": write failed: " + werr.message());
    }
  }
  if (llvm::Error e = syncPath(tmp)) return e;
  if (std::error_code ec = llvm::sys::fs::rename(tmp, path)) {
    llvm::sys::fs::remove(tmp);
    return fail(path + ": cannot rename " + tmp + " over it: " + ec.message());
  }
  return llvm::Error::success();
}

std::string hex16(uint64_t v) {
  std::string s = llvm::utohexstr(v, /*LowerCase=*/true);
  return std::string(16 - std::min<size_t>(16, s.size()), '0') + s;
}

}  // namespace

llvm::Expected<AlignedBuffer> gatherState(const StateStore &store, const StateEntry &e, CommContext *comm) {
  if (!e.layout) {
    AlignedBuffer out(e.tensor.bytes());
    store.device().copyToHost(out.data(), e.tensor.data, e.tensor.bytes());
    return out;
  }
  const Mesh &mesh = store.mesh();
  if (!comm || comm->worldSize() != mesh.size())
    return fail("state '" + e.name() + "' is sharded over the mesh " + mesh.toString() +
                ": gathering it needs the job's communicator on all " + llvm::Twine(mesh.size()) + " ranks");
  const size_t localBytes = e.tensor.bytes();
  AlignedBuffer local(localBytes), all(localBytes * static_cast<size_t>(mesh.size()));
  store.device().copyToHost(local.data(), e.tensor.data, localBytes);
  // Bytes travel as u8: any dtype, no reduction.
  if (llvm::Error err = comm->world().allGather(local.data(), all.data(), {static_cast<int64_t>(localBytes)}, 0, DType::U8))
    return fail("state '" + e.name() + "': gathering its shards: " + llvm::toString(std::move(err)));
  AlignedBuffer global(static_cast<size_t>(numElements(e.globalShape())) * dtypeSize(e.tensor.dtype));
  assembleShards(all.data(), global.data(), dtypeSize(e.tensor.dtype), *e.layout, mesh);
  return global;
}

llvm::Expected<std::string> saveCheckpoint(llvm::StringRef dir, const StateStore &store, const CheckpointInfo &info,
                                           unsigned keep, CommContext *comm) {
  if (keep < 1) keep = 1;
  // Never from a non-finite state (every rank checks its part; all agree on the first such tensor).
  llvm::Expected<std::optional<NonFiniteState>> bad =
      findNonFiniteState(store, {plan::StateTensor::PARAM, plan::StateTensor::OPTIMIZER}, comm);
  if (!bad) return bad.takeError();
  if (*bad)
    return llvm::make_error<NonFiniteError>(describeNonFinite(**bad) + " is not finite, so no checkpoint was written to " +
                                            dir.str());
  // Whole tensors first (a collective for sharded states: every rank takes part), then rank 0
  // alone touches the file system.
  std::vector<AlignedBuffer> staging;
  std::map<std::string, AlignedBuffer> whole;  // sharded states, gathered
  for (const StateEntry &e : store.entries()) {
    if (fileOfRole(e.role()).empty() || !e.layout) continue;
    llvm::Expected<AlignedBuffer> g = gatherState(store, e, comm);
    if (!g) return g.takeError();
    whole[e.name()] = std::move(*g);
  }
  const std::string name = stepFolderName(info.step);
  const std::string tmp = joinPath(dir, name + ".tmp"), final = joinPath(dir, name);
  if (comm && comm->rank() != 0) return final;
  if (std::error_code ec = llvm::sys::fs::create_directories(dir))
    return fail(dir + ": cannot create checkpoint folder: " + ec.message());
  if (llvm::sys::fs::exists(tmp)) llvm::sys::fs::remove_directories(tmp);  // an interrupted save's
  if (std::error_code ec = llvm::sys::fs::create_directory(tmp))
    return fail(tmp + ": cannot create: " + ec.message());

  // Tensors, grouped by file, in the plan's order, at their global shapes.
  std::map<std::string, std::vector<NamedTensor>> files = {{kModelFile.str(), {}}, {kOptimizerFile.str(), {}}};
  for (const StateEntry &e : store.entries()) {
    llvm::StringRef file = fileOfRole(e.role());
    if (file.empty()) continue;
    Shape shape = e.globalShape();
    auto it = whole.find(e.name());
    files[file.str()].push_back({e.name(), e.tensor.dtype, std::vector<int64_t>(shape.begin(), shape.end()),
                                 it != whole.end() ? it->second.data() : hostBytes(store, e, staging),
                                 it != whole.end() ? it->second.size() : e.tensor.bytes()});
  }
  llvm::json::Object fileInfo;
  for (auto &[file, tensors] : files) {
    std::string path = joinPath(tmp, file);
    if (llvm::Error e = writeSafetensors(path, tensors, {{"format", "pt"}})) return std::move(e);
    if (llvm::Error e = syncPath(path)) return std::move(e);
    uint64_t bytes = 0;
    if (std::error_code ec = llvm::sys::fs::file_size(path, bytes)) return fail(path + ": " + ec.message());
    llvm::Expected<uint64_t> hash = fnv1a64File(path);
    if (!hash) return hash.takeError();
    fileInfo[file] = llvm::json::Object{{"bytes", static_cast<int64_t>(bytes)}, {"fnv1a64", hex16(*hash)}};
  }

  llvm::json::Object tensors;
  for (const StateEntry &e : store.entries()) {
    llvm::StringRef file = fileOfRole(e.role());
    if (file.empty()) continue;
    llvm::json::Array shape;
    for (int64_t d : e.globalShape()) shape.push_back(d);
    tensors[e.name()] = llvm::json::Object{{"file", file},
                                           {"role", roleName(e.role())},
                                           {"dtype", safetensorsDTypeName(e.tensor.dtype)},
                                           {"shape", std::move(shape)}};
  }
  llvm::json::Object mesh;
  for (const auto &[axis, size] : info.mesh) mesh[axis] = size;
  llvm::json::Object manifest{{"format", kFormat},
                              {"version", kFormatVersion},
                              {"step", info.step},
                              {"data_position", info.dataPosition},
                              {"seed", hex16(info.seed)},
                              {"spec_hash", hex16(info.specHash)},
                              {"mesh", std::move(mesh)},
                              {"skipped_total", info.skippedTotal},
                              {"files", std::move(fileInfo)},
                              {"tensors", std::move(tensors)}};
  if (info.lossScale > 0) {
    manifest["loss_scale"] = info.lossScale;
    manifest["loss_scale_growth_tracker"] = info.lossScaleGrowthTracker;
  }
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(manifest))) << "\n";
  if (llvm::Error e = writeSmallFileDurably(joinPath(tmp, kManifest), os.str())) return std::move(e);
  if (llvm::Error e = syncPath(tmp)) return std::move(e);

  // Publish: step-N.tmp -> step-N (an older folder of the same step, from an earlier run, is moved
  // aside first and removed at the end), then latest.
  std::string aside;
  if (llvm::sys::fs::exists(final)) {
    aside = final + ".old-" + std::to_string(llvm::sys::Process::getProcessId());
    if (std::error_code ec = llvm::sys::fs::rename(final, aside))
      return fail(final + ": cannot move the existing folder aside: " + ec.message());
  }
  if (std::error_code ec = llvm::sys::fs::rename(tmp, final))
    return fail(final + ": cannot rename " + tmp + " to it: " + ec.message());
  if (llvm::Error e = syncPath(dir)) return std::move(e);
  if (llvm::Error e = writeSmallFileDurably(joinPath(dir, "latest"), name + "\n")) return std::move(e);
  if (llvm::Error e = syncPath(dir)) return std::move(e);

  // Prune: keep this step and the newest keep-1 others; drop leftovers of interrupted saves.
  std::vector<std::pair<int64_t, std::string>> steps;
  std::vector<std::string> leftovers;
  if (!aside.empty()) leftovers.push_back(aside);
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(dir, ec), end; it != end && !ec; it.increment(ec)) {
    llvm::StringRef base = llvm::sys::path::filename(it->path());
    int64_t s = stepOfFolderName(base);
    if (s >= 0 && s != info.step) steps.push_back({s, it->path()});
    else if (base.starts_with("step-") && (base.ends_with(".tmp") || base.contains(".old-")) &&
             it->path() != aside)
      leftovers.push_back(it->path());
  }
  std::sort(steps.rbegin(), steps.rend());
  for (size_t i = keep - 1; i < steps.size(); ++i) leftovers.push_back(steps[i].second);
  for (const std::string &p : leftovers) llvm::sys::fs::remove_directories(p);
  return final;
}

llvm::Expected<std::string> checkpointStepDir(llvm::StringRef dir) {
  if (!llvm::sys::fs::is_directory(dir)) return fail(dir + ": no such checkpoint folder");
  if (llvm::sys::fs::exists(joinPath(dir, kManifest))) return dir.str();
  std::string latest = joinPath(dir, "latest");
  auto buf = llvm::MemoryBuffer::getFile(latest, /*IsText=*/true);
  if (!buf)
    return fail(dir + ": not a checkpoint (no " + kManifest + ") and no readable 'latest' file: " +
                buf.getError().message());
  llvm::StringRef line = (*buf)->getBuffer().trim();
  if (line.empty() || line.contains('/') || line.contains('\n') || line == "." || line == "..")
    return fail(latest + ": expected one line naming a step folder, got '" + line + "'");
  std::string step = joinPath(dir, line);
  if (!llvm::sys::fs::exists(joinPath(step, kManifest)))
    return fail(latest + ": names '" + line + "', which holds no " + kManifest);
  return step;
}

llvm::Expected<CheckpointInfo> loadCheckpoint(llvm::StringRef dir, StateStore &store, bool allowNonFinite) {
  llvm::Expected<std::string> stepDir = checkpointStepDir(dir);
  if (!stepDir) return stepDir.takeError();
  std::string manifestPath = joinPath(*stepDir, kManifest);
  auto buf = llvm::MemoryBuffer::getFile(manifestPath, /*IsText=*/true);
  if (!buf) return fail(manifestPath + ": cannot read: " + buf.getError().message());
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse((*buf)->getBuffer());
  if (!parsed) return fail(manifestPath + ": malformed JSON (truncated or corrupt): " + llvm::toString(parsed.takeError()));
  const llvm::json::Object *m = parsed->getAsObject();
  if (!m) return fail(manifestPath + ": not a JSON object");
  if (m->getString("format") != kFormat)
    return fail(manifestPath + ": \"format\" is not \"" + kFormat + "\"");
  if (m->getInteger("version") != kFormatVersion)
    return fail(manifestPath + ": checkpoint format version " +
                (m->getInteger("version") ? llvm::Twine(*m->getInteger("version")).str() : std::string("missing")) +
                ", this runtime reads version " + llvm::Twine(kFormatVersion));
  CheckpointInfo info;
  std::optional<int64_t> step = m->getInteger("step"), pos = m->getInteger("data_position");
  if (!step || *step < 0) return fail(manifestPath + ": missing or negative \"step\"");
  if (!pos || *pos < 0) return fail(manifestPath + ": missing or negative \"data_position\"");
  info.step = *step;
  info.dataPosition = *pos;
  if (const llvm::json::Value *skipped = m->get("skipped_total")) {
    std::optional<int64_t> n = skipped->getAsInteger();
    if (!n || *n < 0 || *n > info.step)
      return fail(manifestPath + ": \"skipped_total\" must be an integer in [0, step " + llvm::Twine(info.step) + "]");
    info.skippedTotal = *n;
  }
  if (const llvm::json::Value *scale = m->get("loss_scale")) {
    std::optional<double> v = scale->getAsNumber();
    if (!v || !(*v > 0) || !std::isfinite(*v))
      return fail(manifestPath + ": \"loss_scale\" must be a finite number > 0");
    info.lossScale = *v;
    std::optional<int64_t> t = m->getInteger("loss_scale_growth_tracker");
    if (!t || *t < 0)
      return fail(manifestPath + ": \"loss_scale_growth_tracker\" must be an integer >= 0 (with \"loss_scale\")");
    info.lossScaleGrowthTracker = *t;
  }
  auto readHex = [&](llvm::StringRef key, uint64_t &out) -> llvm::Error {
    std::optional<llvm::StringRef> s = m->getString(key);
    if (!s || s->getAsInteger(16, out)) return fail(manifestPath + ": missing or malformed \"" + key + "\"");
    return llvm::Error::success();
  };
  if (llvm::Error e = readHex("seed", info.seed)) return std::move(e);
  if (llvm::Error e = readHex("spec_hash", info.specHash)) return std::move(e);
  if (const llvm::json::Value *meshValue = m->get("mesh")) {
    const llvm::json::Object *mesh = meshValue->getAsObject();
    if (!mesh) return fail(manifestPath + ": \"mesh\" is not an object of axis sizes");
    for (const auto &kv : *mesh) {
      std::optional<int64_t> size = kv.second.getAsInteger();
      if (!size || *size < 1)
        return fail(manifestPath + ": \"mesh\" axis '" + kv.first.str() + "' has no positive integer size");
      info.mesh.emplace_back(kv.first.str(), *size);
    }
    std::sort(info.mesh.begin(), info.mesh.end());
  }

  // Files: size and hash first, so that a truncated or bit-flipped file is named as such.
  const llvm::json::Object *files = m->getObject("files");
  if (!files) return fail(manifestPath + ": missing \"files\"");
  std::map<std::string, std::unique_ptr<SafetensorsFile>> opened;
  for (llvm::StringRef file : {kModelFile, kOptimizerFile}) {
    std::string path = joinPath(*stepDir, file);
    const llvm::json::Object *fi = files->getObject(file);
    std::optional<int64_t> bytes = fi ? fi->getInteger("bytes") : std::nullopt;
    std::optional<llvm::StringRef> hashText = fi ? fi->getString("fnv1a64") : std::nullopt;
    uint64_t want = 0;
    if (!bytes || !hashText || hashText->getAsInteger(16, want))
      return fail(manifestPath + ": missing or malformed entry for " + file + " in \"files\"");
    uint64_t size = 0;
    if (std::error_code ec = llvm::sys::fs::file_size(path, size))
      return fail(path + ": cannot open checkpoint file: " + ec.message());
    if (size != static_cast<uint64_t>(*bytes))
      return fail(path + ": " + llvm::Twine(size) + " bytes, the manifest records " + llvm::Twine(*bytes) +
                  " (truncated or corrupt checkpoint file)");
    llvm::Expected<uint64_t> hash = fnv1a64File(path);
    if (!hash) return hash.takeError();
    if (*hash != want)
      return fail(path + ": FNV-1a hash " + hex16(*hash) + " differs from " + hex16(want) +
                  " recorded in the manifest (corrupt checkpoint file)");
    auto st = SafetensorsFile::open(path);
    if (!st) return st.takeError();
    opened[file.str()] = std::move(*st);
  }

  // Tensors: exactly the saved states of the plan, with its dtypes and shapes.
  std::vector<std::pair<const StateEntry *, const SafetensorsTensor *>> copies;
  size_t expected[2] = {0, 0};
  for (const StateEntry &e : store.entries()) {
    llvm::StringRef file = fileOfRole(e.role());
    if (file.empty()) continue;
    ++expected[file == kModelFile ? 0 : 1];
    const SafetensorsFile &sf = *opened[file.str()];
    const SafetensorsTensor *t = sf.find(e.name());
    if (!t)
      return fail(sf.path() + ": no tensor '" + e.name() + "' (" + roleName(e.role()) + " state of " +
                  store.plan().path + "): the checkpoint belongs to another plan");
    Shape shape = e.globalShape();  // checkpoints hold whole tensors
    if (t->dtype != e.tensor.dtype || llvm::ArrayRef<int64_t>(t->shape) != llvm::ArrayRef<int64_t>(shape))
      return fail(sf.path() + ": tensor '" + e.name() + "' is " + dtypeName(t->dtype) + " " + shapeToString(t->shape) +
                  ", the plan " + store.plan().path + " has " + dtypeName(e.tensor.dtype) + " " +
                  shapeToString(shape));
    if (!allowNonFinite) {
      int64_t at = firstNonFiniteElement(t->dtype, t->data, numElements(t->shape));
      if (at >= 0)
        return llvm::make_error<NonFiniteError>(
            sf.path() + ": tensor '" + e.name() + "' is not finite (element " + std::to_string(at) + ": " +
            nonFiniteText(t->dtype, t->data, at) +
            "): the checkpoint was saved from a diverged state; pass --allow-nonfinite-checkpoint to load it anyway");
    }
    copies.push_back({&e, t});
  }
  for (auto &[file, sf] : opened) {
    if (sf->tensors().size() == expected[file == kModelFile ? 0 : 1]) continue;
    for (const SafetensorsTensor &t : sf->tensors()) {
      const StateEntry *e = store.find(t.name);
      if (!e || fileOfRole(e->role()) != file)
        return fail(sf->path() + ": tensor '" + t.name + "' is not " +
                    (file == kModelFile ? "a PARAM" : "an OPTIMIZER") + " state of " + store.plan().path +
                    ": the checkpoint belongs to another plan");
    }
  }
  for (auto &[e, t] : copies)
    if (llvm::Error err = store.writeGlobal(e->name(), t->data, t->size_bytes)) return std::move(err);
  store.zero(plan::StateTensor::GRAD);
  return info;
}

}  // namespace colossal::runtime
