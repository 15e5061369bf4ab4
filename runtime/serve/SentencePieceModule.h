//===- SentencePieceModule.h - The C interface of the SentencePiece module -----*- C++ -*-===//
//
// libsentencepiece (Debian 0.1.97) carries its own copy of protobuf 3.14 with exported symbols;
// in a process that also holds the system protobuf (the plan's, 3.21), its calls bind to that one
// and its version check aborts. So the library is wrapped in a module of its own
// (libcolossal_sentencepiece.so, SentencePieceModule.cpp) that the runtime loads with
// dlopen(RTLD_LOCAL | RTLD_DEEPBIND): inside it the library binds to its own symbols, and none of
// them enter the process's global scope. This plain C interface is all that crosses over; strings
// and arrays it returns are malloc'ed and freed with free().
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_SERVE_SENTENCEPIECEMODULE_H
#define COLOSSAL_RUNTIME_SERVE_SENTENCEPIECEMODULE_H

#include <cstddef>

extern "C" {

/// What a piece is (SentencePiece's piece types).
enum ColossalSpmPieceKind { COLOSSAL_SPM_NORMAL = 0, COLOSSAL_SPM_CONTROL = 1, COLOSSAL_SPM_BYTE = 2,
                            COLOSSAL_SPM_UNKNOWN = 3 };

struct ColossalSpmApi {
  /// A processor for the serialized ModelProto, or null with *error set (malloc'ed).
  void *(*load)(const char *data, size_t size, char **error);
  void (*destroy)(void *processor);
  int (*pieceSize)(void *processor);
  int (*bosId)(void *processor);
  int (*eosId)(void *processor);
  int (*pieceKind)(void *processor, int id);
  /// The piece's text (malloc'ed, NUL-terminated, length in *size).
  char *(*idToPiece)(void *processor, int id, size_t *size);
  /// The library's decoding of `ids` (malloc'ed, length in *size).
  char *(*decodeIds)(void *processor, const int *ids, size_t count, size_t *size);
  /// The ids of `text` (malloc'ed, count in *count), or null with *error set.
  int *(*encode)(void *processor, const char *text, size_t size, size_t *count, char **error);
};

/// The module's one exported symbol.
const ColossalSpmApi *colossal_sentencepiece_api(void);
}

#endif  // COLOSSAL_RUNTIME_SERVE_SENTENCEPIECEMODULE_H
