// Copyright 2026 The Strata Authors.
#include "net/cancellation.h"

namespace strata::net {

bool Cancellation::Ticket::cancelled() const {
  return from_ != nullptr && from_->Cancelled(generation_);
}

Cancellation::Registration::Registration(const Ticket& ticket, Socket& socket)
    : from_(ticket.from_), socket_(&socket) {
  if (from_ == nullptr) return;
  MutexLock l(&from_->mu_);
  if (ticket.generation_ == from_->generation_) {
    from_->sockets_.insert(socket_);
  } else {
    socket_->Abort();  // cancelled already
  }
}

Cancellation::Registration::~Registration() {
  if (from_ == nullptr) return;
  MutexLock l(&from_->mu_);
  auto it = from_->sockets_.find(socket_);  // gone if a Cancel() came since
  if (it != from_->sockets_.end()) from_->sockets_.erase(it);
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
