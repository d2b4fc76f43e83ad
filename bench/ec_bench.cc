// Copyright 2026 The Strata Authors.
//
// Erasure-code benchmarks for the coded peer tier (src/ec), against memcpy
// of the same bytes in the same run. Each prints absolute figures (median
// of --reps repetitions after a warm-up), then `ratio <name> <value>
// target <t>`:
//
//   ec_encode    a group's parity for one step of --size-mib (split into k
//                chunks): data bytes / encode time ÷ memcpy throughput, for
//                rs(6,2) (ec_encode_rs62) and xor(8) (ec_encode_xor8)
//   ec_ram       RAM a node holds (its step and what it keeps for others)
//                for the same tolerance: rs(6,2) ÷ copies with 2 peers (any
//                2 lost), xor(8) ÷ copies with 1 peer (any 1 lost), from the
//                layout with its padding, for 8 steps of uneven sizes
//   ec_rebuild   a lost node's step rebuilt from its group's survivors
//                (k stripes, each decoded from k shards) ÷ a full copy of it
//                memcpy'd, i.e. the compute of a decode against the copy a
//                peer would serve. In memory only: the network is not in it
//                (a decode reads k chunks from k nodes, a copy one step from
//                one node)
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench_util.h"
#include "ec/codec.h"
#include "ec/layout.h"
#include "ec/redundancy.h"

