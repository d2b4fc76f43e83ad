// Copyright 2026 The Strata Authors.
//
// CudaStager (include/strata/cuda.h). A save asks the Checkpointer for the
// step's files mapped into memory (a StepSlot, engine/slot_saver.h), copies
// every item into them -- device items on their device's lane
// (engine/device_lanes.h), host items by memcpy -- and hands the slot back
// to be checksummed in place and committed; the checksums of an item wait
// for the lane mark recorded after its copy, so they start while later
// items are still copied. The stager page-locks the slots' memory with
// cudaHostRegister (it is the Checkpointer's MemoryRegistrar).
//
// A restore lends the engine memory to read and verify into -- a
// page-locked block when the stager holds one, else the engine's own -- and
// copies each item out as soon as it is verified, while the rest is read.
// Without a slot saver (another Checkpointer implementation), saves go
// through that page-locked block, borrowed by the engine.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <optional>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <utility>

#include "engine/cuda_runtime.h"
#include "engine/device_lanes.h"
#include "engine/planned_restore.h"
#include "engine/slot_saver.h"
#include "engine/staging.h"
#include "engine/step_io.h"
#include "strata/cuda.h"
#include "util/copy.h"
#include "util/logging.h"
#include "util/mutex.h"
#include "util/thread_pool.h"

namespace strata {
namespace {

constexpr size_t kAlign = 64;
size_t Padded(size_t n) { return (n + kAlign - 1) & ~(kAlign - 1); }
// Bytes of device copies between two lane marks: the checksums of a save
// start this far behind its copies.
constexpr size_t kMarkBytes = 256 << 20;
// Host items at least this large are copied in pieces on several threads.
constexpr size_t kHostPiece = 8 << 20;

std::string ItemWhat(int64_t step, const std::string& name) {
  return "step " + std::to_string(step) + " item \"" + name + "\"";
}

// The slot saver of `ckpt` to save in place through, or null for the copy
// path: another Checkpointer implementation has none, and step files that
// are not in memory are not page-locked (`pins`: this stager would), so
// device copies go through the stager's page-locked block instead.
SlotSaver* InPlaceSaver(Checkpointer* ckpt, bool pins) {
  SlotSaver* saver = SlotSaverOf(ckpt);
  if (saver == nullptr || !pins || saver->FilesInMemory()) return saver;
  Log()->info(
      "CUDA staging: {} is not on a memory filesystem (tmpfs); device copies are staged in "
      "page-locked memory and written to the step files from there",
      ckpt->dir());
  return nullptr;
}

// The copy path's block for `meta`: every item 64-byte aligned.
StatusOr<size_t> BlockSize(const std::vector<Item>& meta) {
  size_t total = 0;
  for (const Item& it : meta) {
    if (it.size > SIZE_MAX - kAlign || __builtin_add_overflow(total, Padded(it.size), &total)) {
      return InvalidArgumentError("item \"" + it.name + "\": the state's size overflows");
    }
  }
  return total;
}

class CudaStagerImpl final : public CudaStager, public MemoryRegistrar {
 public:
  CudaStagerImpl(Checkpointer* ckpt, std::unique_ptr<cuda::Runtime> rt, int devices,
                 const CudaStagerOptions& options)
      : ckpt_(ckpt),
        rt_(std::move(rt)),
        lanes_(rt_ ? std::make_unique<DeviceLanes>(*rt_) : nullptr),
        restore_(lanes_.get(), devices, options.pin),
        devices_(devices),
        options_(options),
        saver_(InPlaceSaver(ckpt, rt_ != nullptr && options.pin)) {}

  ~CudaStagerImpl() override {
    AwaitBlock();
    WaitStaged().IgnoreError();  // a failed copy fails its save; nothing to add here
    ckpt_->AwaitIdle();          // the save in flight reads what was copied
    if (registering_) saver_->SetRegistrar(nullptr);
    lanes_.reset();
    FreePinned();
  }

  StatusOr<SaveResult> Save(int64_t step, std::span<const DeviceItem> items, DeviceSaveMode mode,
                            std::function<Status()> gate) override;
  Status WaitStaged() override;
  Status Reserve(std::span<const DeviceItem> items) override;
  Status OrderAfterStaging(void* stream, int device) override;
  StatusOr<int64_t> RestoreInto(std::span<const MutableDeviceItem> into,
                                const RestoreOptions& options) override;
  StatusOr<RestoredStep> RestorePlanned(const std::string& key, const RestorePlan& plan,
                                        const RestoreOptions& options) override;
  CudaStagerStatus status() const override;

