// Copyright 2026 The Strata Authors.
//
// Storage benchmarks: the s3:// backend against the aws CLI, both talking to
// the same moto_server on loopback in the same run. Prints absolute figures
// (median of --reps repetitions after a warm-up; aws and Strata repetitions
// alternate), then `ratio <name> <value> target <t>`:
//
//   backup_upload   throughput of ObjectStore::PutFile of a tmpfs file ÷
//                   throughput of `aws s3 cp <file> s3://...`
//   backup_restore  throughput of ObjectStore::GetFile into a tmpfs file
//                   plus XXH3 of the downloaded file ÷ throughput of
//                   `aws s3 cp s3://... <file>`
//   step_interference  wall time of a toy-trainer run (200 steps of a
//                   64 MiB state, no checkpoints) while PutFile uploads in a
//                   loop from a thread at the agent's upload priority
//                   (SCHED_IDLE) ÷ the same run alone. Lower is better.
//                   moto stands in for a remote object store, so it runs
//                   at SCHED_IDLE too: its CPU is not the node's.
//
// The aws figures include the CLI's start-up (~0.5 s): that is what a backup
// script calling it pays too. moto is Python and holds objects in memory;
// both sides' objects are deleted after each repetition.
// Scratch: <tmpfs>/strata-bench-<pid>, removed at exit.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "moto.h"
#include "storage/object_store.h"
#include "storage/s3_store.h"
#include "util/hash.h"
#include "util/logging.h"
#include "util/priority.h"

namespace strata {
namespace {

using bench::Clock;
using bench::kMiB;
using bench::PrintRatio;
using bench::PrintSamples;
using bench::Samples;
using bench::SecondsSince;
using storage::ObjectStore;
using testing::MotoServer;

constexpr char kBucket[] = "bench";

struct Bench {
  MotoServer moto;
  std::unique_ptr<ObjectStore> store;
  std::string aws;      // the aws CLI
  std::string scratch;  // tmpfs directory
  std::string src;      // the file to upload
  uint64_t bytes = 0;
  uint64_t src_hash = 0;
  int reps = 3;
};

Status RunAws(const Bench& b, const std::string& from, const std::string& to) {
  std::string out;
  int rc = testing::Run({b.aws, "s3", "cp", "--only-show-errors", from, to}, &out, b.moto.AwsEnv());
  if (rc != 0) return UnavailableError("aws s3 cp " + from + " " + to + ": " + out);
  return Status::Ok();
}

Status Delete(const Bench& b, const std::string& key) { return b.store->Delete(key); }

// XXH3 of a whole file, read in 4 MiB blocks.
StatusOr<uint64_t> HashFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, "open " + path);
  std::vector<char> buf(4 * kMiB);
  Xxh3Stream h;
  ssize_t n;
  while ((n = ::read(fd, buf.data(), buf.size())) > 0) h.Update(buf.data(), static_cast<size_t>(n));
  ::close(fd);
  if (n < 0) return ErrnoToStatus(errno, "read " + path);
  return h.Digest();
}

Status UploadRep(Bench& b, int rep, Samples* aws, Samples* ours) {
  std::string key = "up-" + std::to_string(rep);
  auto t = Clock::now();
  STRATA_RETURN_IF_ERROR(RunAws(b, b.src, std::string("s3://") + kBucket + "/aws-" + key));
  aws->Add(SecondsSince(t));
  t = Clock::now();
  STRATA_RETURN_IF_ERROR(b.store->PutFile("strata-" + key, b.src));
  ours->Add(SecondsSince(t));
  STRATA_RETURN_IF_ERROR(Delete(b, "aws-" + key));
  return Delete(b, "strata-" + key);
}

