// Copyright 2026 The Strata Authors.
#include "test_util.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>
#include <utility>

#include "strata/env.h"

extern char** environ;

namespace strata::testing {

void ExpectError(const Status& s, StatusCode code, std::initializer_list<std::string_view> want) {
  EXPECT_EQ(s.code(), code) << s.ToString();
  for (std::string_view w : want) {
    EXPECT_NE(s.message().find(w), std::string::npos)
        << "message: " << s.message() << "\nwanted:  " << w;
  }
}

ScratchDir::ScratchDir(const std::string& tag, const std::string& root) {
  static std::atomic<int> seq{0};
  path_ = root + "/strata-test-" + std::to_string(::getpid()) + "-" + tag + "-" +
          std::to_string(seq.fetch_add(1));
  Env::Default()->RemoveAll(path_).IgnoreError();
  EXPECT_TRUE(Env::Default()->CreateDir(path_).ok()) << path_;
}

ScratchDir::~ScratchDir() { Env::Default()->RemoveAll(path_).IgnoreError(); }

TestMount::TestMount(std::string path, const std::string& options) : path_(std::move(path)) {
  if (::geteuid() != 0) {
    why_ = "mounting a tmpfs needs root";
  } else if (::mount("tmpfs", path_.c_str(), "tmpfs", 0, options.c_str()) != 0) {
    why_ = "cannot mount a tmpfs on " + path_ + ": " + std::strerror(errno);
  }
}

TestMount::~TestMount() {
  if (why_.empty()) ::umount2(path_.c_str(), MNT_DETACH);
}

namespace {

// The environment entry every process a test starts carries, and its
// descendants inherit: how a sweep finds them after they have been
// re-parented (a wrapper that forks, a supervisor's trainer group).
std::string OwnerTag() { return std::string(kOwnerVariable) + "=" + std::to_string(::getpid()); }

// The pids of live processes whose environment holds `entry`.
std::vector<pid_t> ProcessesWithEnv(const std::string& entry) {
  std::vector<pid_t> found;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return found;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0 || pid == ::getpid()) continue;
    std::string env = ReadFile("/proc/" + std::string(e->d_name) + "/environ");
    for (size_t b = 0; b < env.size();) {
      size_t z = env.find('\0', b);
      if (z == std::string::npos) z = env.size();
      if (env.compare(b, z - b, entry) == 0) {
        found.push_back(static_cast<pid_t>(pid));
        break;
      }
      b = z + 1;
    }
  }
  ::closedir(d);
  return found;
}

// Kills what this test process started and left behind, when the test
// program ends (also after failed tests).
class OwnedProcessSweep : public ::testing::Environment {
 public:
  void TearDown() override {
    // Also a shared server a test program keeps for all its tests; a leak
    // that outlives the program is no_process_left_behind's to report.
    KillOwnedProcesses();
  }
};
[[maybe_unused]] const auto* const kSweep =
    ::testing::AddGlobalTestEnvironment(new OwnedProcessSweep);

}  // namespace

int KillOwnedProcesses() {
  int killed = 0;
  // A process may fork while it is being killed: sweep until none is left.
  for (int round = 0; round < 20; ++round) {
    std::vector<pid_t> left = ProcessesWithEnv(OwnerTag());
    if (left.empty()) break;
    // Not reaped here: a Child reaps its own (a zombie's environment is
    // empty, so the next round no longer finds it).
    for (pid_t p : left) killed += ::kill(p, SIGKILL) == 0 ? 1 : 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return killed;
}

std::string BinaryPath(const std::string& name) {
  return std::string(STRATA_BINARY_DIR) + "/" + name;
}

Child::Child(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  static std::atomic<int> seq{0};
  std::string base =
      "/tmp/strata-child-" + std::to_string(::getpid()) + "-" + std::to_string(seq.fetch_add(1));
  out_path_ = base + ".out";
  err_path_ = base + ".err";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  // The inherited environment, with `env` entries replacing variables of
  // the same name (the last entry for a name wins).
  std::vector<std::string> envs;
  auto name_of = [](const std::string& e) { return e.substr(0, e.find('=')); };
  auto put = [&](const std::string& e) {
    std::erase_if(envs, [&](const std::string& x) { return name_of(x) == name_of(e); });
    envs.push_back(e);
  };
  for (char** e = environ; *e; ++e) envs.emplace_back(*e);
  put(OwnerTag());
  for (const auto& e : env) put(e);
  std::vector<char*> cargv, cenv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (const auto& e : envs) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);
  // A process group of its own: killing the group ends whatever the child
  // started too (a wrapper script's real program, a server's workers).
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  int rc = posix_spawn(&pid_, cargv[0], &fa, &attr, cargv.data(), cenv.data());
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    ADD_FAILURE() << "cannot start " << argv[0] << ": " << std::strerror(rc);
    pid_ = -1;
    exited_ = true;
  }
}

Child::~Child() {
  // The group while its leader is unreaped (its pid, the group's id, cannot
  // be reused until then); what outlives the leader, the sweep finds.
  if (!exited_ && pid_ > 0) {
    ::kill(-pid_, SIGKILL);
    Wait(std::chrono::seconds(30));
  }
  ::unlink(out_path_.c_str());
  ::unlink(err_path_.c_str());
}

