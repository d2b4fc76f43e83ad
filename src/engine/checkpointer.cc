// Copyright 2026 The Strata Authors.
#include "strata/checkpointer.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "engine/agent_sync.h"
#include "engine/preemption.h"
#include "engine/slot_saver.h"
#include "engine/staging.h"
#include "engine/step_io.h"
#include "engine/step_lock.h"
#include "format/manifest.h"
#include "format/naming.h"
#include "util/copy.h"
#include "util/crash_point.h"
#include "util/file_util.h"
#include "util/logging.h"
#include "util/mutex.h"
#include "util/thread_pool.h"
#include "util/time_format.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

Status ValidateOptions(const CheckpointerOptions& o) {
  if (o.save_interval_steps < 0) return InvalidArgumentError("save_interval_steps is negative");
  if (o.save_interval_seconds < 0) return InvalidArgumentError("save_interval_seconds is negative");
  if (o.max_to_keep < 0) return InvalidArgumentError("max_to_keep is negative");
  if (o.io_threads < 0) return InvalidArgumentError("io_threads is negative");
  if (o.chunk_size < kMinChunkSize || o.chunk_size > kMaxChunkSize ||
      (o.chunk_size & (o.chunk_size - 1)) != 0) {
    return InvalidArgumentError("chunk_size " + std::to_string(o.chunk_size) +
                                " is not a power of two in [4 KiB, 1 GiB]");
  }
  return Status::Ok();
}

// Takes the exclusive flock on dir/.strata-lock.
StatusOr<UniqueFd> LockDirectory(const std::string& dir) {
  return LockFileExclusive(JoinPath(dir, std::string(kLockFileName)),
                           dir + " is in use by another Strata checkpointer", /*write_pid=*/true);
}

class CheckpointerImpl final : public Checkpointer, public SlotSaver {
 public:
  CheckpointerImpl(std::string dir, CheckpointerOptions options, UniqueFd lock_fd)
      : dir_(std::move(dir)),
        options_(std::move(options)),
        env_(options_.env != nullptr ? options_.env : Env::Default()),
        lock_fd_(std::move(lock_fd)),
        pool_((options_.io_threads > 0 ? options_.io_threads : ThreadPool::DefaultThreads()) - 1),
        slots_(env_, &pool_, dir_, {options_.max_to_keep, options_.recycle_space}),
        served_notices_(PreemptionNotices()),
        last_save_time_(Clock::now()) {}

  ~CheckpointerImpl() override;

  Status Init();

  bool ShouldSave(int64_t step) const noexcept override {
    if (OnDemandDue(step)) return true;
    if (options_.save_interval_steps > 0 && step % options_.save_interval_steps == 0) return true;
    return time_due_.load(std::memory_order_relaxed);
  }

  using Checkpointer::Save;
  StatusOr<SaveResult> Save(int64_t step, std::span<const Item> items,
                            const SaveOptions& options) override;
  Status Wait() override;
  void AwaitIdle() override;
  StatusOr<int64_t> RestoreInto(std::span<const MutableItem> into,
                                const RestoreOptions& options) override;
  StatusOr<RestoredStep> Restore(const RestoreOptions& options) override {
    return RestoreToMemory(RestoreAllocator(), options);
  }
  StatusOr<RestoredStep> RestoreToMemory(const RestoreAllocator& allocate,
                                         const RestoreOptions& options) override;
  void RequestOnDemand() noexcept override { NotePreemption(); }
  CheckpointerStatus status() const override;
  const std::string& dir() const override { return dir_; }

  // SlotSaver (engine/slot_saver.h).
  StepInfo Layout(std::span<const Item> items) const override {
    return PlanStepLayout(items, options_.chunk_size, pool_.parallelism());
  }
  bool FilesInMemory() const override { return OnMemoryFilesystem(dir_); }
  void SetRegistrar(MemoryRegistrar* registrar) override;
  void ReserveSlot(const StepInfo& layout) override;
  StatusOr<std::unique_ptr<StepSlot>> AcquireSlot(int64_t step, const StepInfo& layout) override;
  void ReleaseSlot(std::unique_ptr<StepSlot> slot) override { slots_.GiveBack(std::move(slot)); }
  StatusOr<SaveResult> SaveSlot(int64_t step, std::unique_ptr<StepSlot> slot,
                                std::function<Status(size_t)> item_ready,
                                std::function<Status()> gate) override;
  StatusOr<RestoredStep> RestoreMapped(const RestoreAllocator& begin_attempt,
                                       const RestoreOptions& options) override;
  SlotSaverStatus slot_status() const override;

