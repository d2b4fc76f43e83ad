// Copyright 2026 The Strata Authors.
#include "model.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>

namespace toy {
namespace {

uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint32_t Hash32(uint64_t a, uint64_t b) {
  return static_cast<uint32_t>(SplitMix(a * 0x100000001b3ull ^ b) >> 32);
}

// Uniform in [-0.5, 0.5).
float Unit(uint32_t h) { return static_cast<float>(h >> 8) * (1.0f / 16777216.0f) - 0.5f; }

float Bf16ToFloat(uint16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t FloatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return static_cast<uint16_t>(bits >> 16);  // truncation: deterministic
}

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

Model::Model(uint64_t seed, int state_mb) {
  const int64_t floats = std::max<int64_t>(int64_t{state_mb} << 18, 4 * kCols);  // MiB / 4 bytes
  rows_ = std::max<int64_t>(1, floats * 2 / 5 / kCols);
  embed_rows_ = std::max<int64_t>(1, floats * 2 / 5 / kEmbedCols);
  kernel_.resize(static_cast<size_t>(rows_ * kCols));
  momentum_.assign(kernel_.size(), 0.0f);
  bias_.assign(kCols, 0.0f);
  embed_.resize(static_cast<size_t>(embed_rows_ * kEmbedCols));
  for (size_t i = 0; i < kernel_.size(); ++i) kernel_[i] = Unit(Hash32(seed, i)) * 0.1f;
  for (size_t i = 0; i < embed_.size(); ++i) embed_[i] = FloatToBf16(Unit(Hash32(~seed, i)));
  step_ = {0};
  rng_.resize(4);
  for (int i = 0; i < 4; ++i)
    rng_[static_cast<size_t>(i)] = SplitMix(seed + static_cast<uint64_t>(i));
}

uint64_t Model::NextRandom() {
  uint64_t* s = rng_.data();
  const uint64_t result = Rotl(s[1] * 5, 7) * 9;
  const uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = Rotl(s[3], 45);
  return result;
}

void Model::Train(int64_t step) {
  const uint64_t batch = NextRandom();  // the synthetic "data" of this step
  const float lr = 0.01f, beta = 0.9f;
  for (size_t i = 0; i < kernel_.size(); ++i) {
    float target = Unit(Hash32(batch, i & 0xffff));
    float grad = kernel_[i] - target;
    momentum_[i] = beta * momentum_[i] + grad;
    kernel_[i] -= lr * momentum_[i];
  }
  for (size_t j = 0; j < bias_.size(); ++j) {
    bias_[j] +=
        0.001f * static_cast<float>((j + static_cast<size_t>(batch)) % 7) - 0.003f * bias_[j];
  }
  for (size_t i = 0; i < embed_.size(); ++i) {
    float e = Bf16ToFloat(embed_[i]);
    embed_[i] = FloatToBf16(0.999f * e + 0.001f * Unit(Hash32(batch ^ 0x5bd1e995, i & 0xfff)));
  }
  step_[0] = step;
}

uint64_t Model::Digest() const {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  for (const auto& it : Items()) XXH3_64bits_update(st, it.data, it.size);
  uint64_t d = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return d;
}

std::vector<strata::Item> Model::Items() const {
  using strata::DType;
  return {
      {"model.dense.kernel", DType::kFloat32, {rows_, kCols}, kernel_.data(), kernel_.size() * 4},
      {"model.dense.bias", DType::kFloat32, {kCols}, bias_.data(), bias_.size() * 4},
      {"model.embed",
       DType::kBFloat16,
       {embed_rows_, kEmbedCols},
       embed_.data(),
       embed_.size() * 2},
      {"opt.momentum.kernel",
       DType::kFloat32,
       {rows_, kCols},
       momentum_.data(),
       momentum_.size() * 4},
      {"opt.step", DType::kInt64, {}, step_.data(), 8},
      {"rng.state", DType::kUInt64, {4}, rng_.data(), 32},
  };
}

std::vector<strata::MutableItem> Model::MutableItems() {
  std::vector<strata::MutableItem> out;
  for (const auto& it : Items()) {
    out.push_back({it.name, it.dtype, it.shape, const_cast<void*>(it.data), it.size});
  }
  return out;
}

}  // namespace toy
