// Copyright 2026 The Strata Authors.
#include "agent/node/backup_requests.h"

#include <gtest/gtest.h>

namespace strata::agent {
namespace {

wire::ReplicatedRequest Report(const BackupRequests& r, const std::set<int64_t>& held,
                               int64_t newest) {
  wire::ReplicatedRequest report;
  report.job = "job";
  r.FillReport(
      "job", [&](int64_t s) { return held.count(s) > 0; }, newest, &report);
  return report;
}

wire::ReplicatedReply Listing(std::set<int64_t> pending) {
  wire::ReplicatedReply reply;
  reply.requested = std::move(pending);
  return reply;
}

// An own request is reported and pinned until the coordinator, having heard
// of it, no longer lists it.
TEST(BackupRequestsTest, AnOwnRequestIsPinnedUntilTheCoordinatorIsDoneWithIt) {
  BackupRequests r;
  EXPECT_FALSE(r.Add({"job", 2, 20}).has_value());
  EXPECT_EQ(r.Pins(), (std::set<wire::StepKey>{{"job", 2, 20}}));
  wire::ReplicatedRequest sent = Report(r, {20, 21}, 21);
  EXPECT_EQ(sent.requested, std::set<int64_t>{20});
  EXPECT_TRUE(sent.requested_missing.empty());
  r.OnReply(sent, Listing({20}));  // pending: kept
  EXPECT_EQ(r.Pins().size(), 1u);
  r.OnReply(Report(r, {20}, 21), Listing({}));  // backed up
  EXPECT_TRUE(r.Pins().empty());
  EXPECT_TRUE(Report(r, {20}, 21).requested.empty());
}

// Another node's request, as the coordinator lists it: held here, it is
// reported and pinned; gone past without a copy, it is reported missing.
TEST(BackupRequestsTest, ListedRequestsAreHeldOrMissing) {
  BackupRequests r;
  r.Restored("job", 1, -1);
  wire::ReplicatedRequest nothing = Report(r, {}, 5);
  r.OnReply(nothing, Listing({7, 9}));
  EXPECT_EQ(r.Pins(), (std::set<wire::StepKey>{{"job", 1, 7}, {"job", 1, 9}}));
  wire::ReplicatedRequest sent = Report(r, {9}, 8);  // 7 passed without a copy; 9 held
  EXPECT_EQ(sent.requested, std::set<int64_t>{9});
  EXPECT_EQ(sent.requested_missing, std::set<int64_t>{7});
  sent = Report(r, {}, 8);  // 9 not held, not passed yet (the node is behind)
  EXPECT_TRUE(sent.requested.empty());
  EXPECT_EQ(sent.requested_missing, std::set<int64_t>{7});
}

TEST(BackupRequestsTest, RequestsAreBoundedAndEndWithTheirHistory) {
  BackupRequests r;
  for (int64_t s = 1; s <= static_cast<int64_t>(wire::kMaxRequestedBackups); ++s) {
    EXPECT_FALSE(r.Add({"job", 0, s * 10}).has_value());
  }
  EXPECT_EQ(r.Add({"job", 0, 100}), 10) << "the oldest is displaced";
  EXPECT_EQ(r.Pins().size(), wire::kMaxRequestedBackups);
  r.Restored("job", 0, 30);  // the job went back to step 30
  EXPECT_EQ(r.Pins(), (std::set<wire::StepKey>{{"job", 0, 20}, {"job", 0, 30}}));
  r.Add({"other", 0, 5});  // another job: the last one's requests are moot
  EXPECT_EQ(r.Pins(), (std::set<wire::StepKey>{{"other", 0, 5}}));
  wire::ReplicatedRequest report;
  r.FillReport(
      "job", [](int64_t) { return true; }, 100, &report);
  EXPECT_TRUE(report.requested.empty());
}

}  // namespace
}  // namespace strata::agent