  // MemoryRegistrar: page-locks the step files' memory for every device.
  // Called on the engine's thread too: the call runs on the home device,
  // so no context is made for it on another.
  Status Register(void* p, size_t n) override {
    return rt_->Check(
        OnHome([&] { return rt_->cudaHostRegister(p, n, cuda::kHostRegisterPortable); }),
        "cudaHostRegister",
        std::to_string(n) + " bytes of step files, on device " + std::to_string(home_.load()));
  }
  void Unregister(void* p) override {
    // The pages are unmapped next whatever it says; a refusal is logged (the
    // runtime may keep them locked until the process exits).
    Status s = rt_->Check(OnHome([&] { return rt_->cudaHostUnregister(p); }, /*release=*/true),
                          "cudaHostUnregister", "step files");
    if (!s.ok()) Log()->warn("unlocking step files mapped at {}: {}", p, s.message());
  }

 private:
  // With `need_data` false (a reservation), the addresses are not checked.
  Status Check(std::span<const DeviceItem> items, int64_t step, std::vector<Item>* meta,
               bool need_data = true) const;
  Status CheckDevice(int device, const std::string& name) const {
    return restore_.CheckDevice(device, name);
  }
  StatusOr<RestoredStep> RestoreWith(const PlannedRestore::Planner& planner, bool lend_block,
                                     const RestoreOptions& options);
  // The layout of `meta` in a step's files, worked out again only when the
  // items' names, dtypes, shapes or sizes changed.
  const StepInfo& LayoutFor(const std::vector<Item>& meta);
  StatusOr<SaveResult> SaveInPlace(int64_t step, std::span<const DeviceItem> items,
                                   const std::vector<Item>& meta, DeviceSaveMode mode,
                                   std::function<Status()> gate);
  // Copies every item to `dst[i]`: host items at once, device items
  // enqueued on their lanes (for an overlapped save those that are not
  // deferrable first), with a mark every kMarkBytes (mark_of_[i]: the mark
  // to wait for). Sets in_flight_ when copies are pending and `*urgent` to
  // the mark after those an overlapped save waits for.
  Status CopyIn(int64_t step, std::span<const DeviceItem> items, const std::vector<std::byte*>& dst,
                DeviceSaveMode mode, int* urgent);
  // Waits for the copies `mode` says Save() returns after: all (blocking),
  // or those before mark `urgent` (overlapped).
  Status AwaitCopies(DeviceSaveMode mode, int urgent);
  void CopyHost(std::byte* dst, const void* src, size_t n);
  StatusOr<SaveResult> SaveThroughStaging(int64_t step, std::span<const DeviceItem> items,
                                          std::vector<Item> meta, DeviceSaveMode mode,
                                          std::function<Status()> gate);
  void ReserveRestored(const std::vector<MutableItem>& buffers);

  // The home device: one the state is on (the first device an item or a
  // restore plan names). Calls that concern no device (page-locking,
  // freeing host memory) run there, whatever thread makes them: a thread
  // that never used a device would make device 0's context (hundreds of
  // MiB of a GPU the process may not use). Until an item names a device,
  // nothing is page-locked: host items need no locked memory.
  // A `release` (of page-locked memory) runs even where the home device
  // cannot be set: skipped, it would leave the pages locked.
  // The call is made relaxed (cuda::CaptureRelaxed): it may run on the
  // engine's thread while the trainer captures a graph.
  template <typename Call>
  int OnHome(Call call, bool release = false) const {
    cuda::DeviceGuard guard(*rt_);
    std::optional<cuda::CaptureRelaxed> relaxed;
    if (const int home = home_.load(); home >= 0) {
      if (const int err = rt_->cudaSetDevice(home); err == 0) {
        relaxed.emplace(*rt_);
      } else {
        if (!release) return err;
        rt_->cudaGetLastError();
      }
    }
    return call();
  }
  void NoteHome(int device) {
    int none = -1;  // a device the checks would refuse is not noted
    if (device >= 0 && device < devices_) home_.compare_exchange_strong(none, device);
  }
  template <typename Items>
  void NoteHome(const Items& items) {
    for (size_t i = 0; i < items.size() && home_.load() < 0; ++i) NoteHome(items[i].device);
  }
  // Page-locks the step files from now on, once the home device is known
  // (before that, no device item was seen: nothing needs locked memory).
  // On the caller's thread, before a slot is asked for.
  void StartRegistering() {
    if (registering_ || saver_ == nullptr || rt_ == nullptr || !options_.pin || home_.load() < 0) {
      return;
    }
    saver_->SetRegistrar(this);
    registering_ = true;
  }

