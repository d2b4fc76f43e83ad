// Copyright 2026 The Strata Authors.
#include "net/tls.h"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "net/job_key.h"

namespace strata::net {
namespace {

// Both sides name the key alike; the key itself never crosses the wire.
constexpr std::string_view kPskIdentity = "strata-job-psk-v1";
constexpr std::string_view kPskLabel = "strata tls 1.3 psk";
// What one recv may take from the socket: many records at once.
constexpr size_t kReadAheadBytes = 256 << 10;
// TLS_AES_128_GCM_SHA256, the suite the external PSK is bound to.
constexpr unsigned char kPskSuite[2] = {0x13, 0x01};

// The oldest error on this thread's OpenSSL queue, as text ("" if none);
// empties the queue.
std::string TakeOpensslError() {
  std::string out;
  for (unsigned long e = ERR_get_error(); e != 0; e = ERR_get_error()) {
    if (!out.empty()) continue;  // the first is the cause
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    const char* reason = ERR_reason_error_string(e);
    out = reason != nullptr ? reason : buf;
  }
  return out;
}

// The socket under a TLS connection, as an OpenSSL BIO of our own, for two
// reasons. It sends with MSG_NOSIGNAL, so a peer that went away returns
// EPIPE instead of raising SIGPIPE (OpenSSL's socket BIO write()s). And it
// gathers records: TLS writes 16 KiB records, and one send per record costs
// loopback and the NIC path as much as the encryption; the BIO keeps up to
// kWriteGather bytes of them and sends them in one call once that much is
// waiting or OpenSSL (a handshake flight, an alert) or TlsStream (the end
// of a write) flushes. It never closes the descriptor.
struct SocketBio {
  int fd = -1;
  std::string out;  // records not sent yet: out[sent..]
  size_t sent = 0;
};

constexpr size_t kWriteGather = 256 << 10;

SocketBio* State(BIO* bio) { return static_cast<SocketBio*>(BIO_get_data(bio)); }

size_t Pending(const SocketBio& b) { return b.out.size() - b.sent; }

// Sends what is gathered; 1 when it is all gone, 0 when the socket is full
// (errno EAGAIN), -1 on an error (errno says which).
int SendGathered(SocketBio* b) {
  while (Pending(*b) > 0) {
    const ssize_t r = ::send(b->fd, b->out.data() + b->sent, Pending(*b), MSG_NOSIGNAL);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
    b->sent += static_cast<size_t>(r);
  }
  b->out.clear();
  b->sent = 0;
  return 1;
}

int BioWrite(BIO* bio, const char* data, int n) {
  SocketBio* b = State(bio);
  BIO_clear_retry_flags(bio);
  if (Pending(*b) >= kWriteGather) {
    const int r = SendGathered(b);
    if (r < 0) return -1;
    if (r == 0 && Pending(*b) >= kWriteGather) {
      BIO_set_retry_write(bio);
      return -1;
    }
  }
  if (b->sent > 0 && b->sent == b->out.size()) {
    b->out.clear();
    b->sent = 0;
  }
  const size_t take =
      std::min(static_cast<size_t>(n), kWriteGather - std::min(kWriteGather, Pending(*b)));
  b->out.append(data, take);
  return static_cast<int>(take);
}

int BioRead(BIO* bio, char* data, int n) {
  SocketBio* b = State(bio);
  BIO_clear_retry_flags(bio);
  const ssize_t r = ::recv(b->fd, data, static_cast<size_t>(n), 0);
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
    BIO_set_retry_read(bio);
  }
  return static_cast<int>(r);
}

long BioCtrl(BIO* bio, int cmd, long, void*) {  // NOLINT(runtime/int): OpenSSL's type
  SocketBio* b = State(bio);
  switch (cmd) {
    case BIO_CTRL_FLUSH: {
      BIO_clear_retry_flags(bio);
      const int r = SendGathered(b);
      if (r == 0) BIO_set_retry_write(bio);
      return r;
    }
    case BIO_CTRL_WPENDING:
      return static_cast<long>(Pending(*b));  // NOLINT(runtime/int)
    default:
      return 0;
  }
}

int BioCreate(BIO* bio) {
  BIO_set_data(bio, new SocketBio);
  BIO_set_init(bio, 1);
  return 1;
}

int BioDestroy(BIO* bio) {
  delete State(bio);
  BIO_set_data(bio, nullptr);
  return 1;
}

const BIO_METHOD* SocketBioMethod() {
  static BIO_METHOD* method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "strata socket");
    if (m == nullptr) return m;
    BIO_meth_set_write(m, BioWrite);
    BIO_meth_set_read(m, BioRead);
    BIO_meth_set_ctrl(m, BioCtrl);
    BIO_meth_set_create(m, BioCreate);
    BIO_meth_set_destroy(m, BioDestroy);
    return m;
  }();
  return method;
}