 private:
  // A save: its items (in staging memory, the caller's buffers when
  // borrowed), or a slot whose files hold them already.
  struct Job {
    int64_t step = 0;
    std::vector<Item> items;        // data points into staging_, or the caller's (borrowed)
    std::function<Status()> ready;  // borrowed: called before the items are read
    std::unique_ptr<StepSlot> slot;
    std::function<Status(size_t)> item_ready;  // with a slot: before item i is read
    std::function<Status()> gate;              // with a slot: before the commit
    bool on_demand = false;                    // the process may exit once it commits
  };
  enum class Copy { kSnapshot, kBorrowed, kInPlace };

  // A notice is to be served at `step`: the job's sync step is reached (with
  // an agent) or any notice is pending (without).
  bool OnDemandDue(int64_t step) const noexcept {
    if (sync_) return sync_->Due(step);
    return PreemptionNotices() != served_notices_.load(std::memory_order_relaxed);
  }
  Status RemoveLeftovers();
  // Save()'s policy for a job: waits for the previous save, then commits
  // now (on-demand, sync) or hands the job to the saver thread.
  StatusOr<SaveResult> Submit(Job job, Copy copy);
  Status Snapshot(int64_t step, std::span<const Item> items, Job* job);
  // Runs `job` to its commit (then retention) on the calling thread.
  Status RunJob(Job& job);
  Status Commit(int64_t step, std::span<const Item> items);
  Status CommitInPlace(Job& job);
  // Gives back the slot of a job that will not commit, once nothing writes
  // it any more: copies into it may still be landing (a stager's device
  // copies), and the pool may unmap a slot it gets back.
  void GiveBackUncommitted(Job& job);
  // Waits until no save and no reservation is in flight.
  void AwaitQuiet();
  // The saver thread's: prepares the pending reservation.
  void Reserve() REQUIRES(mu_);
  // Tells the agent (its sync map) the host memory saves stage in.
  void ReportStaging();
  StatusOr<std::string> RetireForRecycling(int64_t new_step);
  Status DropStep(int64_t step);
  Status ApplyRetention();
  void RecordResult(int64_t step, const Status& s, double seconds);
  void LogOnDemand(int64_t step, Clock::time_point start) const;
  void SaverMain();
  void TimerMain();
  void ResetTimer();
  // Tries steps newest first; `read` restores one step's data given its
  // manifest. Mismatches between manifest and caller are not skipped.
  // With an agent_job: the agent's step, no fallback. `read` gets the
  // directory holding the step and its manifest.
  using StepReader = std::function<Status(const std::string& steps_dir, const StepInfo&)>;
  StatusOr<int64_t> RestoreNewest(const RestoreOptions& options, const StepReader& read);
  StatusOr<int64_t> RestoreThroughAgent(const RestoreOptions& options, const StepReader& read);

  const std::string dir_;
  const CheckpointerOptions options_;
  Env* const env_;
  // The directory's lock: let go after the members declared below it (the
  // threads, the slots, the pool), once nothing of this checkpointer
  // touches the directory.
  const UniqueFd lock_fd_;
  ThreadPool pool_;

  // The threads a restore reads and verifies with: with io_threads left at 0,
  // one per CPU, uncapped (a restore blocks the trainer, so nothing of its
  // own runs beside it: on a 16-CPU GPU host this reads the RAM disk 1.6x
  // faster than the 8 threads saves use); else the checkpointer's pool.
  class RestorePool {
   public:
    explicit RestorePool(CheckpointerImpl* c) : c_(c) {
      const int cpus = ThreadPool::DefaultThreads(1 << 10);
      if (c_->options_.io_threads == 0 && cpus > c_->pool_.parallelism()) {
        own_ = std::make_unique<ThreadPool>(cpus - 1);
      }
    }
    ThreadPool* get() const { return own_ ? own_.get() : &c_->pool_; }

