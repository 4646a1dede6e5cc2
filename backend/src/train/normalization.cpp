// What batch norm and group norm (backend/src/kinds/) share in the trainer: their statistics' sums over the
// processes of their group, in double, and their scale's and shift's gradients.
#include "trainer_impl.hpp"

#include <algorithm>

namespace dsl::backend {

// Sums sums_a and sums_b over the slot's group; a replica that does not speak adds nothing.
void Trainer::Impl::group_sum(Slot& s, bool speaks) {
    if (!s.group) return;
    if (!speaks) std::fill(sums_a.begin(), sums_a.end(), 0.0), std::fill(sums_b.begin(), sums_b.end(), 0.0);
    std::vector<double> both(sums_a);
    both.insert(both.end(), sums_b.begin(), sums_b.end());
    timeline.wait(
        Kind::wait_sum, [&] { s.group->allreduce(both.data(), static_cast<std::int64_t>(both.size())); },
        static_cast<std::int64_t>(both.size() * sizeof(double)));
    std::copy_n(both.begin(), sums_a.size(), sums_a.begin());
    std::copy(both.begin() + static_cast<std::ptrdiff_t>(sums_a.size()), both.end(), sums_b.begin());
}

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
    allreduce_gradients(s, speaks);
}

}  // namespace dsl::backend
