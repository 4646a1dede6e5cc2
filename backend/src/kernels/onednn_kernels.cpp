// Convolution and fully connected kernels through oneDNN primitives (f32, CPU; convolutions also with
// bfloat16 products, and with the ReLU that reads them as a post-op), cached per problem.
#include "onednn_kernels.hpp"
#include "../tensors/narrow.hpp"
#include "../tensors/planes.hpp"
#include "../tensors/weight_blocks.hpp"
#include "kernel_checks.hpp"
#include "onednn_weight_blocks.hpp"

#include <dsl/base/error.hpp>
#include <dsl/scheduler/layout_groups.hpp>

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace dsl::backend {
namespace {

using dnnl::memory;
using Key = std::vector<std::int64_t>;

// oneDNN's convolutions and inner products see images (and vectors) as their planes (planes.hpp), NCHW, and
// volumes as they are, NCDHW: dims_of, strides_of, view_desc and append (the cache's keys) convert views, in
// this one place (and OnednnConv's strides, dilates and padding of windows).
memory::dims dims_of(const Dims& d) {
    if (d.rank() == 3) return {d.n, d.c, d.space[0], d.space[1], d.space[2]};
    const PlaneDims p = planes(d);
    return {p.n, p.c, p.h, p.w};
}

memory::dims strides_of(const ConstView& v) {
    if (v.dims.rank() == 3) return {v.stride_n, v.stride_c, v.stride[0], v.stride[1], 1};
    if (v.dims.rank() == 2) return {v.stride_n, v.stride_c, v.stride[0], 1};  // a blocked view's too
    const ConstPlanes p = planes(v);
    return {p.stride_n, p.stride_c, p.stride_h, 1};
}

// A blocked view (view.hpp) is oneDNN's nChw16c (or nCdhw16c) with the view's strides: its channels' blocks
// innermost, then strides_of's. A dense one is the format tag's.
memory::desc view_desc(const ConstView& v) {
    if (!v.blocked()) return memory::desc(dims_of(v.dims), memory::data_type::f32, strides_of(v));
    DSL_INTERNAL_CHECK(v.lanes == blocked_lanes && v.dims.rank() >= 2, "oneDNN kernel: a blocked view of another kind");
    const memory::dims dims = dims_of(v.dims), strides = strides_of(v);
    dnnl_memory_desc_t d{};
    d.ndims = static_cast<int>(dims.size());
    d.data_type = dnnl_f32;
    d.format_kind = dnnl_blocked;
    for (std::size_t k = 0; k < dims.size(); ++k) {
        d.dims[k] = d.padded_dims[k] = dims[k];
        d.format_desc.blocking.strides[k] = strides[k];
    }
    d.format_desc.blocking.strides[dims.size() - 1] = v.lanes;  // strides_of's innermost is a planar view's 1
    d.format_desc.blocking.inner_nblks = 1;
    d.format_desc.blocking.inner_blks[0] = v.lanes;
    d.format_desc.blocking.inner_idxs[0] = 1;  // the channels
    return memory::desc(d);
}

// The primitive chooses its own layout for every tensor argument.
memory::desc any_desc(const memory::dims& dims, memory::data_type type = memory::data_type::f32) {
    return memory::desc(dims, type, memory::format_tag::any);
}

// The layout in which a primitive takes an activation: a blocked view's own, dense (what oneDNN's direct
// kernels run on), else the primitive's choice.
memory::desc activation_desc(const Dims& dims, bool blocked, memory::data_type type = memory::data_type::f32) {
    if (!blocked) return any_desc(dims_of(dims), type);
    return memory::desc(dims_of(dims), type,
                        dims.rank() == 3 ? memory::format_tag::nCdhw16c : memory::format_tag::nChw16c);
}

memory::desc vector_desc(std::int64_t size) {
    return memory::desc({size}, memory::data_type::f32, memory::format_tag::x);
}

void append(Key& key, const ConstView& v) {
    const memory::dims d = dims_of(v.dims), s = strides_of(v);
    key.insert(key.end(), d.begin(), d.end());
    key.insert(key.end(), s.begin(), s.end() - 1);  // the innermost stride is always 1 (a block of lanes)
    key.push_back(v.lanes);
}

void append(Key& key, const Window& w) {
    for (const Index* values : {&w.kernel, &w.stride, &w.dilation})
        key.insert(key.end(), values->begin(), values->end());
    for (const scheduler::Reach& r : w.zeros) key.insert(key.end(), {r.before, r.after});
    key.push_back(w.blocked_weights);
    key.push_back(w.zeros_outside);
}

// A convolution's weights (or their gradient) as the caller keeps them: the view, or its 16 x 16 blocks
// (weight_blocks.hpp) where the window says so.
memory::desc weights_view_desc(const ConstView& w, const Window& window) {
    if (!window.blocked_weights) return view_desc(w);
    DSL_INTERNAL_CHECK(w.dense() && w.dims.rank() < 3 && has_weight_blocks(w.dims),
                       "oneDNN kernel: blocked weights of other dims");
    return memory::desc(dims_of(w.dims), memory::data_type::f32, memory::format_tag::ABcd16b16a);
}

// A window's dimensions of one tap and a stride s > 1 read every s-th place of x's view and nothing between,
// so the convolution is one of stride 1 over those places: x's view with y's extents and its strides times
// s. oneDNN 2.6 runs a strided 1x1 convolution with its 1x1 kernel only when x's extent is a multiple of the
// stride (its own "reduce to unit stride" copy), and a view spans (out - 1) * s + 1 places, so ResNet's
// downsampling convolutions took its general direct kernel ("jit:avx512_core"), whose backward-data took 3.8x
// its forward (layer4.0.downsample.0, 14 by 14 to 7 by 7). The places are gathered into a dense buffer
// (oneDNN refuses a memory descriptor whose strides it thinks overlap, which these do at an odd extent), and
// the stride-1 convolution of it runs the 1x1 kernel; the transpose, backward-data, writes the buffer,
// scattered back into dx with zeros between.
template <typename T>
struct Subsampled {
    BasicView<T> x;  // the places read: its innermost stride may exceed 1
    Window window;
    bool subsampled = false;
};

template <typename T>
Subsampled<T> subsample(BasicView<T> x, const Dims& y, const Window& window) {
    Subsampled<T> s{spatial_form(x), window, false};
    const Dims sy = spatial_form(y);
    for (int d = 0; d < window.kernel.rank(); ++d) {
        if (window.kernel[d] != 1 || window.stride[d] == 1) continue;
        s.x.dims.space[d] = sy.space[d];
        s.x.stride[d] *= window.stride[d];
        s.window.stride[d] = s.window.dilation[d] = 1;
        s.subsampled = true;
    }
    return s;
}

// x without the places at its ends that `window.zeros` says are padding, and the window that pads in their
// place (its `zeros` what oneDNN pads, rank 0 where it pads nothing). Where some padding reaches as far as
// the window does, or nothing would be left, x stays whole and oneDNN pads nothing.
template <typename T>
struct Unpadded {
    BasicView<T> x;
    Window window;
};

// A window whose zeros lie outside x has them left out already.
template <typename T>
Unpadded<T> unpad(BasicView<T> x, const Window& window) {
    if (window.zeros_outside) return Unpadded<T>{x, window};
    Unpadded<T> u{x, window};
    u.window.zeros = {};
    const int rank = window.kernel.rank();
    if (window.zeros.rank() != rank || x.dims.rank() != rank) return u;
    Index at = Index::filled(rank, 0);
    Dims inner = x.dims;
    for (int d = 0; d < rank; ++d) {
        const scheduler::Reach r = window.zeros[d];
        const std::int64_t reach = (window.kernel[d] - 1) * window.dilation[d] + 1;
        if (r.before < 0 || r.after < 0 || r.before >= reach || r.after >= reach ||
            x.dims.space[d] - r.before - r.after < 1)
            return u;
        at[d] = r.before;
        inner.space[d] -= r.before + r.after;
    }
    u.x = x.sub(0, 0, at, inner);
    u.window.zeros = window.zeros;
    return u;
}

// Copies `from` into `to`, views of the same dims in their spatial form whose innermost strides may exceed 1,
// a plane per thread of OpenMP's team (the one oneDNN's primitives use).
void copy_places(const ConstView& from, const View& to) {
    const int last = from.dims.rank() - 1;
    const std::int64_t width = from.dims.space[last], a = from.stride[last], b = to.stride[last];
    const std::int64_t planes = from.dims.n * from.dims.c;
#pragma omp parallel for schedule(static)
    for (std::int64_t p = 0; p < planes; ++p) {
        const std::int64_t n = p / from.dims.c, c = p % from.dims.c;
        for_each_row_start(from.dims.space, [&](const Index& i) {
            const float* src = &from.at(n, c, i);
            float* dst = &to.at(n, c, i);
            for (std::int64_t j = 0; j < width; ++j) dst[j * b] = src[j * a];
        });
    }
}

void zero(View v) {
    for_each_run(v, [&](float* run, std::int64_t w) { std::fill_n(run, w, 0.0f); });
}

// Zeros the places of `v` within `m` of its ends along each spatial dimension (what `unpad` left out; none
// where `m` has rank 0), a plane per thread: a whole row where one of its outer places lies in a margin, else
// the row's own ends. (Strips zeroed one after another took 0.25 ms of mesh_tiny's 5 ms step at batch 8, the
// strip down a column as rows of one element.)
void zero_margins(const View& v, const Margins& m) {
    const int rank = m.rank();
    if (rank == 0 || v.dims.elements() == 0) return;
    DSL_INTERNAL_CHECK(rank == v.dims.rank(), "zero_margins: margins of another rank than the view");
    const int last = rank - 1;
    const std::int64_t width = v.dims.space[last], before = m[last].before, after = m[last].after;
    const std::int64_t planes = v.dims.n * v.dims.c;
#pragma omp parallel for schedule(static)
    for (std::int64_t p = 0; p < planes; ++p) {
        const std::int64_t n = p / v.dims.c, c = p % v.dims.c;
        for_each_row_start(v.dims.space, [&](const Index& i) {
            float* row = &v.at(n, c, i);
            bool whole = false;
            for (int d = 0; d < last; ++d) whole |= i[d] < m[d].before || i[d] >= v.dims.space[d] - m[d].after;
            if (whole) {
                std::fill_n(row, width, 0.0f);
            } else {
                std::fill_n(row, before, 0.0f);
                std::fill_n(row + width - after, after, 0.0f);
            }
        });
    }
}

// Memory for arguments in a primitive's own layout. Calls are serialised, so all problems share one arena
// per argument position, sized by the largest problem, rather than each cached problem holding a copy of
// its activations.
class Arena {
public:
    Arena() = default;
    Arena(const Arena&) = delete;
    Arena& operator=(const Arena&) = delete;
    ~Arena() { std::free(data_); }

    void* get(std::size_t bytes) {
        if (bytes > size_) {
            std::free(data_);
            data_ = nullptr;
            size_ = 0;
            const std::size_t rounded = (bytes + alignment - 1) / alignment * alignment;
            data_ = std::aligned_alloc(alignment, rounded);
            if (!data_) throw std::bad_alloc();
            size_ = rounded;
        }
        return data_;
    }

private:
    static constexpr std::size_t alignment = 64;  // a cache line, as oneDNN allocates its own buffers
    void* data_ = nullptr;
    std::size_t size_ = 0;
};

// One CPU engine and stream for the process. A stream is not thread-safe, so calls hold the mutex; oneDNN
// threads each primitive itself (OpenMP here), so serialising calls costs little.
struct Context {
    std::mutex mutex;
    dnnl::engine engine{dnnl::engine::kind::cpu, 0};
    dnnl::stream stream{engine};
    std::array<Arena, 3> arenas;  // one per tensor argument of a primitive (see Slot)
    Arena places;                 // the places a subsampled window reads (Subsampled), dense
    std::uint64_t runs = 0;       // primitives run so far: what the arenas hold is the last one's
};

Context& context() {
    static Context ctx;
    return ctx;
}

// One tensor argument of a primitive. Views are strided (a tile's interior skips its margins), and oneDNN 2.6
// runs only its reference kernel ("ref:any", many times slower) on a non-dense layout, so the primitive is
// created with format_tag::any and the view is reordered into or out of a buffer in the layout it chose. A
// reorder reads or writes exactly the view's elements, so margins outside a view are never touched. When the
// chosen layout is the view's own, the primitive uses the caller's memory directly.
struct Slot {
    int arg = 0;
    bool input = true;
    memory::desc user;
    memory::desc chosen;
    bool via_buffer = false;  // false when the primitive reads or writes the caller's memory
    bool unblock = false;     // an output that `unblock_weights` writes, in the reorder's place
    dnnl::primitive reorder;  // view -> buffer for inputs, buffer -> view for outputs
    // Made once and pointed at each call's data, rather than memory objects and argument maps built anew on
    // every call.
    memory user_memory, buffer_memory;
    std::unordered_map<int, memory> reorder_args;
    // Of weights rounded to 16 bits into 16 x 16 blocks of filters and channels: where each element goes
    // (weight_blocks16), for narrow_weight_blocks.
    std::optional<WeightBlocks16> blocks16;
};

// A primitive ready to run a problem: its tensor arguments in the order `run` receives the pointers, and the
// bias (or bias gradient), which is always a dense vector and so needs no slot.
struct Planned {
    dnnl::primitive primitive;
    std::vector<Slot> slots;
    int bias_arg = 0;  // DNNL_ARG_BIAS or DNNL_ARG_DIFF_BIAS; 0 when there is none
    memory::desc bias;
    memory bias_memory;
    std::unordered_map<int, memory> args;  // the primitive's arguments (the bias's added by `run`)
    // A problem with a ReLU fused in that oneDNN would run with another implementation (or layouts) than the
    // problem without: not run, since its sums would be in another order than the two apart.
    bool declined = false;
};

// Convolution weights {O, I, H, W} of blocks of 16 outputs by 16 inputs (oneDNN's ABcd16b16a, the outputs
// innermost), as a backward-weights kernel makes their gradient, where the caller keeps them plain OIHW: oneDNN
// 2.6's reorder between them runs at 2.7 GB/s on this machine (3 ms for ResNet-50's 2048 x 1024 x 1 x 1), so
// unblock_weights (weight_blocks.hpp) writes them, a 16 x 16 block of the source in cache at a time.
bool unblockable(const memory::desc& blocked, const memory::desc& plain) {
    const memory::dims d = plain.dims();
    return d.size() == 4 && d[0] % 16 == 0 && d[1] % 16 == 0 &&
           blocked == memory::desc(d, memory::data_type::f32, memory::format_tag::ABcd16b16a) &&
           plain == memory::desc(d, memory::data_type::f32, memory::format_tag::abcd);
}

void add_slot(Planned& p, const Context& ctx, int arg, bool input, const memory::desc& user,
              const memory::desc& chosen) {
    Slot s{arg, input, user, chosen, user != chosen, !input && unblockable(chosen, user), {}, {}, {}, {}, {}};
    if (input && arg == DNNL_ARG_WEIGHTS) s.blocks16 = weight_blocks16(chosen);
    s.user_memory = memory(user, ctx.engine, DNNL_MEMORY_NONE);
    if (s.via_buffer) {
        s.reorder = input ? dnnl::reorder(dnnl::reorder::primitive_desc(ctx.engine, user, ctx.engine, chosen))
                          : dnnl::reorder(dnnl::reorder::primitive_desc(ctx.engine, chosen, ctx.engine, user));
        s.buffer_memory = memory(chosen, ctx.engine, DNNL_MEMORY_NONE);
        s.reorder_args = {{DNNL_ARG_FROM, input ? s.user_memory : s.buffer_memory},
                          {DNNL_ARG_TO, input ? s.buffer_memory : s.user_memory}};
    }
    p.args[arg] = s.via_buffer ? s.buffer_memory : s.user_memory;
    p.slots.push_back(std::move(s));
}

// Runs `p` on the caller's buffers, one pointer per slot, in the slots' order. `held`: bit i set where slot i's
// arena holds its input already, as the last run left it. `made`: where not null, slot i's input in the layout
// the primitive chose, made already (16-bit weights, narrowed_weights), which the primitive reads there.
void run(Context& ctx, Planned& p, const std::vector<const void*>& pointers, const float* bias, unsigned held = 0,
         const std::array<const void*, 3>& made = {}) {
    ++ctx.runs;
    DSL_INTERNAL_CHECK(pointers.size() == p.slots.size(), "oneDNN kernel: wrong number of arguments");
    DSL_INTERNAL_CHECK(p.slots.size() <= ctx.arenas.size(), "oneDNN kernel: too many arguments");
    for (std::size_t i = 0; i < p.slots.size(); ++i) {
        Slot& s = p.slots[i];
        // oneDNN takes void* for every buffer; inputs are only read.
        s.user_memory.set_data_handle(const_cast<void*>(pointers[i]));
        if (!s.via_buffer) continue;
        if (made[i]) {
            s.buffer_memory.set_data_handle(const_cast<void*>(made[i]));
            continue;
        }
        // The arena may have grown (and moved) for another problem since this one last ran.
        void* buffer = ctx.arenas[i].get(s.chosen.get_size());
        if (s.buffer_memory.get_data_handle() != buffer) s.buffer_memory.set_data_handle(buffer);
        if (s.input && !(held >> i & 1u)) s.reorder.execute(ctx.stream, s.reorder_args);
    }
    if (p.bias_arg != 0) {
        if (!p.bias_memory) p.args[p.bias_arg] = p.bias_memory = memory(p.bias, ctx.engine, DNNL_MEMORY_NONE);
        p.bias_memory.set_data_handle(const_cast<float*>(bias));
    }
    p.primitive.execute(ctx.stream, p.args);
    for (Slot& s : p.slots) {
        if (!s.via_buffer || s.input) continue;
        if (s.unblock) {
            ctx.stream.wait();
            const memory::dims d = s.user.dims();
            unblock_weights(Dims{d[0], d[1], {d[2], d[3]}},
                            static_cast<const float*>(s.buffer_memory.get_data_handle()),
                            static_cast<float*>(s.user_memory.get_data_handle()));
        } else {
            s.reorder.execute(ctx.stream, s.reorder_args);
        }
    }
    ctx.stream.wait();
}

// Problems already planned. Our own map rather than oneDNN's primitive cache: that one skips only the
// primitive's creation, while a hit here also skips building the descriptors, choosing the implementation and
// creating the reorders. A network has a few dozen distinct problems; the cap only bounds
// pathological use (every problem different), where we start over.
class Cache {
public:
    Planned& get(const Key& key, const std::function<Planned()>& plan) {
        auto it = entries_.find(key);
        if (it != entries_.end()) return *it->second;
        if (entries_.size() >= max_entries) entries_.clear();
        return *entries_.emplace(key, std::make_unique<Planned>(plan())).first->second;
    }

private:
    static constexpr std::size_t max_entries = 1024;
    std::map<Key, std::unique_ptr<Planned>> entries_;
};

enum Op : std::int64_t {
    conv_forward,
    conv_backward_data,
    conv_backward_weights,
    fc_forward,
    fc_backward_data,
    fc_backward_weights
};

// `in` is the type of the tensors each pass multiplies (x and w forward, dy and w backward-data, x and dy
// backward-weights): f32, or bf16 on CPUs with AVX-512 BF16 instructions (rounded to it, nearest and ties to
// even, by the reorder from the caller's f32 views, which it needs anyway), whose products are exact in f32
// and summed there, the results f32: twice f32's speed on the convolutions of mesh_stack_512's size on this
// machine's Zen 4 (a 32-channel 3x3 of 128 x 128, forward 5.95 -> 2.76 ms, backward-data 5.73 -> 2.76,
// backward-weights 6.52 -> 3.35, without the reorders).
class OnednnConv final : public ConvKernels {
public:
    explicit OnednnConv(memory::data_type in) : in_(in) {}

    void forward(ConstView x, ConstView w, const float* bias, View y, const Window& window) override {
        forward(x, w, bias, std::nullopt, y, window);
    }

    bool forward_relu(ConstView x, ConstView w, const float* bias, float slope, View y, const Window& window) override {
        return forward(x, w, bias, slope, y, window);
    }

    void backward_data(ConstView dy, ConstView w, View dx, const Window& window) override {
        check(dx, w, dy, window);
        if (dy.dims.elements() == 0 || w.dims.elements() == 0) return zero(dx);
        if (const std::int64_t g = scheduler::layout_group(dx.dims, dy.dims); g < dy.dims.n) {
            for (std::int64_t n0 = 0; n0 < dy.dims.n; n0 += g) {
                const std::int64_t k = std::min(g, dy.dims.n - n0);
                backward_data(dy.samples(n0, k), w, dx.samples(n0, k), window);
            }
            return;
        }
        std::lock_guard lock(ctx_.mutex);
        Key key{conv_backward_data};
        append(key, dy), append(key, w), append(key, dx), append(key, window);
        const Subsampled<float> s = subsample(dx, dy.dims, window);
        const View whole = s.subsampled ? places(s.x.dims) : dx;
        const Unpadded<float> u = unpad(whole, s.window);
        const View dxs = u.x;
        Planned& p = cache_.get(key, [&] {
            const auto src = activation_desc(dxs.dims, dxs.blocked()),
                       dst = activation_desc(dy.dims, dy.blocked(), in_);
            auto hint = forward_pd(activation_desc(dxs.dims, dxs.blocked(), in_), any_desc(dims_of(w.dims), in_),
                                   activation_desc(dy.dims, dy.blocked()), u.window, false);
            dnnl::convolution_backward_data::desc d(dnnl::algorithm::convolution_direct, src,
                                                    any_desc(dims_of(w.dims), in_), dst, strides(u.window),
                                                    dilates(u.window), before(u.window), after(u.window));
            dnnl::convolution_backward_data::primitive_desc pd(d, ctx_.engine, hint);
            Planned q;
            q.primitive = dnnl::convolution_backward_data(pd);
            add_slot(q, ctx_, DNNL_ARG_DIFF_DST, true, view_desc(dy), pd.diff_dst_desc());
            add_slot(q, ctx_, DNNL_ARG_WEIGHTS, true, weights_view_desc(w, window), pd.weights_desc());
            add_slot(q, ctx_, DNNL_ARG_DIFF_SRC, false, view_desc(dxs), pd.diff_src_desc());
            return q;
        });
        run(ctx_, p, {dy.base, w.base, dxs.base}, nullptr, 0, {nullptr, narrowed_weights(p.slots[1], 1, w, window)});
        const Slot& first = p.slots.front();
        held_ = Held::left(dy.base, first, ctx_.runs);
        if (!window.zeros_outside) zero_margins(whole, u.window.zeros);
        if (s.subsampled) {
            zero(dx);
            copy_places(whole, s.x);
        }
    }

    // Images' weights of 16-channel blocks in and out, kept in float32 (with bfloat16 products too, whose passes
    // round them from there, narrowed_weights): kept blocked, the forward kernel reorders them
    // from its blocks into its own layout and backward-data into its, and backward-weights writes them as
    // they are. Kept plain, each call reordered them from OIHW, and backward-weights' blocks were unblocked:
    // on mesh_stack_512 at batch 1 these passes over the 7.9M weights took about 8 ms of a 165 ms step with
    // two threads, and 10 to 13 of each process's under H=2 (all three skipped, a measurement only).
    bool blocks_weights(const Dims& w) const override {
        return w.rank() >= 1 && w.rank() < 3 && has_weight_blocks(w) && onednn_blocks16();
    }

    void backward_weights(ConstView x, ConstView dy, View dw, float* db, const Window& window) override {
        check(x, dw, dy, window);
        if (dy.dims.elements() == 0) {
            zero(dw);
            if (db) std::fill_n(db, dw.dims.n, 0.0f);
            return;
        }
        if (const std::int64_t g = scheduler::layout_group(x.dims, dy.dims); g < dy.dims.n) {
            // The first group's gradients, then each other group's added to them, in order.
            backward_weights(x.samples(0, g), dy.samples(0, g), dw, db, window);
            std::vector<float> part_dw(static_cast<std::size_t>(dw.dims.elements())),
                part_db(static_cast<std::size_t>(dw.dims.n));
            const View part = dense_view(part_dw.data(), dw.dims);
            for (std::int64_t n0 = g; n0 < dy.dims.n; n0 += g) {
                const std::int64_t k = std::min(g, dy.dims.n - n0);
                backward_weights(x.samples(n0, k), dy.samples(n0, k), part, db ? part_db.data() : nullptr, window);
                for_each_row(dw, [&](std::int64_t n, std::int64_t c, const Index& i, float* row) {
                    const float* from = &part.at(n, c, i);
                    for (std::int64_t j = 0; j < row_length(dw.dims); ++j) row[j] += from[j];
                });
                if (db)
                    for (std::int64_t f = 0; f < dw.dims.n; ++f) db[f] += part_db[static_cast<std::size_t>(f)];
            }
            return;
        }
        std::lock_guard lock(ctx_.mutex);
        Key key{conv_backward_weights, db != nullptr};
        append(key, x), append(key, dy), append(key, dw), append(key, window);
        const Subsampled<const float> s = subsample(x, dy.dims, window);
        const Unpadded<const float> u = unpad(s.subsampled ? gather(s.x) : x, s.window);
        const ConstView xs = u.x;
        Planned& p = cache_.get(key, [&] {
            const bool bias = db != nullptr;
            const Window& win = u.window;
            // Blocked views in their own layout; else channels-last where that is faster.
            const auto pd_of = [&](bool last) {
                const auto activations = [&](const ConstView& v, memory::data_type type) {
                    return last ? channels_last(v.dims, type) : activation_desc(v.dims, v.blocked(), type);
                };
                const auto src = activations(xs, in_), weights = any_desc(dims_of(dw.dims)), dst = activations(dy, in_);
                // The forward pass it is the transpose of: of the same types, its output f32.
                auto hint = forward_pd(src, any_desc(dims_of(dw.dims), in_), activations(dy, memory::data_type::f32),
                                       win, bias);
                const auto d = bias ? dnnl::convolution_backward_weights::desc(
                                          dnnl::algorithm::convolution_direct, src, weights, vector_desc(dw.dims.n),
                                          dst, strides(win), dilates(win), before(win), after(win))
                                    : dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, src,
                                                                               weights, dst, strides(win), dilates(win),
                                                                               before(win), after(win));
                return dnnl::convolution_backward_weights::primitive_desc(d, ctx_.engine, hint);
            };
            const bool blocked = xs.blocked() || dy.blocked();
            auto pd = pd_of(!blocked && channels_last_backward_weights(x.dims));
            // Where the layouts leave oneDNN only its reference kernel, channels-last (x planar, dy blocked: on
            // CosmoFlow's first layer 66 s a step, against 28 ms channels-last and 9 ms of reorders).
            if (!xs.blocked() && std::string(pd.impl_info_str()).rfind("ref", 0) == 0) pd = pd_of(true);
            Planned q;
            q.primitive = dnnl::convolution_backward_weights(pd);
            // dy first: backward_data's first argument too, whose reorder it may reuse.
            add_slot(q, ctx_, DNNL_ARG_DIFF_DST, true, view_desc(dy), pd.diff_dst_desc());
            add_slot(q, ctx_, DNNL_ARG_SRC, true, view_desc(xs), pd.src_desc());
            add_slot(q, ctx_, DNNL_ARG_DIFF_WEIGHTS, false, weights_view_desc(dw, window), pd.diff_weights_desc());
            if (bias) q.bias_arg = DNNL_ARG_DIFF_BIAS, q.bias = vector_desc(dw.dims.n);
            return q;
        });
        const Slot& first = p.slots.front();
        const bool held = held_.holds(dy.base, first, ctx_.runs);
        held_ = Held{};
        run(ctx_, p, {dy.base, xs.base, dw.base}, db, held ? 1u : 0u);
    }

private:
    // `relu`: the slope of a leaky ReLU that oneDNN applies to each output before writing it (an eltwise
    // post-op), where the problem runs with the implementation and layouts it runs with alone; false, nothing
    // written, where it would not (the fused outputs are to be the two apart's, bit for bit), or where the
    // samples go in groups (a later group could decline after an earlier one wrote).
    bool forward(ConstView x, ConstView w, const float* bias, std::optional<float> relu, View y, const Window& window) {
        check(x, w, y, window);
        if (y.dims.elements() == 0) return true;
        if (const std::int64_t g = scheduler::layout_group(x.dims, y.dims); g < y.dims.n) {
            if (relu) return false;
            Window again = window;
            for (std::int64_t n0 = 0; n0 < y.dims.n; n0 += g) {
                const std::int64_t k = std::min(g, y.dims.n - n0);
                forward(x.samples(n0, k), w, bias, std::nullopt, y.samples(n0, k), again);
                again.same_weights = true;
            }
            return true;
        }
        std::lock_guard lock(ctx_.mutex);
        Key key{conv_forward, bias != nullptr, relu.has_value(), relu ? float_bits(*relu) : 0};
        append(key, x), append(key, w), append(key, y), append(key, window);
        const Subsampled<const float> s = subsample(x, y.dims, window);
        const Unpadded<const float> u = unpad(s.subsampled ? gather(s.x) : x, s.window);
        const ConstView xs = u.x;
        Planned& p = cache_.get(key, [&] {
            const auto choose = [&](const dnnl::primitive_attr& attr) {
                dnnl::convolution_forward::primitive_desc pd;
                if (xs.blocked() || y.blocked())  // blocked tiles: no reorder
                    return forward_pd(activation_desc(xs.dims, xs.blocked(), in_), any_desc(dims_of(w.dims), in_),
                                      activation_desc(y.dims, y.blocked()), u.window, bias != nullptr, attr);
                if (x.dims.rank() < 3 && in_ == memory::data_type::f32)
                    pd = forward_nhwc_pd(xs.dims, w.dims, y.dims, u.window, bias != nullptr, attr);
                if (!pd) pd = forward_pd(xs.dims, w.dims, y.dims, u.window, bias != nullptr, attr);
                return pd;
            };
            const dnnl::convolution_forward::primitive_desc pd =
                choose(relu ? relu_attr(*relu) : dnnl::primitive_attr());
            Planned q;
            if (relu) {
                const dnnl::convolution_forward::primitive_desc alone = choose({});
                q.declined = std::string(pd.impl_info_str()) != alone.impl_info_str() ||
                             pd.src_desc() != alone.src_desc() || pd.weights_desc() != alone.weights_desc() ||
                             pd.dst_desc() != alone.dst_desc();
                if (q.declined) return q;
            }
            q.primitive = dnnl::convolution_forward(pd);
            add_slot(q, ctx_, DNNL_ARG_SRC, true, view_desc(xs), pd.src_desc());
            add_slot(q, ctx_, DNNL_ARG_WEIGHTS, true, weights_view_desc(w, window), pd.weights_desc());
            add_slot(q, ctx_, DNNL_ARG_DST, false, view_desc(y), pd.dst_desc());
            if (bias) q.bias_arg = DNNL_ARG_BIAS, q.bias = vector_desc(w.dims.n);
            return q;
        });
        if (p.declined) return false;
        const Slot& weights = p.slots[1];
        const bool again = window.same_weights && held_weights_.holds(w.base, weights, ctx_.runs);
        run(ctx_, p, {xs.base, w.base, y.base}, bias, again ? 2u : 0u,
            {nullptr, again ? nullptr : narrowed_weights(weights, 1, w, window)});
        held_weights_ = Held::left(w.base, weights, ctx_.runs);
        return true;
    }

    // oneDNN's eltwise post-op of a leaky ReLU: x > 0 ? x : slope * x, as ActivationKernels::forward.
    static dnnl::primitive_attr relu_attr(float slope) {
        dnnl::post_ops ops;
        ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, slope, 0.0f);
        dnnl::primitive_attr attr;
        attr.set_post_ops(ops);
        return attr;
    }

    // The kernels' contract: x spans exactly the places that y's outputs read.
    static void check(const ConstView& x, const ConstView& w, const ConstView& y, const Window& window) {
        check_conv(x.dims, w.dims, y.dims, window, true);
    }

    // A dense buffer for the places of a subsampled window, of `dims`; valid until the next call.
    View places(const Dims& dims) {
        const auto size = static_cast<std::size_t>(dims.elements()) * sizeof(float);
        return dense_view(static_cast<float*>(ctx_.places.get(size)), dims);
    }

    ConstView gather(const ConstView& x) {
        const View to = places(x.dims);
        copy_places(x, to);
        return to;
    }

    static memory::dims strides(const Window& w) { return memory::dims(w.stride.begin(), w.stride.end()); }
    // oneDNN counts the elements skipped between taps: 0 is a dense kernel.
    static memory::dims dilates(const Window& w) {
        memory::dims d(w.dilation.begin(), w.dilation.end());
        for (auto& v : d) --v;
        return d;
    }
    // The padding oneDNN adds before and after x along each spatial dimension: what `unpad` left out of the
    // view, else none (the tile's margins hold it, so the convolution is valid over the view).
    static memory::dims before(const Window& w) { return padding(w, false); }
    static memory::dims after(const Window& w) { return padding(w, true); }
    static memory::dims padding(const Window& w, bool after) {
        memory::dims p(static_cast<std::size_t>(w.kernel.rank()), 0);
        for (int d = 0; d < w.zeros.rank(); ++d)
            p[static_cast<std::size_t>(d)] = after ? w.zeros[d].after : w.zeros[d].before;
        return p;
    }

    dnnl::convolution_forward::primitive_desc forward_pd(const Dims& x, const Dims& w, const Dims& y,
                                                         const Window& window, bool bias,
                                                         const dnnl::primitive_attr& attr = {}) {
        return forward_pd(any_desc(dims_of(x), in_), any_desc(dims_of(w), in_), any_desc(dims_of(y)), window, bias,
                          attr);
    }

    // Activations in channels-last order, NHWC or NDHWC.
    static memory::desc channels_last(const Dims& d, memory::data_type type = memory::data_type::f32) {
        const auto tag = d.rank() == 3 ? memory::format_tag::ndhwc : memory::format_tag::nhwc;
        return memory::desc(dims_of(d), type, tag);
    }

    // Whether backward-weights takes x and dy channels-last rather than in oneDNN's choice of layout.
    // - Volumes of fewer channels than a 16-channel block: with NDHWC activations oneDNN 2.6 runs its AVX-512
    //   kernel where its own choice runs the AVX2 one (on the plain layout its forward takes for so few
    //   channels): 2.4x as fast on CosmoFlow's first layer (4 channels in, 128^3), and as fast or faster from
    //   1 to 8 channels.
    // - Images (f32) of 4 to 23 channels, not 16: its own choice pads x to 16 or 32 channels (nChw16c), the
    //   reorder writing the zeros and the kernel reading them; NHWC pads nothing. With the reorders from and
    //   to NCHW, on one and on two threads (x of 1 x C x 256^2 at strides 1 and 2, and 4 x C x 64^2, into 32
    //   or 64 filters), NHWC took 0.25 to 0.85 of the blocked time at 4, 6, 12, 18 and 20 channels, and 0.59
    //   to 1.05 at 8; mesh_stack_512's first layer (18 x 512^2, stride 2, 32 filters): 8.9 against 12.3 ms
    //   on one thread, 7.5 against 10.8 on two. It lost at 1 and 3 channels (1.4 to 2x; oneDNN reads those
    //   plain, unpadded), at 16 (2.3x on two threads), and at 48 (up to 2.8x); at 24 and 36 it won on two
    //   threads and lost on one.
    bool channels_last_backward_weights(const Dims& x) const {
        if (x.rank() == 3) return x.c < 16;
        return x.rank() < 3 && in_ == memory::data_type::f32 && x.c >= 4 && x.c < 24 && x.c != 16;
    }

    // The forward pass of images with NHWC activations, when oneDNN runs it with its brgemm kernel: with the
    // reorders from and to the views' NCHW it beat the direct kernel on 16-channel blocks with theirs on each
    // of mesh_stack_512's convolutions (by 5 - 20%; the 18-channel first layer by more, as NHWC does not pad
    // it to 32 channels), and was no slower on mesh_stack_256 and mesh_tiny. oneDNN 2.6's NHWC backward
    // kernels are slower than the blocked ones, so only the forward pass uses it. Empty otherwise. (Volumes
    // take oneDNN's own choice: on CosmoFlow's convolutions NDHWC brgemm was as fast within 5%, either way.)
    // Not for a window of one tap with weights of 64 x 64 or more: their reorder from OIHW into brgemm's 1x1
    // layout (Acdb48a and the like) runs at a twenty-fifth of a copy's speed (9.5 ms for ResNet's 2048 x 1024,
    // where the blocked kernel's takes 0.4), and brgemm's kernel was no faster: with the reorders, the blocked
    // 1x1 kernel took 0.4 to 1.05 of brgemm's time (median 0.68) on the 1x1 shapes of ResNet-50 (64 x 64 to
    // 2048 x 1024, batch 4, one thread).
    // Smaller ones (a last layer to a few classes) keep brgemm, as before.
    dnnl::convolution_forward::primitive_desc forward_nhwc_pd(const Dims& x, const Dims& w, const Dims& y,
                                                              const Window& window, bool bias,
                                                              const dnnl::primitive_attr& attr) {
        const bool one_tap =
            std::all_of(window.kernel.begin(), window.kernel.end(), [](std::int64_t k) { return k == 1; });
        if (one_tap && w.n * w.c >= 64 * 64) return {};
        auto pd = forward_pd(channels_last(x), any_desc(dims_of(w)), channels_last(y), window, bias, attr);
        if (std::string(pd.impl_info_str()).rfind("brg", 0) != 0) return {};
        return pd;
    }

    dnnl::convolution_forward::primitive_desc forward_pd(const memory::desc& src, const memory::desc& weights,
                                                         const memory::desc& dst, const Window& window, bool bias,
                                                         const dnnl::primitive_attr& attr = {}) {
        const std::int64_t filters = weights.dims()[0];
        const auto prop = dnnl::prop_kind::forward_training;
        const auto alg = dnnl::algorithm::convolution_direct;
        const auto d =
            bias ? dnnl::convolution_forward::desc(prop, alg, src, weights, vector_desc(filters), dst, strides(window),
                                                   dilates(window), before(window), after(window))
                 : dnnl::convolution_forward::desc(prop, alg, src, weights, dst, strides(window), dilates(window),
                                                   before(window), after(window));
        return dnnl::convolution_forward::primitive_desc(d, attr, ctx_.engine);
    }

    memory::data_type in_;
    Context& ctx_ = context();
    Cache cache_;
    // What a run left in an arena: the layout backward_data reordered dy into, in the first (a layer's
    // backward_weights, which runs next on the same dy, reads it there), and the weights forward reordered,
    // in the second (the next forward reads them there when its window says they are the same). Only where no
    // primitive ran between them (the same run count).
    struct Held {
        const void* data = nullptr;
        memory::desc user, chosen;
        std::uint64_t run = 0;
        // What run `run` left of `data` in slot `s`'s arena (nothing where the primitive read it in place).
        static Held left(const void* data, const Slot& s, std::uint64_t run) {
            return s.via_buffer ? Held{data, s.user, s.chosen, run} : Held{};
        }
        // Whether the arena holds `data` as slot `s` reads it, no primitive having run since.
        bool holds(const void* d, const Slot& s, std::uint64_t runs) const {
            return s.via_buffer && data == d && run == runs && user == s.user && chosen == s.chosen;
        }
    };
    Held held_, held_weights_;

    // The weights of slot `s` (a 16-bit pass's), rounded from float32's 16 x 16 blocks (`window.blocked_weights`)
    // into the layout its primitive chose, in the slot's arena (position `i`) by narrow_weight_blocks; null where
    // they are of another layout either side, which the slot's reorder makes.
    const void* narrowed_weights(const Slot& s, std::size_t i, const ConstView& w, const Window& window) {
        if (in_ == memory::data_type::f32 || !s.via_buffer || !window.blocked_weights || !s.blocks16) return nullptr;
        auto* out = static_cast<std::uint16_t*>(ctx_.arenas[i].get(s.chosen.get_size()));
        narrow_weight_blocks(w.dims, w.base, *s.blocks16, in_ == memory::data_type::bf16, out);
        return out;
    }
};

