// Copyright 2026 The Strata Authors.
#include "agent/store/store.h"

#include <fcntl.h>

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <optional>

#include "agent/store/step_seal.h"
#include "agent/store/store_layout.h"
#include "format/naming.h"
#include "util/crash_point.h"
#include "util/file_util.h"
#include "util/hash.h"
#include "util/logging.h"

namespace strata::agent {
namespace {

constexpr std::string_view kIndexSuffix = kStepIndexSuffix;
constexpr std::string_view kSealSuffix = ".seal";
constexpr uint64_t kMaxIndexBytes = 64 << 20;

}  // namespace

Store::Store(std::string local_dir, ThreadPool* pool, Env* env)
    : local_dir_(std::move(local_dir)),
      root_(JoinPath(local_dir_, std::string(kAgentDirName))),
      pool_(pool),
      env_(env) {}

StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& local_dir, ThreadPool* pool,
                                             Env* env) {
  std::unique_ptr<Store> store(new Store(local_dir, pool, env));
  STRATA_RETURN_IF_ERROR(CreateDirs(env, JoinPath(store->root_, "steps")));
  STRATA_RETURN_IF_ERROR(CreateDirs(env, JoinPath(store->root_, "incoming")));
  STRATA_RETURN_IF_ERROR(env->RemoveAll(JoinPath(store->root_, "spare")));
  STRATA_RETURN_IF_ERROR(CreateDirs(env, JoinPath(store->root_, "spare")));
  STRATA_RETURN_IF_ERROR(store->Recover());
  return store;
}

std::string Store::StepPath(const wire::StepKey& key) const {
  return JoinPath(root_, RelativeStepPath(key).substr(kAgentDirName.size() + 1));
}

std::string Store::RelativeStepPath(const wire::StepKey& key) const {
  return RelativeStepsDir(key.job, key.rank) + "/" + std::to_string(key.step);
}

// Walks steps/<job>/<rank>/ and reconciles data directories with indexes.
Status Store::Recover() {
  STRATA_RETURN_IF_ERROR(env_->RemoveAll(JoinPath(root_, "incoming")));
  STRATA_RETURN_IF_ERROR(env_->CreateDir(JoinPath(root_, "incoming")));
  std::string steps = JoinPath(root_, "steps");
  STRATA_ASSIGN_OR_RETURN(auto jobs, env_->ListDir(steps));
  for (const auto& j : jobs) {
    if (!ValidateJobName(j.name).ok()) continue;
    STRATA_ASSIGN_OR_RETURN(auto ranks, env_->ListDir(JoinPath(steps, j.name)));
    for (const auto& r : ranks) {
      auto rank = ParseStepDirName(r.name);
      if (!rank) continue;
      std::string rank_dir = JoinPath(JoinPath(steps, j.name), r.name);
      STRATA_ASSIGN_OR_RETURN(auto entries, env_->ListDir(rank_dir));
      for (const auto& e : entries) {
        if (IsTempName(e.name)) {
          STRATA_RETURN_IF_ERROR(env_->RemoveAll(JoinPath(rank_dir, e.name)));
          continue;
        }
        auto step = ParseStepDirName(e.name);
        if (!step || e.type != DirEntry::Type::kDirectory) continue;
        wire::StepKey key{j.name, static_cast<int>(*rank), *step};
        const std::string index_path = StepPath(key) + std::string(kIndexSuffix);
        auto text = ReadFileToString(env_, index_path, kMaxIndexBytes);
        auto index = text.ok() ? DecodeStepIndex(*text, index_path) : text.status();
        StepIdentity identity;
        if (!index.ok()) index = BuildStepIndex(env_, StepPath(key), pool_, &identity);
        if (!index.ok()) {
          Log()->warn("dropping {}: {}", StepPath(key), index.status().message());
          STRATA_RETURN_IF_ERROR(Remove(key));
          continue;
        }
        if (!text.ok()) {
          STRATA_RETURN_IF_ERROR(WriteIndex(key, *index));
          WriteSeal(key, *index, identity);
        }
        MutexLock l(&mu_);
        spare_limit_ = std::max(spare_limit_, index->total_bytes);
        held_[key] = std::move(*index);
      }
      for (const auto& e : entries) {  // indexes and seals whose data is gone
        for (std::string_view suffix : {kIndexSuffix, kSealSuffix}) {
          if (e.name.ends_with(suffix) &&
              !env_->Exists(JoinPath(rank_dir, e.name.substr(0, e.name.size() - suffix.size())))) {
            STRATA_RETURN_IF_ERROR(env_->RemoveFile(JoinPath(rank_dir, e.name)));
          }
        }
      }
    }
  }
  return Status::Ok();
}

