// Copyright 2026 The Strata Authors.
#include <dirent.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <new>
#include <sstream>
#include <string>

#include "agent/coordinator/coordinator.h"
#include "agent/rpc/server.h"
#include "net/socket.h"
#include "scale_bench.h"
#include "util/logging.h"
#include "util/process.h"
#include "wire/op.h"

namespace strata::scale_bench {
namespace {

using agent::json;

// CPU seconds (user + system) from a /proc stat file: a process's
// (/proc/<pid>/stat) or one of its threads' (/proc/<pid>/task/<tid>/stat).
double StatCpuSeconds(const std::string& path) {
  std::ifstream in(path);
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');  // the command name may hold spaces
  if (paren == std::string::npos) return -1;
  std::istringstream fields(stat.substr(paren + 2));
  std::string skip;
  for (int i = 3; i < 14; ++i) fields >> skip;  // state .. cmajflt
  double utime = 0, stime = 0;
  fields >> utime >> stime;
  return (utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// Serves a Coordinator on 127.0.0.1 until its stdin closes; writes the port
// to `port_fd` first; leaves its marks in `marks`.
[[noreturn]] void CoordinatorMain(int port_fd, CoordinatorMarks* marks) {
  RaiseFileLimit();
  Log()->set_level(spdlog::level::warn);
  auto listener = net::Socket::Listen("127.0.0.1", 0, SOMAXCONN);
  if (!listener.ok()) {
    std::fprintf(stderr, "coordinator: %s\n", std::string(listener.status().message()).c_str());
    _exit(1);
  }
  const uint16_t port = *listener->LocalPort();
  auto coordinator = std::make_unique<agent::Coordinator>();
  agent::Server::Options options;
  // The simulated nodes speak the handshake in plaintext: this bench measures
  // the coordinator at scale; what TLS costs a connection is agent_bench's.
  options.trust = net::Trust{kSecret, nullptr};
  options.workers = 2;
  agent::Server::Handlers handlers;
  handlers.is_long = [](const std::string&) { return false; };
  handlers.control = [c = coordinator.get(), marks](const json& request, const std::string&,
                                                    agent::Server::Reply reply) {
    const auto op = request.find("op");
    const std::string name = op != request.end() && op->is_string() ? op->get<std::string>() : "";
    const int64_t began = Nanos(Clock::now());
    if (name == wire::OpName(wire::Op::kReady)) CoordinatorMarks::Max(marks->last_ready, began);
    c->HandleAsync(request, std::move(reply));
    if (name == wire::OpName(wire::Op::kRegister)) {
      const int64_t ended = Nanos(Clock::now());
      CoordinatorMarks::Max(marks->last_register_done, ended);
      CoordinatorMarks::Max(marks->longest_register, ended - began);
    }
  };
  handlers.long_call = [](const json&, net::Socket&) -> StatusOr<json> {
    return NotFoundError("no long calls here");
  };
  auto server = agent::Server::Start(std::move(*listener), options, handlers);
  if (!server.ok()) _exit(1);
  if (::write(port_fd, &port, sizeof port) != sizeof port) _exit(1);
  ::close(port_fd);
  char c;
  while (::read(0, &c, 1) > 0) {
  }
  coordinator->Shutdown();
  (*server)->Stop();
  _exit(0);
}

}  // namespace

CoordinatorProcess CoordinatorProcess::Start() {
  int ports[2], in[2];
  if (::pipe(ports) != 0 || ::pipe(in) != 0) std::abort();
  CoordinatorProcess p;
  void* page = ::mmap(nullptr, sizeof(CoordinatorMarks), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) std::abort();
  p.marks = new (page) CoordinatorMarks();
  p.pid = ::fork();
  if (p.pid == 0) {
    ::dup2(in[0], 0);
    ::close(in[1]);
    ::close(ports[0]);
    CoordinatorMain(ports[1], p.marks);
  }
  ::close(in[0]);
  ::close(ports[1]);
  p.stdin_fd = in[1];
  if (::read(ports[0], &p.port, sizeof p.port) != sizeof p.port) {
    std::fprintf(stderr, "scale_bench: the coordinator process did not start\n");
    std::exit(1);
  }
  ::close(ports[0]);
  return p;
}

double CoordinatorProcess::PeakRssMib() const {
  return static_cast<double>(ProcessStatus("VmHWM", pid).value_or(-1024)) / 1024.0;
}

double CoordinatorProcess::CpuSeconds() const {
  return StatCpuSeconds("/proc/" + std::to_string(pid) + "/stat");
}

std::map<pid_t, double> CoordinatorProcess::ThreadCpuSeconds() const {
  std::map<pid_t, double> out;
  const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  DIR* dir = ::opendir(tasks.c_str());
  if (dir == nullptr) return out;
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    out[static_cast<pid_t>(std::stol(e->d_name))] =
        StatCpuSeconds(tasks + "/" + e->d_name + "/stat");
  }
  ::closedir(dir);
  return out;
}

double BusiestThreadSeconds(const std::map<pid_t, double>& before,
                            const std::map<pid_t, double>& after) {
  double most = 0;
  for (const auto& [tid, cpu] : after) {
    auto b = before.find(tid);
    most = std::max(most, cpu - (b == before.end() ? 0.0 : b->second));
  }
  return most;
}

void CoordinatorProcess::Stop() {
  ::close(stdin_fd);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::munmap(marks, sizeof *marks);
}

double OwnCpuSeconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

}  // namespace strata::scale_bench