// The external PSK as a TLS 1.3 session, bound to kPskSuite; null when the
// handshake asks for another digest (then the PSK is not offered).
SSL_SESSION* PskSession(SSL* ssl, const EVP_MD* md) {
  const SSL_CIPHER* cipher = SSL_CIPHER_find(ssl, kPskSuite);
  if (cipher == nullptr) return nullptr;
  if (md != nullptr && SSL_CIPHER_get_handshake_digest(cipher) != md) return nullptr;
  const auto* key = static_cast<const std::string*>(SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl)));
  SSL_SESSION* session = SSL_SESSION_new();
  if (session == nullptr ||
      SSL_SESSION_set1_master_key(session, reinterpret_cast<const unsigned char*>(key->data()),
                                  key->size()) != 1 ||
      SSL_SESSION_set_cipher(session, cipher) != 1 ||
      SSL_SESSION_set_protocol_version(session, TLS1_3_VERSION) != 1) {
    SSL_SESSION_free(session);
    return nullptr;
  }
  return session;
}

int UsePsk(SSL* ssl, const EVP_MD* md, const unsigned char** id, size_t* id_len,
           SSL_SESSION** session) {
  *session = PskSession(ssl, md);
  *id = reinterpret_cast<const unsigned char*>(kPskIdentity.data());
  *id_len = *session != nullptr ? kPskIdentity.size() : 0;
  return 1;
}

int FindPsk(SSL* ssl, const unsigned char* id, size_t id_len, SSL_SESSION** session) {
  const std::string_view offered(reinterpret_cast<const char*>(id), id_len);
  // An unknown identity: no PSK, and with no certificate the handshake fails.
  *session = offered == kPskIdentity ? PskSession(ssl, nullptr) : nullptr;
  return 1;
}

// HMAC-SHA256(key, kPskLabel), of the job's key (scrypt of its secret,
// MakeTrust): a key for TLS alone, apart from the handshake's.
StatusOr<std::string> DerivePsk(std::string_view secret) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
           reinterpret_cast<const unsigned char*>(kPskLabel.data()), kPskLabel.size(), out,
           &len) == nullptr) {
    return InternalError("TLS: deriving the pre-shared key failed");
  }
  return std::string(reinterpret_cast<const char*>(out), len);
}

Status LoadCertificates(SSL_CTX* ctx, const TlsOptions& o) {
  if (o.cert_file.empty() || o.key_file.empty() || o.ca_file.empty()) {
    return InvalidArgumentError(
        "TLS with certificates needs a certificate, its key and the CA file (tls-cert-file, "
        "tls-key-file, tls-ca-file)");
  }
  ERR_clear_error();
  if (SSL_CTX_use_certificate_chain_file(ctx, o.cert_file.c_str()) != 1) {
    return InvalidArgumentError("TLS certificate " + o.cert_file + ": " + TakeOpensslError());
  }
  if (SSL_CTX_use_PrivateKey_file(ctx, o.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    return InvalidArgumentError("TLS key " + o.key_file + ": " + TakeOpensslError());
  }
  if (SSL_CTX_check_private_key(ctx) != 1) {
    return InvalidArgumentError("TLS key " + o.key_file + " does not match the certificate " +
                                o.cert_file + ": " + TakeOpensslError());
  }
  if (SSL_CTX_load_verify_locations(ctx, o.ca_file.c_str(), nullptr) != 1) {
    return InvalidArgumentError("TLS CA file " + o.ca_file + ": " + TakeOpensslError());
  }
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  return Status::Ok();
}

bool IsIpAddress(const std::string& host) {
  unsigned char buf[sizeof(in6_addr)];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

}  // namespace

std::string_view TlsModeName(TlsMode mode) {
  switch (mode) {
    case TlsMode::kPsk:
      return "psk";
    case TlsMode::kCertificates:
      return "certificates";
    case TlsMode::kOff:
      return "off";
  }
  return "?";
}

StatusOr<TlsMode> ParseTlsMode(std::string_view text) {
  for (TlsMode m : {TlsMode::kPsk, TlsMode::kCertificates, TlsMode::kOff}) {
    if (text == TlsModeName(m)) return m;
  }
  return InvalidArgumentError("TLS mode \"" + std::string(text) +
                              "\": expected psk, certificates or off");
}

StatusOr<std::shared_ptr<const TlsContext>> TlsContext::Create(const TlsOptions& options,
                                                               std::string_view secret) {
  if (options.mode == TlsMode::kOff) return InvalidArgumentError("TLS is off: no context");
  const bool certificates = options.mode == TlsMode::kCertificates;
  if (SocketBioMethod() == nullptr) return InternalError("TLS: cannot create the socket BIO");
  SSL_CTX* ctx = SSL_CTX_new(TLS_method());
  if (ctx == nullptr) return InternalError("TLS: SSL_CTX_new: " + TakeOpensslError());
  std::shared_ptr<TlsContext> context(new TlsContext(options.mode, ctx));
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION);
  // No resumption: connections are few and long, and tickets cost a write.
  SSL_CTX_set_num_tickets(ctx, 0);
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  // A peer that hangs up without close_notify reads as end of stream; the
  // frame lengths above say whether a message was cut short.
  SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                            SSL_MODE_RELEASE_BUFFERS);
  // Read ahead: one recv takes what the read buffer holds, instead of two
  // recvs per record (header, body). The buffer is OpenSSL's default (one
  // record) until the stream is widened (WidenReadBuffer: then many of a
  // step's 16 KiB records at once), and released while the connection is
  // idle (RELEASE_BUFFERS).
  SSL_CTX_set_read_ahead(ctx, 1);
  if (certificates) {
    // AES-128-GCM first: as strong as the job needs and the fastest with AES-NI.
    SSL_CTX_set_ciphersuites(
        ctx, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256");
    STRATA_RETURN_IF_ERROR(LoadCertificates(ctx, options));
  } else {
    if (secret.empty()) return InvalidArgumentError("TLS with a pre-shared key needs the secret");
    STRATA_ASSIGN_OR_RETURN(context->psk_, DerivePsk(secret));
    // The PSK's hash is SHA-256: a server that preferred a SHA-384 suite
    // would skip the PSK and look for a certificate it does not have.
    if (SSL_CTX_set_ciphersuites(ctx, "TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256") != 1) {
      return InternalError("TLS: cannot set the cipher suites: " + TakeOpensslError());
    }
    SSL_CTX_set_app_data(ctx, &context->psk_);
    SSL_CTX_set_psk_use_session_callback(ctx, UsePsk);
    SSL_CTX_set_psk_find_session_callback(ctx, FindPsk);
  }
  return std::shared_ptr<const TlsContext>(std::move(context));
}

