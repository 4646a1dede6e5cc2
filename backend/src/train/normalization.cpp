// What batch norm and group norm (backend/src/kinds/) share in the trainer: their scale's and shift's
// gradients (their statistics: statistics.hpp).
#include "trainer_impl.hpp"

#include <algorithm>

namespace dsl::backend {

// This tile's part of a normalization's d(gamma) and d(beta), per channel of its block, into the scale's and
// shift's gradients; the allreduce over the block's holders adds the rest.
void Trainer::Impl::scale_shift_gradients(Slot& s, const std::vector<double>& d_gamma,
                                          const std::vector<double>& d_beta, bool speaks) {
    const std::size_t channels = d_beta.size();
    scratch_values.resize(2 * channels);
    for (std::size_t c = 0; c < channels; ++c) {
        scratch_values[c] = static_cast<float>(d_beta[c]);
        scratch_values[channels + c] = static_cast<float>(d_gamma[c]);
    }
    const auto count = static_cast<std::int64_t>(channels);
    mem.upload(scratch_values.data(), s.db.data(), count);
    mem.upload(scratch_values.data() + channels, s.dw.data(), count);
    optimizer.start_sum(s, speaks);
}

}  // namespace dsl::backend