  size_t capacity() const { return pinned_ != nullptr ? pinned_size_ : pageable_.capacity(); }
  std::byte* base() const { return pinned_ != nullptr ? pinned_ : pageable_.data(); }
  Status ReserveStaging(size_t size);
  // The copy path: reserves the block for `meta` on a thread of its own,
  // after the save in flight, so that the next save sets nothing up.
  // AwaitBlock() joins it; every use of the block comes after.
  void ReserveBlockAhead(const std::vector<Item>& meta);
  void AwaitBlock() {
    if (block_reserver_.joinable()) block_reserver_.join();
  }
  void FreePinned();
  ThreadPool* HostPool();

  Checkpointer* const ckpt_;
  const std::unique_ptr<cuda::Runtime> rt_;  // null: host buffers only
  std::unique_ptr<DeviceLanes> lanes_;       // null without a runtime
  PlannedRestore restore_;
  const int devices_;
  const CudaStagerOptions options_;
  SlotSaver* const saver_;  // null: the checkpointer cannot save in place
  std::unique_ptr<ThreadPool> host_pool_;
  std::vector<Item> layout_meta_;  // what layout_ was made for (data not compared)
  StepInfo layout_;
  std::vector<int> mark_of_;  // per item of the save in flight: its lane mark
  std::byte* pinned_ = nullptr;
  size_t pinned_size_ = 0;
  StagingBuffer pageable_;  // when pinning is off or failed
  bool warned_unpinned_ = false;
  // For status(), which may be read from any thread.
  std::atomic<bool> in_flight_{false};  // a save's copies not yet waited for (an overlapped
                                        // save's after it returned; a blocking one's inside it)
  std::atomic<uint64_t> block_bytes_{0};
  std::atomic<bool> block_pinned_{false};
  std::atomic<int> home_{-1};   // see OnHome; set once
  bool registering_ = false;    // this is the saver's registrar
  std::thread block_reserver_;  // ReserveBlockAhead's
  Mutex block_mu_;
  size_t block_wanted_ GUARDED_BY(block_mu_) = 0;  // the largest size asked for, not yet taken
  std::atomic<bool> block_reserving_{false};       // written with block_mu_ held
};

// Everything the checkpointer would refuse is refused before any copy.
Status CudaStagerImpl::Check(std::span<const DeviceItem> items, int64_t step,
                             std::vector<Item>* meta, bool need_data) const {
  if (step < 0) return InvalidArgumentError("step " + std::to_string(step) + " is negative");
  meta->reserve(items.size());
  for (const DeviceItem& it : items) {
    STRATA_RETURN_IF_ERROR(CheckDevice(it.device, it.name));
    if (need_data && it.size > 0 && it.data == nullptr) {
      return InvalidArgumentError("item \"" + it.name + "\": null data for " +
                                  std::to_string(it.size) + " bytes");
    }
    meta->push_back(Item{it.name, it.dtype, it.shape, it.data, it.size});
  }
  return ValidateItems(*meta, need_data).WithContext("step " + std::to_string(step));
}

const StepInfo& CudaStagerImpl::LayoutFor(const std::vector<Item>& meta) {
  auto same = [](const Item& a, const Item& b) {
    return a.size == b.size && a.dtype == b.dtype && a.shape == b.shape && a.name == b.name;
  };
  if (meta.size() != layout_meta_.size() ||
      !std::equal(meta.begin(), meta.end(), layout_meta_.begin(), same)) {
    layout_ = saver_->Layout(meta);
    layout_meta_ = meta;
  }
  return layout_;
}

ThreadPool* CudaStagerImpl::HostPool() {
  if (!host_pool_) host_pool_ = std::make_unique<ThreadPool>(ThreadPool::DefaultThreads() - 1);
  return host_pool_.get();
}

void CudaStagerImpl::CopyHost(std::byte* dst, const void* src, size_t n) {
  const auto* from = static_cast<const std::byte*>(src);
  if (n < 2 * kHostPiece) {
    std::memcpy(dst, from, n);
    return;
  }
  const size_t pieces = (n + kHostPiece - 1) / kHostPiece;
  HostPool()->ParallelFor(pieces, [&](size_t i) {
    const size_t off = i * kHostPiece;
    CopyNonTemporal(dst + off, from + off, std::min(kHostPiece, n - off));
  });
}

Status CudaStagerImpl::CopyIn(int64_t step, std::span<const DeviceItem> items,
                              const std::vector<std::byte*>& dst, DeviceSaveMode mode,
                              int* urgent) {
  *urgent = -1;
  mark_of_.assign(items.size(), -1);
  in_flight_ = false;
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].device < 0 && items[i].size > 0) CopyHost(dst[i], items[i].data, items[i].size);
  }
  if (!lanes_) return Status::Ok();
  lanes_->Begin();
  std::vector<size_t> unmarked;  // device items copied since the last mark
  size_t since_mark = 0;
  auto mark = [&]() -> Status {
    STRATA_ASSIGN_OR_RETURN(int m, lanes_->Mark());
    for (size_t i : unmarked) mark_of_[i] = m;
    unmarked.clear();
    since_mark = 0;
    return Status::Ok();
  };
  cuda::DeviceGuard guard(*rt_);
  const bool overlap = mode == DeviceSaveMode::kOverlapped;
  for (bool deferred : {false, true}) {
    for (size_t i = 0; i < items.size(); ++i) {
      const DeviceItem& it = items[i];
      if (it.device < 0 || (overlap && it.deferrable) != deferred) continue;
      STRATA_RETURN_IF_ERROR(lanes_->Copy(it.device, it.stream, dst[i], it.data, it.size,
                                          cuda::kMemcpyDeviceToHost, ItemWhat(step, it.name)));
      unmarked.push_back(i);
      since_mark += it.size;
      if (since_mark >= kMarkBytes) STRATA_RETURN_IF_ERROR(mark());
    }
    if (!unmarked.empty()) STRATA_RETURN_IF_ERROR(mark());
    if (!deferred && !mark_of_.empty()) {
      *urgent = *std::max_element(mark_of_.begin(), mark_of_.end());
    }
  }
  STRATA_RETURN_IF_ERROR(lanes_->Finish());
  in_flight_ = lanes_->pending();
  return Status::Ok();
}

