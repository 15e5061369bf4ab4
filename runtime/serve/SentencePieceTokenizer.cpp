//===- SentencePieceTokenizer.cpp - SentencePiece .model through libsentencepiece ----------===//
//
// Encoding is the library's, reached through the module of SentencePieceModule.h. Decoding is
// per token (what a stream needs): each id's bytes are computed once at load from the library's
// view of the piece — a control piece stands for nothing, a byte piece <0xHH> for its byte, the
// unknown piece for the library's decoding of it (" ⁇ " by default), any other piece for its text
// with U+2581 (▁) read as a space. The library drops the leading space of the first piece when
// the model adds a dummy prefix; the loader asks the library whether this model does, by decoding
// one piece that starts with ▁.
//
// The module is found at $COLOSSAL_SENTENCEPIECE_MODULE, else beside the executable
// (../lib/colossal/ or its own folder). Test binaries outside bin/ get the variable from ctest.
//
//===----------------------------------------------------------------------------------------===//
#include "TokenizerFormats.h"

#include "SentencePieceModule.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <cstdlib>
#include <cstring>
#include <dlfcn.h>

namespace colossal::runtime::serve {

namespace {

constexpr llvm::StringLiteral kModuleName = "libcolossal_sentencepiece.so";

struct ModuleLoad {
  const ColossalSpmApi *api = nullptr;
  std::string error;
};

/// Loads the module once per process.
const ModuleLoad &module() {
  static const ModuleLoad loaded = [] {
    ModuleLoad m;
    std::vector<std::string> candidates;
    if (const char *env = std::getenv("COLOSSAL_SENTENCEPIECE_MODULE")) candidates.push_back(env);
    static int anchor;
    const std::string exe = llvm::sys::fs::getMainExecutable(nullptr, &anchor);
    if (!exe.empty()) {
      llvm::SmallString<256> dir = llvm::sys::path::parent_path(exe);
      llvm::SmallString<256> installed = dir;
      llvm::sys::path::append(installed, "..", "lib", "colossal", kModuleName);
      candidates.push_back(installed.str().str());
      llvm::sys::path::append(dir, kModuleName);
      candidates.push_back(dir.str().str());
    }
    for (const std::string &path : candidates) {
      if (!llvm::sys::fs::exists(path)) continue;
      void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
      if (!handle) {
        m.error = std::string("cannot load ") + path + ": " + dlerror();
        return m;
      }
      using Entry = const ColossalSpmApi *(*)();
      auto entry = reinterpret_cast<Entry>(dlsym(handle, "colossal_sentencepiece_api"));
      if (!entry) {
        m.error = path + " has no colossal_sentencepiece_api";
        return m;
      }
      m.api = entry();
      return m;
    }
    m.error = "this installation has no " + kModuleName.str() +
              " (built when libsentencepiece-dev is installed; or set COLOSSAL_SENTENCEPIECE_MODULE)";
    return m;
  }();
  return loaded;
}

std::string takeString(char *s, size_t size) {
  std::string out(s, size);
  std::free(s);
  return out;
}

constexpr llvm::StringLiteral kSpaceSymbol = "\xE2\x96\x81";  // U+2581, SentencePiece's space

class SentencePieceTokenizer final : public Tokenizer {
public:
  SentencePieceTokenizer(const ColossalSpmApi &api, void *processor) : api_(api), sp_(processor) {
    const int n = api_.pieceSize(sp_);
    bytes_.resize(n);
    special_.assign(n, false);
    startsWithSpace_.assign(n, false);
    int probe = -1;
    for (int id = 0; id < n; ++id) {
      size_t size = 0;
      char *text = api_.idToPiece(sp_, id, &size);
      const std::string piece = takeString(text, size);
      switch (api_.pieceKind(sp_, id)) {
      case COLOSSAL_SPM_CONTROL: special_[id] = true; break;
      case COLOSSAL_SPM_BYTE: {
        unsigned value = 0;
        if (piece.size() == 6 && !llvm::StringRef(piece).substr(3, 2).getAsInteger(16, value))
          bytes_[id] = std::string(1, static_cast<char>(value));
        break;
      }
      case COLOSSAL_SPM_UNKNOWN: bytes_[id] = libraryDecode({id}); break;
      default:
        startsWithSpace_[id] = llvm::StringRef(piece).starts_with(kSpaceSymbol);
        if (startsWithSpace_[id] && probe < 0) probe = id;
        bytes_[id] = llvm::StringRef(piece).str();
        for (size_t pos; (pos = bytes_[id].find(kSpaceSymbol.data())) != std::string::npos;)
          bytes_[id].replace(pos, kSpaceSymbol.size(), " ");
      }
    }
    dropsDummyPrefix_ = probe >= 0 && !llvm::StringRef(libraryDecode({probe})).starts_with(" ");
  }
  ~SentencePieceTokenizer() override { api_.destroy(sp_); }

  TokenizerFormat format() const override { return TokenizerFormat::SentencePiece; }
  int32_t vocabSize() const override { return static_cast<int32_t>(bytes_.size()); }
  TokenId bosId() const override { return api_.bosId(sp_); }
  TokenId eosId() const override { return api_.eosId(sp_); }
  bool isSpecial(TokenId id) const override { return id >= 0 && id < vocabSize() && special_[id]; }

  void appendTokenBytes(TokenId id, bool atStart, std::string &out) const override {
    if (id < 0 || id >= vocabSize() || special_[id]) return;
    llvm::StringRef text = bytes_[id];
    if (atStart && dropsDummyPrefix_ && startsWithSpace_[id]) text = text.drop_front();
    out.append(text.data(), text.size());
  }

  llvm::Expected<std::vector<TokenId>> encode(llvm::StringRef text, bool addBos) const override {
    size_t count = 0;
    char *error = nullptr;
    int *ids = api_.encode(sp_, text.data(), text.size(), &count, &error);
    if (!ids)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "SentencePiece cannot encode the text: " + takeString(error, std::strlen(error)));
    std::vector<TokenId> out;
    out.reserve(count + 1);
    if (addBos && bosId() >= 0) out.push_back(bosId());
    out.insert(out.end(), ids, ids + count);
    std::free(ids);
    return out;
  }

private:
  std::string libraryDecode(std::vector<int> ids) const {
    size_t size = 0;
    char *text = api_.decodeIds(sp_, ids.data(), ids.size(), &size);
    return takeString(text, size);
  }

  const ColossalSpmApi &api_;
  void *sp_;
  std::vector<std::string> bytes_;
  std::vector<bool> special_, startsWithSpace_;
  bool dropsDummyPrefix_ = false;
};

}  // namespace

llvm::Expected<std::unique_ptr<Tokenizer>> loadSentencePieceTokenizer(llvm::StringRef path, llvm::StringRef contents) {
  const ModuleLoad &m = module();
  if (!m.api)
    return tokenizerError(path, "not a llama2.c tokenizer.bin or a tokenizer.json, and SentencePiece is not "
                                "available to read it as a .model: " + m.error);
  char *error = nullptr;
  void *processor = m.api->load(contents.data(), contents.size(), &error);
  if (!processor)
    return tokenizerError(path, "not a llama2.c tokenizer.bin, a tokenizer.json or a SentencePiece model "
                                "(SentencePiece: " + takeString(error, std::strlen(error)) + ")");
  if (m.api->pieceSize(processor) <= 0) {
    m.api->destroy(processor);
    return tokenizerError(path, "SentencePiece model without pieces");
  }
  return std::make_unique<SentencePieceTokenizer>(*m.api, processor);
}

}  // namespace colossal::runtime::serve
