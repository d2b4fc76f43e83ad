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
//    the index's digest, and its data files are exactly the index's other
//    files, with the same sizes; the caller fetches and decodes it first);
//  - any other step: every 16 MiB chunk of every file against the index.
// The file list, the sizes and the manifest's digest are still checked when
// the copy is committed (Store::AdoptVerified); only the data pass is saved.
#ifndef STRATA_AGENT_STORE_STREAM_VERIFY_H_
#define STRATA_AGENT_STORE_STREAM_VERIFY_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "format/step_index.h"
#include "strata/catalog.h"
#include "strata/status.h"
#include "util/mutex.h"
#include "wire/vocabulary.h"

namespace strata::agent {

// The checks that verify the files of `index`. `manifest` is the decoded
// manifest of a Strata step (null otherwise). DATA_LOSS when the index and
// the manifest disagree: another digest, a data file the index lacks or
// lists with another size, a file the manifest does not name, an item past
// the end of its file.
StatusOr<wire::RangePlan> PlanRangeChecks(const StepIndex& index, const StepInfo* manifest);

// Hashes submitted ranges of the files of one incoming directory on its own
// threads. Thread-safe: the streams of one transfer share one verifier.
class StreamVerifier {
 public:
  // How received bytes are read back: kAuto maps them on a tmpfs (no copy)
  // and reads them with pread elsewhere (a read error through a mapping is
  // SIGBUS). The others are for tests.
  enum class Read { kAuto, kMapped, kPread };

  // `plan` as PlanRangeChecks returns it for `index`; the files are read
  // under `dir`.
  StreamVerifier(std::string dir, const StepIndex& index, wire::RangePlan plan, int threads,
                 Read read = Read::kAuto);
  // Stops the threads; queued checks are dropped.
  ~StreamVerifier();
  StreamVerifier(const StreamVerifier&) = delete;
  StreamVerifier& operator=(const StreamVerifier&) = delete;

  // Called once, on the thread that ran the check, when a check first
  // fails (e.g. to stop the transfer); Wait() returns after it has run.
  // Set it before the first Submit.
  void SetOnFailure(std::function<void()> on_failure) { on_failure_ = std::move(on_failure); }

  // The checks of the file at `path` (relative, as in the index); empty for
  // a file the index does not list.
  const std::vector<wire::RangeCheck>& ChecksFor(const std::string& path) const;
  // Queues the checks [first, last) of ChecksFor(path) as one task: their
  // bytes are in the file now. A check submitted again is ignored.
  void Submit(const std::string& path, size_t first, size_t last);
  // Waits until every queued check is done; the first that failed (a
  // mismatch is DATA_LOSS naming the file, the byte range and the chunk).
  Status Wait();
  // Wait(), then: OK iff every check of every file was submitted.
  Status Finish();

 private:
  struct Task {
    size_t file;
    size_t first, last;
  };
  void WorkerMain();
  Status Run(const Task& t) const;
  Status HashMapped(int fd, const Task& t, const std::string& path) const;
  Status HashRead(int fd, const Task& t, const std::string& path) const;
  Status Mismatch(const std::string& path, const wire::RangeCheck& c) const;
  void Finished(const Status& s);  // a task's outcome

  const std::string dir_;
  bool mapped_ = false;             // hash through mmap (a tmpfs)
  std::vector<std::string> paths_;  // by file position
  std::map<std::string, size_t> position_;
  wire::RangePlan plan_;
  std::function<void()> on_failure_;
  Mutex mu_;
  CondVar cv_;    // work queued, or stopping
  CondVar done_;  // a task finished
  std::deque<Task> queue_ GUARDED_BY(mu_);
  std::vector<std::vector<bool>> submitted_ GUARDED_BY(mu_);  // by file, check
  size_t pending_ GUARDED_BY(mu_) = 0;                        // submitted, not finished
  Status error_ GUARDED_BY(mu_);                              // the first failure
  bool stop_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace strata::agent

#endif  // STRATA_AGENT_STORE_STREAM_VERIFY_H_
