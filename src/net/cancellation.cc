// Copyright 2026 The Strata Authors.
#include "net/cancellation.h"

namespace strata::net {

bool Cancellation::Ticket::cancelled() const {
  return from_ != nullptr && from_->Cancelled(generation_);
}

Cancellation::Registration::Registration(const Ticket& ticket, Socket& socket)
    : from_(ticket.from_), socket_(&socket), generation_(ticket.generation_) {
  if (from_ == nullptr) return;
  MutexLock l(&from_->mu_);
  if (generation_ == from_->generation_) {
    from_->sockets_.insert(socket_);
    listed_ = true;
  } else {
    socket_->Abort();  // cancelled already
  }
}

Cancellation::Registration::~Registration() {
  if (!listed_) return;
  MutexLock l(&from_->mu_);
  if (generation_ != from_->generation_) return;  // a Cancel() cleared the entry
  from_->sockets_.erase(from_->sockets_.find(socket_));
}

Cancellation::Ticket Cancellation::Take() {
  MutexLock l(&mu_);
  return Ticket(this, generation_);
}

void Cancellation::Cancel() {
  MutexLock l(&mu_);
  ++generation_;
  // Under mu_: a Registration ends (and its socket may go) only with it.
  for (Socket* socket : sockets_) socket->Abort();
  sockets_.clear();
}

bool Cancellation::Cancelled(uint64_t generation) const {
  MutexLock l(&mu_);
  return generation != generation_;
}

}  // namespace strata::net