Status RestoreRep(Bench& b, Samples* aws, Samples* ours) {
  std::string dst = b.scratch + "/dst";
  ::unlink(dst.c_str());
  auto t = Clock::now();
  STRATA_RETURN_IF_ERROR(RunAws(b, std::string("s3://") + kBucket + "/object", dst));
  aws->Add(SecondsSince(t));
  ::unlink(dst.c_str());
  t = Clock::now();
  STRATA_ASSIGN_OR_RETURN(uint64_t n, b.store->GetFile("object", dst));
  STRATA_ASSIGN_OR_RETURN(uint64_t hash, HashFile(dst));
  ours->Add(SecondsSince(t));
  if (n != b.bytes || hash != b.src_hash) return DataLossError("restored bytes differ");
  return Status::Ok();
}

// One toy-trainer run; its wall time.
StatusOr<double> TrainerSeconds(const Bench& b) {
  const std::string dir = b.scratch + "/trainer";
  std::filesystem::remove_all(dir);
  auto t = Clock::now();
  std::string out;
  int rc = testing::Run({std::string(STRATA_BINARY_DIR) + "/toy-trainer", "--dir", dir, "--steps",
                         "200", "--state-mb", "64", "--save-interval-steps", "1000000"},
                        &out);
  double s = SecondsSince(t);
  if (rc != 0) return InternalError("toy-trainer failed: " + out);
  return s;
}

