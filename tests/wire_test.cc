// Copyright 2026 The Strata Authors.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "wire/op.h"

namespace strata::wire {
namespace {

using nlohmann::json;

TEST(WireOpTest, EveryNameRoundTripsAndIsUnique) {
  std::set<std::string> names;
  for (int i = 0; i <= static_cast<int>(Op::kQuarantine); ++i) {
    const Op op = static_cast<Op>(i);
    const std::string name = OpName(op);
    EXPECT_TRUE(names.insert(name).second) << name;
    auto parsed = ParseOp(Request(op));
    ASSERT_TRUE(parsed.ok()) << name << ": " << parsed.status().ToString();
    EXPECT_EQ(*parsed, op) << name;
  }
  EXPECT_EQ(names.size(), 18u);
}

// The kinds decide routing: long calls take the connection, coordination
// calls go to the coordinator, control calls are answered by the agent.
TEST(WireOpTest, KindsRouteTheCalls) {
  EXPECT_EQ(KindOf(Op::kRegister), OpKind::kCoordination);
  EXPECT_EQ(KindOf(Op::kSync), OpKind::kCoordination);
  EXPECT_EQ(KindOf(Op::kStatus), OpKind::kControl);
  EXPECT_EQ(KindOf(Op::kGetIndex), OpKind::kControl);
  EXPECT_EQ(KindOf(Op::kPutStep), OpKind::kLong);
  EXPECT_EQ(KindOf(Op::kFetchStep), OpKind::kLong);
  EXPECT_EQ(KindOf(Op::kQuarantine), OpKind::kLong);
}

TEST(WireOpTest, BadOpsAreClearErrors) {
  auto missing = ParseOp(json{{"job", "j"}});
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("\"op\""), std::string::npos);
  EXPECT_EQ(ParseOp(json{{"op", 7}}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseOp(json::array()).status().code(), StatusCode::kInvalidArgument);
  auto unknown = ParseOp(json{{"op", "members"}});
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(unknown.status().message(), "unknown call \"members\"");
  auto long_name = ParseOp(json{{"op", std::string(1000, 'x')}});
  EXPECT_EQ(long_name.status().message(), "unknown call \"" + std::string(32, 'x') + "\"");
}

}  // namespace
}  // namespace strata::wire