   private:
    CheckpointerImpl* c_;
    std::unique_ptr<ThreadPool> own_;
  };
  StagingBuffer staging_;  // used by the caller while no job is in flight, by the saver otherwise
  SlotPool slots_;

  // Notices already answered by an on-demand save; starts at the count seen
  // at Open, so a notice delivered before Open is not this one's to serve.
  std::atomic<uint64_t> served_notices_;
  std::atomic<bool> time_due_{false};

  mutable Mutex mu_;
  CondVar cv_;
  std::optional<Job> job_ GUARDED_BY(mu_);  // handed to the saver
  bool busy_ GUARDED_BY(mu_) = false;       // a job is queued or running
  bool stop_ GUARDED_BY(mu_) = false;
  Status unreported_error_ GUARDED_BY(mu_);
  Status last_error_ GUARDED_BY(mu_);
  std::optional<int64_t> in_flight_step_ GUARDED_BY(mu_);
  bool borrowed_in_flight_ GUARDED_BY(mu_) = false;
  uint64_t staging_bytes_ GUARDED_BY(mu_) = 0;  // staging_.capacity(), for status()
  std::optional<int64_t> last_committed_ GUARDED_BY(mu_);
  Clock::time_point last_save_time_ GUARDED_BY(mu_);
  bool timer_reset_ GUARDED_BY(mu_) = false;
  std::optional<StepInfo> reserve_ GUARDED_BY(mu_);  // a slot to prepare on the saver thread
  bool reserving_ GUARDED_BY(mu_) = false;
  std::thread saver_;
  std::thread timer_;
  std::unique_ptr<AgentSync> sync_;  // null without a node agent
};

Status CheckpointerImpl::Init() {
  STRATA_RETURN_IF_ERROR(RemoveLeftovers());
  STRATA_RETURN_IF_ERROR(InstallPreemptionHandlers(options_.preemption_signals));
  if (options_.use_agent) {
    std::string agent_dir = options_.agent_dir.empty() ? JoinPath(dir_, std::string(kAgentDirName))
                                                       : options_.agent_dir;
    STRATA_ASSIGN_OR_RETURN(sync_,
                            AgentSync::Attach(agent_dir, options_.sync_timeout, &served_notices_));
  }
  saver_ = std::thread([this] { SaverMain(); });
  if (options_.save_interval_seconds > 0) timer_ = std::thread([this] { TimerMain(); });
  return Status::Ok();
}

