// Copyright 2026 The Strata Authors.
//
// TestPki: a certificate authority and certificates for tests of TLS in
// certificate mode, made with Debian's openssl command in a scratch
// directory: <name>.pem (certificate), <name>.key (its EC P-256 key).
#ifndef STRATA_TESTS_HARNESS_TEST_PKI_H_
#define STRATA_TESTS_HARNESS_TEST_PKI_H_

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_util.h"

namespace strata::testing {

class TestPki {
 public:
  explicit TestPki(const std::string& tag) : dir_(tag) {}

  std::string Path(const std::string& file) const { return dir_.Sub(file); }

  // A self-signed CA `name`.
  void MakeCa(const std::string& name) {
    OpenSsl({"req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", Path(name + ".key"), "-out", Path(name + ".pem"), "-days", "2", "-subj",
             "/CN=" + name});
  }
  // A certificate `name` that `ca` signed, with `san` as its extension, e.g.
  // "subjectAltName=IP:127.0.0.1,DNS:localhost".
  void MakeCert(const std::string& name, const std::string& ca, const std::string& san) {
    WriteFile(Path(name + ".ext"), san + "\n");
    OpenSsl({"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
             Path(name + ".key"), "-out", Path(name + ".csr"), "-subj", "/CN=" + name});
    OpenSsl({"x509", "-req", "-in", Path(name + ".csr"), "-CA", Path(ca + ".pem"), "-CAkey",
             Path(ca + ".key"), "-CAcreateserial", "-out", Path(name + ".pem"), "-days", "2",
             "-extfile", Path(name + ".ext")});
  }

  // The flags that give an agent or a client command certificate `name`
  // and trust in `ca`.
  std::vector<std::string> Flags(const std::string& name, const std::string& ca) const {
    return {"--tls",          "certificates",      "--tls-cert-file", Path(name + ".pem"),
            "--tls-key-file", Path(name + ".key"), "--tls-ca-file",   Path(ca + ".pem")};
  }

 private:
  static void OpenSsl(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"/usr/bin/openssl"};
    argv.insert(argv.end(), args.begin(), args.end());
    std::string out;
    ASSERT_EQ(Run(argv, &out), 0) << out;
  }

  ScratchDir dir_;
};

}  // namespace strata::testing

#endif  // STRATA_TESTS_HARNESS_TEST_PKI_H_
