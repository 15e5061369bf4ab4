//===- ChatTemplate.cpp - The chat template format of ChatTemplate.h ------------------------===//
#include "colossal/runtime/serve/ChatTemplate.h"

#include "llvm/Support/MemoryBuffer.h"

namespace colossal::runtime::serve {

namespace {
constexpr llvm::StringLiteral kHeader = "@@";
}  // namespace

const ChatTemplate &ChatTemplate::defaultTemplate() {
  static const ChatTemplate t =
      llvm::cantFail(parse("@@ message\n{role}: {content}\n\n@@ generation\nassistant:\n", "<default template>"));
  return t;
}

namespace {

/// An error `NAME:LINE: msg`.
llvm::Error lineError(llvm::StringRef name, size_t line, const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), (name + ":" + llvm::Twine(line) + ": " + msg).str());
}

/// A section as written: its name, the line of its header, its text.
struct RawSection {
  std::string name;
  size_t line;
  std::string text;
  bool any = false;  // the text has a line (an empty one counts)
};

/// Cuts the file at its `@@ NAME` headers.
llvm::Expected<std::vector<RawSection>> splitSections(llvm::StringRef text, llvm::StringRef name) {
  std::vector<RawSection> raws;
  size_t lineNo = 0;
  for (llvm::StringRef rest = text; !rest.empty();) {
    auto [line, tail] = rest.split('\n');
    rest = tail;
    ++lineNo;
    llvm::StringRef l = line.rtrim('\r');
    if (l.starts_with(kHeader)) {
      llvm::StringRef sectionName = l.drop_front(kHeader.size()).trim();
      if (sectionName.empty() || sectionName.contains(' '))
        return lineError(
            name, lineNo,
            "a header is '@@ NAME' with one name (prefix, generation, message or a role), not '" + l + "'");
      for (const RawSection &r : raws)
        if (r.name == sectionName)
          return lineError(name, lineNo,
                           "section '" + sectionName + "' is given twice (first on line " + llvm::Twine(r.line) + ")");
      raws.push_back({sectionName.str(), lineNo, "", false});
      continue;
    }
    if (raws.empty()) {
      if (l.trim().empty() || l.starts_with("#")) continue;
      return lineError(name, lineNo, "text before the first '@@ NAME' header (comments there start with '#')");
    }
    RawSection &r = raws.back();
    if (r.any) r.text += '\n';
    r.text += l.str();
    r.any = true;
  }
  if (raws.empty()) return lineError(name, lineNo, "no section: a template needs at least one '@@ NAME' header");
  return raws;
}

}  // namespace

llvm::Expected<ChatTemplate::Section> ChatTemplate::compile(llvm::StringRef section, size_t line, llvm::StringRef text,
                                                            llvm::StringRef name) {
  Section s;
  ++line;  // the text starts below its header
  std::string lit;
  const bool isMessage = section != "prefix" && section != "generation";
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') ++line;
    if ((c == '{' || c == '}') && i + 1 < text.size() && text[i + 1] == c) {  // {{ and }}
      lit += c;
      ++i;
    } else if (c == '{') {
      const size_t close = text.find('}', i);
      if (close == llvm::StringRef::npos) return lineError(name, line, "'{' without '}' (write '{{' for a brace)");
      llvm::StringRef field = text.slice(i + 1, close);
      if (field != "role" && field != "content")
        return lineError(name, line, "unknown placeholder '{" + field + "}' (there are {role} and {content})");
      if (!isMessage)
        return lineError(name, line, "'{" + field + "}' in section '" + section + "', which belongs to no message");
      if (!lit.empty()) s.push_back({Piece::Text, std::move(lit)});
      lit.clear();
      s.push_back({field == "role" ? Piece::Role : Piece::Content, ""});
      i = close;
    } else if (c == '}') {
      return lineError(name, line, "'}' without '{' (write '}}' for a brace)");
    } else {
      lit += c;
    }
  }
  if (!lit.empty()) s.push_back({Piece::Text, std::move(lit)});
  return s;
}

llvm::Expected<ChatTemplate> ChatTemplate::parse(llvm::StringRef text, llvm::StringRef name) {
  auto raws = splitSections(text, name);
  if (!raws) return raws.takeError();
  ChatTemplate t;
  for (const RawSection &r : *raws) {
    auto s = compile(r.name, r.line, r.text, name);
    if (!s) return s.takeError();
    if (r.name == "prefix")
      t.prefix_ = std::move(*s);
    else if (r.name == "generation")
      t.generation_ = std::move(*s);
    else if (r.name == "message")
      t.message_ = std::move(*s);
    else
      t.roles_[r.name] = std::move(*s);
  }
  return t;
}

llvm::Expected<ChatTemplate> ChatTemplate::load(llvm::StringRef path) {
  auto buf = llvm::MemoryBuffer::getFile(path, /*IsText=*/false, /*RequiresNullTerminator=*/false);
  if (!buf)
    return llvm::createStringError(buf.getError(), "cannot read chat template '%s': %s", path.str().c_str(),
                                   buf.getError().message().c_str());
  return parse((*buf)->getBuffer(), path);
}

void ChatTemplate::append(const Section &s, const ChatMessage *m, std::string &out) {
  for (const Piece &p : s) {
    if (p.kind == Piece::Text)
      out += p.text;
    else if (p.kind == Piece::Role)
      out += m->role;
    else
      out += m->content;
  }
}

llvm::Expected<std::string> ChatTemplate::render(llvm::ArrayRef<ChatMessage> messages) const {
  std::string out;
  append(prefix_, nullptr, out);
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage &m = messages[i];
    auto it = roles_.find(m.role);
    const Section *s = it != roles_.end() ? &it->second : (message_ ? &*message_ : nullptr);
    if (!s)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "messages[%zu]: the chat template has no section for role '%s' (and no '@@ message')", i, m.role.c_str());
    append(*s, &m, out);
  }
  append(generation_, nullptr, out);
  return out;
}

}  // namespace colossal::runtime::serve
