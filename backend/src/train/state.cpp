// The trainer's state as a checkpoint holds it: every parameter, optimizer moment and running statistic as a
// whole tensor in host memory, plain. Where the kernels' memory is the host's and a tensor is whole on every
// process and plain, it is handed out as it is; a GPU's are copied, weights that the kernels keep in blocks
// (weight_blocks.hpp) copied plain, and the blocks of F and C parts gathered whole (`read`); state_written takes
// each copy back.
#include "../kinds/kind.hpp"
#include "../tensors/weight_blocks.hpp"
#include "trainer_impl.hpp"

namespace dsl::backend {

std::vector<StateTensor> Trainer::Impl::state(bool read, bool to_first) {
    std::vector<StateTensor> out;
    host_state.clear();
    // A tensor of the kernels' memory, of which this process holds `block` at `t` (`keeps`: the first of the
    // block's holders, which gives it to the others), in weight blocks where `blocked`.
    auto add = [&](const std::string& name, std::vector<std::int64_t> shape, Tensor& t, const Block& block, bool keeps,
                   bool blocked = false) {
        if (mem.host() && block.is_whole() && !blocked) {
            out.push_back(StateTensor{name, std::move(shape), t.data(), t.size()});
            return;
        }
        StateCopy& copy = host_state.emplace_back(StateCopy{t.data(), block,
                                                            std::vector<float>(static_cast<std::size_t>(block.total)),
                                                            blocked ? std::optional(t.dims()) : std::nullopt});
        if (read) {
            std::vector<float> held(static_cast<std::size_t>(t.size()));
            if (blocked)  // only in the host's memory (Slot::blocked_weights)
                unblock_weights(t.dims(), t.data(), held.data());
            else
                mem.download(t.data(), held.data(), t.size());
            copy.host = block.is_whole() ? std::move(held)
                        : to_first       ? gathered_to_first(block, held.data(), keeps)
                                         : gathered(block, held.data(), keeps);
        }
        // Gathered to the first process, the tensor is nowhere else.
        const bool absent = read && to_first && copy.host.empty() && block.total > 0;
        out.push_back(
            StateTensor{name, std::move(shape), absent ? nullptr : copy.host.data(), absent ? 0 : block.total});
    };
    for (Slot& s : slots) {
        const Layer& l = *s.layer;
        if (s.w.size() == 0) continue;
        const std::vector<std::int64_t> wshape = rules_of(l.op).weight_shape(s.whole);
        const Block wb = weight_block(s), bb = bias_block(s);
        const std::vector<std::int64_t> bshape{bb.total};
        const bool keeps = !s.holders || s.holders->rank() == 0, bias = s.b.size() > 0;
        // Only the first of the C processes makes the bias's gradient, and keeps it.
        const bool keeps_bias = keeps && s.adds_bias;
        add(l.name + ".weight", wshape, s.w, wb, keeps, s.blocked_weights);
        if (bias) add(l.name + ".bias", bshape, s.b, bb, keeps_bias);
        if (stats.has_running(s.index)) {  // batch norm's running statistics
            Statistics::Gather gather;
            if (read && s.holders)
                gather = [&](const float* held) {
                    return to_first ? gathered_to_first(bb, held, keeps) : gathered(bb, held, keeps);
                };
            stats.add_state(s.index, l.name, bshape, bb.total, static_cast<std::size_t>(s.filters.lo), gather, out);
        }
        optimizer.each_moment(s.index, [&](const std::string& suffix, Tensor& moment, bool of_bias) {
            if (of_bias)
                add(l.name + suffix, bshape, moment, bb, keeps_bias);
            else
                add(l.name + suffix, wshape, moment, wb, keeps, s.blocked_weights);
        });
    }
    return out;
}

// A tensor held in blocks, whole: the first of each block's holders (`keeps`) gives its block (`held`,
// dense), the others zeros, summed over every process (a float and zeros add up exactly).
std::vector<float> Trainer::Impl::gathered(const Block& block, const float* held, bool keeps) {
    std::vector<double> whole(static_cast<std::size_t>(block.total), 0.0);
    if (keeps) block.place(held, whole.data());
    comm.allreduce(whole.data(), block.total);
    return std::vector<float>(whole.begin(), whole.end());
}

// The same whole on the first process alone (empty elsewhere): each process gives the place of its block in
// the whole, and the first of each block's holders its elements, as they are (4 bytes each, to the first
// process only).
std::vector<float> Trainer::Impl::gathered_to_first(const Block& block, const float* held, bool keeps) {
    const std::vector<double> place{keeps ? 1.0 : 0.0,
                                    static_cast<double>(block.rows.lo),
                                    static_cast<double>(block.rows.hi),
                                    static_cast<double>(block.cols.lo),
                                    static_cast<double>(block.cols.hi),
                                    static_cast<double>(block.columns),
                                    static_cast<double>(block.run)};
    const auto places = comm.gather(place);
    const auto parts =
        comm.gather_floats(keeps ? std::vector<float>(held, held + block.elements()) : std::vector<float>());
    if (comm.rank() != 0) return {};
    std::vector<float> whole(static_cast<std::size_t>(block.total), 0.0f);
    for (std::size_t p = 0; p < places.size(); ++p) {
        const std::vector<double>& at = places[p];
        if (at.size() != place.size() || at[0] == 0.0) continue;
        Block b = block;
        b.rows = Range{static_cast<std::int64_t>(at[1]), static_cast<std::int64_t>(at[2])};
        b.cols = Range{static_cast<std::int64_t>(at[3]), static_cast<std::int64_t>(at[4])};
        b.columns = static_cast<std::int64_t>(at[5]);
        b.run = static_cast<std::int64_t>(at[6]);
        DSL_INTERNAL_CHECK(static_cast<std::int64_t>(parts[p].size()) == b.elements(), "a block of another size");
        b.place(parts[p].data(), whole.data());
    }
    return whole;
}

// Puts the copies that state() handed out back where the kernels read them: each process its block, in
// weight blocks where the kernels keep them so.
void Trainer::Impl::state_written() {
    std::vector<float> held, blocks;
    for (StateCopy& copy : host_state) {
        const float* plain = copy.host.data();
        if (!copy.block.is_whole()) {
            held.resize(static_cast<std::size_t>(copy.block.elements()));
            copy.block.take(copy.host.data(), held.data());
            plain = held.data();
        }
        if (copy.blocked) {
            blocks.resize(static_cast<std::size_t>(copy.block.elements()));
            block_weights(*copy.blocked, plain, blocks.data());
            plain = blocks.data();
        }
        mem.upload(plain, copy.kernel, copy.block.elements());
    }
}

}  // namespace dsl::backend