Status InterferenceReps(Bench& b, Samples* alone, Samples* loaded) {
  RunWhenIdle(b.moto.pid());
  for (int r = 0; r < b.reps; ++r) {
    STRATA_ASSIGN_OR_RETURN(double a, TrainerSeconds(b));
    alone->Add(a);
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> uploaded{0};
    Status upload_status;
    std::thread uploader([&] {
      RunWhenIdle();
      while (!stop.load() && upload_status.ok()) {
        upload_status = b.store->PutFile("interference", b.src);
        if (upload_status.ok()) uploaded += b.bytes;
      }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the upload is under way
    auto l = TrainerSeconds(b);
    stop = true;
    uploader.join();
    STRATA_RETURN_IF_ERROR(upload_status);
    STRATA_RETURN_IF_ERROR(l.status());
    loaded->Add(*l);
    std::printf("  rep %d: alone %.2f s, with upload %.2f s (%.0f MiB uploaded meanwhile)\n", r, a,
                *l, static_cast<double>(uploaded.load()) / kMiB);
  }
  return b.store->Delete("interference");
}

Status RunAll(Bench& b, const std::vector<std::string>& only) {
  auto wanted = [&](const char* n) {
    return only.empty() || std::find(only.begin(), only.end(), n) != only.end();
  };
  if (wanted("backup_upload")) {
    Samples aws, ours, warm;
    STRATA_RETURN_IF_ERROR(UploadRep(b, 0, &warm, &warm));
    for (int r = 1; r <= b.reps; ++r) STRATA_RETURN_IF_ERROR(UploadRep(b, r, &aws, &ours));
    std::printf("backup_upload: %.0f MiB tmpfs file -> moto\n",
                static_cast<double>(b.bytes) / kMiB);
    PrintSamples("aws s3 cp (upload)", aws, b.bytes);
    PrintSamples("ObjectStore::PutFile", ours, b.bytes);
    PrintRatio("backup_upload", aws.Median() / ours.Median(), "1.0");
  }
  if (wanted("backup_restore")) {
    STRATA_RETURN_IF_ERROR(b.store->PutFile("object", b.src));
    Samples aws, ours, warm;
    STRATA_RETURN_IF_ERROR(RestoreRep(b, &warm, &warm));
    for (int r = 0; r < b.reps; ++r) STRATA_RETURN_IF_ERROR(RestoreRep(b, &aws, &ours));
    std::printf("backup_restore: moto -> %.0f MiB tmpfs file\n",
                static_cast<double>(b.bytes) / kMiB);
    PrintSamples("aws s3 cp (download)", aws, b.bytes);
    PrintSamples("ObjectStore::GetFile + XXH3", ours, b.bytes);
    PrintRatio("backup_restore", aws.Median() / ours.Median(), "1.0");
  }
  if (wanted("step_interference")) {
    Samples alone, loaded;
    std::printf("step_interference: toy-trainer, 200 steps of 64 MiB, alone and during uploads\n");
    STRATA_RETURN_IF_ERROR(InterferenceReps(b, &alone, &loaded));
    PrintRatio("step_interference", loaded.Median() / alone.Median(), "1.10", true);
  }
  return Status::Ok();
}

Status SetUpAndRun(Bench& b, const storage::StoreOptions& base,
                   const std::vector<std::string>& only) {
  b.aws = MotoServer::FindTool("aws");
  if (b.aws.empty()) return FailedPreconditionError("the aws CLI is not on PATH");
  STRATA_RETURN_IF_ERROR(b.moto.Start());
  STRATA_RETURN_IF_ERROR(b.moto.CreateBucket(kBucket));
  storage::StoreOptions o = base;
  o.endpoint = b.moto.endpoint();
  o.region = b.moto.region();
  o.access_key_id = b.moto.strata().access_key_id;
  o.secret_access_key = b.moto.strata().secret_access_key;
  STRATA_ASSIGN_OR_RETURN(b.store, storage::OpenObjectStore(std::string("s3://") + kBucket, o));

  b.src = b.scratch + "/src";
  std::string data(b.bytes, '\0');
  std::mt19937_64 rng(42);
  for (size_t i = 0; i + 8 <= data.size(); i += 8) {
    uint64_t v = rng();
    std::memcpy(&data[i], &v, 8);
  }
  b.src_hash = Xxh3(data.data(), data.size());
  int fd = ::open(b.src.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 || ::write(fd, data.data(), data.size()) != static_cast<ssize_t>(data.size())) {
    return ErrnoToStatus(errno, "write " + b.src);
  }
  ::close(fd);
  std::printf(
      "storage_bench: %.0f MiB, %d reps (median, min, max), moto_server at %s, parallelism %d, "
      "part %llu MiB, scratch %s\n",
      static_cast<double>(b.bytes) / kMiB, b.reps, b.moto.endpoint().c_str(), o.parallelism,
      static_cast<unsigned long long>(o.part_bytes / kMiB), b.scratch.c_str());
  std::fflush(stdout);
  return RunAll(b, only);
}

int Main(int argc, char** argv) {
  CLI::App app("storage_bench: the s3:// backend against the aws CLI, both on moto_server");
  uint64_t size_mib = 256;
  std::string tmpfs = "/dev/shm";
  std::vector<std::string> only;
  storage::StoreOptions o;
  uint64_t part_mib = o.part_bytes / kMiB;
  Bench b;
  app.add_option("--size-mib", size_mib, "File size in MiB")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 16));
  app.add_option("--reps", b.reps, "Timed repetitions (the median is reported)")
      ->envname("STRATA_STORAGE_BENCH_REPS")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  app.add_option("--tmpfs", tmpfs, "Directory on a RAM file system for scratch files")
      ->envname("STRATA_BENCH_TMPFS")
      ->capture_default_str();
  app.add_option("--parallelism", o.parallelism, "Requests in flight")->capture_default_str();
  app.add_option("--part-mib", part_mib, "Part and range size in MiB")->capture_default_str();
  app.add_option("benchmarks", only, "Benchmarks to run (default all)")
      ->check(CLI::IsMember({"backup_upload", "backup_restore", "step_interference"}));
  CLI11_PARSE(app, argc, argv);
  o.part_bytes = part_mib * kMiB;
  if (std::getenv("STRATA_LOG_LEVEL") == nullptr) SetLogLevel("warn");

  b.bytes = size_mib * kMiB;
  b.scratch = tmpfs + "/strata-bench-" + std::to_string(::getpid());
  std::error_code ec;
  if (!std::filesystem::create_directories(b.scratch, ec)) {
    std::fprintf(stderr, "storage_bench: create %s: %s\n", b.scratch.c_str(),
                 ec ? ec.message().c_str() : "exists");
    return 1;
  }
  Status s = SetUpAndRun(b, o, only);
  std::filesystem::remove_all(b.scratch, ec);
  if (!s.ok()) std::fprintf(stderr, "storage_bench: %s\n", s.ToString().c_str());
  return s.ok() ? 0 : 1;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) { return strata::Main(argc, argv); }
