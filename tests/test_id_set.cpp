#include "dtsim/id_set.hpp"

#include <doctest/doctest.h>

using dtsim::IdSet;

TEST_CASE("ids inserted in any order merge into maximal intervals") {
    IdSet s{5, 1, 2, 3, 9, 4};
    CHECK(s.intervals().size() == 2);
    CHECK(s.str() == "{1-5,9}");
    CHECK(s.size() == 6);
    CHECK(s.contains(4));
    CHECK_FALSE(s.contains(6));
    s.insert_range(6, 9);
    CHECK(s.intervals().size() == 1);
    CHECK(s == IdSet::range(1, 10));
}

TEST_CASE("union of 16384 single-rank shards is one interval") {
    IdSet s;
    for (int r = 16383; r >= 0; --r) s |= IdSet::single(r);
    CHECK(s.intervals().size() == 1);
    CHECK(s.is_prefix(16384));
    CHECK(s.size() == 16384);
}

TEST_CASE("subset, prefix and empty sets") {
    CHECK(IdSet{2, 3}.is_subset_of(IdSet::range(0, 4)));
    CHECK_FALSE(IdSet{2, 7}.is_subset_of(IdSet::range(0, 4)));
    CHECK(IdSet{}.is_subset_of(IdSet{}));
    CHECK(IdSet{}.is_prefix(0));
    CHECK_FALSE(IdSet{1, 2}.is_prefix(2));
    CHECK(IdSet{0, 1}.is_prefix(2));
    CHECK(IdSet{}.str() == "{}");
    CHECK(IdSet{0, 1}.str() == "{0,1}");
    CHECK(IdSet::range(3, 3).empty());
}

TEST_CASE("inserting into the middle merges neighbours") {
    IdSet s{0, 10, 20};
    s.insert_range(1, 10);
    CHECK(s.str() == "{0-10,20}");
    s.insert_range(11, 20);
    CHECK(s.str() == "{0-20}");
    CHECK(s.to_vector().size() == 21);
}