CheckpointerImpl::~CheckpointerImpl() {
  Status s = Wait();
  if (!s.ok()) Log()->error("{}", s.message());
  {
    MutexLock l(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  // A reservation the saver is preparing ends first: it reports through
  // sync_, so the agent link goes only once no thread of ours is left.
  if (saver_.joinable()) saver_.join();
  if (timer_.joinable()) timer_.join();
  sync_.reset();
}

Status CheckpointerImpl::RemoveLeftovers() {
  STRATA_ASSIGN_OR_RETURN(auto entries, env_->ListDir(dir_));
  for (const auto& e : entries) {
    if (!IsTempName(e.name)) continue;
    Log()->info("removing leftover temporary {}", JoinPath(dir_, e.name));
    STRATA_RETURN_IF_ERROR(env_->RemoveAll(JoinPath(dir_, e.name)));
  }
  return Status::Ok();
}

StatusOr<SaveResult> CheckpointerImpl::Save(int64_t step, std::span<const Item> items,
                                            const SaveOptions& options) {
  if (step < 0) return InvalidArgumentError("step " + std::to_string(step) + " is negative");
  STRATA_RETURN_IF_ERROR(ValidateItems(items).WithContext("saving step " + std::to_string(step)));
  Job job;
  job.step = step;
  job.items.assign(items.begin(), items.end());
  job.ready = options.ready;
  return Submit(std::move(job), options.borrowed ? Copy::kBorrowed : Copy::kSnapshot);
}

StatusOr<SaveResult> CheckpointerImpl::SaveSlot(int64_t step, std::unique_ptr<StepSlot> slot,
                                                std::function<Status(size_t)> item_ready,
                                                std::function<Status()> gate) {
  Job job;
  job.step = step;
  job.slot = std::move(slot);
  job.item_ready = std::move(item_ready);
  job.gate = std::move(gate);
  return Submit(std::move(job), Copy::kInPlace);
}

StatusOr<SaveResult> CheckpointerImpl::Submit(Job job, Copy copy) {
  const int64_t step = job.step;
  const Clock::time_point start = Clock::now();
  // However Save() returns, the time it blocked the caller is a stall.
  struct StallReport {
    AgentSync* sync;
    Clock::time_point start;
    ~StallReport() {
      if (sync != nullptr) {
        sync->SaveStalled(
            std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start));
      }
    }
  } stall_report{sync_.get(), start};
  const uint64_t notices = PreemptionNotices();
  SaveResult result;
  result.step = step;
  result.on_demand = OnDemandDue(step);
  // The job's step this save answers, fixed now: a step published while it
  // is written is a new one.
  const uint64_t sync_generation = sync_ ? sync_->SyncDue(step) : 0;
  Status previous = Wait();
  if (!previous.ok()) {
    if (!result.on_demand) {
      GiveBackUncommitted(job);
      return previous;
    }
    Log()->warn("{}; writing the on-demand step {} anyway", previous.message(), step);
  }
  if (result.on_demand || !options_.async) {
    job.on_demand = result.on_demand;
    Status s = RunJob(job);
    RecordResult(step, s, SecondsSince(start));
    if (!s.ok()) return s;
    result.committed = true;
    if (result.on_demand) {
      served_notices_.store(notices, std::memory_order_relaxed);
      if (sync_) sync_->Served(step, sync_generation);
      result.should_exit = options_.exit_after_ondemand;
      LogOnDemand(step, start);
    }
  } else {
    // Borrowed and in-place jobs are read where they are, once `ready` /
    // `item_ready` says their bytes are there.
    if (copy == Copy::kSnapshot) {
      if (job.ready) {
        Status s = job.ready().WithContext("saving step " + std::to_string(step));
        if (!s.ok()) {
          RecordResult(step, s, SecondsSince(start));
          return s;
        }
        job.ready = nullptr;
      }
      std::vector<Item> items = std::move(job.items);
      job.items.clear();
      STRATA_RETURN_IF_ERROR(Snapshot(step, items, &job));
    }
    {
      MutexLock l(&mu_);
      job_ = std::move(job);
      busy_ = true;
      in_flight_step_ = step;
      borrowed_in_flight_ = copy != Copy::kSnapshot;
      staging_bytes_ = staging_.capacity();
    }
    cv_.SignalAll();
  }
  ResetTimer();
  return result;
}

// Copies the caller's buffers into staging memory, in parallel pieces.
Status CheckpointerImpl::Snapshot(int64_t step, std::span<const Item> items, Job* job) {
  size_t total = 0;
  for (const Item& it : items) total += it.size;
  STRATA_RETURN_IF_ERROR(
      staging_.Reserve(total).WithContext("saving step " + std::to_string(step)));
  constexpr size_t kPiece = 8 << 20;
  struct Piece {
    const std::byte* src;
    std::byte* dst;
    size_t n;
  };
  std::vector<Piece> pieces;
  std::byte* cursor = staging_.data();
  for (const Item& it : items) {
    const auto* src = static_cast<const std::byte*>(it.data);
    for (size_t off = 0; off < it.size; off += kPiece) {
      pieces.push_back({src + off, cursor + off, std::min(kPiece, it.size - off)});
    }
    job->items.push_back({it.name, it.dtype, it.shape, cursor, it.size});
    cursor += it.size;
  }
  pool_.ParallelFor(pieces.size(),
                    [&](size_t i) { CopyNonTemporal(pieces[i].dst, pieces[i].src, pieces[i].n); });
  CrashPoint("save.after_snapshot");
  return Status::Ok();
}

Status CheckpointerImpl::RunJob(Job& job) {
  Status s =
      job.ready ? job.ready().WithContext("saving step " + std::to_string(job.step)) : Status::Ok();
  if (!s.ok()) {
    GiveBackUncommitted(job);
    return s;
  }
  return job.slot ? CommitInPlace(job) : Commit(job.step, job.items);
}

void CheckpointerImpl::GiveBackUncommitted(Job& job) {
  if (!job.slot) return;
  for (size_t i = 0; job.item_ready && i < job.slot->layout().items.size(); ++i) {
    job.item_ready(i).IgnoreError();  // the save failed already; this only waits
  }
  slots_.GiveBack(std::move(job.slot));
}

// Commits the slot's step, keeps the slot for recycling, applies retention
// and, when the next save could take no slot without making files (the
// first saves of a job, or a directory another owns), prepares a spare
// slot on this thread, so that save does not.
Status CheckpointerImpl::CommitInPlace(Job& job) {
  auto info = CommitSlot(env_, &pool_, job.slot.get(), dir_, job.step, job.item_ready, job.gate);
  if (!info.ok()) {
    GiveBackUncommitted(job);
    return info.status();
  }
  StepInfo layout = job.slot->layout();
  slots_.Committed(job.step, std::move(job.slot));
  CrashPoint("save.before_retention");
  STRATA_RETURN_IF_ERROR(
      ApplyRetention().WithContext("after saving step " + std::to_string(job.step)));
  STRATA_ASSIGN_OR_RETURN(auto steps, ListSteps(dir_, env_));
  if (!job.on_demand && slots_.NeedsSpare(steps.size())) {  // no spare for a process that exits
    {
      MutexLock l(&mu_);
      if (!reserve_) reserve_ = std::move(layout);
    }
    cv_.SignalAll();
  }
  ReportStaging();
  return Status::Ok();
}

void CheckpointerImpl::ReportStaging() {
  if (!sync_) return;
  const SlotStatus s = slots_.status();
  sync_->Staging(s.mapped_bytes, s.pinned);
}

// Writes and commits `step`, then applies retention. Runs on the saver
// thread (async) or the caller's (sync / on-demand), never both at once.
Status CheckpointerImpl::Commit(int64_t step, std::span<const Item> items) {
  WriteStepRequest req;
  req.dir = dir_;
  req.step = step;
  req.items = items;
  req.chunk_size = options_.chunk_size;
  req.max_files = pool_.parallelism();
  STRATA_ASSIGN_OR_RETURN(req.recycle_dir, RetireForRecycling(step));
  STRATA_RETURN_IF_ERROR(WriteStep(env_, &pool_, req).status());
  CrashPoint("save.before_retention");
  return ApplyRetention().WithContext("after saving step " + std::to_string(step));
}

// With recycling on and max_to_keep steps already committed, the oldest is
// leaving anyway: rename it out of the step namespace now and hand its
// directory to the writer, whose data files it will overwrite.
StatusOr<std::string> CheckpointerImpl::RetireForRecycling(int64_t new_step) {
  if (!options_.recycle_space || options_.max_to_keep < 2) return std::string();
  STRATA_ASSIGN_OR_RETURN(auto steps, ListSteps(dir_, env_));
  if (static_cast<int>(steps.size()) < options_.max_to_keep || steps.front() >= new_step) {
    return std::string();
  }
  STRATA_ASSIGN_OR_RETURN(auto entries, env_->ListDir(dir_));
  std::string oldest = StepDirName(steps.front());
  for (const auto& e : entries) {
    if (e.name != oldest || e.type != DirEntry::Type::kDirectory) continue;
    std::string tmp = JoinPath(dir_, TempDirName(new_step));
    // A step being read is removed by retention instead.
    STRATA_ASSIGN_OR_RETURN(bool renamed, RenameUnlessRead(env_, JoinPath(dir_, oldest), tmp));
    if (!renamed) return std::string();
    CrashPoint("save.after_retire");
    return tmp;
  }
  return std::string();
}

// Renames the step out of the namespace first, so a crash mid-removal never
// leaves a manifest beside missing data.
Status CheckpointerImpl::DropStep(int64_t step) {
  std::string tmp = JoinPath(dir_, TempDirName(step));
  STRATA_RETURN_IF_ERROR(env_->Rename(JoinPath(dir_, StepDirName(step)), tmp));
  CrashPoint("retention.after_rename");
  return env_->RemoveAll(tmp);
}

// A retired step whose files a slot maps becomes the free slot instead of
// being removed (at most one).
Status CheckpointerImpl::ApplyRetention() {
  if (options_.max_to_keep <= 0) return Status::Ok();
  STRATA_ASSIGN_OR_RETURN(auto steps, ListSteps(dir_, env_));
  size_t keep = static_cast<size_t>(options_.max_to_keep);
  for (size_t i = 0; i + keep < steps.size(); ++i) {
    STRATA_ASSIGN_OR_RETURN(bool taken, slots_.TakeRetired(steps[i]));
    if (!taken) STRATA_RETURN_IF_ERROR(DropStep(steps[i]));
  }
  return Status::Ok();
}

void CheckpointerImpl::RecordResult(int64_t step, const Status& s, double seconds) {
  MutexLock l(&mu_);
  in_flight_step_.reset();
  if (s.ok()) {
    last_committed_ = step;
    last_error_ = Status::Ok();
    Log()->debug("committed step {} in {} in {:.3f} s", step, dir_, seconds);
  } else {
    last_error_ = s;
    Log()->error("{}", s.message());
  }
}

void CheckpointerImpl::LogOnDemand(int64_t step, Clock::time_point start) const {
  double since_notice = 0;
  const int64_t job_notice_ms = sync_ ? sync_->NoticeUnixMs() : 0;
  if (job_notice_ms > 0) {  // the job's notice, wherever it arrived
    since_notice = static_cast<double>(UnixMillisNow() - job_notice_ms) / 1000;
  } else if (int64_t ns = LastNoticeMonotonicNs(); ns > 0) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    since_notice = (static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec) -
                    static_cast<double>(ns)) /
                   1e9;
  }
  double grace = static_cast<double>(options_.grace_period.count());
  if (since_notice > grace) {
    Log()->error(
        "on-demand checkpoint of step {} committed {:.1f} s after the notice, past the "
        "{:.0f} s grace period",
        step, since_notice, grace);
  } else {
    Log()->info("on-demand checkpoint of step {} committed in {:.3f} s ({:.1f} s after the notice)",
                step, SecondsSince(start), since_notice);
  }
}

