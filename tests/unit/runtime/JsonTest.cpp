// megac's JSON API (support/Json.h over nlohmann/json): values, escapes and malformed input.
#include "support/Json.h"

#include <gtest/gtest.h>

using namespace megac;

TEST(Json, ParsesNestedValues) {
  auto v = json::parse(R"( {"a": [1, -2, 3.5e2, true, false, null], "b": {"c": "d"}} )");
  ASSERT_TRUE(v.isOk()) << v.status().message();
  const json::Value *a = v->find("a");
  ASSERT_TRUE(a && a->kind == json::Value::Kind::array);
  ASSERT_EQ(a->items.size(), 6u);
  EXPECT_TRUE(a->items[0].isInteger);
  EXPECT_EQ(a->items[0].integer, 1);
  EXPECT_EQ(a->items[1].integer, -2);
  EXPECT_FALSE(a->items[2].isInteger);
  EXPECT_EQ(a->items[2].number, 350.0);
  EXPECT_TRUE(a->items[3].boolean);
  EXPECT_EQ(a->items[5].kind, json::Value::Kind::null);
  EXPECT_EQ(v->find("b")->find("c")->string, "d");
  EXPECT_EQ(v->find("missing"), nullptr);
}

TEST(Json, LargeIntegersStayExact) {
  auto v = json::parse("[9007199254740993, 99999999999999999999]");
  ASSERT_TRUE(v.isOk());
  EXPECT_TRUE(v->items[0].isInteger);
  EXPECT_EQ(v->items[0].integer, 9007199254740993LL); // not representable as a double
  EXPECT_FALSE(v->items[1].isInteger);                // beyond int64
}

TEST(Json, DecodesEscapes) {
  auto v = json::parse(R"("q\"b\\s\/n\n t\t u\u00e9 \ud83d\ude00")");
  ASSERT_TRUE(v.isOk()) << v.status().message();
  EXPECT_EQ(v->string, "q\"b\\s/n\n t\t u\xc3\xa9 \xf0\x9f\x98\x80");
}

TEST(Json, QuoteRoundTrips) {
  std::string s = "a\"b\\c\n\x01 \xc3\xa9";
  auto v = json::parse(json::quote(s));
  ASSERT_TRUE(v.isOk()) << v.status().message();
  EXPECT_EQ(v->string, s);
}

TEST(Json, RejectsMalformedInput) {
  for (const char *bad :
       {"", "{", "[1,]", "{\"a\":1,}", "{\"a\" 1}", "\"unterminated", "[1] 2", "{\"a\":1,\"a\":2}",
        "01x", "\"\\ud800\"", "\"\\x\"", "tru", "[-]", "\"tab\there\""}) {
    auto v = json::parse(bad);
    EXPECT_FALSE(v.isOk()) << "accepted: " << bad;
    if (!v.isOk()) {
      EXPECT_NE(v.status().message().find("JSON error at byte"), std::string::npos);
    }
  }
}

TEST(Json, BoundsNestingDepth) {
  std::string deep(100, '[');
  deep += std::string(100, ']');
  auto v = json::parse(deep);
  ASSERT_FALSE(v.isOk());
  EXPECT_NE(v.status().message().find("nesting"), std::string::npos);
  std::string ok(60, '[');
  ok += std::string(60, ']');
  EXPECT_TRUE(json::parse(ok).isOk());
}
