// Copyright 2026 The Strata Authors.
//
// StepLock (engine/step_lock.h): a reader's shared lock keeps a save from
// taking a step's files, and a reader that waited while a save renamed the
// step away is told the step is gone rather than reading what replaced it.
#include "engine/step_lock.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "test_util.h"

namespace strata {
namespace {

using testing::ScratchDir;

// Whether /proc/locks shows a request blocked on the inode of `path`
// (a line "N: -> FLOCK ... MAJ:MIN:INODE ...").
bool SomeoneWaitsOn(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return false;
  const std::string inode = ":" + std::to_string(st.st_ino) + " ";
  std::ifstream locks("/proc/locks");
  std::string line;
  while (std::getline(locks, line)) {
    if (line.find("->") != std::string::npos && line.find(inode) != std::string::npos) return true;
  }
  return false;
}

TEST(StepLockTest, ASaveTakesNoStepAReaderHolds) {
  ScratchDir d("step-lock");
  const std::string step = d.Sub("7");
  std::filesystem::create_directory(step);
  {
    auto reading = StepLock::ForReading(step);
    ASSERT_TRUE(reading.ok()) << reading.status().ToString();
    EXPECT_TRUE(reading->held());
    auto second = StepLock::ForReading(step);  // readers share it
    ASSERT_TRUE(second.ok()) << second.status().ToString();
    auto recycling = StepLock::ForRecycling(step);
    ASSERT_TRUE(recycling.ok()) << recycling.status().ToString();
    EXPECT_FALSE(recycling->has_value()) << "a save took a step being read";
  }
  auto recycling = StepLock::ForRecycling(step);
  ASSERT_TRUE(recycling.ok()) << recycling.status().ToString();
  ASSERT_TRUE(recycling->has_value());
  EXPECT_TRUE((*recycling)->held());
  auto again = StepLock::ForRecycling(step);  // one save at a time
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->has_value());
}

TEST(StepLockTest, AMissingStepIsNotFound) {
  ScratchDir d("step-lock");
  auto reading = StepLock::ForReading(d.Sub("3"));
  EXPECT_EQ(reading.status().code(), StatusCode::kNotFound) << reading.status().ToString();
  EXPECT_NE(reading.status().message().find(d.Sub("3")), std::string::npos);
  EXPECT_EQ(StepLock::ForRecycling(d.Sub("3")).status().code(), StatusCode::kNotFound);
}

// The reader opened the step before the save renamed it and waited for the
// lock meanwhile; another directory of the same name is there once it has
// the lock. It must not take that one for the step it opened.
TEST(StepLockTest, AReaderWhoseStepASaveRenamedMeanwhileIsToldItIsGone) {
  ScratchDir d("step-lock");
  const std::string step = d.Sub("7");
  std::filesystem::create_directory(step);
  auto recycling = StepLock::ForRecycling(step);
  ASSERT_TRUE(recycling.ok() && recycling->has_value());
  StatusOr<StepLock> reading = InternalError("not run");
  std::thread reader([&] { reading = StepLock::ForReading(step); });
  bool waits = false;
  for (int i = 0; i < 3000 && !(waits = SomeoneWaitsOn(step)); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(waits) << "the reader never waited for the lock";
  ASSERT_EQ(std::rename(step.c_str(), d.Sub("tmp-7").c_str()), 0);
  std::filesystem::create_directory(step);  // a step saved anew under the name
  recycling->reset();                       // the save lets go
  reader.join();
  EXPECT_EQ(reading.status().code(), StatusCode::kNotFound) << reading.status().ToString();
}

}  // namespace
}  // namespace strata
