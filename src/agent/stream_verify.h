// Copyright 2026 The Strata Authors.
//
// Verification while a step arrives. A restore used to receive every byte,
// then read every byte again to check it (Store::Adopt). StreamVerifier
// checks each checksummed range of a file as soon as the range has been
// received, on its own threads, while the next bytes arrive; after the last
// byte only the ranges still queued are left to hash.
//
// The checks are the ones a full verification makes (VerifyStepIndex):
//  - a Strata checkpoint: every chunk of every item against the manifest's
//    XXH3-64, the manifest being the copy's own (its content digest equals
//    the index's digest; the caller fetches and decodes it first);
//  - any other step: every 16 MiB chunk of every file against the index.
// The file list, the sizes and the manifest's digest are still checked when
// the copy is committed (Store::AdoptVerified); only the data pass is saved.
#ifndef STRATA_AGENT_STREAM_VERIFY_H_
#define STRATA_AGENT_STREAM_VERIFY_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "agent/step_index.h"
#include "strata/catalog.h"
#include "strata/status.h"

namespace strata::agent {

// One range of one file whose XXH3-64 is known.
struct RangeCheck {
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t xxh3 = 0;
  std::string what;  // names the range in errors: "chunk 2", "item 'w' chunk 0"

  uint64_t end() const { return offset + length; }
};

// For each file of `index` (same positions), the checks that verify it,
// ordered by end offset. `manifest` is the decoded manifest of a Strata
// step (null otherwise). DATA_LOSS when the index and the manifest
// disagree: another digest, a data file the index lacks, an item past the
// end of its file, a chunk count that does not match.
StatusOr<std::vector<std::vector<RangeCheck>>> PlanRangeChecks(const StepIndex& index,
                                                               const StepInfo* manifest);

// Hashes submitted ranges of the files of one incoming directory on its own
// threads. Thread-safe: the streams of one transfer share one verifier.
class StreamVerifier {
 public:
  // `checks` as PlanRangeChecks returns them for `index`; the files are
  // read under `dir`.
  StreamVerifier(std::string dir, const StepIndex& index,
                 std::vector<std::vector<RangeCheck>> checks, int threads);
  // Stops the threads; queued checks are dropped.
  ~StreamVerifier();
  StreamVerifier(const StreamVerifier&) = delete;
  StreamVerifier& operator=(const StreamVerifier&) = delete;

  // The checks of the file at `path` (relative, as in the index); empty for
  // a file the index does not list.
  const std::vector<RangeCheck>& ChecksFor(const std::string& path) const;
  // Queues the check `i` of ChecksFor(path): its bytes are in the file now.
  void Submit(const std::string& path, size_t i);
  // Waits until every queued check is done. OK iff every check of every
  // file was submitted and matched; otherwise the first mismatch or read
  // error, naming the file and the range (DATA_LOSS).
  Status Finish();

 private:
  struct Task {
    size_t file;
    size_t check;
  };
  void WorkerMain();
  Status Run(const Task& t) const;
  void Finished(const Status& s);  // a task's outcome

  const std::string dir_;
  std::vector<std::string> paths_;  // by file position
  std::map<std::string, size_t> position_;
  std::vector<std::vector<RangeCheck>> checks_;
  std::mutex mu_;
  std::condition_variable cv_;                // work queued, or stopping
  std::condition_variable done_;              // a task finished
  std::deque<Task> queue_;                    // GUARDED_BY(mu_)
  std::vector<std::vector<bool>> submitted_;  // by file, check; GUARDED_BY(mu_)
  size_t pending_ = 0;                        // submitted, not finished; GUARDED_BY(mu_)
  Status error_;                              // the first failure; GUARDED_BY(mu_)
  bool stop_ = false;                         // GUARDED_BY(mu_)
  std::vector<std::thread> workers_;
};

}  // namespace strata::agent

#endif  // STRATA_AGENT_STREAM_VERIFY_H_