Status CheckpointerImpl::Wait() {
  MutexLock l(&mu_);
  while (busy_) cv_.Wait(&mu_);
  Status s = std::move(unreported_error_);
  unreported_error_ = Status::Ok();
  return s;
}

void CheckpointerImpl::AwaitIdle() {
  MutexLock l(&mu_);
  while (busy_) cv_.Wait(&mu_);
}

void CheckpointerImpl::SaverMain() {
  MutexLock l(&mu_);
  for (;;) {
    while (!stop_ && !job_.has_value() && !reserve_) cv_.Wait(&mu_);
    if (!job_) {
      if (stop_) return;
      Reserve();
      continue;
    }
    Job job = std::move(*job_);
    job_.reset();
    l.Unlock();
    Clock::time_point start = Clock::now();
    const int64_t step = job.step;
    Status s = RunJob(job);
    RecordResult(step, s, SecondsSince(start));
    l.Lock();
    if (!s.ok()) unreported_error_ = s;
    busy_ = false;
    borrowed_in_flight_ = false;
    cv_.SignalAll();
  }
}

void CheckpointerImpl::Reserve() {
  StepInfo layout = std::move(*reserve_);
  reserve_.reset();
  reserving_ = true;
  mu_.Unlock();  // the caller's lock is held again on return
  Status s = slots_.Prepare(layout);
  if (!s.ok()) Log()->warn("reserving memory for the next save in {}: {}", dir_, s.message());
  ReportStaging();
  mu_.Lock();
  reserving_ = false;
  cv_.SignalAll();
}

