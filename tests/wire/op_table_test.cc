// Copyright 2026 The Strata Authors.
#include "wire/op_table.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "wire/control.h"
#include "wire/coordination.h"

namespace strata::wire {
namespace {

using nlohmann::json;
using Answer = std::optional<StatusOr<json>>;
using Table = OpTable<Answer(int&)>;

TEST(OpTableTest, AHandlerSeesItsTypedRequestAndTheCallsContext) {
  Table t("test");
  t.On<NodeAddressRequest>(Op::kNodeAddress, [](const NodeAddressRequest& r, int& seen) -> Answer {
    seen = r.node;
    return json{{"job", r.job.value_or("")}};
  });
  NodeAddressRequest req;
  req.job = "j";
  req.node = 3;
  int seen = -1;
  Answer a = t.Serve(req.ToJson(), seen);
  ASSERT_TRUE(a && a->ok()) << (a ? a->status().ToString() : "parked");
  EXPECT_EQ((**a)["job"], "j");
  EXPECT_EQ(seen, 3);
}

TEST(OpTableTest, ARequestThatDoesNotParseReachesNoHandler) {
  Table t("test");
  bool called = false;
  t.On<NodeAddressRequest>(Op::kNodeAddress, [&](const NodeAddressRequest&, int&) -> Answer {
    called = true;
    return json::object();
  });
  int ctx = 0;
  Answer a = t.Serve(json{{"op", "node_address"}, {"node", "three"}}, ctx);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(called);
}

TEST(OpTableTest, AnOperationWithNoHandlerIsNamedWithTheTable) {
  Table t("coordination");
  int ctx = 0;
  Answer a = t.Serve(Request(Op::kPutStep), ctx);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->status().code(), StatusCode::kNotFound);
  EXPECT_NE(a->status().message().find("\"put_step\" is not a coordination call"),
            std::string::npos)
      << a->status().ToString();
  EXPECT_EQ(t.Serve(json{{"op", "members"}}, ctx)->status().code(), StatusCode::kNotFound);
  EXPECT_EQ(t.Serve(json{{"job", "j"}}, ctx)->status().code(), StatusCode::kInvalidArgument);
}

TEST(OpTableTest, UnservedListsEachOperationOfAKindWithoutAHandler) {
  Table t("test");
  EXPECT_EQ(t.Unserved(OpKind::kControl).size(), 4u);
  t.OnRaw(Op::kStatus, [](const json&, int&) -> Answer { return json::object(); });
  t.OnRaw(Op::kHealth, [](const json&, int&) -> Answer { return std::nullopt; });
  EXPECT_EQ(t.Unserved(OpKind::kControl), (std::vector<Op>{Op::kGetIndex, Op::kSupervisorRestart}));
  EXPECT_TRUE(t.Serves(Op::kStatus));
  EXPECT_FALSE(t.Serves(Op::kGetIndex));
  int ctx = 0;
  EXPECT_FALSE(t.Serve(Request(Op::kHealth), ctx));  // parked: answered later
}

}  // namespace
}  // namespace strata::wire