Status CudaStagerImpl::AwaitCopies(DeviceSaveMode mode, int urgent) {
  if (mode == DeviceSaveMode::kBlocking) return WaitStaged();
  return lanes_ ? lanes_->WaitMark(urgent) : Status::Ok();
}

StatusOr<SaveResult> CudaStagerImpl::Save(int64_t step, std::span<const DeviceItem> items,
                                          DeviceSaveMode mode, std::function<Status()> gate) {
  AwaitBlock();
  STRATA_RETURN_IF_ERROR(WaitStaged());
  std::vector<Item> meta;
  STRATA_RETURN_IF_ERROR(Check(items, step, &meta));
  NoteHome(items);
  StartRegistering();
  if (saver_ == nullptr) {
    return SaveThroughStaging(step, items, std::move(meta), mode, std::move(gate));
  }
  return SaveInPlace(step, items, meta, mode, std::move(gate));
}

StatusOr<SaveResult> CudaStagerImpl::SaveInPlace(int64_t step, std::span<const DeviceItem> items,
                                                 const std::vector<Item>& meta, DeviceSaveMode mode,
                                                 std::function<Status()> gate) {
  const StepInfo& layout = LayoutFor(meta);
  // Waits for the previous save: its checksums may still wait on our marks.
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<StepSlot> slot, saver_->AcquireSlot(step, layout));
  std::vector<std::byte*> dst(items.size());
  for (size_t i = 0; i < items.size(); ++i) dst[i] = slot->data(i);
  int urgent = -1;
  Status copied = CopyIn(step, items, dst, mode, &urgent);
  if (!copied.ok()) {
    if (lanes_) lanes_->Sync().IgnoreError();  // nothing may still write the slot
    in_flight_ = false;
    saver_->ReleaseSlot(std::move(slot));
    return copied;
  }
  std::function<Status(size_t)> item_ready;
  if (in_flight_) {
    item_ready = [lanes = lanes_.get(), marks = &mark_of_](size_t i) {
      return lanes->WaitMark((*marks)[i]);
    };
  }
  // The save is handed over while its copies still land, in either mode:
  // the checksums follow them mark by mark, so a blocking save is committed
  // about one checksum of a mark after its last copy, not a whole pass
  // over the state later. Save() then waits for what `mode` says.
  auto saved = saver_->SaveSlot(step, std::move(slot), std::move(item_ready), std::move(gate));
  if (!saved.ok() && lanes_) {  // refused: the slot went back, nothing may still write it
    // The refusal is what Save() returns; a copy of this save that failed
    // as well is said here, or nothing would tell of it.
    Status synced = lanes_->Sync();
    in_flight_ = false;
    if (!synced.ok()) {
      Log()->warn("step {} in {} was refused ({}), and its copies failed as well: {}", step,
                  ckpt_->dir(), saved.status().message(), synced.message());
    }
  }
  if (!saved.ok()) return saved;
  Status waited = AwaitCopies(mode, urgent);
  if (waited.ok()) return saved;
  // A failed copy fails the save too (its checksums wait on every copy):
  // the save's outcome is collected, so that the next save does not report
  // it again. A save that committed all the same (a committing save, or
  // one whose copies all completed before the wait failed) stands.
  const Status save = saved->committed ? Status::Ok() : ckpt_->Wait();
  if (lanes_) lanes_->Sync().IgnoreError();
  in_flight_ = false;
  if (!save.ok()) return waited;
  Log()->warn("step {} in {} is committed, but waiting for its copies afterwards failed: {}", step,
              ckpt_->dir(), waited.message());
  return saved;
}