TlsContext::~TlsContext() { SSL_CTX_free(ctx_); }

StatusOr<std::unique_ptr<TlsStream>> TlsStream::New(std::shared_ptr<const TlsContext> context,
                                                    int fd, Role role,
                                                    const std::string& server_name,
                                                    std::string peer) {
  ERR_clear_error();
  SSL* ssl = SSL_new(context->native());
  if (ssl == nullptr) return InternalError("TLS with " + peer + ": " + TakeOpensslError());
  std::unique_ptr<TlsStream> stream(new TlsStream(std::move(context), ssl, std::move(peer)));
  BIO* bio = BIO_new(SocketBioMethod());
  if (bio == nullptr) return InternalError("TLS with " + stream->peer_ + ": no BIO");
  State(bio)->fd = fd;
  SSL_set_bio(ssl, bio, bio);
  if (role == Role::kServer) {
    SSL_set_accept_state(ssl);
    return stream;
  }
  SSL_set_connect_state(ssl);
  stream->WidenReadBuffer();  // a connection this process made: nothing to fear from it
  if (stream->context_->mode() == TlsMode::kCertificates && !server_name.empty()) {
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
    X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    const int ok = IsIpAddress(server_name)
                       ? X509_VERIFY_PARAM_set1_ip_asc(param, server_name.c_str())
                       : X509_VERIFY_PARAM_set1_host(param, server_name.c_str(), 0);
    if (ok != 1) return InvalidArgumentError("TLS: cannot check the name " + server_name);
  }
  return stream;
}

TlsStream::TlsStream(std::shared_ptr<const TlsContext> context, SSL* ssl, std::string peer)
    : context_(std::move(context)), ssl_(ssl), peer_(std::move(peer)) {}

TlsStream::~TlsStream() { SSL_free(ssl_); }

StatusOr<IoStep> TlsStream::Handshake() {
  if (handshake_done_) return IoStep{IoStep::kProgress, 0};
  ERR_clear_error();
  errno = 0;
  const int r = SSL_do_handshake(ssl_);
  if (r == 1) {
    handshake_done_ = true;
    return IoStep{IoStep::kProgress, 0};
  }
  return Outcome(r, "TLS handshake with");
}

StatusOr<IoStep> TlsStream::Read(void* data, size_t n) {
  ERR_clear_error();
  size_t got = 0;
  errno = 0;
  const int r = SSL_read_ex(ssl_, data, n, &got);
  if (r == 1) return IoStep{IoStep::kProgress, got};
  return Outcome(r, "TLS: receiving from");
}

