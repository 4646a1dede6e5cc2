// The trainer's tiles and buffers (tiles.hpp): the plan's tiles in the kernels' memory, values with their
// margins and gradients over the buffers the plan shares among them; what their margins hold; and which
// reader writes a gradient rather than adds to it.
#include "tiles.hpp"

#include "../tensors/planes.hpp"

#include <dsl/base/error.hpp>

namespace dsl::backend {

View view_of(Tensor& tensor, const Tile& t, const scheduler::Box& b) {
    const View padded = tensor.padded();
    Index at = b.origin();
    for (int d = 0; d < at.rank(); ++d) {
        at[d] -= t.box.space[d].lo - t.need[d].before;
        // Within the tile (a blocked one has margins only where halos lie).
        DSL_INTERNAL_CHECK(b.space[d].empty() || (at[d] >= 0 && at[d] + b.space[d].size() <= padded.dims.space[d]),
                           "a view beyond its tile's margins");
    }
    return padded.sub(b.n.lo - t.box.n.lo, b.c.lo - t.box.c.lo, at, b.dims());
}

Tiles::Tiles(const scheduler::Plan& plan, Kernels kernels)
    : plan_(plan), k_(kernels), mem_(kernels.mem()), scratch_(mem_), staging_(mem_) {}

// The plan's tiles in the kernels' memory: values with their margins, and gradients over the buffers the plan
// shares among them.
void Tiles::allocate(std::vector<Slot>& slots, const std::vector<scheduler::LayerPaths>& paths) {
    tiles_.resize(slots.size());
    for (std::size_t i = 0; i < slots.size(); ++i)
        for (const scheduler::TilePlan& tp : plan_.layers[i].tiles) {
            auto t = std::make_unique<Tile>();
            static_cast<scheduler::TilePlan&>(*t) = tp;
            slots[i].tiles.push_back(t.get());
            tiles_[i].push_back(std::move(t));
        }
    for (std::size_t i = 0; i < slots.size(); ++i) {
        const frontend::Layer& l = *slots[i].layer;
        for (std::size_t j = 0; j < l.inputs.size(); ++j) {
            const int t = plan_.layers[i].operands[j];
            slots[i].operands.push_back(
                t < 0 ? nullptr : slots[static_cast<std::size_t>(l.inputs[j])].tiles[static_cast<std::size_t>(t)]);
        }
    }
    shared_.clear();
    shared_.reserve(plan_.buffers.size());
    for (std::int64_t size : plan_.buffers) shared_.emplace_back(mem_).resize(size);
    // A blocked tile (layouts.cpp) has margins only where it is split: its readers pad it themselves elsewhere.
    for (std::size_t i = 0; i < slots.size(); ++i) {
        if (slots[i].layer->op == frontend::OpKind::label) continue;
        if (paths[i].on(scheduler::PathKind::blocked)) {
            Tile& t = slots[i].own();
            t.need = blocked_margins(t);
            t.lanes = blocked_lanes;
        }
        for (Tile* t : slots[i].tiles)
            if (t->forward_buffer >= 0)
                bind(*t, t->forward_buffer);
            else
                t->y = Tensor(t->box.dims(), t->need, mem_, t->lanes);
        // Two 16-bit values to a float of the buffer.
        if (plan_.layers[i].stored)
            slots[i].own().stored.emplace(mem_).resize((slots[i].own().box.dims().elements() + 1) / 2);
    }
    for (auto& layer : tiles_)
        for (auto& t : layer)
            if (t->grad_buffer >= 0)
                t->dy = Tensor::over(shared_[static_cast<std::size_t>(t->grad_buffer)].data(), t->y.dims(), t->need,
                                     t->lanes);
}

void Tiles::bind(Tile& t, int buffer) {
    t.y = Tensor::over(shared_[static_cast<std::size_t>(buffer)].data(), t.box.dims(), t.need, t.lanes);
    t.y.fill_margins(0.0f, mem_);
    t.padding_ = 0.0f;
}

// Zero where a gradient is accumulated (or partly written), and the margins that go back to the neighbours.
// A tile's gradient that several readers add up is zeroed only in its margins: the first reader that writes
// all of its interior writes it (`writes`), which saves a pass over it and one through scratch.
void Tiles::clear_gradients(int position) {
    for (auto& layer : tiles_)
        for (auto& t : layer) {
            if (t->dy.size() == 0 || t->grad_first != position) continue;
            t->unwritten_ = t->zero_grad && !t->copy && t->readers > 1;
            if (t->unwritten_ || (!t->zero_grad && !t->backward.empty()))
                t->dy.fill_margins(0.0f, mem_);
            else if (t->zero_grad)
                mem_.fill(t->dy.padded(), 0.0f);
        }
}

void Tiles::zero_values(Tile& t) {
    mem_.fill(t.y.padded(), 0.0f);
    t.padding_ = 0.0f;
}

// Padding: the margins outside the tensor hold zero for most readers, -infinity for max pooling; a periodic
// tile's hold its far side (its halo).
void Tiles::set_padding(Tile& t, float value) {
    if (t.padding_ == value || t.periodic) return;
    t.padding_ = value;
    // The tensor's extent, in the padded buffer's coordinates.
    const Dims& d = plan_.layers[static_cast<std::size_t>(t.spec.layer)].whole;
    Space<Range> inside = Space<Range>::filled(d.rank(), Range{});
    for (int i = 0; i < d.rank(); ++i) {
        const std::int64_t first = t.box.space[i].lo - t.need[i].before;
        inside[i] = {-first, d.space[i] - first};
    }
    fill_outside(mem_, t.y.padded(), inside, value);
}

void Tiles::add_gradient(Tile& in, ConstView dy) {
    const View target = in.dy.interior();
    if (writes(in, in.box))
        k_.eltwise->copy(dy, target);
    else
        k_.eltwise->accumulate(dy, target);
}

bool Tiles::writes(Tile& in, const scheduler::Box& part) {
    if (in.readers == 1) return true;
    if (in.unwritten_ && part == in.box) {
        in.unwritten_ = false;
        return true;
    }
    zero_unwritten(in);
    return false;
}

void Tiles::zero_unwritten(Tile& t) {
    if (!t.unwritten_) return;
    mem_.fill(t.dy.interior(), 0.0f);
    t.unwritten_ = false;
}

std::int64_t Tiles::floats() const {
    std::int64_t n = 0;
    for (const auto& layer : tiles_)
        for (const auto& t : layer) {
            if (t->forward_buffer < 0) n += t->y.size();  // recomputed values are in the shared buffers
            if (t->stored) n += t->stored->size();
        }
    for (const Buffer& b : shared_) n += b.size();
    return n;
}

}  // namespace dsl::backend
