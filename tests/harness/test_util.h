// Copyright 2026 The Strata Authors.
//
// Helpers for tests: scratch directories, child processes, and a check of
// an error's code and message.
#ifndef STRATA_TESTS_HARNESS_TEST_UTIL_H_
#define STRATA_TESTS_HARNESS_TEST_UTIL_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "strata/status.h"

namespace strata::testing {

// Checks the code of `s` and that each of `want` occurs in its message.
void ExpectError(const Status& s, StatusCode code, std::initializer_list<std::string_view> want);
inline void ExpectError(const Status& s, StatusCode code, std::string_view want) {
  ExpectError(s, code, {want});
}

// A fresh directory under /dev/shm (tmpfs, like a node's RAM disk), or
// under `root`, removed with everything in it when the object goes away.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& tag = "t", const std::string& root = "/dev/shm");
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A tmpfs mounted over `path` (options as mount(8)'s -o), unmounted
// (lazily) when the object goes away; why() says why not (not root,
// refused), empty once mounted. Declare it after the ScratchDir it covers.
class TestMount {
 public:
  TestMount(std::string path, const std::string& options);
  ~TestMount();
  TestMount(const TestMount&) = delete;
  TestMount& operator=(const TestMount&) = delete;
  const std::string& why() const { return why_; }

 private:
  std::string path_;
  std::string why_;
};

// n bytes of a fixed pseudo-random sequence (the same for the same seed).
inline std::vector<uint8_t> RandomData(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(n);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

// Path of a binary built next to the tests ("strata", "toy-trainer").
std::string BinaryPath(const std::string& name);

// The environment variable that marks every process a test starts (and
// their descendants) with the test program's pid.
inline constexpr char kOwnerVariable[] = "STRATA_TEST_OWNER";

// SIGKILLs every live process marked with this test program's pid, however
// far it has been re-parented; returns how many. Runs by itself when the
// test program ends.
int KillOwnedProcesses();

// A child process whose stdout and stderr go to files. It runs in a process
// group of its own, which the destructor kills.
class Child {
 public:
  // Starts argv[0] with the given arguments; `env` entries ("K=V") are added
  // to the inherited environment.
  explicit Child(const std::vector<std::string>& argv, const std::vector<std::string>& env = {});
  ~Child();  // kills (SIGKILL) the child's process group and reaps the child
  // Wait() returns 255 for a child some other code reaped.
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  void Signal(int sig) const;
  // Waits for exit; returns the exit code, or 128+signal if killed, or -1 on
  // timeout (the child keeps running).
  int Wait(std::chrono::milliseconds timeout = std::chrono::minutes(5));
  bool Exited() const { return exited_; }
  std::string Stdout() const;
  std::string Stderr() const;
  // Waits until stdout contains `text`; false on timeout or exit.
  bool WaitForOutput(const std::string& text,
                     std::chrono::milliseconds timeout = std::chrono::seconds(60));

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  int status_ = 0;
  std::string out_path_, err_path_;
};

// Runs a command to completion; returns its exit code; fills *out.
int Run(const std::vector<std::string>& argv, std::string* out = nullptr,
        const std::vector<std::string>& env = {});

std::string ReadFile(const std::string& path);
void WriteFile(const std::string& path, const std::string& data);
// A secret file as it must be (mode 0600: Strata refuses one others may read).
void WriteSecretFile(const std::string& path, const std::string& data);
// Flips one bit of the byte at `offset` in `path`.
void FlipByte(const std::string& path, uint64_t offset);

// The mapping of this process that holds `p`, from /proc/self/maps: its
// permissions ("r--s") and the file it maps ("" for anonymous memory);
// both "" when no mapping holds `p`.
struct Mapping {
  std::string perms;
  std::string file;
};
Mapping MappingAt(const void* p);

// Occurrences of `what` in `text` (not overlapping).
size_t Count(const std::string& text, const std::string& what);

// The value after "key=" on the last line of `text` that contains it, or "".
std::string LastValue(const std::string& text, const std::string& key);

inline constexpr std::chrono::milliseconds kWait{10000};

// Polls `done` every 20 ms until it holds or `timeout` passes.
bool WaitUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout = kWait);

// An unprivileged local user of the machine for the tests of what other
// users may not make Strata do: "strata-test-user", created (useradd, with
// a group of its own) on first use. nullopt, with *why, when the tests do
// not run as root (they cannot create it, nor act as it).
struct LocalUser {
  uid_t uid = 0;
  gid_t gid = 0;
  std::string name;
  // `argv` run as this user (setpriv: its uid, its group only).
  std::vector<std::string> Command(const std::vector<std::string>& argv) const;
};
std::optional<LocalUser> UnprivilegedUser(std::string* why);

// A free loopback port, below the ephemeral range (see test_util.cc).
uint16_t FreePort();

// With STRATA_FUZZ_SEED_DIR set, writes `bytes` to <dir>/<target>/<hash>:
// the real messages and files the tests build become the fuzz targets'
// seed corpus (fuzz/corpus/<target>, docs/reliability.md). Otherwise nothing.
void SaveFuzzSeed(const std::string& target, std::string_view bytes);

}  // namespace strata::testing

#endif  // STRATA_TESTS_HARNESS_TEST_UTIL_H_
