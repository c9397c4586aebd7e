// Must not compile (tests/CMakeLists.txt builds it and expects the message):
// a collective's awaiter holds where its value is, so it is awaited where it
// is made. DTSIM_MISUSE_OK builds the correct form, to show the file is
// otherwise sound.
#include "dtsim/puzzle/model.hpp"

namespace dtsim::puzzle {

Task<> keeps_the_awaiter(Model& model) {
#ifdef DTSIM_MISUSE_OK
    model.grad_weights[0] = co_await model.allreduce(model.fake_grad(0, {model.rank}), 0);
#else
    auto pending = model.allreduce(model.fake_grad(0, {model.rank}), 0);  // the grad is gone at the semicolon
    model.grad_weights[0] = co_await pending;
#endif
}

}  // namespace dtsim::puzzle
