// Copyright 2026 The Strata Authors.
//
// FaultInjectionEnv: an Env that fails a chosen operation on its n-th call
// with a chosen errno, to reach error paths deterministically.
#ifndef STRATA_TESTS_FAULT_ENV_H_
#define STRATA_TESTS_FAULT_ENV_H_

#include <atomic>
#include <cerrno>
#include <map>
#include <mutex>
#include <string>

#include "strata/env.h"

namespace strata::testing {

enum class Op { kWrite, kTruncate, kSync, kRename, kSyncDir, kCreateDir, kOpenWritable };

class FaultInjectionEnv : public EnvWrapper {
 public:
  FaultInjectionEnv() : EnvWrapper(Env::Default()) {}

  // The n-th call (1-based, counted from now) of `op` fails with `err`;
  // every later call fails too if `sticky`.
  void FailAt(Op op, int n, int err, bool sticky = false) {
    std::lock_guard<std::mutex> l(mu_);
    rules_[op] = Rule{n, err, sticky, 0};
  }
  void Clear() {
    std::lock_guard<std::mutex> l(mu_);
    rules_.clear();
  }
  // Returns a non-OK status if this call of `op` should fail.
  Status Check(Op op, const std::string& what) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = rules_.find(op);
    if (it == rules_.end()) return Status::Ok();
    Rule& r = it->second;
    ++r.calls;
    if (r.calls == r.n || (r.sticky && r.calls > r.n)) {
      return ErrnoToStatus(r.err, "injected fault: " + what);
    }
    return Status::Ok();
  }

  StatusOr<std::unique_ptr<WritableFile>> OpenWritable(const std::string& p) override;
  Status Rename(const std::string& a, const std::string& b) override {
    STRATA_RETURN_IF_ERROR(Check(Op::kRename, "rename " + a));
    return target()->Rename(a, b);
  }
  Status SyncDir(const std::string& p) override {
    STRATA_RETURN_IF_ERROR(Check(Op::kSyncDir, "fsync directory " + p));
    return target()->SyncDir(p);
  }
  Status CreateDir(const std::string& p) override {
    STRATA_RETURN_IF_ERROR(Check(Op::kCreateDir, "mkdir " + p));
    return target()->CreateDir(p);
  }

 private:
  struct Rule {
    int n;
    int err;
    bool sticky;
    int calls;
  };
  std::mutex mu_;
  std::map<Op, Rule> rules_;
};

class FaultWritableFile : public WritableFile {
 public:
  FaultWritableFile(FaultInjectionEnv* env, std::string path, std::unique_ptr<WritableFile> f)
      : env_(env), path_(std::move(path)), f_(std::move(f)) {}
  Status PWrite(uint64_t off, const void* d, size_t n) override {
    STRATA_RETURN_IF_ERROR(env_->Check(Op::kWrite, "write " + path_));
    return f_->PWrite(off, d, n);
  }
  Status Truncate(uint64_t size) override {
    STRATA_RETURN_IF_ERROR(env_->Check(Op::kTruncate, "truncate " + path_));
    return f_->Truncate(size);
  }
  Status Sync() override {
    STRATA_RETURN_IF_ERROR(env_->Check(Op::kSync, "fsync " + path_));
    return f_->Sync();
  }
  Status Close() override { return f_->Close(); }

 private:
  FaultInjectionEnv* env_;
  std::string path_;
  std::unique_ptr<WritableFile> f_;
};

inline StatusOr<std::unique_ptr<WritableFile>> FaultInjectionEnv::OpenWritable(
    const std::string& p) {
  STRATA_RETURN_IF_ERROR(Check(Op::kOpenWritable, "open " + p));
  STRATA_ASSIGN_OR_RETURN(auto f, target()->OpenWritable(p));
  return std::unique_ptr<WritableFile>(new FaultWritableFile(this, p, std::move(f)));
}

}  // namespace strata::testing

#endif  // STRATA_TESTS_FAULT_ENV_H_
