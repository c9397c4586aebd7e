#include "dtsim/render.hpp"

#include <doctest/doctest.h>

#include <stdexcept>

using dtsim::render::parse_rank_selection;

TEST_CASE("an empty rank selection selects every rank") {
    CHECK(parse_rank_selection("", 3) == std::vector<int>{0, 1, 2});
    CHECK(parse_rank_selection("  ", 1) == std::vector<int>{0});
}

TEST_CASE("rank selections are ids and inclusive ranges, sorted without duplicates") {
    CHECK(parse_rank_selection("0-3,1023", 1024) == std::vector<int>{0, 1, 2, 3, 1023});
    CHECK(parse_rank_selection("5, 1 - 2 ,2", 8) == std::vector<int>{1, 2, 5});
    CHECK(parse_rank_selection("7-7", 8) == std::vector<int>{7});
    CHECK(parse_rank_selection("0-1023", 1024).size() == 1024);
}

TEST_CASE("bad rank selections name the token and the valid range") {
    CHECK_THROWS_WITH_AS(
        parse_rank_selection("0-7,1024", 1024),
        "invalid rank selection \"0-7,1024\": \"1024\" is out of range; valid ranks are 0-1023",
        std::invalid_argument);
    CHECK_THROWS_WITH_AS(
        parse_rank_selection("3,x", 4),
        "invalid rank selection \"3,x\": \"x\" is not a rank or a range A-B; valid ranks are 0-3",
        std::invalid_argument);
    CHECK_THROWS_WITH_AS(parse_rank_selection("5-2", 8),
                         doctest::Contains("\"5-2\" is a range whose end comes before its start"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(parse_rank_selection("1,,2", 8), doctest::Contains("\"\" is empty"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(parse_rank_selection("-1", 8), doctest::Contains("\"-1\" is not a rank"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(parse_rank_selection("1-", 8), doctest::Contains("\"1-\" is not a rank"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(parse_rank_selection("1", 1), doctest::Contains("the only valid rank is 0"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(parse_rank_selection("99999999999999999", 8), doctest::Contains("is not a rank"),
                         std::invalid_argument);
    CHECK_THROWS_AS(parse_rank_selection("0", 0), std::invalid_argument);
}
