//===- ToyDecoder.h - A two-layer toy decoder over the paged KV-cache kernels ----*- C++ -*-===//
//
// The model the serving tests run (SchedulerTest, the server's e2e test through
// test/serve/toy_server.cpp): a token's first-layer key, value and query come from its id and
// position, the second layer's from the first layer's output, so they depend on the whole
// prefix as a real decoder's do; the logits come from the second layer's output. It runs the
// real kv_copy_blocks, kv_append and paged_attention kernels on caches of config.numBlocks ×
// config.blockSize slots, one row at a time in a fixed order, so a row's logits are the same bits
// wherever it sits in the batch.
//
//===----------------------------------------------------------------------------------------===//
#ifndef COLOSSAL_TEST_UNIT_TOYDECODER_H
#define COLOSSAL_TEST_UNIT_TOYDECODER_H

#include "TestUtil.h"

#include "colossal/runtime/serve/Scheduler.h"

namespace colossal::runtime::testing {

/// x0 = embedding(token) + a sinusoid of the position; per layer l,
/// x_{l+1} = x_l + paged_attention(q_l x_l, cache of k_l x_l, v_l x_l); logits = out · x_2.
/// Widths: 2 query heads, 1 kv head, head dim 16; vocabulary config.vocabSize.
class ToyDecoder {
public:
  explicit ToyDecoder(const serve::SchedulerConfig &c);
  /// Scheduler.h's ModelStep.
  llvm::Error operator()(const serve::StepBatch &b, llvm::MutableArrayRef<float> logits);

private:
  struct Layer {
    std::vector<float> wq, wk, wv;
    HostTensor kc, vc;
  };
  Layer layers_[2];
  std::vector<float> embedding_, out_;
  int32_t vocab_;
};

}  // namespace colossal::runtime::testing

#endif  // COLOSSAL_TEST_UNIT_TOYDECODER_H
