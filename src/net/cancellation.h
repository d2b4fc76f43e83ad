// Copyright 2026 The Strata Authors.
//
// Cancellation: ends, from another thread, the transfers of work that no
// longer matters (the sends of a past incarnation of a job, which would
// hold the sending thread and the links for minutes behind a partition).
//
// Work takes a Ticket when it begins. Each socket the work blocks on is
// Registered for as long as it carries the work; Cancel() ends every ticket
// taken before it: its registered sockets are aborted (a call blocked on
// one returns at once with an error, and the peer sees a reset), a socket
// registered for it later is aborted as it registers, and cancelled() tells
// the work to begin nothing more. A connect in progress is not registered:
// it ends within its own timeout, and the work checks cancelled() after it.
//
// Thread-safe; Cancel() makes only non-blocking system calls and may be
// called with the caller's locks held.
#ifndef STRATA_NET_CANCELLATION_H_
#define STRATA_NET_CANCELLATION_H_

#include <cstdint>
#include <set>

#include "net/socket.h"
#include "util/mutex.h"

namespace strata::net {

class Cancellation {
 public:
  // Work begun at one moment. A default Ticket belongs to no Cancellation
  // and is never cancelled. The Cancellation must outlive its tickets.
  class Ticket {
   public:
    Ticket() = default;
    bool cancelled() const;

   private:
    friend class Cancellation;
    Ticket(Cancellation* from, uint64_t generation) : from_(from), generation_(generation) {}
    Cancellation* from_ = nullptr;
    uint64_t generation_ = 0;
  };

  // `socket` carries the work of `ticket` while this lives (it must not
  // move or close meanwhile). Registrations of one socket may nest.
  class Registration {
   public:
    Registration(const Ticket& ticket, Socket& socket);
    ~Registration();
    Registration(const Registration&) = delete;
    Registration& operator=(const Registration&) = delete;

   private:
    Cancellation* const from_;
    Socket* const socket_;
    const uint64_t generation_;
    bool listed_ = false;  // in from_->sockets_ (until a Cancel() clears them)
  };

  Cancellation() = default;
  Cancellation(const Cancellation&) = delete;
  Cancellation& operator=(const Cancellation&) = delete;

  Ticket Take() EXCLUDES(mu_);  // for work that begins now
  // Ends every ticket taken so far.
  void Cancel() EXCLUDES(mu_);

 private:
  bool Cancelled(uint64_t generation) const EXCLUDES(mu_);

  mutable Mutex mu_;
  uint64_t generation_ GUARDED_BY(mu_) = 0;
  // Registered for generation_, one entry per Registration listed.
  std::multiset<Socket*> sockets_ GUARDED_BY(mu_);
};

}  // namespace strata::net

#endif  // STRATA_NET_CANCELLATION_H_