void Child::Signal(int sig) const {
  if (!exited_) ::kill(pid_, sig);
}

int Child::Wait(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!exited_) {
    pid_t r = ::waitpid(pid_, &status_, WNOHANG);
    if (r == pid_) {
      exited_ = true;
      break;
    }
    if (r < 0 && errno == ECHILD) {  // reaped elsewhere: gone, its status unknown
      exited_ = true;
      status_ = W_EXITCODE(255, 0);
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (WIFEXITED(status_)) return WEXITSTATUS(status_);
  if (WIFSIGNALED(status_)) return 128 + WTERMSIG(status_);
  return -1;
}

std::string Child::Stdout() const { return ReadFile(out_path_); }
std::string Child::Stderr() const { return ReadFile(err_path_); }

bool Child::WaitForOutput(const std::string& text, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (Stdout().find(text) != std::string::npos) return true;
    if (!exited_ && ::waitpid(pid_, &status_, WNOHANG) == pid_) exited_ = true;
    if (exited_) return Stdout().find(text) != std::string::npos;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

int Run(const std::vector<std::string>& argv, std::string* out,
        const std::vector<std::string>& env) {
  Child c(argv, env);
  int rc = c.Wait();
  if (out) *out = c.Stdout() + c.Stderr();
  return rc;
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << data;
}

void WriteSecretFile(const std::string& path, const std::string& data) {
  WriteFile(path, data);
  EXPECT_EQ(::chmod(path.c_str(), 0600), 0) << path;
}

void FlipByte(const std::string& path, uint64_t offset) {
  int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << path;
  unsigned char b = 0;
  ASSERT_EQ(::pread(fd, &b, 1, static_cast<off_t>(offset)), 1);
  b ^= 0x01;
  ASSERT_EQ(::pwrite(fd, &b, 1, static_cast<off_t>(offset)), 1);
  ::close(fd);
}

Mapping MappingAt(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream in(line);
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::string perms, offset, device, inode, file;
    in >> std::hex >> lo >> dash >> hi >> perms >> offset >> device >> inode >> file;
    if (lo <= a && a < hi) return {perms, file};
  }
  return {};
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + what.size()))
    ++n;
  return n;
}

std::string LastValue(const std::string& text, const std::string& key) {
  std::string needle = key + "=";
  auto pos = text.rfind(needle);
  if (pos == std::string::npos) return "";
  pos += needle.size();
  auto end = text.find_first_of(" \n", pos);
  return text.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
}

bool WaitUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return done();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// A port in 20000-25999: below Linux's ephemeral range (32768 and up), so no
// outgoing connection of a test running beside this one (ctest -j) takes it
// before the agent it is meant for binds it; the Python tests pick theirs in
// 26000-31999 (tests/harness/loopback_ports.py). Ports follow each other from a
// random start, so one process never gets the same port twice (until it has
// used all 6000).
uint16_t FreePort() {
  static std::mutex mu;
  static int next = [] {
    std::mt19937 random(std::random_device{}());
    return std::uniform_int_distribution<int>(0, 5999)(random);
  }();
  std::lock_guard<std::mutex> l(mu);
  for (int attempt = 0; attempt < 6000; ++attempt) {
    auto port = static_cast<uint16_t>(20000 + next);
    next = (next + 1) % 6000;
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    if (free) return port;
  }
  return 0;
}

void SaveFuzzSeed(const std::string& target, std::string_view bytes) {
  const char* dir = std::getenv("STRATA_FUZZ_SEED_DIR");
  if (dir == nullptr || *dir == '\0') return;
  const std::string sub = std::string(dir) + "/" + target;
  ::mkdir(dir, 0755);
  ::mkdir(sub.c_str(), 0755);
  char name[32];
  std::snprintf(name, sizeof(name), "%016zx", std::hash<std::string_view>()(bytes));
  WriteFile(sub + "/" + name, std::string(bytes));
}

std::vector<std::string> LocalUser::Command(const std::vector<std::string>& argv) const {
  std::vector<std::string> out = {"/usr/bin/setpriv", "--reuid=" + std::to_string(uid),
                                  "--regid=" + std::to_string(gid), "--clear-groups", "--"};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

std::optional<LocalUser> UnprivilegedUser(std::string* why) {
  static constexpr const char* kName = "strata-test-user";
  if (::geteuid() != 0) {
    *why = "needs root (to create the local user " + std::string(kName) + " and act as it)";
    return std::nullopt;
  }
  struct passwd* pw = ::getpwnam(kName);
  if (pw == nullptr) {
    std::string out;
    const int rc = Run({"/usr/sbin/useradd", "--system", "--user-group", "--no-create-home",
                        "--shell", "/usr/sbin/nologin", kName},
                       &out);
    pw = ::getpwnam(kName);
    if (pw == nullptr) {
      *why = "useradd " + std::string(kName) + " failed (" + std::to_string(rc) + "): " + out;
      return std::nullopt;
    }
  }
  return LocalUser{pw->pw_uid, pw->pw_gid, kName};
}

}  // namespace strata::testing