namespace strata {
namespace {

using bench::Clock;
using bench::kMiB;
using bench::PrintRatio;
using bench::PrintSamples;
using bench::Samples;
using bench::SecondsSince;

struct Free {
  void operator()(uint8_t* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<uint8_t[], Free>;

// `bytes` of 64-byte aligned memory, filled with a pattern (and so paged in).
Buffer Aligned(uint64_t bytes, uint8_t seed) {
  const uint64_t size = std::max<uint64_t>(64, (bytes + 63) / 64 * 64);
  Buffer b(static_cast<uint8_t*>(std::aligned_alloc(64, size)));
  for (uint64_t i = 0; i < size; ++i) b[i] = static_cast<uint8_t>(i * 131 + seed);
  return b;
}

// The median of memcpy of `bytes` (source and destination paged in).
Samples Memcpy(uint64_t bytes, int reps) {
  Buffer from = Aligned(bytes, 1), to = Aligned(bytes, 2);
  Samples s;
  for (int r = -1; r < reps; ++r) {
    auto t = Clock::now();
    std::memcpy(to.get(), from.get(), bytes);
    if (r >= 0) s.Add(SecondsSince(t));
  }
  return s;
}

void Encode(const char* text, const char* ratio, uint64_t bytes, int reps, const Samples& copy) {
  auto codec = ec::Codec::Create(*ec::Redundancy::Parse(text));
  const int k = codec->k(), m = codec->m();
  const uint64_t chunk = ec::ChunkBytes(bytes, k);
  std::vector<Buffer> data, parity;
  std::vector<const uint8_t*> in;
  std::vector<uint8_t*> out;
  for (int i = 0; i < k; ++i) in.push_back((data.emplace_back(Aligned(chunk, i))).get());
  for (int j = 0; j < m; ++j) out.push_back((parity.emplace_back(Aligned(chunk, 0))).get());
  Samples s;
  for (int r = -1; r < reps; ++r) {
    auto t = Clock::now();
    codec->Encode(in, out, chunk);
    if (r >= 0) s.Add(SecondsSince(t));
  }
  const std::string label = std::string(text) + " encode (data bytes)";
  PrintSamples(label.c_str(), s, chunk * k);
  PrintRatio(ratio, copy.Median() / s.Median() * (static_cast<double>(chunk * k) / bytes),
             text[0] == 'x' ? "0.5" : "0.3");
}

int RunEncode(uint64_t bytes, int reps) {
  std::printf("ec_encode: one step of %llu MiB split into k chunks\n",
              static_cast<unsigned long long>(bytes / kMiB));
  Samples copy = Memcpy(bytes, reps);
  PrintSamples("memcpy", copy, bytes);
  Encode("rs(6,2)", "ec_encode_rs62", bytes, reps, copy);
  Encode("xor(8)", "ec_encode_xor8", bytes, reps, copy);
  return 0;
}

// Bytes a member of a group of 8 holds for `text`, per byte of its own step,
// averaged over the members: its step plus its parity rows (coded), or its
// step plus `peers` copies of others' steps (copies, peers in a ring).
double RamFactor(const char* text, int peers, const std::vector<uint64_t>& steps) {
  ec::Redundancy r = *ec::Redundancy::Parse(text);
  uint64_t own = 0, held = 0;
  for (uint64_t s : steps) own += s;
  if (!r.coded()) {
    held = own * (1 + peers);
  } else {
    const uint64_t chunk = ec::ChunkBytes(*std::max_element(steps.begin(), steps.end()), r.k);
    held = own + steps.size() * static_cast<uint64_t>(r.m) * chunk;
  }
  return static_cast<double>(held) / static_cast<double>(own);
}

int RunRam(uint64_t bytes) {
  std::vector<uint64_t> steps;  // uneven: up to 5% apart, as shards of a model rarely are equal
  for (int x = 0; x < 8; ++x) steps.push_back(bytes - bytes / 20 * x / 7);
  const double copies1 = RamFactor("copies", 1, steps), copies2 = RamFactor("copies", 2, steps);
  const double xor8 = RamFactor("xor(8)", 0, steps), rs62 = RamFactor("rs(6,2)", 0, steps);
  std::printf(
      "ec_ram: RAM per node in units of its own step (8 nodes, steps of %llu MiB down to "
      "95%%)\n",
      static_cast<unsigned long long>(bytes / kMiB));
  std::printf("  %-40s %6.3f\n  %-40s %6.3f\n  %-40s %6.3f\n  %-40s %6.3f\n",
              "copies, 1 peer (any 1 lost)", copies1, "xor(8) (any 1 lost)", xor8,
              "copies, 2 peers (any 2 lost)", copies2, "rs(6,2) (any 2 lost)", rs62);
  PrintRatio("ec_ram_rs62_vs_copies2", rs62 / copies2, "0.5", true);
  PrintRatio("ec_ram_xor8_vs_copies1", xor8 / copies1, "0.6", true);
  return 0;
}

int RunRebuild(uint64_t bytes, int reps) {
  auto codec = ec::Codec::Create(*ec::Redundancy::Parse("rs(6,2)"));
  ec::GroupLayout layout(6, 2);
  const uint64_t chunk = ec::ChunkBytes(bytes, 6);
  // Shards of the stripes member 0 contributes to: k of them survive (the
  // other contributors' chunks, or parity), any content will do for timing.
  std::vector<Buffer> shards;
  std::vector<const uint8_t*> in;
  for (int i = 0; i < 6; ++i) in.push_back((shards.emplace_back(Aligned(chunk, i))).get());
  Buffer out = Aligned(chunk * 6, 0);
  // Member 0 and one other lost: shard 0 (member 0's) rebuilt from shards
  // 2..5 and both parity rows.
  const std::vector<int> have = {2, 3, 4, 5, 6, 7}, lost = {0};
  Samples s;
  for (int r = -1; r < reps; ++r) {
    auto t = Clock::now();
    for (int stripe : layout.DataStripes(0)) {
      uint8_t* dst = out.get() + layout.ChunkOf(0, stripe) * chunk;
      std::vector<uint8_t*> to = {dst};
      if (!codec->Reconstruct(have, in, lost, to, chunk).ok()) return 1;
    }
    if (r >= 0) s.Add(SecondsSince(t));
  }
  std::printf("ec_rebuild: a lost node's step of %llu MiB, rs(6,2), two of its group lost\n",
              static_cast<unsigned long long>(bytes / kMiB));
  Samples copy = Memcpy(bytes, reps);
  PrintSamples("memcpy of a full copy", copy, bytes);
  PrintSamples("decode from 6 survivors' shards", s, bytes);
  PrintRatio("ec_rebuild_vs_copy", copy.Median() / s.Median(), "");
  return 0;
}

int Main(int argc, char** argv) {
  CLI::App app("ec_bench: erasure codes of the coded peer tier against memcpy");
  uint64_t size_mib = 256;
  int reps = 9;
  std::string tmpfs;
  std::vector<std::string> only;
  app.add_option("--size-mib", size_mib, "Step size in MiB")
      ->envname("STRATA_BENCH_SIZE_MIB")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 16));
  app.add_option("--reps", reps, "Timed repetitions (the median is reported)")
      ->envname("STRATA_BENCH_REPS")
      ->capture_default_str()
      ->check(CLI::Range(5, 1000));
  app.add_option("--tmpfs", tmpfs, "Unused (everything is in memory); accepted as the others do");
  app.add_option("benchmarks", only,
                 "Benchmarks to run (default all): ec_encode ec_ram ec_rebuild");
  CLI11_PARSE(app, argc, argv);
  const uint64_t bytes = size_mib * kMiB;
  auto wanted = [&](const char* name) {
    return only.empty() || std::find(only.begin(), only.end(), name) != only.end();
  };
  for (const std::string& name : only) {
    if (name != "ec_encode" && name != "ec_ram" && name != "ec_rebuild") {
      std::fprintf(stderr, "ec_bench: unknown benchmark \"%s\"\n", name.c_str());
      return 2;
    }
  }
  int failed = 0;
  if (wanted("ec_encode")) failed += RunEncode(bytes, reps);
  if (wanted("ec_ram")) failed += RunRam(bytes);
  if (wanted("ec_rebuild")) failed += RunRebuild(bytes, reps);
  return failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) { return strata::Main(argc, argv); }
