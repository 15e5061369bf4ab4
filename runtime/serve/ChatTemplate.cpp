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

llvm::Expected<ChatTemplate> ChatTemplate::parse(llvm::StringRef text, llvm::StringRef name) {
  auto error = [&](size_t line, const llvm::Twine &msg) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), (name + ":" + llvm::Twine(line) + ": " + msg).str());
  };
  ChatTemplate t;
  // Sections as raw text first: (name, first line number, text).
  struct Raw {
    std::string name;
    size_t line;
    std::string text;
    bool any = false;
  };
  std::vector<Raw> raws;
  size_t lineNo = 0;
  llvm::StringRef rest = text;
  while (!rest.empty()) {
    auto [line, tail] = rest.split('\n');
    rest = tail;
    ++lineNo;
    llvm::StringRef l = line.rtrim('\r');
    if (l.starts_with(kHeader)) {
      llvm::StringRef sectionName = l.drop_front(kHeader.size()).trim();
      if (sectionName.empty() || sectionName.contains(' '))
        return error(lineNo,
                     "a header is '@@ NAME' with one name (prefix, generation, message or a role), not '" + l + "'");
      for (const Raw &r : raws)
        if (r.name == sectionName)
          return error(lineNo,
                       "section '" + sectionName + "' is given twice (first on line " + llvm::Twine(r.line) + ")");
      raws.push_back({sectionName.str(), lineNo, "", false});
      continue;
    }
    if (raws.empty()) {
      if (l.trim().empty() || l.starts_with("#")) continue;
      return error(lineNo, "text before the first '@@ NAME' header (comments there start with '#')");
    }
    Raw &r = raws.back();
    if (r.any) r.text += '\n';
    r.text += l.str();
    r.any = true;
  }
  if (raws.empty()) return error(lineNo, "no section: a template needs at least one '@@ NAME' header");

  for (const Raw &r : raws) {
    Section s;
    size_t line = r.line + 1;
    std::string lit;
    const bool isMessage = r.name != "prefix" && r.name != "generation";
    for (size_t i = 0; i < r.text.size(); ++i) {
      const char c = r.text[i];
      if (c == '\n') ++line;
      if (c == '{' && i + 1 < r.text.size() && r.text[i + 1] == '{') {
        lit += '{';
        ++i;
      } else if (c == '}' && i + 1 < r.text.size() && r.text[i + 1] == '}') {
        lit += '}';
        ++i;
      } else if (c == '{') {
        const size_t close = r.text.find('}', i);
        if (close == std::string::npos) return error(line, "'{' without '}' (write '{{' for a brace)");
        llvm::StringRef field = llvm::StringRef(r.text).slice(i + 1, close);
        Piece::Kind kind;
        if (field == "role")
          kind = Piece::Role;
        else if (field == "content")
          kind = Piece::Content;
        else
          return error(line, "unknown placeholder '{" + field + "}' (there are {role} and {content})");
        if (!isMessage)
          return error(line, "'{" + field + "}' in section '" + r.name + "', which belongs to no message");
        if (!lit.empty()) s.push_back({Piece::Text, std::move(lit)});
        lit.clear();
        s.push_back({kind, ""});
        i = close;
      } else if (c == '}') {
        return error(line, "'}' without '{' (write '}}' for a brace)");
      } else {
        lit += c;
      }
    }
    if (!lit.empty()) s.push_back({Piece::Text, std::move(lit)});
    if (r.name == "prefix")
      t.prefix_ = std::move(s);
    else if (r.name == "generation")
      t.generation_ = std::move(s);
    else if (r.name == "message")
      t.message_ = std::move(s);
    else
      t.roles_[r.name] = std::move(s);
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