StatusOr<SaveResult> CudaStagerImpl::SaveThroughStaging(int64_t step,
                                                        std::span<const DeviceItem> items,
                                                        std::vector<Item> meta, DeviceSaveMode mode,
                                                        std::function<Status()> gate) {
  ckpt_->AwaitIdle();  // the previous save may still read the staging memory
  STRATA_ASSIGN_OR_RETURN(const size_t total, BlockSize(meta));
  STRATA_RETURN_IF_ERROR(ReserveStaging(total));
  std::vector<std::byte*> dst;
  size_t offset = 0;
  for (Item& it : meta) {
    dst.push_back(base() + offset);
    it.data = dst.back();  // the checkpointer reads the staged copy
    offset += Padded(it.size);
  }
  int urgent = -1;
  Status copied = CopyIn(step, items, dst, mode, &urgent);
  if (copied.ok()) copied = AwaitCopies(mode, urgent);
  if (!copied.ok()) {
    if (lanes_) lanes_->Sync().IgnoreError();
    in_flight_ = false;
    return copied;
  }
  SaveOptions options;
  options.borrowed = true;
  // Runs on the engine's writer before it reads a byte; the marks are not
  // re-recorded before this save has finished (Save waits for it).
  const int last = mark_of_.empty() ? -1 : *std::max_element(mark_of_.begin(), mark_of_.end());
  options.ready = [lanes = lanes_.get(), last, gate = std::move(gate)]() {
    for (int m = 0; lanes != nullptr && m <= last; ++m) STRATA_RETURN_IF_ERROR(lanes->WaitMark(m));
    return gate ? gate() : Status::Ok();
  };
  auto saved = ckpt_->Save(step, meta, options);
  if (!saved.ok() && lanes_) {  // refused: `ready` never runs, nothing may still write the block
    lanes_->Sync().IgnoreError();
    in_flight_ = false;
  }
  return saved;
}

Status CudaStagerImpl::WaitStaged() {
  if (!in_flight_) return Status::Ok();
  in_flight_ = false;
  return lanes_->WaitDone();
}

Status CudaStagerImpl::Reserve(std::span<const DeviceItem> items) {
  std::vector<Item> meta;
  STRATA_RETURN_IF_ERROR(Check(items, 0, &meta, /*need_data=*/false));
  NoteHome(items);
  if (saver_ == nullptr) {
    ReserveBlockAhead(meta);
    return Status::Ok();
  }
  StartRegistering();
  saver_->ReserveSlot(LayoutFor(meta));
  return Status::Ok();
}

