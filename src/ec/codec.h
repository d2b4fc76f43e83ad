// Copyright 2026 The Strata Authors.
//
// Codec: the erasure code of a coded redundancy (xor or rs), over GF(2^8)
// with Intel ISA-L. Shards 0..k-1 are a stripe's data, k..k+m-1 its parity:
// parity row j = sum over i of a[k+j][i] * data[i], with a the (k+m) x k
// Cauchy generator (identity on top), so any k shards determine the rest.
// xor(n) is the same with m = 1 and every coefficient 1 (parity = XOR of
// the data), computed with ISA-L's XOR kernels where the buffers allow.
//
// Buffers are caller-owned; lengths may be any size (large ones are coded
// in slabs). Threads: a Codec is immutable after Create; its methods may be
// called concurrently.
#ifndef STRATA_EC_CODEC_H_
#define STRATA_EC_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "ec/redundancy.h"
#include "strata/status.h"

namespace strata::ec {

class Codec {
 public:
  // INVALID_ARGUMENT for copies (nothing to code).
  static StatusOr<Codec> Create(const Redundancy& r);

  int k() const { return k_; }
  int m() const { return m_; }

  // parity[j] = row j of the code over data[0..k-1], `len` bytes each.
  void Encode(std::span<const uint8_t* const> data, std::span<uint8_t* const> parity,
              size_t len) const;
  // The holder of parity row `row` adds one data shard (`index` 0..k-1):
  // parity += a[k+row][index] * shard. Started from zeros, the k shards
  // added in any order make the row Encode makes.
  void Accumulate(int row, int index, const uint8_t* shard, uint8_t* parity, size_t len) const;
  // Rebuilds the shards `lost` (indices 0..k+m-1) from k others: `have`
  // lists k distinct shard indices, `shards` their buffers. INVALID_ARGUMENT
  // when `have` is not k distinct valid indices.
  Status Reconstruct(std::span<const int> have, std::span<const uint8_t* const> shards,
                     std::span<const int> lost, std::span<uint8_t* const> out, size_t len) const;

 private:
  Codec(int k, int m, bool xor_only) : k_(k), m_(m), xor_(xor_only) {}
  // ISA-L's tables for `rows` rows of k coefficients each (row-major).
  static std::vector<uint8_t> Tables(const uint8_t* coef, int k, int rows);
  // out[r] = sum over i of coef[r][i] * in[i], the coefficients as Tables.
  static void Apply(const std::vector<uint8_t>& tables, int k, std::span<const uint8_t* const> in,
                    std::span<uint8_t* const> out, size_t len);

  int k_, m_;
  bool xor_;
  std::vector<uint8_t> matrix_;         // (k+m) x k generator
  std::vector<uint8_t> parity_tables_;  // the parity rows' tables (32*k per row)
};

}  // namespace strata::ec

#endif  // STRATA_EC_CODEC_H_