// x is {N, C, H, W} (or {N, C, D, H, W}) and flattens in c, h, w order, which is how oneDNN's inner product
// reads a 4-D source against 4-D weights {K, C, H, W}: so w {K, C*H*W} is described as {K, C, H, W} over the
// same memory (and alike for volumes, in 5-D).
// Every pass takes the weights (their gradient) as the caller keeps them: oneDNN's gemm kernels read them in
// place, where given its choice it reordered them on each call (CosmoFlow's fc1, 2048 x 16384: 19 ms of its
// 23 ms backward-data, now 3; ResNet-50's fc at batch 4: 4.6 ms a step over its three passes, now 1.1).
class OnednnFc final : public FcKernels {
public:
    void forward(ConstView x, ConstView w, const float* bias, View y) override {
        check(x, w, y);
        if (y.dims.elements() == 0) return;
        std::lock_guard lock(ctx_.mutex);
        Key key{fc_forward, bias != nullptr};
        append(key, x), append(key, w), append(key, y);
        Planned& p = cache_.get(key, [&] {
            auto pd = forward_pd(x.dims, weights_desc(w, x.dims), bias != nullptr);
            Planned q;
            q.primitive = dnnl::inner_product_forward(pd);
            add_slot(q, ctx_, DNNL_ARG_SRC, true, view_desc(x), pd.src_desc());
            add_slot(q, ctx_, DNNL_ARG_WEIGHTS, true, weights_desc(w, x.dims), pd.weights_desc());
            add_slot(q, ctx_, DNNL_ARG_DST, false, matrix_desc(y), pd.dst_desc());
            if (bias) q.bias_arg = DNNL_ARG_BIAS, q.bias = vector_desc(w.dims.n);
            return q;
        });
        run(ctx_, p, {x.base, w.base, y.base}, bias);
    }