void CheckpointerImpl::AwaitQuiet() {
  MutexLock l(&mu_);
  while (busy_ || reserving_ || reserve_) cv_.Wait(&mu_);
}

void CheckpointerImpl::SetRegistrar(MemoryRegistrar* registrar) {
  AwaitQuiet();
  slots_.SetRegistrar(registrar);
}

void CheckpointerImpl::ReserveSlot(const StepInfo& layout) {
  {
    MutexLock l(&mu_);
    reserve_ = layout;
  }
  cv_.SignalAll();
}

StatusOr<std::unique_ptr<StepSlot>> CheckpointerImpl::AcquireSlot(int64_t step,
                                                                  const StepInfo& layout) {
  AwaitQuiet();
  return slots_.Acquire(step, layout);
}

SlotSaverStatus CheckpointerImpl::slot_status() const {
  SlotSaverStatus s;
  static_cast<SlotStatus&>(s) = slots_.status();
  MutexLock l(&mu_);
  s.reserving = reserving_ || reserve_.has_value();
  return s;
}

void CheckpointerImpl::TimerMain() {
  const auto interval = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(options_.save_interval_seconds));
  MutexLock l(&mu_);
  while (!stop_) {
    timer_reset_ = false;
    const Clock::time_point due = last_save_time_ + interval;
    while (!stop_ && !timer_reset_ && cv_.WaitUntil(&mu_, due)) {
    }
    if (stop_ || timer_reset_) continue;
    time_due_.store(true, std::memory_order_relaxed);
    while (!stop_ && !timer_reset_) cv_.Wait(&mu_);
  }
}

