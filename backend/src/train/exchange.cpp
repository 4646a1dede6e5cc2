// Halo exchange and redistribution: an exchange posted from one tile's memory and finished into another's,
// forward (gather: halos and copies filled) and backward (scatter: what readers left in margins and copies
// added where the elements live); padding; and input tiles, which the data source makes, never sent.
#include "../tensors/planes.hpp"
#include "trainer_impl.hpp"

namespace dsl::backend {

// The part of a tile's padded tensor (y or dy) over `b`, in global coordinates.
View Trainer::Impl::view_of(Tensor& tensor, const Tile& t, const Box& b) {
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

// Posts an exchange, packing what it sends from `from` (of `from_tile`): a piece's source() in the layer's
// own tile (forward: `at_source`), or its box in the tile it fills (backward). `kind` and `layer` name it on
// a profile's timeline. Values of a narrowed layer travel in its 16 bits (`narrow`: they are rounded already,
// so nothing changes), two to a float of the message.
void Trainer::Impl::start(const scheduler::Exchange& p, Messages& m, int tag, Tensor& from, const Tile& from_tile,
                          bool at_source, Kind kind, int layer, std::optional<scheduler::Precision> narrow) {
    std::vector<Message> sends, receives;
    std::int64_t bytes = 0;
    auto size = [&](const Buffer& b) { return narrow ? (b.size() + 1) / 2 : b.size(); };
    for (std::size_t i = 0; i < p.sends.size(); ++i) {
        Buffer& buffer = m.sends[i];
        const View v = view_of(from, from_tile, at_source ? p.sends[i].source() : p.sends[i].box);
        if (narrow)
            mem.narrow(v, *narrow, reinterpret_cast<std::uint16_t*>(buffer.data()));
        else
            mem.pack(v, buffer.data());
        sends.push_back(Message{p.sends[i].peer, buffer.data(), size(buffer)});
        bytes += size(buffer) * static_cast<std::int64_t>(sizeof(float));
    }
    sent_bytes += bytes;
    for (std::size_t i = 0; i < p.receives.size(); ++i)
        receives.push_back(Message{p.receives[i].peer, m.receives[i].data(), size(m.receives[i])});
    if (!sends.empty() || !receives.empty()) timeline.post(kind, layer, bytes);
    comm.start_exchange(sends, receives, tag);
}

// The layer a tile's gradient goes back for, on a profile's timeline: the reader of a copy, the first
// windowed reader of an own tile (whose margins the halo fills).
int Trainer::Impl::reader_of(const Tile& t) const {
    const std::vector<int>& readers = t.copy ? t.reader_layers : t.windowed_readers;
    return readers.empty() ? timeline.layer() : readers.front();
}

// Fills a tile's halos (or the whole of a copy) from the processes that hold them: posts the exchange,
// and `finish_gather` waits for it and places what came.
void Trainer::Impl::start_gather(Tile& t) {
    t.gathered = step_index;
    if (t.forward.empty()) return;
    Tile& owner = slots[static_cast<std::size_t>(t.spec.layer)].own();
    start(t.forward, t.forward_messages, 2 * t.id, owner.y, owner, true, t.copy ? Kind::shuffle : Kind::halo,
          timeline.layer(), narrowed_of(t.spec.layer));
    // A copy of partial sums is their sum: it starts from zero (its margins outside the tensor too).
    if (owner.partial) {
        mem.fill(t.y.padded(), 0.0f);
        t.padding = 0.0f;
    }
    for (const scheduler::Piece& p : t.forward.local)
        if (owner.partial)
            k.eltwise->accumulate(view_of(owner.y, owner, p.source()), view_of(t.y, t, p.box));
        else
            k.eltwise->copy(view_of(owner.y, owner, p.source()), view_of(t.y, t, p.box));
}

void Trainer::Impl::finish_gather(Tile& t) {
    if (t.forward.empty()) return;
    timeline.wait(t.copy ? Kind::wait_shuffle : Kind::wait_halo, [&] { comm.finish_exchange(); });
    const auto narrow = narrowed_of(t.spec.layer);
    // Partial sums are added; they are never narrowed (Distribution::narrowed: not under C parts).
    const bool sum = slots[static_cast<std::size_t>(t.spec.layer)].own().partial;
    for (std::size_t i = 0; i < t.forward.receives.size(); ++i) {
        float* in = t.forward_messages.receives[i].data();
        const View v = view_of(t.y, t, t.forward.receives[i].box);
        if (narrow)
            mem.widen(reinterpret_cast<const std::uint16_t*>(in), *narrow, v);
        else
            mem.unpack(in, v, sum);
    }
}

void Trainer::Impl::gather(Tile& t) {
    if (t.gathered == step_index) return;
    start_gather(t);
    finish_gather(t);
}

// Adds the gradient that readers left in a tile's margins (or in a copy) into the tiles that hold those
// elements, in two halves like the gather.
void Trainer::Impl::start_scatter(Tile& t) {
    t.scattered = step_index;
    if (t.backward.empty()) return;
    Tile& owner = slots[static_cast<std::size_t>(t.spec.layer)].own();
    start(t.backward, t.backward_messages, 2 * t.id + 1, t.dy, t, false, t.copy ? Kind::shuffle_back : Kind::halo_back,
          reader_of(t));
    for (const scheduler::Piece& p : t.backward.local)
        k.eltwise->accumulate(view_of(t.dy, t, p.box), view_of(owner.dy, owner, p.source()));
}

void Trainer::Impl::finish_scatter(Tile& t) {
    if (t.backward.empty()) return;
    Tile& owner = slots[static_cast<std::size_t>(t.spec.layer)].own();
    timeline.wait(t.copy ? Kind::wait_shuffle_back : Kind::wait_halo_back, [&] { comm.finish_exchange(); });
    for (std::size_t i = 0; i < t.backward.receives.size(); ++i)
        mem.unpack(t.backward_messages.receives[i].data(), view_of(owner.dy, owner, t.backward.receives[i].source()),
                   true);
}

void Trainer::Impl::scatter(Tile& t) {
    if (t.scattered == step_index) return;
    start_scatter(t);
    finish_scatter(t);
}

// Padding: the margins outside the tensor hold zero for most readers, -infinity for max pooling; a periodic
// tile's hold its far side (its halo).
void Trainer::Impl::set_padding(Tile& t, float v) {
    if (t.padding == v || t.periodic) return;
    t.padding = v;
    // The tensor's extent, in the padded buffer's coordinates.
    const Dims& d = global_dims(t.spec.layer);
    Space<Range> inside = Space<Range>::filled(d.rank(), Range{});
    for (int i = 0; i < d.rank(); ++i) {
        const std::int64_t first = t.box.space[i].lo - t.need[i].before;
        inside[i] = {-first, d.space[i] - first};
    }
    fill_outside(mem, t.y.padded(), inside, v);
}

// An input tile (and its halo) is made by the data source, never sent.
// The part within the tensor, and a periodic tile's margins beyond its border from the far side.
void Trainer::Impl::make_input(DataSource& data, Tile& t, std::int64_t first) {
    if (t.gathered == step_index) return;
    t.gathered = step_index;
    const Dims& whole = global_dims(t.spec.layer);
    const Box want = t.box.grown(t.need);
    make_input_part(data, t, first, scheduler::Piece{0, want.meet(scheduler::whole_box(whole)), {}});
    if (t.periodic)
        for (const scheduler::Piece& p : scheduler::wrapped_parts(whole, want)) make_input_part(data, t, first, p);
}

// The inputs of `part.source()`, into `part.box` of the tile.
void Trainer::Impl::make_input_part(DataSource& data, Tile& t, std::int64_t first, const scheduler::Piece& part) {
    const Box& b = part.box;
    const std::int64_t sample0 = first + b.n.lo;
    const Index at = part.source().origin();
    const Layer& input = net.layers[static_cast<std::size_t>(t.spec.layer)];
    if (b.empty()) return;
    const std::int64_t channels = global_dims(t.spec.layer).c;
    if (b.c.lo != 0 || b.c.hi != channels) {
        // A block of the channels (what a layer under C parts reads): a source makes every channel of a tile.
        Box all = b;
        all.c = {0, channels};
        host_channels.resize(static_cast<std::size_t>(all.dims().elements()));
        const View made = dense_view(host_channels.data(), all.dims());
        data.inputs(input, sample0, at, made);
        host_tile.resize(static_cast<std::size_t>(b.dims().elements()));
        host_memory().pack(made.channels(b.c.lo, b.c.size()), host_tile.data());
        if (mem.host()) return mem.unpack(host_tile.data(), view_of(t.y, t, b), false);
        mem.upload(host_tile.data(), staging.reserve(b.dims().elements()), b.dims().elements());
        return mem.unpack(staging.data(), view_of(t.y, t, b), false);
    }
    if (mem.host()) return data.inputs(input, sample0, at, view_of(t.y, t, b));
    if (const SyntheticData* synthetic = data.synthetic(input); synthetic && k.synthetic)
        return k.synthetic->inputs(*synthetic, sample0, at, view_of(t.y, t, b));
    // Made on the host, densely, then sent to where the kernels read it.
    const Dims bd = b.dims();
    host_tile.resize(static_cast<std::size_t>(bd.elements()));
    data.inputs(input, sample0, at, dense_view(host_tile.data(), bd));
    mem.upload(host_tile.data(), staging.reserve(bd.elements()), bd.elements());
    mem.unpack(staging.data(), view_of(t.y, t, b), false);
}

// A view's elements, densely, on the host.
void Trainer::Impl::to_host(ConstView v, std::vector<float>& out) {
    out.resize(static_cast<std::size_t>(v.dims.elements()));
    if (v.blocked()) {  // planar, element by element (blocked tiles are the host's)
        const View to = dense_view(out.data(), v.dims);
        for (std::int64_t n = 0; n < v.dims.n; ++n)
            for (std::int64_t c = 0; c < v.dims.c; ++c)
                for_each_place(v.dims.space, [&](const Index& i) { to.at(n, c, i) = v.at(n, c, i); });
        return;
    }
    if (mem.host()) return mem.pack(v, out.data());
    mem.pack(v, staging.reserve(v.dims.elements()));
    mem.download(staging.data(), out.data(), v.dims.elements());
}

Trainer::Impl::Tile& Trainer::Impl::ready(DataSource* data, std::int64_t first, Tile& t) {
    if (net.layers[static_cast<std::size_t>(t.spec.layer)].op == OpKind::input) {
        DSL_INTERNAL_CHECK(data, "forward without data");
        make_input(*data, t, first);
    } else {
        gather(t);
    }
    return t;
}

}  // namespace dsl::backend