    void backward_data(ConstView dy, ConstView w, View dx) override {
        check(dx, w, dy);
        if (dy.dims.elements() == 0 || w.dims.elements() == 0) return zero(dx);
        std::lock_guard lock(ctx_.mutex);
        Key key{fc_backward_data};
        append(key, dy), append(key, w), append(key, dx);
        Planned& p = cache_.get(key, [&] {
            auto hint = forward_pd(dx.dims, weights_desc(w, dx.dims), false);
            dnnl::inner_product_backward_data::desc d(any_desc(dims_of(dx.dims)), weights_desc(w, dx.dims),
                                                      any_desc({dy.dims.n, dy.dims.c}));
            dnnl::inner_product_backward_data::primitive_desc pd(d, ctx_.engine, hint);
            Planned q;
            q.primitive = dnnl::inner_product_backward_data(pd);
            add_slot(q, ctx_, DNNL_ARG_DIFF_DST, true, matrix_desc(dy), pd.diff_dst_desc());
            add_slot(q, ctx_, DNNL_ARG_WEIGHTS, true, weights_desc(w, dx.dims), pd.weights_desc());
            add_slot(q, ctx_, DNNL_ARG_DIFF_SRC, false, view_desc(dx), pd.diff_src_desc());
            return q;
        });
        run(ctx_, p, {dy.base, w.base, dx.base}, nullptr);
    }