void CudaStagerImpl::ReserveBlockAhead(const std::vector<Item>& meta) {
  auto size = BlockSize(meta);
  if (!size.ok()) return;  // a size that overflows fails the save
  {
    // A reservation under way takes the new size too: joining it here
    // could hold the caller for the save in flight and the allocation.
    MutexLock l(&block_mu_);
    block_wanted_ = std::max(block_wanted_, *size);
    if (block_reserving_) return;
    block_reserving_ = true;  // a thread is started below
  }
  AwaitBlock();  // the last one returned: it found nothing more wanted
  auto reserve = [this] {
    for (;;) {
      size_t n = 0;
      {
        MutexLock l(&block_mu_);
        n = std::exchange(block_wanted_, 0);
        if (n == 0) {
          block_reserving_ = false;
          return;
        }
      }
      ckpt_->AwaitIdle();            // a save in flight may read the block being replaced
      Status s = ReserveStaging(n);  // nothing when the block is large enough
      if (!s.ok()) {
        Log()->warn("CUDA staging for {}: reserving {} bytes ahead: {}; the next save tries again",
                    ckpt_->dir(), n, s.message());
      }
    }
  };
  try {
    block_reserver_ = std::thread(reserve);
  } catch (const std::system_error&) {  // no thread to be had: here, then
    reserve();
  }
}

Status CudaStagerImpl::OrderAfterStaging(void* stream, int device) {
  if (!in_flight_) return Status::Ok();
  return lanes_->OrderAfter(stream, device);
}

CudaStagerStatus CudaStagerImpl::status() const {
  CudaStagerStatus s;
  s.in_place = saver_ != nullptr;
  s.devices = devices_;
  s.copies_in_flight = in_flight_;
  if (saver_ != nullptr) {
    const SlotSaverStatus slots = saver_->slot_status();
    s.staging_bytes = slots.mapped_bytes;
    s.staging_pinned = slots.pinned;
    s.reserving = slots.reserving;
  } else {
    s.reserving = block_reserving_.load();
  }
  if (const uint64_t block = block_bytes_.load(); block > 0) {  // the copy path's block
    s.staging_pinned = (s.staging_bytes == 0 || s.staging_pinned) && block_pinned_.load();
    s.staging_bytes += block;
  }
  return s;
}

Status CudaStagerImpl::ReserveStaging(size_t size) {
  if (size <= capacity()) return Status::Ok();
  size = std::max<size_t>(Padded(size), 1 << 16);
  FreePinned();
  // Page-locked only once a device item was seen: host items need none,
  // and page-locking makes a context on the thread's device.
  if (options_.pin && rt_ && home_.load() >= 0) {
    void* p = nullptr;
    Status s =
        rt_->Check(OnHome([&] { return rt_->cudaHostAlloc(&p, size, cuda::kHostAllocPortable); }),
                   "cudaHostAlloc", std::to_string(size) + " bytes of staging memory");
    if (s.ok()) {
      pinned_ = static_cast<std::byte*>(p);
      pinned_size_ = size;
      block_bytes_ = size;
      block_pinned_ = true;
      return Status::Ok();
    }
    if (!warned_unpinned_) {
      warned_unpinned_ = true;
      Log()->warn(
          "CUDA staging: cannot pin {} bytes ({}); staging in pageable memory, device "
          "copies will be slower and synchronous",
          size, s.message());
    }
  }
  STRATA_RETURN_IF_ERROR(pageable_.Reserve(size));
  block_bytes_ = pageable_.capacity();
  return Status::Ok();
}

void CudaStagerImpl::FreePinned() {
  if (pinned_ != nullptr) {
    rt_->Check(OnHome([&] { return rt_->cudaFreeHost(pinned_); }, /*release=*/true), "cudaFreeHost",
               "staging memory")
        .IgnoreError();
  }
  pinned_ = nullptr;
  pinned_size_ = 0;
  block_bytes_ = pageable_.capacity();
  block_pinned_ = false;
}

// The items just restored, as the next Save() will lay them out: their
// memory prepared in the background.
void CudaStagerImpl::ReserveRestored(const std::vector<MutableItem>& buffers) {
  if (!options_.reserve_after_restore) return;
  std::vector<Item> meta;
  for (const MutableItem& m : buffers)
    meta.push_back(Item{m.name, m.dtype, m.shape, m.data, m.size});
  if (saver_ == nullptr) {
    ReserveBlockAhead(meta);
    return;
  }
  StartRegistering();
  saver_->ReserveSlot(LayoutFor(meta));
}

