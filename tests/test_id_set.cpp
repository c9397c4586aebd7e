#include "dtsim/id_set.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstdint>
#include <utility>

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

TEST_CASE("an id set is 8 bytes; ids outside 0..2^31-2 and several intervals live on the heap") {
    static_assert(sizeof(IdSet) == 8 && alignof(IdSet) == 4);
    constexpr std::int64_t big = std::int64_t{1} << 31;  // the first id the inline form cannot hold
    IdSet a = IdSet::range(big - 3, big + 2);            // one interval, on the heap
    CHECK(a.size() == 5);
    CHECK(a.intervals().size() == 1);
    CHECK(a.min() == big - 3);
    CHECK(a.max() == big + 1);
    CHECK(a.contains(big));
    CHECK_FALSE(a.contains(big + 2));
    CHECK(a.str() == fmt::format("{{{}-{}}}", big - 3, big + 1));

    IdSet neg{-2, -1, 0};
    CHECK(neg.size() == 3);
    CHECK(neg.min() == -2);
    CHECK(neg.str() == "{-2..0}");
    CHECK(IdSet::range(-5, -2).str() == "{-5..-3}");
    CHECK(IdSet::range(-1, 1).str() == "{-1,0}");
    CHECK(neg.is_subset_of(IdSet::range(-5, 5)));
    CHECK_FALSE(neg.is_prefix(3));
    CHECK(IdSet::range(0, big - 1).is_prefix(big - 1));  // the largest inline set
    CHECK(IdSet::range(0, big).is_prefix(big));          // and the smallest on the heap

    // Copies and moves keep the heap form apart; equality compares ids, not forms.
    IdSet b = a;
    b.insert(big + 10);
    CHECK(b.intervals().size() == 2);
    CHECK(a.intervals().size() == 1);
    IdSet c = std::move(b);
    CHECK(b.empty());  // NOLINT: a moved-from set is empty
    CHECK(c.size() == 6);
    c = a;
    CHECK(c == a);
    CHECK_FALSE(c == IdSet::range(0, 5));
    CHECK(IdSet::range(3, 3) == IdSet{});

    // Growing past the inline range moves a set to the heap; removing the gap of
    // a heap set whose ids fit brings it back (equal to the inline set).
    IdSet d = IdSet::range(10, 20);
    d.insert_range(20, big + 1);
    CHECK(d.size() == big + 1 - 10);
    CHECK(d == IdSet::range(10, big + 1));
    IdSet e{1, 3};
    e.insert(2);
    CHECK(e == IdSet::range(1, 4));
    CHECK(e.intervals().size() == 1);
    e |= IdSet::range(big, big + 1);
    CHECK(e.intervals().size() == 2);
    CHECK((IdSet::range(1, 4) | IdSet::single(big)) == e);
}