void CheckpointerImpl::ResetTimer() {
  {
    MutexLock l(&mu_);
    last_save_time_ = Clock::now();
    timer_reset_ = true;
    time_due_.store(false, std::memory_order_relaxed);
  }
  cv_.SignalAll();
}

StatusOr<int64_t> CheckpointerImpl::RestoreNewest(const RestoreOptions& options,
                                                  const StepReader& read) {
  if (options_.agent_job) return RestoreThroughAgent(options, read);
  std::vector<int64_t> steps;
  if (options.step) {
    steps.push_back(*options.step);
  } else {
    STRATA_ASSIGN_OR_RETURN(steps, ListSteps(dir_, env_));
    std::reverse(steps.begin(), steps.end());
  }
  std::string skipped;
  for (int64_t step : steps) {
    Status s;
    auto info = ReadStepInfo(dir_, step, env_);
    s = info.ok() ? read(dir_, *info) : info.status();
    if (s.ok()) {
      ResetTimer();
      return step;
    }
    if (s.code() == StatusCode::kInvalidArgument || options.step) return s;
    Log()->warn("skipping step {} in {}: {}", step, dir_, s.message());
    skipped += (skipped.empty() ? "" : ", ") + std::to_string(step);
  }
  if (skipped.empty()) return NotFoundError("no checkpoint in " + dir_);
  return DataLossError("no checkpoint in " + dir_ + " verifies (skipped corrupt steps " + skipped +
                       ")");
}

StatusOr<int64_t> CheckpointerImpl::RestoreThroughAgent(const RestoreOptions& options,
                                                        const StepReader& read) {
  const AgentJob& job = *options_.agent_job;
  if (options.step) {
    return InvalidArgumentError("job " + job.job + ": the agent chooses the step to restore; " +
                                "RestoreOptions::step " + std::to_string(*options.step) +
                                " cannot be asked for");
  }
  STRATA_ASSIGN_OR_RETURN(auto point, AgentHandshake(dir_, job));
  if (!point) {
    return NotFoundError("the agent says job " + job.job + " starts fresh: no step is complete " +
                         "for every node (node " + std::to_string(job.node_rank) + ", " + dir_ +
                         ")");
  }
  STRATA_ASSIGN_OR_RETURN(StepInfo info, ReadStepInfo(point->steps_dir, point->step, env_));
  STRATA_RETURN_IF_ERROR(read(point->steps_dir, info));
  ResetTimer();
  return point->step;
}