Status Store::WriteIndex(const wire::StepKey& key, const StepIndex& index) {
  return WriteFileAtomic(env_, StepPath(key) + std::string(kIndexSuffix), EncodeStepIndex(index));
}

void Store::WriteSeal(const wire::StepKey& key, const StepIndex& index,
                      const StepIdentity& identity) {
  const std::string path = StepPath(key) + std::string(kSealSuffix);
  Status s = identity.files.size() == index.files.size()
                 ? WriteFileAtomic(env_, path, EncodeSeal(index.digest, identity))
                 : FailedPreconditionError("no identity recorded");
  // Without a seal the copy is read and verified at the next restart.
  if (!s.ok()) Log()->warn("sealing {}: {}", key.ToString(), s.message());
}

StatusOr<bool> Store::CheckHeld(const wire::StepKey& key) {
  STRATA_ASSIGN_OR_RETURN(StepIndex index, GetIndex(key));
  const std::string dir = StepPath(key);
  const std::string seal_path = dir + std::string(kSealSuffix);
  auto text = ReadFileToString(env_, seal_path, kMaxIndexBytes);
  auto sealed = text.ok() ? DecodeSeal(*text, index.digest, seal_path) : text.status();
  Status proof = sealed.ok() ? CheckStepIdentity(env_, dir, index, *sealed) : sealed.status();
  if (proof.ok()) return false;
  // Could have changed: read every byte, and seal what verified.
  env_->RemoveFile(seal_path).IgnoreError();
  StepIdentity identity;
  STRATA_RETURN_IF_ERROR(VerifyStepIndex(env_, dir, index, pool_, VerifyScope::kAll, &identity));
  WriteSeal(key, index, identity);
  return true;
}

StatusOr<StepIndex> Store::Ingest(const std::string& client_dir, const wire::StepKey& key) {
  STRATA_RETURN_IF_ERROR(wire::ValidateStepKey(key));
  std::string dst = StepPath(key);
  STRATA_RETURN_IF_ERROR(CreateDirs(env_, Dirname(dst)));
  if (env_->Exists(dst)) STRATA_RETURN_IF_ERROR(Remove(key));
  STRATA_RETURN_IF_ERROR(env_->Rename(client_dir, dst));
  CrashPoint("store.ingest.before_index");
  StepIdentity identity;
  auto index = BuildStepIndex(env_, dst, pool_, &identity);
  if (!index.ok()) {
    env_->RemoveAll(dst).IgnoreError();
    return index.status().WithContext("ingesting " + client_dir);
  }
  STRATA_RETURN_IF_ERROR(WriteIndex(key, *index));
  CrashPoint("store.ingest.before_seal");
  WriteSeal(key, *index, identity);
  MutexLock l(&mu_);
  held_[key] = *index;
  spare_limit_ = std::max(spare_limit_, index->total_bytes);
  return index;
}

StatusOr<std::string> Store::NewIncomingDir() {
  std::string dir = JoinPath(JoinPath(root_, "incoming"), TempDirName(0));
  STRATA_RETURN_IF_ERROR(env_->CreateDir(dir));
  return dir;
}

Status Store::Adopt(const std::string& dir, const wire::StepKey& key, const StepIndex& index) {
  return AdoptChecked(dir, key, index, VerifyScope::kAll);
}

Status Store::AdoptVerified(const std::string& dir, const wire::StepKey& key,
                            const StepIndex& index) {
  return AdoptChecked(dir, key, index, VerifyScope::kLayout);
}

