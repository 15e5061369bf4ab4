//===- ChatTemplate.h - Chat messages rendered into one prompt -------------------*- C++ -*-===//
//
// `--chat-template FILE` (docs/serving.md "Chat templates"): a deliberately small format, not a
// programming language. A file is a list of sections, each opened by a header line
//
//   @@ prefix              text before the first message
//   @@ ROLE                one message whose role is ROLE (system, user, assistant, tool, ...)
//   @@ message             a message whose role has no section of its own
//   @@ generation          text after the last message: where the model's answer starts
//
// The text of a section is the lines up to the next header; the line break that ends its last
// line is not part of it (leave an empty line to end a section with a line break). In a
// message's text `{role}` and `{content}` stand for the message's; `{{` and `}}` stand for `{`
// and `}`. Lines before the first header are comments when they start with `#`, else an error.
// The prompt is prefix, then each message through its section, then generation; it is encoded
// like any string prompt (with the tokenizer's BOS).
//
// Without a file the default renders each message as a `<role>: <content>` line and ends with
// `assistant:`:
//
//   @@ message
//   {role}: {content}
//
//   @@ generation
//   assistant:
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_RUNTIME_SERVE_CHATTEMPLATE_H
#define COLOSSAL_RUNTIME_SERVE_CHATTEMPLATE_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace colossal::runtime::serve {

struct ChatMessage {
  std::string role, content;
};

class ChatTemplate {
public:
  /// The default template (the header comment).
  static const ChatTemplate &defaultTemplate();
  /// Parses template text; `name` (the file) prefixes errors: `NAME:LINE: ...` for a line before
  /// the first header that is not a comment, an unknown placeholder, an unmatched brace, a section
  /// given twice, a header without a name.
  static llvm::Expected<ChatTemplate> parse(llvm::StringRef text, llvm::StringRef name = "<template>");
  /// Reads and parses a file. Errors: unreadable, and parse's.
  static llvm::Expected<ChatTemplate> load(llvm::StringRef path);

  /// The prompt text of `messages`. Errors (a 400 for `messages`): a message whose role has no
  /// section and there is no `message` section.
  llvm::Expected<std::string> render(llvm::ArrayRef<ChatMessage> messages) const;

private:
  /// A section's text cut at its placeholders: literal pieces and fields, in order.
  struct Piece {
    enum Kind { Text, Role, Content } kind;
    std::string text;
  };
  using Section = std::vector<Piece>;
  /// Cuts the text of section `section` (whose header is on line `line` of `file`) at its
  /// placeholders. Errors: `FILE:LINE:` an unknown placeholder, an unmatched brace, a placeholder
  /// outside a message's section.
  static llvm::Expected<Section> compile(llvm::StringRef section, size_t line, llvm::StringRef text,
                                         llvm::StringRef file);
  static void append(const Section &s, const ChatMessage *m, std::string &out);

  Section prefix_, generation_;
  std::optional<Section> message_;
  std::map<std::string, Section> roles_;
};

}  // namespace colossal::runtime::serve

#endif  // COLOSSAL_RUNTIME_SERVE_CHATTEMPLATE_H