StatusOr<IoStep> TlsStream::Write(const void* data, size_t n) {
  ERR_clear_error();
  size_t sent = 0;
  errno = 0;
  const int r = SSL_write_ex(ssl_, data, n, &sent);
  if (r != 1) return Outcome(r, "TLS: sending to");
  // The records wait in the BIO until kWriteGather bytes do (SSL_write
  // returns after each record: SSL_MODE_ENABLE_PARTIAL_WRITE); the writer's
  // Flush sends the rest.
  return IoStep{IoStep::kProgress, sent};
}

StatusOr<IoStep> TlsStream::Flush() {
  const int r = SendGathered(State(SSL_get_wbio(ssl_)));
  if (r < 0) return UnavailableError("TLS: sending to " + peer_ + ": " + std::strerror(errno));
  return IoStep{r == 1 ? IoStep::kProgress : IoStep::kWantWrite, 0};
}

size_t TlsStream::unsent() const { return Pending(*State(SSL_get_wbio(ssl_))); }

void TlsStream::WidenReadBuffer() { SSL_set_default_read_buffer_len(ssl_, kReadAheadBytes); }

void TlsStream::Shutdown() {
  if (!handshake_done_) return;
  ERR_clear_error();
  SSL_shutdown(ssl_);  // one attempt: a close_notify if the socket takes it
  SendGathered(State(SSL_get_wbio(ssl_)));
  ERR_clear_error();
}

std::string TlsStream::Describe() const {
  const SSL_CIPHER* cipher = SSL_get_current_cipher(ssl_);
  return std::string(SSL_get_version(ssl_)) + " " +
         (cipher != nullptr ? SSL_CIPHER_get_name(cipher) : "(no cipher)");
}

StatusOr<IoStep> TlsStream::Outcome(int ret, const char* doing) {
  const int err = SSL_get_error(ssl_, ret);
  const int saved_errno = errno;  // the callers clear it before the call
  if (err == SSL_ERROR_WANT_READ) return IoStep{IoStep::kWantRead, 0};
  if (err == SSL_ERROR_WANT_WRITE) return IoStep{IoStep::kWantWrite, 0};
  std::string reason = TakeOpensslError();
  const std::string where = std::string(doing) + " " + peer_;
  // The peer hung up (SSL_OP_IGNORE_UNEXPECTED_EOF makes a missing
  // close_notify read like one).
  const bool eof = err == SSL_ERROR_ZERO_RETURN || (err == SSL_ERROR_SYSCALL && saved_errno == 0);
  if (handshake_done_) {
    if (eof) return IoStep{IoStep::kClosed, 0};
    if (err == SSL_ERROR_SYSCALL)
      return UnavailableError(where + ": " + std::strerror(saved_errno));
    return DataLossError(where + ": " + (reason.empty() ? "error" : reason) +
                         " (a record failed its integrity check: the connection was changed in "
                         "flight or broken)");
  }
  if (eof || (err == SSL_ERROR_SYSCALL && (saved_errno == ECONNRESET || saved_errno == EPIPE))) {
    return UnavailableError(where + ": the peer " + (eof ? "closed" : "reset") +
                            " the connection during the handshake (is it an agent with TLS "
                            "off, or with another TLS mode?)");
  }
  if (err == SSL_ERROR_SYSCALL) return UnavailableError(where + ": " + std::strerror(saved_errno));
  return PermissionDeniedError(
      where + " failed: " + (reason.empty() ? "error " + std::to_string(err) : reason) +
      (context_->mode() == TlsMode::kPsk
           ? " (the peer does not know the job's secret, or does not use TLS with it)"
           : " (a certificate is not trusted or not for this host, or the peer does not use "
             "TLS)"));
}

std::string Trust::Describe() const {
  if (tls == nullptr) return "plaintext";
  return "TLS 1.3 (" + std::string(TlsModeName(tls->mode())) + ")";
}

StatusOr<Trust> MakeTrust(std::string secret, const TlsOptions& options, std::string_view job) {
  const bool files =
      !(options.cert_file.empty() && options.key_file.empty() && options.ca_file.empty());
  if (files && options.mode != TlsMode::kCertificates) {
    return InvalidArgumentError(
        "tls-cert-file, tls-key-file and tls-ca-file apply only to TLS mode certificates");
  }
  if (secret.empty()) return InvalidArgumentError("the job's secret is empty");
  Trust trust;
  STRATA_ASSIGN_OR_RETURN(trust.secret, DeriveJobKey(secret, job));
  if (options.mode != TlsMode::kOff) {
    STRATA_ASSIGN_OR_RETURN(trust.tls, TlsContext::Create(options, trust.secret));
  }
  return trust;
}

}  // namespace strata::net
