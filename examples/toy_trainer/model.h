// Copyright 2026 The Strata Authors.
//
// A deterministic stand-in for a model and its optimizer. The state after
// step N is a pure function of (N, seed, size): every update is computed in
// a fixed order from the step number and the state's own RNG, so a run that
// is interrupted and restored ends bit for bit where an uninterrupted one does.
#ifndef STRATA_EXAMPLES_TOY_TRAINER_MODEL_H_
#define STRATA_EXAMPLES_TOY_TRAINER_MODEL_H_

#include <cstdint>
#include <vector>

#include "strata/types.h"

namespace toy {

class Model {
 public:
  // About `state_mb` MiB of state in tensors of several dtypes and shapes.
  Model(uint64_t seed, int state_mb);

  // Applies one training step: SGD with momentum on synthetic data derived
  // from the step number. REQUIRES: step == this->step() + 1.
  void Train(int64_t step);

  int64_t step() const { return step_[0]; }
  // XXH3-64 over every tensor, in item order.
  uint64_t Digest() const;

  std::vector<strata::Item> Items() const;
  std::vector<strata::MutableItem> MutableItems();

 private:
  uint64_t NextRandom();

  int64_t rows_ = 0, embed_rows_ = 0;
  static constexpr int64_t kCols = 1024, kEmbedCols = 512;
  std::vector<float> kernel_;    // model.dense.kernel [rows, 1024] float32
  std::vector<float> bias_;      // model.dense.bias [1024] float32
  std::vector<uint16_t> embed_;  // model.embed [embed_rows, 512] bfloat16
  std::vector<float> momentum_;  // opt.momentum.kernel [rows, 1024] float32
  std::vector<int64_t> step_;    // opt.step [] int64
  std::vector<uint64_t> rng_;    // rng.state [4] uint64 (xoshiro256**)
};

}  // namespace toy

#endif  // STRATA_EXAMPLES_TOY_TRAINER_MODEL_H_
