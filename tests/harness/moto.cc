// Copyright 2026 The Strata Authors.
#include "moto.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

namespace strata::testing {
namespace {

constexpr char kAllowAll[] =
    R"({"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"*","Resource":"*"}]})";

std::string FindOnPath(const std::string& name) {
  std::vector<std::string> dirs;
  if (const char* path = std::getenv("PATH")) {
    std::string p = path;
    for (size_t b = 0; b <= p.size();) {
      size_t e = p.find(':', b);
      if (e == std::string::npos) e = p.size();
      if (e > b) dirs.push_back(p.substr(b, e - b));
      b = e + 1;
    }
  }
  for (const auto& d : dirs) {
    std::string f = d + "/" + name;
    if (::access(f.c_str(), X_OK) == 0) return f;
  }
  return "";
}

bool CanConnect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  ::close(fd);
  return ok;
}

// The text of the first <tag>...</tag> in `xml`, or "".
std::string XmlValue(const std::string& xml, const std::string& tag) {
  auto b = xml.find("<" + tag + ">");
  if (b == std::string::npos) return "";
  b += tag.size() + 2;
  auto e = xml.find("</" + tag + ">", b);
  return e == std::string::npos ? "" : xml.substr(b, e - b);
}

std::string FormEncode(const std::string& s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

}  // namespace

MotoServer::~MotoServer() { Kill(); }

std::string MotoServer::FindTool(const std::string& name) {
  // The project's Python environment (scripts/python-env.sh) first: that is
  // where the install step puts moto_server and aws; then PATH.
  std::string venv_bin = STRATA_VENV_BIN;
  if (!venv_bin.empty()) {
    std::string f = venv_bin + "/" + name;
    if (::access(f.c_str(), X_OK) == 0) return f;
  }
  return FindOnPath(name);
}

Status MotoServer::Start() {
  if (running()) return FailedPreconditionError("moto_server already running");
  port_ = FreePort();
  if (port_ == 0) return UnavailableError("no free loopback port for moto_server");
  return Launch();
}

Status MotoServer::Launch() {
  std::string bin = FindBinary();
  if (bin.empty()) {
    return FailedPreconditionError("moto_server not found in " STRATA_VENV_BIN
                                   " or on PATH (run scripts/install-deps.sh)");
  }
  child_ = std::make_unique<Child>(
      std::vector<std::string>{bin, "-H", "127.0.0.1", "-p", std::to_string(port_)},
      std::vector<std::string>{"INITIAL_NO_AUTH_ACTION_COUNT=1000000"});
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!CanConnect(port_)) {
    if (child_->Wait(std::chrono::milliseconds(0)) != -1 ||
        std::chrono::steady_clock::now() > deadline) {
      std::string err = child_->Stderr();
      Kill();
      return UnavailableError("moto_server on port " + std::to_string(port_) +
                              " did not start: " + err.substr(0, 500));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // Requests that reach a restarted server during the set-up draw from moto's
  // random generator too, and may change the keys it hands out: start over.
  Status s = CreateUsers();
  for (int i = 0; i < 5 && s.code() == StatusCode::kAborted; ++i) {
    STRATA_RETURN_IF_ERROR(Curl({"-X", "POST", endpoint() + "/moto-api/reset"}).status());
    s = CreateUsers();
  }
  return s;
}

StatusOr<std::string> MotoServer::Curl(const std::vector<std::string>& args) const {
  static const std::string curl = FindTool("curl");
  if (curl.empty()) return FailedPreconditionError("curl not found on PATH");
  std::vector<std::string> argv = {curl, "-s", "-S", "-w", "\n%{http_code}"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::string out;
  int rc = Run(argv, &out);
  auto nl = out.rfind('\n');
  std::string code = nl == std::string::npos ? "" : out.substr(nl + 1);
  std::string body = nl == std::string::npos ? out : out.substr(0, nl);
  if (rc != 0 || code.empty() || code[0] != '2') {
    return UnavailableError("curl " + args.back() + ": exit " + std::to_string(rc) + ", HTTP " +
                            code + ": " + body.substr(0, 300));
  }
  return body;
}

StatusOr<std::string> MotoServer::Iam(const std::string& form) const {
  return Curl({"--aws-sigv4", "aws:amz:" + region_ + ":iam", "-u", "setup:setup", "-X", "POST",
               "-H", "Content-Type: application/x-www-form-urlencoded", "--data",
               form + "&Version=2010-05-08", endpoint() + "/"});
}

Status MotoServer::CreateUsers() {
  int seed = 20261121;
  for (auto [name, creds] : {std::pair{"strata", &strata_}, std::pair{"nobody", &nobody_}}) {
    STRATA_RETURN_IF_ERROR(Iam(std::string("Action=CreateUser&UserName=") + name).status());
    STRATA_RETURN_IF_ERROR(
        Curl({"-X", "POST", endpoint() + "/moto-api/seed?a=" + std::to_string(seed++)}).status());
    STRATA_ASSIGN_OR_RETURN(std::string key,
                            Iam(std::string("Action=CreateAccessKey&UserName=") + name));
    S3Credentials c{XmlValue(key, "AccessKeyId"), XmlValue(key, "SecretAccessKey")};
    if (c.access_key_id.empty()) return InternalError("moto CreateAccessKey: " + key);
    if (!creds->access_key_id.empty() && creds->access_key_id != c.access_key_id) {
      return AbortedError("moto gave user " + std::string(name) + " a new key after a restart");
    }
    *creds = c;
  }
  STRATA_RETURN_IF_ERROR(Iam("Action=PutUserPolicy&UserName=strata&PolicyName=all&PolicyDocument=" +
                             FormEncode(kAllowAll))
                             .status());
  return SetAuth(true);
}

Status MotoServer::SetAuth(bool on) {
  return Curl({"-X", "POST", "-H", "Content-Type: text/plain", "--data", on ? "0" : "1000000",
               endpoint() + "/moto-api/reset-auth"})
      .status();
}

void MotoServer::Kill() {
  if (!child_) return;
  child_->Signal(SIGKILL);
  child_->Wait(std::chrono::seconds(30));
  child_.reset();
}

Status MotoServer::Restart() {
  Kill();
  return Launch();
}

Status MotoServer::CreateBucket(const std::string& name) {
  return Curl({"--aws-sigv4", "aws:amz:" + region_ + ":s3", "-u",
               strata_.access_key_id + ":" + strata_.secret_access_key, "-H",
               "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-X", "PUT", endpoint() + "/" + name})
      .status();
}

std::vector<std::string> MotoServer::AwsEnv() const {
  return {"AWS_ENDPOINT_URL=" + endpoint(),
          "AWS_REGION=" + region_,
          "AWS_DEFAULT_REGION=" + region_,
          "AWS_ACCESS_KEY_ID=" + strata_.access_key_id,
          "AWS_SECRET_ACCESS_KEY=" + strata_.secret_access_key,
          "AWS_SESSION_TOKEN=",
          "AWS_CONFIG_FILE=/dev/null",
          "AWS_SHARED_CREDENTIALS_FILE=/dev/null"};
}

}  // namespace strata::testing
