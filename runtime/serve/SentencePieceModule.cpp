//===- SentencePieceModule.cpp - libsentencepiece behind a C interface ----------------------===//
//
// Built as libcolossal_sentencepiece.so and loaded by SentencePieceTokenizer.cpp (see
// SentencePieceModule.h for why it is a module of its own).
//
//===----------------------------------------------------------------------------------------===//
#include "SentencePieceModule.h"

#include <sentencepiece_processor.h>

#include <cstdlib>
#include <cstring>
#include <memory>

namespace {

using sentencepiece::SentencePieceProcessor;

SentencePieceProcessor &sp(void *p) { return *static_cast<SentencePieceProcessor *>(p); }

char *copyString(const std::string &s, size_t *size) {
  char *out = static_cast<char *>(std::malloc(s.size() + 1));
  std::memcpy(out, s.data(), s.size());
  out[s.size()] = '\0';
  if (size) *size = s.size();
  return out;
}

void *load(const char *data, size_t size, char **error) {
  auto processor = std::make_unique<SentencePieceProcessor>();
  const auto status = processor->LoadFromSerializedProto(std::string_view(data, size));
  if (!status.ok()) {
    *error = copyString(status.ToString(), nullptr);
    return nullptr;
  }
  return processor.release();
}

void destroy(void *p) { delete static_cast<SentencePieceProcessor *>(p); }
int pieceSize(void *p) { return sp(p).GetPieceSize(); }
int bosId(void *p) { return sp(p).bos_id(); }
int eosId(void *p) { return sp(p).eos_id(); }

int pieceKind(void *p, int id) {
  if (sp(p).IsControl(id)) return COLOSSAL_SPM_CONTROL;
  if (sp(p).IsByte(id)) return COLOSSAL_SPM_BYTE;
  if (sp(p).IsUnknown(id)) return COLOSSAL_SPM_UNKNOWN;
  return COLOSSAL_SPM_NORMAL;
}

char *idToPiece(void *p, int id, size_t *size) { return copyString(sp(p).IdToPiece(id), size); }

char *decodeIds(void *p, const int *ids, size_t count, size_t *size) {
  return copyString(sp(p).DecodeIds(std::vector<int>(ids, ids + count)), size);
}

int *encode(void *p, const char *text, size_t size, size_t *count, char **error) {
  std::vector<int> ids;
  const auto status = sp(p).Encode(std::string_view(text, size), &ids);
  if (!status.ok()) {
    *error = copyString(status.ToString(), nullptr);
    return nullptr;
  }
  int *out = static_cast<int *>(std::malloc(sizeof(int) * (ids.size() + 1)));
  std::memcpy(out, ids.data(), sizeof(int) * ids.size());
  *count = ids.size();
  return out;
}

const ColossalSpmApi kApi = {load, destroy, pieceSize, bosId, eosId, pieceKind, idToPiece, decodeIds, encode};

}  // namespace

extern "C" __attribute__((visibility("default"))) const ColossalSpmApi *colossal_sentencepiece_api(void) {
  return &kApi;
}
