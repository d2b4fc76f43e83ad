// Copyright 2026 The Strata Authors.
#include "ec/codec.h"

#include <isa-l/erasure_code.h>
#include <isa-l/raid.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <string>

namespace strata::ec {
namespace {

// ISA-L takes int lengths; slabs also keep the shards' pieces in cache.
constexpr size_t kSlab = 1 << 20;

bool Aligned32(const void* p) { return reinterpret_cast<uintptr_t>(p) % 32 == 0; }

// ISA-L's XOR kernel (two or more 32-byte aligned sources, then the
// destination); false if it refused, and the caller codes it otherwise.
bool XorKernel(std::span<const uint8_t* const> data, uint8_t* parity, size_t len) {
  std::vector<void*> v(data.size() + 1);
  for (size_t done = 0; done < len; done += kSlab) {
    const int n = static_cast<int>(std::min(kSlab, len - done));
    for (size_t i = 0; i < data.size(); ++i) v[i] = const_cast<uint8_t*>(data[i]) + done;
    v.back() = parity + done;
    if (xor_gen(static_cast<int>(v.size()), n, v.data()) != 0) return false;
  }
  return true;
}

}  // namespace

StatusOr<Codec> Codec::Create(const Redundancy& r) {
  if (!r.coded() || r.k < 1 || r.m < 1 || r.k + r.m > kMaxGroupSize) {
    return InvalidArgumentError("no erasure code for redundancy " + r.ToString());
  }
  Codec c(r.k, r.m, r.kind == Redundancy::Kind::kXor);
  const int n = r.k + r.m;
  c.matrix_.assign(static_cast<size_t>(n) * r.k, 0);
  if (c.xor_) {
    for (int i = 0; i < r.k; ++i) c.matrix_[static_cast<size_t>(i) * r.k + i] = 1;
    std::fill(c.matrix_.begin() + static_cast<ptrdiff_t>(r.k) * r.k, c.matrix_.end(), 1);
  } else {
    gf_gen_cauchy1_matrix(c.matrix_.data(), n, r.k);
  }
  c.parity_tables_ = Tables(&c.matrix_[static_cast<size_t>(r.k) * r.k], r.k, r.m);
  return c;
}

std::vector<uint8_t> Codec::Tables(const uint8_t* coef, int k, int rows) {
  std::vector<uint8_t> tables(32 * static_cast<size_t>(k) * rows);
  ec_init_tables(k, rows, const_cast<uint8_t*>(coef), tables.data());
  return tables;
}

void Codec::Apply(const std::vector<uint8_t>& tables, int k, std::span<const uint8_t* const> in,
                  std::span<uint8_t* const> out, size_t len) {
  const int rows = static_cast<int>(out.size());
  std::vector<uint8_t*> src(in.size()), dst(out.size());
  for (size_t done = 0; done < len; done += kSlab) {
    const int n = static_cast<int>(std::min(kSlab, len - done));
    for (size_t i = 0; i < in.size(); ++i) src[i] = const_cast<uint8_t*>(in[i]) + done;
    for (size_t r = 0; r < out.size(); ++r) dst[r] = out[r] + done;
    ec_encode_data(n, k, rows, const_cast<uint8_t*>(tables.data()), src.data(), dst.data());
  }
}

void Codec::Encode(std::span<const uint8_t* const> data, std::span<uint8_t* const> parity,
                   size_t len) const {
  if (xor_ && data.size() == 1) {  // xor(2): the parity is a copy
    std::memcpy(parity[0], data[0], len);
    return;
  }
  const bool aligned = std::all_of(data.begin(), data.end(), Aligned32) && Aligned32(parity[0]);
  if (xor_ && aligned && len % 32 == 0 && XorKernel(data, parity[0], len)) return;
  Apply(parity_tables_, k_, data, parity, len);
}

void Codec::Accumulate(int row, int index, const uint8_t* shard, uint8_t* parity,
                       size_t len) const {
  // Row j's tables are the j-th 32*k bytes of the encode tables.
  auto* tables = const_cast<uint8_t*>(parity_tables_.data()) + 32 * static_cast<size_t>(k_) * row;
  for (size_t done = 0; done < len; done += kSlab) {
    const int n = static_cast<int>(std::min(kSlab, len - done));
    uint8_t* out = parity + done;
    ec_encode_data_update(n, k_, 1, index, tables, const_cast<uint8_t*>(shard) + done, &out);
  }
}

Status Codec::Reconstruct(std::span<const int> have, std::span<const uint8_t* const> shards,
                          std::span<const int> lost, std::span<uint8_t* const> out,
                          size_t len) const {
  const int n = k_ + m_;
  std::set<int> distinct(have.begin(), have.end());
  if (static_cast<int>(have.size()) != k_ || static_cast<int>(distinct.size()) != k_ ||
      *distinct.begin() < 0 || *distinct.rbegin() >= n || shards.size() != have.size() ||
      lost.size() != out.size()) {
    return InvalidArgumentError("reconstructing a stripe of " + std::to_string(k_) + "+" +
                                std::to_string(m_) + " needs " + std::to_string(k_) +
                                " distinct shards, got " + std::to_string(have.size()));
  }
  for (int r : lost) {
    if (r < 0 || r >= n) return InvalidArgumentError("no shard " + std::to_string(r));
  }
  // With xor the one shard not at hand is the XOR of the k that are.
  if (xor_ && lost.size() == 1 && !distinct.count(lost[0])) {
    Encode(shards, out, len);
    return Status::Ok();
  }
  // B: the generator's rows of the shards at hand; B^-1 maps them back to
  // the data, and generator row r times B^-1 gives any shard r.
  std::vector<uint8_t> b(static_cast<size_t>(k_) * k_), inv(b.size());
  for (int i = 0; i < k_; ++i) {
    std::copy_n(&matrix_[static_cast<size_t>(have[i]) * k_], k_, &b[static_cast<size_t>(i) * k_]);
  }
  if (gf_invert_matrix(b.data(), inv.data(), k_) != 0) {
    return InternalError("the generator's rows for these shards are singular");
  }
  std::vector<uint8_t> coef(lost.size() * static_cast<size_t>(k_), 0);
  for (size_t r = 0; r < lost.size(); ++r) {
    const uint8_t* g = &matrix_[static_cast<size_t>(lost[r]) * k_];
    for (int i = 0; i < k_; ++i) {
      uint8_t sum = 0;
      for (int t = 0; t < k_; ++t) sum ^= gf_mul(g[t], inv[static_cast<size_t>(t) * k_ + i]);
      coef[r * k_ + i] = sum;
    }
  }
  Apply(Tables(coef.data(), k_, static_cast<int>(lost.size())), k_, shards, out, len);
  return Status::Ok();
}

}  // namespace strata::ec