Status Store::AdoptChecked(const std::string& dir, const wire::StepKey& key, const StepIndex& index,
                           VerifyScope scope) {
  STRATA_RETURN_IF_ERROR(wire::ValidateStepKey(key));
  // Listed as checked; renaming the directory changes no file's identity.
  StepIdentity identity;
  STRATA_RETURN_IF_ERROR(
      VerifyStepIndex(env_, dir, index, pool_, scope, &identity).WithContext(key.ToString()));
  std::string dst = StepPath(key);
  STRATA_RETURN_IF_ERROR(CreateDirs(env_, Dirname(dst)));
  if (env_->Exists(dst)) STRATA_RETURN_IF_ERROR(Remove(key));
  CrashPoint("store.adopt.before_commit");
  STRATA_RETURN_IF_ERROR(CommitDir(env_, dir, dst));
  CrashPoint("store.adopt.before_index");
  STRATA_RETURN_IF_ERROR(WriteIndex(key, index));
  WriteSeal(key, index, identity);
  MutexLock l(&mu_);
  held_[key] = index;
  spare_limit_ = std::max(spare_limit_, index.total_bytes);
  return Status::Ok();
}

bool Store::Has(const wire::StepKey& key) const {
  MutexLock l(&mu_);
  return held_.count(key) > 0;
}

StatusOr<StepIndex> Store::GetIndex(const wire::StepKey& key) const {
  MutexLock l(&mu_);
  auto it = held_.find(key);
  if (it == held_.end()) return NotFoundError("this agent holds no step " + key.ToString());
  return it->second;
}

std::map<wire::StepKey, StepIndex> Store::List() const {
  MutexLock l(&mu_);
  return held_;
}

Status Store::Verify(const wire::StepKey& key) {
  STRATA_ASSIGN_OR_RETURN(StepIndex index, GetIndex(key));
  return VerifyStepIndex(env_, StepPath(key), index, pool_);
}

Status Store::Remove(const wire::StepKey& key, std::optional<uint64_t> digest) {
  std::optional<StepIndex> index;
  {
    MutexLock l(&mu_);
    auto it = held_.find(key);
    if (digest && (it == held_.end() || it->second.digest != *digest)) {
      return FailedPreconditionError("removing " + key.ToString() + ": the copy held is not " +
                                     Hex64(*digest));
    }
    if (it != held_.end()) {
      index = std::move(it->second);
      held_.erase(it);
    }
  }
  std::string path = StepPath(key);
  STRATA_RETURN_IF_ERROR(env_->RemoveFile(path + std::string(kSealSuffix)));
  STRATA_RETURN_IF_ERROR(env_->RemoveFile(path + std::string(kIndexSuffix)));
  if (!env_->Exists(path)) return Status::Ok();
  std::string aside = JoinPath(Dirname(path), TempDirName(key.step));
  STRATA_RETURN_IF_ERROR(env_->Rename(path, aside));
  if (index) KeepSpare(aside, *index);
  return env_->RemoveAll(aside);
}

void Store::KeepSpare(const std::string& dir, const StepIndex& index) {
  for (const IndexedFile& f : index.files) {
    if (f.size == 0) continue;
    std::string to;
    {
      MutexLock l(&mu_);
      if (spare_bytes_ + f.size > spare_limit_) return;
      to = JoinPath(JoinPath(root_, "spare"), std::to_string(++spare_counter_));
      spare_bytes_ += f.size;  // reserved; undone below if the rename fails
    }
    Status s = env_->Rename(JoinPath(dir, f.path), to);
    MutexLock l(&mu_);
    if (s.ok()) {
      spare_.emplace(f.size, std::move(to));
    } else {
      spare_bytes_ -= f.size;
    }
  }
}

bool Store::TakeSpare(uint64_t size, const std::string& path) {
  std::string from;
  uint64_t from_size = 0;
  {
    MutexLock l(&mu_);
    if (spare_.empty()) return false;
    auto it = spare_.lower_bound(size);  // the smallest that holds it, else the largest
    if (it == spare_.end()) it = std::prev(it);
    from_size = it->first;
    from = std::move(it->second);
    spare_.erase(it);
    spare_bytes_ -= from_size;
  }
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) == 0) {
    return true;
  }
  env_->RemoveFile(from).IgnoreError();
  return false;
}

void Store::DropSpare() {
  std::multimap<uint64_t, std::string> spare;
  {
    MutexLock l(&mu_);
    spare.swap(spare_);
    spare_bytes_ = 0;
  }
  for (const auto& [size, path] : spare) env_->RemoveFile(path).IgnoreError();
}

uint64_t Store::SpareBytes() const {
  MutexLock l(&mu_);
  return spare_bytes_;
}

uint64_t Store::BytesHeld() const {
  MutexLock l(&mu_);
  uint64_t n = 0;
  for (const auto& [key, index] : held_) n += index.total_bytes;
  return n;
}

}  // namespace strata::agent