StatusOr<int64_t> CheckpointerImpl::RestoreInto(std::span<const MutableItem> into,
                                                const RestoreOptions& options) {
  STRATA_RETURN_IF_ERROR(Wait());
  RestorePool pool(this);
  return RestoreNewest(options, [&](const std::string& steps_dir, const StepInfo& info) -> Status {
    std::vector<std::byte*> dst;
    STRATA_RETURN_IF_ERROR(MatchBuffers(info, into, &dst));
    return ReadStepData(env_, pool.get(), JoinPath(steps_dir, StepDirName(info.step)), info, dst);
  });
}

StatusOr<RestoredStep> CheckpointerImpl::RestoreToMemory(const RestoreAllocator& allocate,
                                                         const RestoreOptions& options) {
  STRATA_RETURN_IF_ERROR(Wait());
  RestoredStep out;
  RestorePool pool(this);
  auto step = RestoreNewest(options, [&](const std::string& steps_dir, const StepInfo& info) {
    return ReadOwned(env_, pool.get(), steps_dir, info, allocate, &out, options);
  });
  if (!step.ok()) return step.status();
  out.step = *step;
  return out;
}

StatusOr<RestoredStep> CheckpointerImpl::RestoreMapped(const RestoreAllocator& begin_attempt,
                                                       const RestoreOptions& options) {
  STRATA_RETURN_IF_ERROR(Wait());
  RestoredStep out;
  RestorePool pool(this);
  auto step = RestoreNewest(options, [&](const std::string& steps_dir, const StepInfo& info) {
    if (begin_attempt) STRATA_RETURN_IF_ERROR(begin_attempt(0).status());
    if (options_.agent_job || steps_dir != dir_) {
      return ReadOwned(env_, pool.get(), steps_dir, info, begin_attempt, &out, options);
    }
    const std::optional<HeldRegion> held = slots_.Held(info.step, info);
    auto mapped = VerifyMapped(env_, pool.get(), JoinPath(steps_dir, StepDirName(info.step)), info,
                               held ? &*held : nullptr, options);
    if (mapped.status().code() == StatusCode::kUnimplemented) {
      return ReadOwned(env_, pool.get(), steps_dir, info, begin_attempt, &out, options);
    }
    if (!mapped.ok()) return mapped.status();
    out = std::move(*mapped);
    return Status::Ok();
  });
  if (!step.ok()) return step.status();
  out.step = *step;
  return out;
}

CheckpointerStatus CheckpointerImpl::status() const {
  MutexLock l(&mu_);
  CheckpointerStatus s;
  s.in_flight_step = in_flight_step_;
  s.last_committed_step = last_committed_;
  s.last_error = last_error_;
  s.notices = PreemptionNotices();
  s.staging_bytes = staging_bytes_;
  s.borrowed_in_flight = borrowed_in_flight_;
  s.reserving = reserving_ || reserve_.has_value();
  const SlotStatus slots = slots_.status();
  s.mapped_bytes = slots.mapped_bytes;
  s.mapped_pinned = slots.pinned;
  if (sync_) {
    s.agent_sync = sync_->path();
    s.sync_step = sync_->PendingSyncStep();
  }
  return s;
}

}  // namespace

SlotSaver* SlotSaverOf(Checkpointer* ckpt) { return dynamic_cast<CheckpointerImpl*>(ckpt); }

const RestoredItem* RestoredStep::Find(std::string_view name) const {
  for (const auto& it : items) {
    if (it.name == name) return &it;
  }
  return nullptr;
}

StatusOr<std::unique_ptr<Checkpointer>> Checkpointer::Open(const std::string& dir,
                                                           CheckpointerOptions options) {
  STRATA_RETURN_IF_ERROR(ValidateOptions(options).WithContext("opening " + dir));
  Env* env = options.env != nullptr ? options.env : Env::Default();
  STRATA_RETURN_IF_ERROR(CreateDirs(env, dir));
  STRATA_ASSIGN_OR_RETURN(UniqueFd lock, LockDirectory(dir));
  if (options.agent_job) options.max_to_keep = 0;  // the agent owns the directory
  auto impl = std::make_unique<CheckpointerImpl>(dir, std::move(options), std::move(lock));
  STRATA_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<Checkpointer>(std::move(impl));
}

const char* Version() { return STRATA_VERSION; }

}  // namespace strata
