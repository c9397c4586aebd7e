#include "dtsim/puzzle/values.hpp"

#include <doctest/doctest.h>

#include <stdexcept>

using namespace dtsim;
using namespace dtsim::puzzle;

TEST_CASE("weight shards combine into a complete weight") {
    Weight a{0, 0, IdSet::single(0), 4}, b{0, 0, IdSet::single(2), 4};
    Weight c = a.combine(b);
    CHECK(c.shards == IdSet{0, 2});
    CHECK_FALSE(c.is_complete());
    for (int s : {1, 3}) c = c.combine(Weight{0, 0, IdSet::single(s), 4});
    CHECK(c.is_complete());
    CHECK(c.shard(3, 8).shards == IdSet::single(3));
    CHECK(c.shard(3, 8).total == 8);
}

TEST_CASE("combining values of different layers or totals is rejected") {
    Weight a{0, 0, IdSet::single(0), 4};
    CHECK_THROWS_WITH_AS((void)a.combine(Weight{1, 0, IdSet::single(1), 4}),
                         "cannot combine weight of layer 0 with one of layer 1", std::invalid_argument);
    CHECK_THROWS_WITH_AS((void)a.combine(Weight{0, 0, IdSet::single(1), 3}),
                         "cannot combine weight shards of 4 with shards of 3", std::invalid_argument);
    OptState o{2, 0, IdSet::single(0), 2};
    CHECK_THROWS_AS((void)o.combine(OptState{3, 0, IdSet::single(1), 2}), std::invalid_argument);
}

TEST_CASE("sharding needs a complete value and a shard in range") {
    Weight part{0, 0, IdSet::single(1), 4};
    CHECK_THROWS_WITH_AS((void)part.shard(0, 4), "cannot shard an incomplete weight (shards {1} of 4)",
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS((void)Weight{}.shard(4, 4), "shard 4 out of range [0, 4)", std::invalid_argument);
    WeightGrad g{1, IdSet{0}, IdSet::single(0), 1};
    CHECK(g.shard(2, 4).shards == IdSet::single(2));
}

TEST_CASE("weight grads add up batches, only for the same layer and shards") {
    WeightGrad a{1, IdSet{0}, IdSet::single(0), 1}, b{1, IdSet{3}, IdSet::single(0), 1};
    CHECK((a + b).batches == IdSet{0, 3});
    CHECK_THROWS_WITH_AS((void)(a + WeightGrad{2, IdSet{1}, IdSet::single(0), 1}),
                         "only weight grads of the same layer add up: layer 1 + layer 2", std::invalid_argument);
    CHECK_THROWS_WITH_AS((void)(WeightGrad{1, IdSet{0}, IdSet::single(0), 4} + WeightGrad{1, IdSet{1}, IdSet::single(1), 4}),
                         "weight grads add up only with the same shards: {0} of 4 + {1} of 4", std::invalid_argument);
}

TEST_CASE("values describe themselves for error messages") {
    CHECK(Weight{3, 1, IdSet::single(2), 4}.str() == "Weight(layer 3, step 1, shards {2} of 4)");
    CHECK(Weight{3, 0}.str() == "Weight(layer 3, step 0)");
    CHECK(Activation{2, IdSet{0, 1, 2}}.str() == "Activation(layer 2, batches {0-2})");
    CHECK(WeightGrad{0, IdSet{1}}.str() == "WeightGrad(layer 0, batches {1})");
}
