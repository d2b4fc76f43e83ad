// Copyright 2026 The Strata Authors.
#include "strata/status.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace strata {
namespace {

TEST(StatusTest, OkByDefault) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.ToString(), "OK");
}

TEST(StatusTest, CarriesCodeAndMessage) {
  Status s = NotFoundError("no checkpoint in /x");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.ToString(), "NOT_FOUND: no checkpoint in /x");
  EXPECT_EQ(s.WithContext("restoring").message(), "restoring: no checkpoint in /x");
  EXPECT_TRUE(Status().WithContext("x").ok());
}

TEST(StatusTest, ErrnoMapping) {
  EXPECT_EQ(ErrnoToStatus(ENOSPC, "write /d/f").code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrnoToStatus(ENOENT, "open /d/f").code(), StatusCode::kNotFound);
  EXPECT_EQ(ErrnoToStatus(EACCES, "open /d/f").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(ErrnoToStatus(ENOSPC, "write /d/f").message(), "write /d/f: No space left on device");
}

StatusOr<int> Half(int x) {
  if (x % 2) return InvalidArgumentError(std::to_string(x) + " is odd");
  return x / 2;
}

Status UseHalf(int x, int* out) {
  STRATA_ASSIGN_OR_RETURN(*out, Half(x));
  return Status::Ok();
}

TEST(StatusOrTest, ValueOrError) {
  int v = 0;
  EXPECT_TRUE(UseHalf(8, &v).ok());
  EXPECT_EQ(v, 4);
  Status s = UseHalf(3, &v);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "3 is odd");
  EXPECT_EQ(Half(3).value_or(-1), -1);
}

// Reading the value of an error aborts, naming the status (as absl does),
// rather than reading an empty optional.
TEST(StatusOrDeathTest, ValueOfAnErrorAbortsWithItsMessage) {
  StatusOr<int> bad = NotFoundError("step 7 of job j");
  EXPECT_DEATH((void)bad.value(), "StatusOr accessed without a value: NOT_FOUND: step 7 of job j");
  EXPECT_DEATH((void)*bad, "NOT_FOUND");
  StatusOr<std::string> s = InternalError("x");
  EXPECT_DEATH((void)s->size(), "INTERNAL: x");
  EXPECT_EQ(bad.value_or(3), 3);
}

}  // namespace
}  // namespace strata
