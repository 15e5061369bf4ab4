//===- ServerTest.cpp - Server: create's errors, start, run and stop ------------------------===//
//
// The HTTP server (Server.h) in-process over a model that always answers token 'a' on a byte
// tokenizer, reached with cpp-httplib's client: create's errors; start on a free port (port 0)
// answers /health and a completion, a wrong method with 405 and an unknown path with 404; a port
// in use is an error; run() returns after stop() from another thread, with a streamed answer still
// open, whose stream ends.
//
//===----------------------------------------------------------------------------------------===//
#include "ByteTokenizer.h"
#include "TestUtil.h"

#include "colossal/runtime/serve/Server.h"

#include <httplib.h>

#include <fstream>
#include <thread>

using namespace colossal::runtime::testing;
using namespace colossal::runtime::serve;

namespace {

/// Always 'a'; `delayMs` per step.
class AModel : public StepModel {
public:
  explicit AModel(int delayMs = 0) : delayMs_(delayMs) {
    config_.maxSeqLen = 256;
    config_.blockSize = 16;
    config_.numBlocks = 64;
    config_.vocabSize = 259;
  }
  const SchedulerConfig &config() const override { return config_; }
  llvm::Error step(const StepBatch &b, llvm::MutableArrayRef<float> logits) override {
    if (delayMs_) std::this_thread::sleep_for(std::chrono::milliseconds(delayMs_));
    std::fill(logits.begin(), logits.end(), 0.0f);
    for (size_t j = 0; j < b.logitsIndices.size(); ++j) logits[j * 259 + 'a' + 3] = 5.0f;
    return llvm::Error::success();
  }

private:
  SchedulerConfig config_;
  int delayMs_;
};

ServerOptions quietOnFreePort() {
  ServerOptions o;
  o.port = 0;
  o.quiet = true;
  o.modelName = "a";
  return o;
}

TEST(Server, CreateRefusesBadTemplatesAndVocabularies) {
  AModel model;
  ByteTokenizer tok;
  ServerOptions o = quietOnFreePort();
  o.chatTemplate = ::testing::TempDir() + "/server_test_bad.tmpl";
  std::ofstream(o.chatTemplate) << "@@ user\n{nope}\n";
  auto s = Server::create(model, tok, o);
  ASSERT_FALSE(static_cast<bool>(s));
  EXPECT_EQ(llvm::toString(s.takeError()),
            o.chatTemplate + ":2: unknown placeholder '{nope}' (there are {role} and {content})");
  ByteTokenizer big(300);
  auto s2 = Server::create(model, big, quietOnFreePort());
  ASSERT_FALSE(static_cast<bool>(s2));
  EXPECT_EQ(llvm::toString(s2.takeError()), "the tokenizer has 300 tokens but the model's vocabulary is 259");
}

TEST(Server, StartsOnAFreePortAnswersAndStops) {
  AModel model;
  ByteTokenizer tok;
  auto server = llvm::cantFail(Server::create(model, tok, quietOnFreePort()));
  ASSERT_NO_ERR(server->start());
  ASSERT_GT(server->port(), 0);
  httplib::Client client("127.0.0.1", server->port());
  auto health = client.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto r = client.Post("/v1/completions", R"({"model": "a", "prompt": "x", "max_tokens": 3, "temperature": 0})",
                       "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find(R"("text":"aaa")"), std::string::npos) << r->body;

  // A known path with the wrong method is a 405 naming the method to use, not "no route".
  auto get = client.Get("/v1/completions");
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 405);
  EXPECT_EQ(get->get_header_value("Allow"), "POST");
  EXPECT_NE(get->body.find("GET is not allowed on /v1/completions (use POST)"), std::string::npos) << get->body;
  auto post = client.Post("/health", "", "application/json");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 405);
  EXPECT_EQ(post->get_header_value("Allow"), "GET");
  auto unknown = client.Get("/v1/nothing");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
  EXPECT_NE(unknown->body.find("no route GET /v1/nothing"), std::string::npos) << unknown->body;

  // The same port again is an error that names it.
  AModel model2;
  ServerOptions same = quietOnFreePort();
  same.port = server->port();
  auto second = llvm::cantFail(Server::create(model2, tok, same));
  const std::string err = errorMessage(second->start());
  EXPECT_NE(err.find("cannot listen on 127.0.0.1:" + std::to_string(server->port())), std::string::npos) << err;
  server->stop();
  server->stop();  // idempotent
}

TEST(Server, RunReturnsAfterStopFromAnotherThreadAndOpenStreamsEnd) {
  AModel model(/*delayMs=*/5);
  ByteTokenizer tok;
  auto server = llvm::cantFail(Server::create(model, tok, quietOnFreePort()));
  std::thread runner([&] { ASSERT_NO_ERR(server->run()); });
  while (server->port() <= 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // A long stream (250 tokens × 5 ms) still open when the server stops: it ends, not hangs.
  std::string streamed;
  std::thread reader([&] {
    httplib::Client client("127.0.0.1", server->port());
    client.set_read_timeout(30, 0);
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = R"({"model": "a", "prompt": "x", "max_tokens": 250, "stream": true})";
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char *data, size_t n, uint64_t, uint64_t) {
      streamed.append(data, n);
      return true;
    };
    client.send(req);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto t0 = std::chrono::steady_clock::now();
  server->stop();
  runner.join();
  reader.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_NE(streamed.find("data: "), std::string::npos);
  EXPECT_EQ(streamed.find("\"finish_reason\":\"length\""), std::string::npos) << "the stream ran to its end";
}

}  // namespace
