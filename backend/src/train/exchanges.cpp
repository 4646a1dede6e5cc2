// Halo exchange and redistribution (exchanges.hpp): an exchange posted from one tile's memory and finished
// into another's, forward (gather: halos and copies filled) and backward (scatter: what readers left in
// margins and copies added where the elements live).
#include "exchanges.hpp"

#include <dsl/base/error.hpp>

namespace dsl::backend {

using Kind = ProfileEvent::Kind;

Exchanges::Exchanges(const scheduler::Plan& plan, Kernels kernels, Comm& comm, Tiles& tiles, Timeline& timeline)
    : plan_(plan), k_(kernels), mem_(kernels.mem()), comm_(comm), tiles_(tiles), timeline_(timeline) {}

void Exchanges::allocate(const std::vector<Slot>& slots) {
    std::size_t tiles = 0;
    for (const Slot& s : slots) tiles += s.tiles.size();
    forward_.resize(tiles);
    backward_.resize(tiles);
    gathered_.assign(tiles, -1);
    scattered_.assign(tiles, -1);
    for (const Slot& s : slots)
        for (const Tile* t : s.tiles) {
            DSL_INTERNAL_CHECK(id(*t) < tiles, "a tile's id beyond the plan's tiles");
            for (auto [exchange, messages] :
                 {std::pair{&t->forward, &forward_[id(*t)]}, std::pair{&t->backward, &backward_[id(*t)]}})
                for (auto [pieces, buffers] : {std::pair{&exchange->sends, &messages->sends},
                                               std::pair{&exchange->receives, &messages->receives}})
                    for (const scheduler::Piece& piece : *pieces)
                        buffers->emplace_back(mem_).resize(piece.box.dims().elements());
        }
}

void Exchanges::begin_step() {
    ++step_;
    sent_bytes_ = 0;
}

bool Exchanges::fill_from_data(const Tile& t) {
    if (gathered_[id(t)] == step_) return false;
    gathered_[id(t)] = step_;
    return true;
}

std::int64_t Exchanges::floats() const {
    std::int64_t n = 0;
    for (const auto* direction : {&forward_, &backward_})
        for (const Messages& m : *direction)
            for (const auto* buffers : {&m.sends, &m.receives})
                for (const Buffer& b : *buffers) n += b.size();
    return n;
}

// A narrowed layer's precision, in which its halos and copies travel; none for the others.
std::optional<scheduler::Precision> Exchanges::narrowed_of(int layer) const {
    const scheduler::LayerPlan& p = plan_.layers[static_cast<std::size_t>(layer)];
    return p.narrowed ? std::optional(*p.dist.precision) : std::nullopt;
}

// Posts an exchange, packing what it sends from `from` (of `from_tile`): a piece's source() in the layer's
// own tile (forward: `at_source`), or its box in the tile it fills (backward). `kind` and `layer` name it on
// a profile's timeline. Values of a narrowed layer travel in its 16 bits (`narrow`: they are rounded already,
// so nothing changes), two to a float of the message.
void Exchanges::start(const scheduler::Exchange& p, Messages& m, int tag, Tensor& from, const Tile& from_tile,
                      bool at_source, Kind kind, int layer, std::optional<scheduler::Precision> narrow) {
    std::vector<Message> sends, receives;
    std::int64_t bytes = 0;
    auto size = [&](const Buffer& b) { return narrow ? (b.size() + 1) / 2 : b.size(); };
    for (std::size_t i = 0; i < p.sends.size(); ++i) {
        Buffer& buffer = m.sends[i];
        const View v = view_of(from, from_tile, at_source ? p.sends[i].source() : p.sends[i].box);
        if (narrow)
            mem_.narrow(v, *narrow, reinterpret_cast<std::uint16_t*>(buffer.data()));
        else
            mem_.pack(v, buffer.data());
        sends.push_back(Message{p.sends[i].peer, buffer.data(), size(buffer)});
        bytes += size(buffer) * static_cast<std::int64_t>(sizeof(float));
    }
    sent_bytes_ += bytes;
    for (std::size_t i = 0; i < p.receives.size(); ++i)
        receives.push_back(Message{p.receives[i].peer, m.receives[i].data(), size(m.receives[i])});
    if (!sends.empty() || !receives.empty()) timeline_.post(kind, layer, bytes);
    comm_.start_exchange(sends, receives, tag);
}

// The layer a tile's gradient goes back for, on a profile's timeline: the reader of a copy, the first
// windowed reader of an own tile (whose margins the halo fills).
int Exchanges::reader_of(const Tile& t) const {
    const std::vector<int>& readers = t.copy ? t.reader_layers : t.windowed_readers;
    return readers.empty() ? timeline_.layer() : readers.front();
}

// Fills a tile's halos (or the whole of a copy) from the processes that hold them: posts the exchange,
// and `finish_gather` waits for it and places what came.
void Exchanges::start_gather(Tile& t) {
    gathered_[id(t)] = step_;
    if (t.forward.empty()) return;
    Tile& owner = tiles_.own(t.spec.layer);
    start(t.forward, forward_[id(t)], 2 * t.id, owner.y, owner, true, t.copy ? Kind::shuffle : Kind::halo,
          timeline_.layer(), narrowed_of(t.spec.layer));
    // A copy of partial sums is their sum: it starts from zero (its margins outside the tensor too).
    if (owner.partial) tiles_.zero_values(t);
    for (const scheduler::Piece& p : t.forward.local)
        if (owner.partial)
            k_.eltwise->accumulate(view_of(owner.y, owner, p.source()), view_of(t.y, t, p.box));
        else
            k_.eltwise->copy(view_of(owner.y, owner, p.source()), view_of(t.y, t, p.box));
}

void Exchanges::finish_gather(Tile& t) {
    if (t.forward.empty()) return;
    timeline_.wait(t.copy ? Kind::wait_shuffle : Kind::wait_halo, [&] { comm_.finish_exchange(); });
    const auto narrow = narrowed_of(t.spec.layer);
    // Partial sums are added; they are never narrowed (Distribution::narrowed: not under C parts).
    const bool sum = tiles_.own(t.spec.layer).partial;
    for (std::size_t i = 0; i < t.forward.receives.size(); ++i) {
        float* in = forward_[id(t)].receives[i].data();
        const View v = view_of(t.y, t, t.forward.receives[i].box);
        if (narrow)
            mem_.widen(reinterpret_cast<const std::uint16_t*>(in), *narrow, v);
        else
            mem_.unpack(in, v, sum);
    }
}

void Exchanges::gather(Tile& t) {
    if (gathered_[id(t)] == step_) return;
    start_gather(t);
    finish_gather(t);
}

// Adds the gradient that readers left in a tile's margins (or in a copy) into the tiles that hold those
// elements, in two halves like the gather.
void Exchanges::start_scatter(Tile& t) {
    scattered_[id(t)] = step_;
    if (t.backward.empty()) return;
    Tile& owner = tiles_.own(t.spec.layer);
    start(t.backward, backward_[id(t)], 2 * t.id + 1, t.dy, t, false, t.copy ? Kind::shuffle_back : Kind::halo_back,
          reader_of(t));
    for (const scheduler::Piece& p : t.backward.local)
        k_.eltwise->accumulate(view_of(t.dy, t, p.box), view_of(owner.dy, owner, p.source()));
}

void Exchanges::finish_scatter(Tile& t) {
    if (t.backward.empty()) return;
    Tile& owner = tiles_.own(t.spec.layer);
    timeline_.wait(t.copy ? Kind::wait_shuffle_back : Kind::wait_halo_back, [&] { comm_.finish_exchange(); });
    for (std::size_t i = 0; i < t.backward.receives.size(); ++i)
        mem_.unpack(backward_[id(t)].receives[i].data(), view_of(owner.dy, owner, t.backward.receives[i].source()),
                    true);
}

void Exchanges::scatter(Tile& t) {
    if (scattered_[id(t)] == step_) return;
    start_scatter(t);
    finish_scatter(t);
}

}  // namespace dsl::backend