StatusOr<int64_t> CudaStagerImpl::RestoreInto(std::span<const MutableDeviceItem> into,
                                              const RestoreOptions& options) {
  std::vector<MutableItem> buffers;
  std::unordered_map<std::string, size_t> by_name;
  for (size_t i = 0; i < into.size(); ++i) {
    const MutableDeviceItem& m = into[i];
    STRATA_RETURN_IF_ERROR(CheckDevice(m.device, m.name));
    if (!by_name.emplace(m.name, i).second) {
      return InvalidArgumentError("restoring: two buffers are named \"" + m.name + "\"");
    }
    buffers.push_back(MutableItem{m.name, m.dtype, m.shape, m.data, m.size});
  }
  NoteHome(into);
  // Pairs the step being read with the buffers (once per attempt, before any
  // copy), as Checkpointer::RestoreInto does.
  PlannedRestore::Planner match =
      [&](const RestoredStep& reading,
          const std::vector<bool>&) -> StatusOr<std::optional<std::vector<MutableDeviceItem>>> {
    StepInfo info;
    info.step = reading.step;
    for (const RestoredItem& r : reading.items) {
      info.items.push_back(ItemInfo{r.name, r.dtype, r.shape, r.data.size(), 0, 0, {}});
    }
    std::vector<std::byte*> dst;
    STRATA_RETURN_IF_ERROR(MatchBuffers(info, buffers, &dst));
    std::vector<MutableDeviceItem> dest;
    for (const RestoredItem& r : reading.items) dest.push_back(into[by_name.at(r.name)]);
    return std::optional(std::move(dest));
  };
  STRATA_ASSIGN_OR_RETURN(RestoredStep restored, RestoreWith(match, /*lend_block=*/true, options));
  ReserveRestored(buffers);
  return restored.step;
}

StatusOr<RestoredStep> CudaStagerImpl::RestorePlanned(const std::string& key,
                                                      const RestorePlan& plan,
                                                      const RestoreOptions& options) {
  // The plan names the devices (on the reading thread): the first becomes
  // the home device, and the step files are page-locked from the next save.
  RestorePlan noting = [this, &plan](const RestoredStep& step, const RestoredItem& item) {
    auto items = plan(step, item);
    if (items.ok()) NoteHome(*items);
    return items;
  };
  // The key item is verified first: the plan is made while the rest is read.
  RestoreOptions first = options;
  if (first.first_item.empty()) first.first_item = key;
  auto restored =
      RestoreWith(PlannedRestore::FromPlan(restore_, key, noting), /*lend_block=*/false, first);
  StartRegistering();
  return restored;
}

// Waits for what a save may still do, then restores through the engine
// (into the stager's block when lent and large enough).
StatusOr<RestoredStep> CudaStagerImpl::RestoreWith(const PlannedRestore::Planner& planner,
                                                   bool lend_block, const RestoreOptions& options) {
  AwaitBlock();
  STRATA_RETURN_IF_ERROR(WaitStaged());
  ckpt_->AwaitIdle();  // a save in flight may still wait on the lanes' marks
  std::optional<cuda::DeviceGuard> guard;
  if (rt_) guard.emplace(*rt_);
  std::span<std::byte> block;
  if (lend_block && capacity() > 0) block = std::span<std::byte>(base(), capacity());
  // With a slot saver, steps of the directory are verified where their
  // files are (a slot's page-locked memory, or a mapping): no read into
  // other memory.
  return restore_.Run(
      [this](const RestoreAllocator& allocate, const RestoreOptions& o) {
        return saver_ != nullptr ? saver_->RestoreMapped(allocate, o)
                                 : ckpt_->RestoreToMemory(allocate, o);
      },
      planner, block, options);
}

}  // namespace

namespace {

// The process's runtime, loaded once (it stays loaded: see cuda_runtime.h);
// null without one that sees a device.
const cuda::Runtime* ProcessRuntime(int* devices) {
  static const cuda::Runtime* const rt = [] {
    auto loaded = cuda::Runtime::Load();
    int n = 0;
    if (!loaded.ok() || (*loaded)->cudaGetDeviceCount(&n) != 0 || n <= 0) {
      return static_cast<cuda::Runtime*>(nullptr);
    }
    return loaded->release();
  }();
  *devices = 0;
  if (rt != nullptr) rt->cudaGetDeviceCount(devices);
  return rt;
}

}  // namespace

