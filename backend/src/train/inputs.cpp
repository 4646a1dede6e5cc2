// The inputs that the data source makes (never sent: an input tile and its halo are made where they are
// read), and values read back to the host.
#include "../tensors/planes.hpp"
#include "trainer_impl.hpp"

namespace dsl::backend {

// An input tile (and its halo), once a step: the part within the tensor, and a periodic tile's margins beyond
// its border from the far side.
void Trainer::Impl::make_input(DataSource& data, Tile& t, std::int64_t first) {
    if (!exchanges.fill_from_data(t)) return;
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
        await_read(data, input, sample0, at, all.dims());
        data.inputs(input, sample0, at, made);
        host_tile.resize(static_cast<std::size_t>(b.dims().elements()));
        host_memory().pack(made.channels(b.c.lo, b.c.size()), host_tile.data());
        if (mem.host()) return mem.unpack(host_tile.data(), view_of(t.y, t, b), false);
        float* staged = tiles.staging(b.dims().elements());
        mem.upload(host_tile.data(), staged, b.dims().elements());
        return mem.unpack(staged, view_of(t.y, t, b), false);
    }
    if (const SyntheticData* synthetic = data.synthetic(input); synthetic && k.synthetic && !mem.host())
        return k.synthetic->inputs(*synthetic, sample0, at, view_of(t.y, t, b));
    const Dims bd = b.dims();
    const auto* dense = static_cast<const float*>(await_read(data, input, sample0, at, bd));
    if (mem.host()) return data.inputs(input, sample0, at, view_of(t.y, t, b));
    // Made on the host, densely, then sent to where the kernels read it: a block read ahead straight from its
    // buffer (page-locked).
    if (!dense) {
        host_tile.resize(static_cast<std::size_t>(bd.elements()));
        data.inputs(input, sample0, at, dense_view(host_tile.data(), bd));
        dense = host_tile.data();
    }
    float* staged = tiles.staging(bd.elements());
    mem.upload(dense, staged, bd.elements());
    mem.unpack(staged, view_of(t.y, t, b), false);
}

const void* Trainer::Impl::await_read(DataSource& data, const Layer& layer, std::int64_t first, const Index& at,
                                      const Dims& dims) {
    if (!data.reads_ahead()) return nullptr;
    const void* values = nullptr;
    timeline.wait(Kind::wait_read, [&] { values = data.ready(layer, first, at, dims); });
    return values;
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
    float* staged = tiles.staging(v.dims.elements());
    mem.pack(v, staged);
    mem.download(staged, out.data(), v.dims.elements());
}

Trainer::Impl::Tile& Trainer::Impl::ready(DataSource* data, std::int64_t first, Tile& t) {
    if (net.layers[static_cast<std::size_t>(t.spec.layer)].op == OpKind::input) {
        DSL_INTERNAL_CHECK(data, "forward without data");
        make_input(*data, t, first);
    } else {
        exchanges.gather(t);
    }
    return t;
}

}  // namespace dsl::backend
