// Copyright 2026 The Strata Authors.
//
// MotoServer: a real S3 (moto_server) on loopback for tests and benchmarks,
// with signatures and IAM policies checked.
//
//   MotoServer moto;
//   ASSERT_TRUE(moto.Start().ok());            // ~1-2 s: share one per suite
//   ASSERT_TRUE(moto.CreateBucket("ckpt").ok());
//   StoreOptions o;
//   o.endpoint = moto.endpoint();              // "http://127.0.0.1:<port>"
//   o.access_key_id = moto.strata().access_key_id;   // may do anything
//   o.secret_access_key = moto.strata().secret_access_key;
//   // moto.nobody(): a user without any policy (AccessDenied on writes)
//
// Start() picks a free port, runs moto_server (found in the project's Python
// environment, then on PATH; a missing binary is an error, not a skip) with
// INITIAL_NO_AUTH_ACTION_COUNT high while it creates the users over moto's
// IAM API, then turns authentication on for every later request
// (POST /moto-api/reset-auth 0). moto's random generator is seeded first, so
// the users get the same keys after Restart().
//
// Kill() is kill -9: every bucket and object is lost. Restart() starts a new
// moto on the same port with the same users and keys but no buckets, as a
// real server that lost its state would be. The destructor kills the server.
//
// Not thread-safe; one test thread drives it.
#ifndef STRATA_TESTS_HARNESS_MOTO_H_
#define STRATA_TESTS_HARNESS_MOTO_H_

#include <memory>
#include <string>
#include <vector>

#include "strata/status.h"
#include "test_util.h"

namespace strata::testing {

struct S3Credentials {
  std::string access_key_id;
  std::string secret_access_key;
};

class MotoServer {
 public:
  MotoServer() = default;
  ~MotoServer();
  MotoServer(const MotoServer&) = delete;
  MotoServer& operator=(const MotoServer&) = delete;

  // Starts the server and creates the users "strata" and "nobody".
  Status Start();
  // SIGKILLs the server (no-op if not running).
  void Kill();
  // Kill(), then Start() on the same port: same users and keys, no buckets.
  Status Restart();
  bool running() const { return child_ != nullptr; }
  // The server's process id (-1 when not running), e.g. to renice it.
  pid_t pid() const { return child_ ? child_->pid() : -1; }

  int port() const { return port_; }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  const std::string& region() const { return region_; }
  const S3Credentials& strata() const { return strata_; }  // allow-all policy
  const S3Credentials& nobody() const { return nobody_; }  // no policy

  // Creates `name` as user strata.
  Status CreateBucket(const std::string& name);
  // Authentication on (the default after Start) or off. moto checks
  // signatures over its web framework's decoded URL, so it refuses the aws
  // CLI's correct signature of a listing below a prefix or of keys with
  // '=', '+', '!', ...: tests turn it off only while the CLI runs. Strata's
  // client adapts (src/storage/sigv4.h) and is always checked.
  Status SetAuth(bool on);
  // "K=V" entries that point the aws CLI at this server as user strata.
  std::vector<std::string> AwsEnv() const;

  // moto_server's path: the project's environment, then PATH; "" if neither has it.
  static std::string FindBinary() { return FindTool("moto_server"); }
  // The path of program `name` (e.g. "aws", "curl") the same way.
  static std::string FindTool(const std::string& name);

 private:
  Status Launch();
  Status CreateUsers();
  // Runs curl with `args` (after the URL options); returns the body.
  StatusOr<std::string> Curl(const std::vector<std::string>& args) const;
  StatusOr<std::string> Iam(const std::string& form) const;

  std::unique_ptr<Child> child_;
  int port_ = 0;
  std::string region_ = "us-east-1";
  S3Credentials strata_;
  S3Credentials nobody_;
};

}  // namespace strata::testing

#endif  // STRATA_TESTS_HARNESS_MOTO_H_
