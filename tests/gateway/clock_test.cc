#include "gateway/clock.h"

#include <gtest/gtest.h>

namespace ts::gateway {
namespace {

WallTime at(const char* s) {
  auto t = parse_rfc3339(s);
  EXPECT_TRUE(t.ok()) << s;
  return t.ok() ? *t : WallTime{};
}

TEST(Clock, Rfc3339RoundTripAndOffsets) {
  EXPECT_EQ(format_rfc3339(at("2026-11-30T06:00:00Z")), "2026-11-30T06:00:00Z");
  EXPECT_EQ(format_rfc3339(at("2026-11-30T06:00:00.123Z")), "2026-11-30T06:00:00.123Z");
  EXPECT_EQ(at("2026-11-30T08:00:00+02:00"), at("2026-11-30T06:00:00Z"));
  EXPECT_EQ(at("2026-11-30T01:30:00-04:30"), at("2026-11-30T06:00:00Z"));
  EXPECT_EQ(at("2026-11-30"), at("2026-11-30T00:00:00Z"));
  EXPECT_EQ(to_unix_ms(at("1970-01-02T00:00:00Z")), 86'400'000);
  for (const char* bad : {"2026-13-01", "2026-02-30", "yesterday", "2026-11-30T25:00:00Z",
                          "2026-11-30T06:00:00", "2026-11-30T06:00:00Zjunk"})
    EXPECT_FALSE(parse_rfc3339(bad).ok()) << bad;
}

TEST(Clock, DayPeriodsAreUtcDays) {
  WallTime t = at("2026-03-31T23:59:59.999Z");
  EXPECT_EQ(period_start(t, Period::kDay), at("2026-03-31T00:00:00Z"));
  EXPECT_EQ(period_end(t, Period::kDay), at("2026-04-01T00:00:00Z"));
  WallTime next = t + Millis(1);
  EXPECT_EQ(period_start(next, Period::kDay), at("2026-04-01T00:00:00Z"));
}

TEST(Clock, MonthPeriodsHandleLengthsLeapYearsAndYearEnd) {
  EXPECT_EQ(period_start(at("2026-03-31T23:59:59Z"), Period::kMonth), at("2026-03-01"));
  EXPECT_EQ(period_end(at("2026-03-31T23:59:59Z"), Period::kMonth), at("2026-04-01"));
  EXPECT_EQ(period_end(at("2028-02-10T12:00:00Z"), Period::kMonth), at("2028-03-01"));
  EXPECT_EQ(period_start(at("2028-02-29T23:00:00Z"), Period::kMonth), at("2028-02-01"));
  EXPECT_EQ(period_end(at("2026-12-31T23:59:59Z"), Period::kMonth), at("2027-01-01"));
  EXPECT_EQ(period_start(at("2027-01-01T00:00:00Z"), Period::kMonth), at("2027-01-01"));
}

TEST(Clock, DurationsAndResetStrings) {
  EXPECT_EQ(*parse_duration("30d"), Millis(30LL * 86'400'000));
  EXPECT_EQ(*parse_duration("12h"), Millis(12LL * 3'600'000));
  EXPECT_EQ(*parse_duration("500ms"), Millis(500));
  EXPECT_FALSE(parse_duration("d").ok());
  EXPECT_FALSE(parse_duration("3 days").ok());
  WallTime now = at("2026-01-01T00:00:00Z");
  EXPECT_EQ(*parse_time_or_offset("30d", now), at("2026-01-31T00:00:00Z"));
  EXPECT_EQ(*parse_time_or_offset("2027-01-01T00:00:00Z", now), at("2027-01-01"));
  EXPECT_EQ(format_reset(Millis(0)), "0s");
  EXPECT_EQ(format_reset(Millis(20)), "20ms");
  EXPECT_EQ(format_reset(Millis(1000)), "1s");
  EXPECT_EQ(format_reset(Millis(1001)), "2s");
  EXPECT_EQ(format_reset(Millis(360'000)), "6m0s");
  EXPECT_EQ(format_reset(Millis(3'723'000)), "1h2m3s");
}

TEST(FakeClock, MovesOnlyWhenTold) {
  FakeClock c(at("2026-05-01T00:00:00Z"));
  EXPECT_EQ(c.now(), at("2026-05-01T00:00:00Z"));
  c.advance(Millis(1500));
  EXPECT_EQ(c.now(), at("2026-05-01T00:00:01.500Z"));
  c.set(at("2027-01-01"));
  EXPECT_EQ(c.now(), at("2027-01-01"));
}

}  // namespace
}  // namespace ts::gateway
