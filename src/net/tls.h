// Copyright 2026 The Strata Authors.
//
// TLS 1.3 between agents (OpenSSL). Every byte after the TCP connect is
// encrypted and authenticated: a change in flight fails the record's AEAD
// tag and the connection, a replayed or truncated stream fails the same way.
// Both sides authenticate, in one of two ways:
//
//   kPsk           (the default) an external pre-shared key derived from the
//                  job's key (net/job_key.h: scrypt of the job's secret,
//                  salted with the job's name), HMAC-SHA256(key, "strata tls
//                  1.3 psk"),
//                  with an ephemeral (EC)DHE exchange on top (psk_dhe_ke), so
//                  a recorded session stays secret even if the job's secret
//                  leaks later. No certificates to manage.
//   kCertificates  X.509: each agent presents `cert_file` (its chain) with
//                  `key_file`, and accepts only peers whose certificate
//                  chains to `ca_file`; a client also checks that the
//                  server's certificate names the host or IP it dialled.
//   kOff           plaintext. Only by explicit choice; the agent logs a
//                  warning at start.
//
// Whatever the mode, the job's HMAC handshake (net/auth.h) then runs inside
// the channel: it carries the protocol version and the client's id, and in
// certificate mode it is a second check, of the job's secret.
//
// Errors are PERMISSION_DENIED when the peer fails authentication (wrong
// secret, untrusted certificate), UNAVAILABLE when it goes away, DATA_LOSS
// when a record fails its integrity check, each naming the peer.
//
// Thread-safety: a TlsContext is immutable once created and shared by every
// connection. A TlsStream is used by one thread at a time.
#ifndef STRATA_NET_TLS_H_
#define STRATA_NET_TLS_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "strata/status.h"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;

namespace strata::net {

enum class TlsMode { kPsk, kCertificates, kOff };

// "psk", "certificates" or "off".
std::string_view TlsModeName(TlsMode mode);
// The inverse of TlsModeName; INVALID_ARGUMENT otherwise, naming the choices.
StatusOr<TlsMode> ParseTlsMode(std::string_view text);

struct TlsOptions {
  TlsMode mode = TlsMode::kPsk;
  // kCertificates only: PEM files. Required in that mode, refused otherwise.
  std::string cert_file;  // this agent's certificate, then its chain
  std::string key_file;   // its private key
  std::string ca_file;    // the certificates peers must chain to
};

class TlsContext {
 public:
  // REQUIRES: options.mode != kOff, and certificate files only with
  // kCertificates (MakeTrust checks both). `secret` keys kPsk.
  // Errors name the file that cannot be loaded or does not match its key.
  static StatusOr<std::shared_ptr<const TlsContext>> Create(const TlsOptions& options,
                                                            std::string_view secret);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  TlsMode mode() const { return mode_; }
  SSL_CTX* native() const { return ctx_; }

 private:
  TlsContext(TlsMode mode, SSL_CTX* ctx) : mode_(mode), ctx_(ctx) {}
  const TlsMode mode_;
  SSL_CTX* const ctx_;
  std::string psk_;  // kPsk: the key the callbacks hand OpenSSL
};

// The result of one non-blocking attempt to move bytes (or to advance the
// handshake): some progress, or what to wait for before trying again.
struct IoStep {
  enum Kind { kProgress, kWantRead, kWantWrite, kClosed };
  Kind kind = kProgress;
  size_t bytes = 0;  // kProgress of a read or write: how many moved (> 0)
};

// One TLS connection over a non-blocking socket it does not own. Always try
// the operation before waiting for the socket: decrypted bytes may already
// be buffered.
class TlsStream {
 public:
  enum class Role { kClient, kServer };
  // `server_name`: for a client, the host it dialled (checked against the
  // server's certificate in kCertificates mode); `peer` names it in errors.
  static StatusOr<std::unique_ptr<TlsStream>> New(std::shared_ptr<const TlsContext> context, int fd,
                                                  Role role, const std::string& server_name,
                                                  std::string peer);
  ~TlsStream();
  TlsStream(const TlsStream&) = delete;
  TlsStream& operator=(const TlsStream&) = delete;

  // Advances the handshake: kProgress once it is complete.
  StatusOr<IoStep> Handshake();
  // kClosed when the peer closed the connection (with or without
  // close_notify: the framing above detects a truncated message).
  StatusOr<IoStep> Read(void* data, size_t n);
  // Encrypts up to n bytes into records and sends what the socket takes;
  // records it does not take yet wait in the stream (unsent()) and go with
  // the next Write or Flush. A writer's last step is Flush until kProgress.
  StatusOr<IoStep> Write(const void* data, size_t n);
  // Sends the records waiting: kProgress when none is left, else kWantWrite.
  StatusOr<IoStep> Flush();
  size_t unsent() const;
  // Sends close_notify if the socket takes it at once; never waits.
  void Shutdown();
  // A stream reads one record at a time (OpenSSL's default buffer, about
  // 17 KiB) until this is called; then up to 256 KiB per receive (many
  // records at once, for step data). Servers call it once the peer has
  // authenticated: a connection that has not costs little. Clients are
  // widened from the start.
  void WidenReadBuffer();

  // "TLSv1.3 TLS_AES_128_GCM_SHA256" once the handshake is done.
  std::string Describe() const;
  const std::string& peer() const { return peer_; }

 private:
  TlsStream(std::shared_ptr<const TlsContext> context, SSL* ssl, std::string peer);
  // Maps SSL_get_error of a call that returned `ret` while `doing`.
  StatusOr<IoStep> Outcome(int ret, const char* doing);

  std::shared_ptr<const TlsContext> context_;  // outlives ssl_
  SSL* const ssl_;
  const std::string peer_;
  bool handshake_done_ = false;
};

// What a connection between agents proves and how it is protected: the
// job's key (the HMAC handshake, and the PSK in kPsk mode) and the TLS
// context (null: plaintext). Copies share the context.
struct Trust {
  // What the handshake is keyed by: the job's key from MakeTrust (never the
  // secret itself, which is only ever an input to scrypt), or for a test,
  // any string both ends share.
  std::string secret;
  std::shared_ptr<const TlsContext> tls;

  bool encrypted() const { return tls != nullptr; }
  // "TLS 1.3 (psk)", "TLS 1.3 (certificates)" or "plaintext".
  std::string Describe() const;
};

// The trust of a job: the key of `secret` for `job` (DeriveJobKey; "" when
// the agents name no job) and TLS as `options` say.
StatusOr<Trust> MakeTrust(std::string secret, const TlsOptions& options, std::string_view job = "");

}  // namespace strata::net

#endif  // STRATA_NET_TLS_H_
