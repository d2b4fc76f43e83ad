// Copyright 2026 The Strata Authors.
//
// GoodputLedger on scripted timelines: every second of a job lands in one
// category, and the categories add up to the time elapsed.
#include "agent/node/goodput.h"

#include <gtest/gtest.h>

namespace strata::agent {
namespace {

using std::chrono::seconds;
using Rank = wire::StatusReply::Rank;

class GoodputTest : public ::testing::Test {
 protected:
  SteadyClock::time_point At(double s) {
    return t0_ +
           std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(s));
  }
  // One rank (pid) training from `from` to `to` seconds, one step a second
  // from `step`, its cumulative stall growing by `stall_per_step`.
  int64_t Train(GoodputLedger& g, int64_t pid, double from, double to, int64_t step,
                double stall_per_step, double* stall) {
    for (double t = from; t <= to + 1e-9; t += 1) {
      g.Sample(At(t), step, {Rank{pid, step, 0, -1, *stall, step}});
      *stall += stall_per_step;
      ++step;
    }
    return step - 1;
  }
  void ExpectAddsUp(const wire::Goodput& r) {
    EXPECT_NEAR(r.productive_seconds + r.save_seconds + r.restore_seconds + r.wasted_seconds +
                    r.other_seconds,
                r.elapsed_seconds, 1e-6);
  }
  SteadyClock::time_point t0_{};
};

TEST_F(GoodputTest, NothingBeforeTheJobStarts) {
  GoodputLedger g;
  g.Sample(At(1), 5, {});
  EXPECT_FALSE(g.Report(At(2)).has_value());
}

TEST_F(GoodputTest, AnUninterruptedRunIsProductiveButForItsStalls) {
  GoodputLedger g;
  g.StartBegan(At(0));
  g.StartDone(At(2), -1);  // 2 s to start fresh
  double stall = 0;
  Train(g, 10, 2, 102, 1, 0.1, &stall);  // steps 1..101, 0.1 s of each blocked in Save()
  auto r = g.Report(At(102));
  ASSERT_TRUE(r.has_value());
  EXPECT_DOUBLE_EQ(r->elapsed_seconds, 102);
  EXPECT_DOUBLE_EQ(r->restore_seconds, 2);
  EXPECT_NEAR(r->save_seconds, 10, 1e-6);  // 100 growths of 0.1 s
  EXPECT_NEAR(r->productive_seconds, 90, 1e-6);
  EXPECT_EQ(r->wasted_seconds, 0);
  EXPECT_EQ(r->interruptions, 0);
  EXPECT_EQ(r->step, 101);
  ExpectAddsUp(*r);
}

TEST_F(GoodputTest, AnInterruptionCostsDownTimeRestoreAndRecomputation) {
  GoodputLedger g;
  g.StartBegan(At(0));
  g.StartDone(At(0), -1);
  double stall = 0;
  Train(g, 10, 0, 100, 0, 0, &stall);  // steps 0..100 in 100 s: 1 s a step
  // The process dies at 100.5 s; the job starts again at 110 s and restores
  // step 80 at 115 s: 20 steps lost.
  g.StartBegan(At(110));
  g.StartDone(At(115), 80);
  Train(g, 11, 115, 135, 80, 0, &stall);  // steps 80..100 again
  auto r = g.Report(At(135));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->interruptions, 1);
  EXPECT_EQ(r->wasted_steps, 20);
  EXPECT_DOUBLE_EQ(r->restore_seconds, 5);
  EXPECT_NEAR(r->wasted_seconds, 20, 1e-6);
  EXPECT_NEAR(r->productive_seconds, 100, 1e-6);
  EXPECT_NEAR(r->other_seconds, 10, 1e-6);  // from the last progress to the next start
  EXPECT_NEAR(r->goodput, 100.0 / 135, 1e-9);
  ExpectAddsUp(*r);
}

TEST_F(GoodputTest, ASupersededStartCountsOnceAndStallsOfARestartedRankAreNotLost) {
  GoodputLedger g;
  g.StartBegan(At(0));
  g.StartBegan(At(3));  // a newer yaml: the same start goes on
  g.StartDone(At(4), -1);
  EXPECT_DOUBLE_EQ(g.Report(At(4))->restore_seconds, 4);
  // Two ranks side by side: stalls are shared, not added up.
  g.Sample(At(5), 1, {Rank{1, 1, 0, -1, 0.0, 0}, Rank{2, 1, 0, -1, 0.0, 0}});
  g.Sample(At(6), 2, {Rank{1, 2, 0, -1, 1.0, 1}, Rank{2, 2, 0, -1, 1.0, 1}});
  EXPECT_NEAR(g.Report(At(6))->save_seconds, 1, 1e-9);
  // Rank 2 restarts: the new pid's first value is its baseline (its slot
  // may hold a previous holder's count), then its growth counts.
  g.Sample(At(7), 3, {Rank{1, 3, 0, -1, 1.0, 1}, Rank{3, 3, 0, -1, 0.25, 1}});
  g.Sample(At(8), 4, {Rank{1, 4, 0, -1, 1.0, 1}, Rank{3, 4, 0, -1, 0.75, 2}});
  EXPECT_NEAR(g.Report(At(8))->save_seconds, 1.25, 1e-9);
  ExpectAddsUp(*g.Report(At(8)));
}

TEST_F(GoodputTest, TimeAfterTheRanksAreGoneIsNotProductive) {
  GoodputLedger g;
  g.StartBegan(At(0));
  g.StartDone(At(0), -1);
  double stall = 0;
  Train(g, 10, 0, 50, 0, 0, &stall);  // steps 0..50, then the job ends
  g.Sample(At(51), 50, {});
  auto r = g.Report(At(1000));
  EXPECT_NEAR(r->productive_seconds, 50, 1e-6);
  EXPECT_NEAR(r->other_seconds, 950, 1e-6);
  ExpectAddsUp(*r);
}

TEST_F(GoodputTest, ARunWhoseStepsFellBetweenSamplesStillTrained) {
  GoodputLedger g;
  g.StartBegan(At(0));
  g.StartDone(At(1), -1);
  // Samples at 2 s and 3 s find the ranks live but their step unchanged
  // (every step checked between samples); at 4 s they are gone.
  g.Sample(At(2), -1, {Rank{10, -1, 0, -1, 0.0, 0}});
  g.Sample(At(3), -1, {Rank{10, -1, 0, -1, 0.0, 0}});
  g.Sample(At(4), -1, {});
  auto r = g.Report(At(10));
  ASSERT_TRUE(r.has_value());
  EXPECT_NEAR(r->productive_seconds, 2, 1e-6);  // from the start's end to the last live sample
  EXPECT_NEAR(r->other_seconds, 7, 1e-6);
  // The next start closes the run at the same point.
  g.StartBegan(At(12));
  EXPECT_NEAR(g.Report(At(12))->productive_seconds, 2, 1e-6);
  ExpectAddsUp(*g.Report(At(12)));
}

}  // namespace
}  // namespace strata::agent