    void backward_weights(ConstView x, ConstView dy, View dw, float* db) override {
        check(x, dw, dy);
        if (dy.dims.elements() == 0 || x.dims.elements() == 0) {
            zero(dw);
            if (db) std::fill_n(db, dw.dims.n, 0.0f);
            return;
        }
        std::lock_guard lock(ctx_.mutex);
        Key key{fc_backward_weights, db != nullptr};
        append(key, x), append(key, dy), append(key, dw);
        Planned& p = cache_.get(key, [&] {
            const bool bias = db != nullptr;
            const auto src = any_desc(dims_of(x.dims)), weights = weights_desc(dw, x.dims),
                       dst = any_desc({dy.dims.n, dy.dims.c});
            auto hint = forward_pd(x.dims, weights, bias);
            const auto d = bias ? dnnl::inner_product_backward_weights::desc(src, weights, vector_desc(dw.dims.n), dst)
                                : dnnl::inner_product_backward_weights::desc(src, weights, dst);
            dnnl::inner_product_backward_weights::primitive_desc pd(d, ctx_.engine, hint);
            Planned q;
            q.primitive = dnnl::inner_product_backward_weights(pd);
            add_slot(q, ctx_, DNNL_ARG_SRC, true, view_desc(x), pd.src_desc());
            add_slot(q, ctx_, DNNL_ARG_DIFF_DST, true, matrix_desc(dy), pd.diff_dst_desc());
            add_slot(q, ctx_, DNNL_ARG_DIFF_WEIGHTS, false, weights_desc(dw, x.dims), pd.diff_weights_desc());
            if (bias) q.bias_arg = DNNL_ARG_DIFF_BIAS, q.bias = vector_desc(dw.dims.n);
            return q;
        });
        run(ctx_, p, {x.base, dy.base, dw.base}, db);
    }

private:
    static void check(const ConstView& x, const ConstView& w, const ConstView& y) { check_fc(x.dims, w.dims, y.dims); }

