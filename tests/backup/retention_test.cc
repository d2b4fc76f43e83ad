// Copyright 2026 The Strata Authors.
//
// DecidePrune over a synthetic history: a backup every 6 hours through 2025
// and 2026, then a cluster around the ISO week-year boundary (2026-12-28 ..
// 2027-01-03 is 2026-W53; 2027-01-04 begins 2027-W01).
#include "backup/retention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

namespace strata::backup {
namespace {

constexpr const char* kNow = "2027-01-04_01-00";

BackupSummary Summary(const std::string& id, bool complete = true) {
  BackupSummary s;
  auto parsed = ParseBackupId(id);
  EXPECT_TRUE(parsed.ok()) << id;
  s.id = parsed.value_or(BackupId{});
  s.id_text = id;
  s.complete = complete;
  return s;
}

std::time_t T(const std::string& id) { return ParseBackupId(id)->minute; }

// Every 6 hours from 2025-01-01_00-00 to 2026-12-31_18-00, then the cluster.
std::vector<BackupSummary> History() {
  std::vector<BackupSummary> out;
  for (std::time_t t = T("2025-01-01_00-00"); t < T("2027-01-01_00-00"); t += 6 * 3600)
    out.push_back(Summary(BackupId{t, 1}.ToString()));
  for (const char* id :
       {"2027-01-01_00-00", "2027-01-01_00-00.2", "2027-01-01_00-00.3", "2027-01-01_00-05",
        "2027-01-02_12-00", "2027-01-03_23-59", "2027-01-04_00-00"})
    out.push_back(Summary(id));
  return out;
}

// id -> reason of every kept backup.
std::map<std::string, std::string> Kept(const std::vector<PruneDecision>& decisions) {
  std::map<std::string, std::string> kept;
  for (const auto& d : decisions)
    if (d.keep) kept[d.id] = d.reason;
  return kept;
}

struct Case {
  const char* name;
  RetentionPolicy policy;
  std::map<std::string, std::string> kept;  // id -> reason; everything else is deleted
};

RetentionPolicy P(int hourly, int daily, int weekly, int monthly, int yearly, bool recent = false) {
  RetentionPolicy p;
  p.hourly = hourly;
  p.daily = daily;
  p.weekly = weekly;
  p.monthly = monthly;
  p.yearly = yearly;
  p.prefer_recent = recent;
  return p;
}

void CheckCase(const Case& c, const std::vector<BackupSummary>& backups) {
  SCOPED_TRACE(c.name);
  ASSERT_TRUE(ValidateRetentionPolicy(c.policy).ok());
  auto decisions = DecidePrune(backups, c.policy, T(kNow));
  ASSERT_EQ(decisions.size(), backups.size());
  EXPECT_EQ(Kept(decisions), c.kept);
  for (const auto& d : decisions) {
    if (!d.keep) {
      EXPECT_EQ(d.reason, "not kept by any class") << d.id;
    }
  }
}

TEST(RetentionTest, EachClassKeepsTheOldestOfItsNewestBuckets) {
  const std::string newest = "2027-01-04_00-00";
  const Case cases[] = {
      {"hourly 5",
       P(5, 0, 0, 0, 0),
       {{newest, "hourly 2027-01-04T00, newest"},
        {"2027-01-03_23-59", "hourly 2027-01-03T23"},
        {"2027-01-02_12-00", "hourly 2027-01-02T12"},
        {"2027-01-01_00-00", "hourly 2027-01-01T00"},
        {"2026-12-31_18-00", "hourly 2026-12-31T18"}}},
      {"daily 5",
       P(0, 5, 0, 0, 0),
       {{newest, "daily 2027-01-04, newest"},
        {"2027-01-03_23-59", "daily 2027-01-03"},
        {"2027-01-02_12-00", "daily 2027-01-02"},
        {"2027-01-01_00-00", "daily 2027-01-01"},
        {"2026-12-31_00-00", "daily 2026-12-31"}}},
      // 2026-12-28 (Monday) .. 2027-01-03 is ISO week 53 of 2026.
      {"weekly 3",
       P(0, 0, 3, 0, 0),
       {{newest, "weekly 2027-W01, newest"},
        {"2026-12-28_00-00", "weekly 2026-W53"},
        {"2026-12-21_00-00", "weekly 2026-W52"}}},
      {"monthly 3",
       P(0, 0, 0, 3, 0),
       {{newest, "newest"},
        {"2027-01-01_00-00", "monthly 2027-01"},
        {"2026-12-01_00-00", "monthly 2026-12"},
        {"2026-11-01_00-00", "monthly 2026-11"}}},
      {"yearly 2",
       P(0, 0, 0, 0, 2),
       {{newest, "newest"},
        {"2027-01-01_00-00", "yearly 2027"},
        {"2026-01-01_00-00", "yearly 2026"}}},
      {"yearly always",
       P(0, 0, 0, 0, RetentionPolicy::kAlways),
       {{newest, "newest"},
        {"2027-01-01_00-00", "yearly 2027"},
        {"2026-01-01_00-00", "yearly 2026"},
        {"2025-01-01_00-00", "yearly 2025"}}},
      // More buckets asked for than exist: every bucket keeps one.
      {"yearly 10",
       P(0, 0, 0, 0, 10),
       {{newest, "newest"},
        {"2027-01-01_00-00", "yearly 2027"},
        {"2026-01-01_00-00", "yearly 2026"},
        {"2025-01-01_00-00", "yearly 2025"}}},
  };
  auto backups = History();
  for (const auto& c : cases) CheckCase(c, backups);
}

TEST(RetentionTest, PreferRecentKeepsTheNewestOfEachBucket) {
  const std::string newest = "2027-01-04_00-00";
  const Case cases[] = {
      {"hourly 5 recent",
       P(5, 0, 0, 0, 0, true),
       {{newest, "hourly 2027-01-04T00, newest"},
        {"2027-01-03_23-59", "hourly 2027-01-03T23"},
        {"2027-01-02_12-00", "hourly 2027-01-02T12"},
        {"2027-01-01_00-05", "hourly 2027-01-01T00"},
        {"2026-12-31_18-00", "hourly 2026-12-31T18"}}},
      {"daily 2 recent",
       P(0, 2, 0, 0, 0, true),
       {{newest, "daily 2027-01-04, newest"}, {"2027-01-03_23-59", "daily 2027-01-03"}}},
      {"weekly 2 recent",
       P(0, 0, 2, 0, 0, true),
       {{newest, "weekly 2027-W01, newest"}, {"2027-01-03_23-59", "weekly 2026-W53"}}},
      {"monthly 2 recent",
       P(0, 0, 0, 2, 0, true),
       {{newest, "monthly 2027-01, newest"}, {"2026-12-31_18-00", "monthly 2026-12"}}},
      {"yearly 1 recent", P(0, 0, 0, 0, 1, true), {{newest, "yearly 2027, newest"}}},
  };
  auto backups = History();
  for (const auto& c : cases) CheckCase(c, backups);
}

// Sequence numbers order backups within a minute.
TEST(RetentionTest, SequenceBreaksTiesWithinAMinute) {
  std::vector<BackupSummary> backups = {
      Summary("2027-01-01_00-00.2"), Summary("2027-01-01_00-00.10"), Summary("2027-01-01_00-00")};
  auto kept = Kept(DecidePrune(backups, P(1, 0, 0, 0, 0), T(kNow)));
  EXPECT_EQ(kept, (std::map<std::string, std::string>{{"2027-01-01_00-00", "hourly 2027-01-01T00"},
                                                      {"2027-01-01_00-00.10", "newest"}}));
  kept = Kept(DecidePrune(backups, P(1, 0, 0, 0, 0, true), T(kNow)));
  EXPECT_EQ(kept, (std::map<std::string, std::string>{
                      {"2027-01-01_00-00.10", "hourly 2027-01-01T00, newest"}}));
}

TEST(RetentionTest, WeeklyBucketsFollowIsoWeekYears) {
  // 2025-12-29 is Monday of 2026-W01; 2025-01-01 is in 2025-W01.
  auto backups = History();
  auto kept = Kept(DecidePrune(backups, P(0, 0, 1000, 0, 0), T(kNow)));
  EXPECT_EQ(kept.size(), 106u);  // 2025-W01..W52, 2026-W01..W53, 2027-W01
  EXPECT_EQ(kept["2025-01-01_00-00"], "weekly 2025-W01");
  EXPECT_EQ(kept["2025-12-22_00-00"], "weekly 2025-W52");
  EXPECT_EQ(kept["2025-12-29_00-00"], "weekly 2026-W01");
  EXPECT_EQ(kept["2026-12-28_00-00"], "weekly 2026-W53");
  EXPECT_FALSE(kept.count("2026-12-31_00-00"));
  EXPECT_FALSE(kept.count("2027-01-01_00-00"));
}

TEST(RetentionTest, MonthlyAlwaysKeepsTheFirstOfEveryMonth) {
  auto backups = History();
  auto kept = Kept(DecidePrune(backups, P(0, 0, 0, RetentionPolicy::kAlways, 0), T(kNow)));
  std::map<std::string, std::string> want = {{"2027-01-04_00-00", "newest"},
                                             {"2027-01-01_00-00", "monthly 2027-01"}};
  for (int year : {2025, 2026})
    for (int month = 1; month <= 12; ++month) {
      char id[32], label[16];
      std::snprintf(id, sizeof id, "%d-%02d-01_00-00", year, month);
      std::snprintf(label, sizeof label, "%d-%02d", year, month);
      want[id] = std::string("monthly ") + label;
    }
  EXPECT_EQ(kept, want);
}

TEST(RetentionTest, ABackupKeptBySeveralClassesListsThemAll) {
  auto backups = History();
  RetentionPolicy p = P(6, 7, 4, RetentionPolicy::kAlways, RetentionPolicy::kAlways);
  auto kept = Kept(DecidePrune(backups, p, T(kNow)));
  EXPECT_EQ(kept["2027-01-01_00-00"],
            "hourly 2027-01-01T00, daily 2027-01-01, monthly 2027-01, yearly 2027");
  EXPECT_EQ(kept["2027-01-04_00-00"],
            "hourly 2027-01-04T00, daily 2027-01-04, weekly 2027-W01, newest");
  EXPECT_EQ(kept["2026-12-31_18-00"], "hourly 2026-12-31T18");
  EXPECT_EQ(kept["2026-12-29_00-00"], "daily 2026-12-29");
  EXPECT_EQ(kept["2026-12-28_00-00"], "weekly 2026-W53");
  EXPECT_EQ(kept["2026-12-14_00-00"], "weekly 2026-W51");
  EXPECT_EQ(kept["2026-01-01_00-00"], "monthly 2026-01, yearly 2026");
  EXPECT_FALSE(kept.count("2026-12-27_00-00"));
  // 6 hourly; daily adds 12-29..12-31; weekly adds three Mondays; monthly
  // adds 24 more firsts of the month; yearly adds none.
  EXPECT_EQ(kept.size(), 6u + 3 + 3 + 24);
}

TEST(RetentionTest, TheNewestCompleteBackupIsAlwaysKept) {
  std::vector<BackupSummary> backups = {Summary("2026-01-01_00-00"), Summary("2026-06-01_00-00"),
                                        Summary("2026-06-02_00-00")};
  auto decisions = DecidePrune(backups, P(0, 0, 0, 0, 1), T(kNow));
  ASSERT_EQ(decisions.size(), 3u);
  EXPECT_TRUE(decisions[0].keep);
  EXPECT_EQ(decisions[0].reason, "yearly 2026");
  EXPECT_FALSE(decisions[1].keep);
  EXPECT_TRUE(decisions[2].keep);
  EXPECT_EQ(decisions[2].reason, "newest");
  // An incomplete backup newer than all is not "the newest".
  backups.push_back(Summary("2026-07-01_00-00", false));
  decisions = DecidePrune(backups, P(0, 0, 0, 0, 1), T(kNow));
  EXPECT_EQ(decisions[2].reason, "newest");
  EXPECT_EQ(decisions[3].reason, "incomplete");
}

TEST(RetentionTest, IncompleteBackupsAreKeptUnlessOlderThanTheLimit) {
  auto backups = History();
  backups.push_back(Summary("2026-06-15_03-00", false));
  backups.push_back(Summary("2027-01-04_00-30", false));  // being uploaded
  backups.push_back(Summary("2027-01-04_00-31", false));
  RetentionPolicy p = P(1, 0, 0, 0, 0);
  auto decisions = DecidePrune(backups, p, T(kNow));
  auto find = [&](const std::string& id) {
    return *std::find_if(decisions.begin(), decisions.end(),
                         [&](const PruneDecision& d) { return d.id == id; });
  };
  for (const char* id : {"2026-06-15_03-00", "2027-01-04_00-30", "2027-01-04_00-31"}) {
    EXPECT_TRUE(find(id).keep) << id;
    EXPECT_EQ(find(id).reason, "incomplete") << id;
  }
  // Incomplete backups take no bucket: the hour 2027-01-04T00 still keeps
  // its oldest complete backup.
  EXPECT_EQ(find("2027-01-04_00-00").reason, "hourly 2027-01-04T00, newest");

  p.delete_incomplete_after = 30 * 60;  // now - 00:30 is exactly 30m: not older
  decisions = DecidePrune(backups, p, T(kNow));
  EXPECT_FALSE(find("2026-06-15_03-00").keep);
  EXPECT_EQ(find("2026-06-15_03-00").reason, "incomplete, older than 30m");
  EXPECT_TRUE(find("2027-01-04_00-30").keep);
  EXPECT_TRUE(find("2027-01-04_00-31").keep);
  p.delete_incomplete_after = 29 * 60;
  decisions = DecidePrune(backups, p, T(kNow));
  EXPECT_FALSE(find("2027-01-04_00-30").keep);
  EXPECT_TRUE(find("2027-01-04_00-31").keep);
}

TEST(RetentionTest, DecisionsComeInIdOrderWhateverTheInputOrder) {
  auto backups = History();
  backups.push_back(Summary("2026-06-15_03-00", false));
  std::mt19937 rng(7);
  std::shuffle(backups.begin(), backups.end(), rng);
  auto decisions = DecidePrune(backups, P(0, 7, 0, 0, 0), T(kNow));
  ASSERT_EQ(decisions.size(), backups.size());
  for (size_t i = 1; i < decisions.size(); ++i)
    EXPECT_LT(*ParseBackupId(decisions[i - 1].id), *ParseBackupId(decisions[i].id));
  EXPECT_TRUE(DecidePrune({}, P(0, 7, 0, 0, 0), T(kNow)).empty());
}

// --delete-incomplete-older-than alone cleans up abandoned uploads and
// keeps every complete backup.
TEST(RetentionTest, IncompleteOnlyPolicyKeepsEveryCompleteBackup) {
  auto backups = History();
  backups.push_back(Summary("2026-06-15_03-00", false));
  backups.push_back(Summary("2027-01-04_00-30", false));
  RetentionPolicy p;
  p.delete_incomplete_after = 7 * 86400;
  ASSERT_TRUE(ValidateRetentionPolicy(p).ok());
  size_t deleted = 0;
  for (const auto& d : DecidePrune(backups, p, T(kNow))) {
    if (d.id == "2026-06-15_03-00") {
      EXPECT_FALSE(d.keep);
      ++deleted;
    } else if (d.id == "2027-01-04_00-30") {
      EXPECT_TRUE(d.keep);
      EXPECT_EQ(d.reason, "incomplete");
    } else {
      EXPECT_TRUE(d.keep) << d.id;
      EXPECT_EQ(d.reason, "complete; no retention class given") << d.id;
    }
  }
  EXPECT_EQ(deleted, 1u);
}

TEST(RetentionTest, APolicyWithoutAClassIsRefused) {
  RetentionPolicy p;
  p.prefer_recent = true;
  Status s = ValidateRetentionPolicy(p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "no retention class given");
  p.delete_incomplete_after = 3600;  // alone: cleans up incomplete backups only
  EXPECT_TRUE(ValidateRetentionPolicy(p).ok());
  p.delete_incomplete_after.reset();
  p.daily = -2;
  EXPECT_EQ(ValidateRetentionPolicy(p).code(), StatusCode::kInvalidArgument);
  p.daily = 1;
  EXPECT_TRUE(ValidateRetentionPolicy(p).ok());
  p.monthly = RetentionPolicy::kAlways;
  EXPECT_TRUE(ValidateRetentionPolicy(p).ok());
}

TEST(RetentionTest, DurationsParseStrictly) {
  EXPECT_EQ(*ParseRetentionDuration("30m"), 1800);
  EXPECT_EQ(*ParseRetentionDuration("12h"), 43200);
  EXPECT_EQ(*ParseRetentionDuration("7d"), 604800);
  EXPECT_EQ(*ParseRetentionDuration("2w"), 1209600);
  for (const char* bad : {"", "m", "7", "0d", "07d", "-1d", "+1d", "1.5d", "7D", "7 d", "7dd", "1s",
                          "99999999999999999999d", "40000w"})
    EXPECT_EQ(ParseRetentionDuration(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  EXPECT_EQ(FormatRetentionDuration(1209600), "14d");
  EXPECT_EQ(FormatRetentionDuration(43200), "12h");
  EXPECT_EQ(FormatRetentionDuration(5400), "90m");
}

}  // namespace
}  // namespace strata::backup
