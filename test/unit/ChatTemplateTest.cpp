//===- ChatTemplateTest.cpp - The chat template format (ChatTemplate.h) ---------------------===//
#include "TestUtil.h"

#include "colossal/runtime/serve/ChatTemplate.h"

using namespace colossal::runtime::testing;
using namespace colossal::runtime::serve;

namespace {

std::string render(const ChatTemplate &t, std::vector<ChatMessage> m) {
  auto s = t.render(m);
  if (!s) return "error: " + llvm::toString(s.takeError());
  return *s;
}

std::string parseError(llvm::StringRef text) {
  auto t = ChatTemplate::parse(text, "t.txt");
  return t ? "" : llvm::toString(t.takeError());
}

TEST(ChatTemplate, DefaultIsRoleColonContentLinesThenAssistant) {
  EXPECT_EQ(render(ChatTemplate::defaultTemplate(), {{"system", "Be brief."}, {"user", "Hi!"}}),
            "system: Be brief.\nuser: Hi!\nassistant:");
  EXPECT_EQ(render(ChatTemplate::defaultTemplate(), {{"user", "a\nb"}, {"assistant", "c"}, {"user", "d"}}),
            "user: a\nb\nassistant: c\nuser: d\nassistant:");
}

TEST(ChatTemplate, SectionsPerRoleWithPrefixAndGeneration) {
  const char *text =
      "# a Llama-2 style template\n"
      "\n"
      "@@ prefix\n"
      "<chat>\n"
      "@@ system\n"
      "<<SYS>>{content}<</SYS>>\n"
      "\n"
      "@@ user\n"
      "[INST] {content} [/INST]\n"
      "@@ assistant\n"
      " {content} {{done}}\n"
      "@@ generation\n"
      "\n"
      "ANSWER:\n";
  auto t = ChatTemplate::parse(text);
  ASSERT_TRUE(static_cast<bool>(t)) << llvm::toString(t.takeError());
  EXPECT_EQ(render(*t, {{"system", "S"}, {"user", "U1"}, {"assistant", "A1"}, {"user", "U2"}}),
            "<chat><<SYS>>S<</SYS>>\n[INST] U1 [/INST] A1 {done}[INST] U2 [/INST]\nANSWER:");
  // No section for "tool" and no "@@ message": an error naming the message.
  EXPECT_EQ(render(*t, {{"user", "x"}, {"tool", "y"}}),
            "error: messages[1]: the chat template has no section for role 'tool' (and no '@@ message')");
}

TEST(ChatTemplate, MessageSectionCoversOtherRoles) {
  auto t = ChatTemplate::parse("@@ user\n>> {content}\n\n@@ message\n[{role}] {content}\n\n");
  ASSERT_TRUE(static_cast<bool>(t)) << llvm::toString(t.takeError());
  EXPECT_EQ(render(*t, {{"user", "q"}, {"tool", "r"}}), ">> q\n[tool] r\n");
}

TEST(ChatTemplate, ErrorsNameTheFileAndLine) {
  EXPECT_EQ(parseError("hello\n@@ user\n{content}"),
            "t.txt:1: text before the first '@@ NAME' header (comments there start with '#')");
  EXPECT_EQ(parseError("@@ user\n{content} {name}"),
            "t.txt:2: unknown placeholder '{name}' (there are {role} and {content})");
  EXPECT_EQ(parseError("@@ user\nok\n{content"), "t.txt:3: '{' without '}' (write '{{' for a brace)");
  EXPECT_EQ(parseError("@@ user\na } b"), "t.txt:2: '}' without '{' (write '}}' for a brace)");
  EXPECT_EQ(parseError("@@ user\na\n@@ user\nb"), "t.txt:3: section 'user' is given twice (first on line 1)");
  EXPECT_EQ(parseError("@@\nx"),
            "t.txt:1: a header is '@@ NAME' with one name (prefix, generation, message or a role), not '@@'");
  EXPECT_EQ(parseError("@@ generation\n{content}"),
            "t.txt:2: '{content}' in section 'generation', which belongs to no message");
  EXPECT_EQ(parseError("# only a comment\n"), "t.txt:1: no section: a template needs at least one '@@ NAME' header");
  auto missing = ChatTemplate::load("/nonexistent/chat.tmpl");
  ASSERT_FALSE(static_cast<bool>(missing));
  EXPECT_NE(llvm::toString(missing.takeError()).find("cannot read chat template '/nonexistent/chat.tmpl'"),
            std::string::npos);
}

}  // namespace