    static memory::dims fc_weights(std::int64_t k, const Dims& x) {
        memory::dims d = dims_of(x);
        d[0] = k;
        return d;
    }

    // w {K, I}: input i = (c, h, w) of row k is at k * stride_n + i * stride_c.
    static memory::desc weights_desc(const ConstView& w, const Dims& x) {
        const memory::dims d = fc_weights(w.dims.n, x);
        memory::dims strides(d.size());
        strides[0] = w.stride_n;
        std::int64_t s = w.stride_c;
        for (std::size_t i = d.size(); i-- > 1;) {
            strides[i] = s;
            s *= d[i];
        }
        return memory::desc(d, memory::data_type::f32, strides);
    }

    // y {N, K, 1, 1} as the [N, K] matrix the inner product writes.
    static memory::desc matrix_desc(const ConstView& y) {
        return memory::desc({y.dims.n, y.dims.c}, memory::data_type::f32, memory::dims{y.stride_n, y.stride_c});
    }

    dnnl::inner_product_forward::primitive_desc forward_pd(const Dims& x, const memory::desc& weights, bool bias) {
        const std::int64_t k = weights.dims()[0];
        const auto src = any_desc(dims_of(x)), dst = any_desc({x.n, k});
        const auto prop = dnnl::prop_kind::forward_training;
        const auto d = bias ? dnnl::inner_product_forward::desc(prop, src, weights, vector_desc(k), dst)
                            : dnnl::inner_product_forward::desc(prop, src, weights, dst);
        return dnnl::inner_product_forward::primitive_desc(d, ctx_.engine);
    }

    Context& ctx_ = context();
    Cache cache_;
};

}  // namespace

ConvKernels& onednn_conv() {
    static OnednnConv kernels(memory::data_type::f32);
    return kernels;
}

namespace {

// Whether the CPU has ISA `isa`: the ISAs are masks of their instruction sets, and it has all of isa's bits.
bool cpu_has(dnnl::cpu_isa isa) {
    const auto want = static_cast<unsigned>(isa);
    return (static_cast<unsigned>(dnnl::get_effective_cpu_isa()) & want) == want;
}

}  // namespace

bool onednn_blocks16() {
    static const bool has = cpu_has(dnnl::cpu_isa::avx512_core);
    return has;
}

ConvKernels* onednn_conv_bfloat16() {
    static const bool has = cpu_has(dnnl::cpu_isa::avx512_core_bf16);
    static OnednnConv kernels(memory::data_type::bf16);
    return has ? &kernels : nullptr;
}

FcKernels& onednn_fc() {
    static OnednnFc kernels;
    return kernels;
}

}  // namespace dsl::backend