Status CopyToHost(std::span<const DeviceItem> items, std::span<std::byte* const> dst) {
  static Mutex mu;
  static DeviceLanes* lanes = nullptr;  // the process's, made on first use, never freed
  MutexLock l(&mu);
  int devices = 0;
  const cuda::Runtime* rt = nullptr;
  for (const DeviceItem& it : items) {
    if (it.device >= 0 && rt == nullptr) rt = ProcessRuntime(&devices);
    if (it.device >= devices) {
      return InvalidArgumentError("item \"" + it.name + "\" is on CUDA device " +
                                  std::to_string(it.device) + ", but " + std::to_string(devices) +
                                  " are visible");
    }
  }
  if (rt != nullptr && lanes == nullptr) lanes = new DeviceLanes(*rt);
  if (lanes != nullptr) lanes->Begin();
  std::optional<cuda::DeviceGuard> guard;
  if (rt != nullptr) guard.emplace(*rt);
  Status s;
  for (size_t i = 0; i < items.size() && s.ok(); ++i) {
    const DeviceItem& it = items[i];
    if (it.size == 0) continue;
    if (it.device < 0) {
      std::memcpy(dst[i], it.data, it.size);
    } else {
      s = lanes->Copy(it.device, it.stream, dst[i], it.data, it.size, cuda::kMemcpyDeviceToHost,
                      "staging item \"" + it.name + "\"");
    }
  }
  if (lanes == nullptr) return s;
  if (s.ok()) s = lanes->Finish();
  Status synced = lanes->Sync();
  return s.ok() ? synced : s;
}

Status PageLock(void* p, size_t n) {
  int devices = 0;
  const cuda::Runtime* rt = ProcessRuntime(&devices);
  if (rt == nullptr) return UnavailableError("page-locking host memory: no CUDA device");
  cuda::CaptureRelaxed relaxed(*rt);
  return rt->Check(rt->cudaHostRegister(p, n, cuda::kHostRegisterPortable), "cudaHostRegister",
                   std::to_string(n) + " bytes of host memory");
}

void PageUnlock(void* p) {
  int devices = 0;
  const cuda::Runtime* rt = ProcessRuntime(&devices);
  if (rt == nullptr || p == nullptr) return;
  cuda::CaptureRelaxed relaxed(*rt);
  Status s = rt->Check(rt->cudaHostUnregister(p), "cudaHostUnregister", "host memory");
  if (!s.ok()) Log()->warn("unlocking host memory at {}: {}", p, s.message());
}

StatusOr<RestoredStep> RestoreStepPlanned(const std::string& dir, int64_t step,
                                          const std::string& key,
                                          const CudaStager::RestorePlan& plan, int threads) {
  int devices = 0;
  const cuda::Runtime* rt = ProcessRuntime(&devices);
  std::unique_ptr<DeviceLanes> lanes = rt ? std::make_unique<DeviceLanes>(*rt) : nullptr;
  PlannedRestore restore(lanes.get(), devices);
  std::optional<cuda::DeviceGuard> guard;
  if (rt) guard.emplace(*rt);
  RestoreOptions options;
  options.first_item = key;  // the plan is made while the rest is read
  return restore.Run(
      [&](const RestoreAllocator& allocate, const RestoreOptions& o) {
        return ReadStepInPlace(dir, step, allocate, o, threads);
      },
      PlannedRestore::FromPlan(restore, key, plan), {}, options);
}

StatusOr<std::unique_ptr<CudaStager>> CudaStager::Open(Checkpointer* ckpt,
                                                       const CudaStagerOptions& options) {
  if (ckpt == nullptr) return InvalidArgumentError("CudaStager::Open: no checkpointer");
  auto rt = cuda::Runtime::Load(options.runtime_library);
  int devices = 0;
  Status why;
  if (rt.ok()) {
    const int err = (*rt)->cudaGetDeviceCount(&devices);
    if (err != 0 || devices <= 0) {
      why = UnavailableError("no CUDA device: " +
                             (err != 0
                                  ? (*rt)->Check(err, "cudaGetDeviceCount", (*rt)->path()).message()
                                  : (*rt)->path() + " sees none"));
      devices = 0;
    }
  } else {
    why = rt.status();
  }
  if (!why.ok()) {
    if (!options.allow_host_only) return why;
    return std::unique_ptr<CudaStager>(new CudaStagerImpl(ckpt, nullptr, 0, options));
  }
  return std::unique_ptr<CudaStager>(new CudaStagerImpl(ckpt, std::move(*rt), devices, options));
}

}  // namespace strata
