// Reading ahead of the step (`dsl run --prefetch K`, data.hpp's read_ahead): a thread that reads the blocks of
// the next mini-batches through the data source while the step computes, and the source over it that hands
// them to the step, or waits for them where they are late.
#include <dsl/backend/data.hpp>
#include <dsl/backend/watchdog.hpp>

#include "file_guard.hpp"

#include <dsl/base/error.hpp>

#include <hdf5.h>

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <new>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

namespace dsl::backend {

using frontend::Layer;

namespace {

// What a block's read gives: an input's values, a class label's classes, or a float label's targets.
enum class Read { inputs, labels, targets };

// A block that a step reads: its layer (a copy: the reader may outlive the trainer's network), what it reads,
// its first sample counted from the step's first, its place and its sizes.
struct Block {
    Layer layer;
    Read read = Read::inputs;
    std::int64_t offset = 0;
    Index at;
    Dims dims;
    bool is(const Layer& l, std::int64_t o, const Index& a, const Dims& d) const {
        return layer.name == l.name && offset == o && at == a && dims == d;
    }
    // Floats and int32s alike: 4 bytes an element.
    std::size_t bytes() const { return static_cast<std::size_t>(std::max<std::int64_t>(1, dims.elements())) * 4; }
};

// A host buffer, page-locked where ReadAhead::allocate gave it.
struct Buffer {
    void* data = nullptr;
    std::size_t bytes = 0;
    bool pinned = false;
};

// A block of a step read ahead: done once the read has ended, with its error if it failed.
struct Item {
    Buffer buffer;
    bool done = false;
    std::exception_ptr error;
};

// `from`, dense, into the rows of `to`: a read's values where the step wants them.
template <typename T>
void copy(const T* from, BasicView<T> to) {
    const std::int64_t length = row_length(to.dims);
    for_each_row(to, [&](std::int64_t, std::int64_t, const Index&, T* row) {
        std::copy_n(from, length, row);
        from += length;
    });
}

class ReadAheadSource final : public DataSource {
public:
    ReadAheadSource(std::unique_ptr<DataSource> source, const ReadAhead& options)
        : source_(std::move(source)), options_(options) {
        reader_ = std::thread([this] { read_ahead(); });
    }
    ~ReadAheadSource() override {
        {
            const std::lock_guard lock(mutex_);
            stop_ = true;
        }
        changed_.notify_all();
        reader_.join();
        for (auto& [step, items] : steps_)
            for (Item& i : items) free_.push_back(i.buffer);
        for (const Buffer& b : free_) release(b);
    }
    ReadAheadSource(const ReadAheadSource&) = delete;
    ReadAheadSource& operator=(const ReadAheadSource&) = delete;

    void inputs(const Layer& input, std::int64_t first, const Index& at, View tile) override {
        if (const void* r = ready(input, first, at, tile.dims)) return copy(static_cast<const float*>(r), tile);
        asked(input, Read::inputs, first, at, tile.dims, [&] { source_->inputs(input, first, at, tile); });
    }
    void labels(const Layer& label, std::int64_t first, const Index& at, BasicView<std::int32_t> tile) override {
        if (const void* r = ready(label, first, at, tile.dims)) return copy(static_cast<const std::int32_t*>(r), tile);
        asked(label, Read::labels, first, at, tile.dims, [&] { source_->labels(label, first, at, tile); });
    }
    void targets(const Layer& label, std::int64_t first, const Index& at, View tile) override {
        if (const void* r = ready(label, first, at, tile.dims)) return copy(static_cast<const float*>(r), tile);
        asked(label, Read::targets, first, at, tile.dims, [&] { source_->targets(label, first, at, tile); });
    }
    const SyntheticData* synthetic(const Layer& layer) const override { return source_->synthetic(layer); }
    std::int64_t samples() const override { return source_->samples(); }
    bool reads_ahead() const override { return true; }

    const void* ready(const Layer& layer, std::int64_t first, const Index& at, const Dims& dims) override {
        if (first < 0) return nullptr;
        const std::int64_t step = first / options_.batch;
        std::unique_lock lock(mutex_);
        advance(step);
        // A step gone by (its blocks released) or outside the run's is read when asked for.
        if (!learnt_ || step <= learning_ || step < current_ || step >= options_.end_step) return nullptr;
        const std::optional<std::size_t> b = find(layer, first - step * options_.batch, at, dims);
        if (!b) return nullptr;
        // The reader makes every step's blocks in order, and stops at the first that fails.
        const auto item = [&]() -> Item* {
            const auto it = steps_.find(step);
            return it == steps_.end() ? nullptr : &it->second[*b];
        };
        changed_.wait(lock, [&] { return (item() && item()->done) || failed_ || stop_; });
        const Item* i = item();
        if (!i || !i->done) return nullptr;  // after a failure: read when asked for, as without reading ahead
        if (i->error) std::rethrow_exception(i->error);
        return i->buffer.data;
    }

private:
    // The step of `step`'s blocks begins (a no-op for one that has): the pattern is what the first step read,
    // and the blocks of the steps before are done with.
    void advance(std::int64_t step) {
        if (step <= current_) return;
        current_ = step;
        if (learning_ < 0) {
            learning_ = step;
            return;
        }
        if (!learnt_) learnt_ = true, next_ = step;
        release_before(current_);
        changed_.notify_all();
    }

    // The buffers of the steps before `step` back to the pool, but the one the reader fills now.
    void release_before(std::int64_t step) {
        for (auto it = steps_.begin(); it != steps_.end() && it->first < step;) {
            if (it->first == reading_) {
                ++it;
                continue;
            }
            for (Item& i : it->second) free_.push_back(i.buffer);
            it = steps_.erase(it);
        }
    }

    std::optional<std::size_t> find(const Layer& layer, std::int64_t offset, const Index& at, const Dims& dims) const {
        for (std::size_t i = 0; i < pattern_.size(); ++i)
            if (pattern_[i].is(layer, offset, at, dims)) return i;
        return std::nullopt;
    }

    // A block read when asked for; the first step's make the pattern.
    template <typename F>
    void asked(const Layer& layer, Read read, std::int64_t first, const Index& at, const Dims& dims, F&& make) {
        {
            const std::lock_guard lock(mutex_);
            const std::int64_t step = first / options_.batch, offset = first - step * options_.batch;
            advance(step);
            if (!learnt_ && step == learning_ && !find(layer, offset, at, dims))
                pattern_.push_back(Block{layer, read, offset, at, dims});
        }
        // Behind the reader's read, if it makes one now: a read that never returns is named by the watchdog.
        std::unique_lock source(source_mutex_, std::try_to_lock);
        if (!source.owns_lock()) {
            const Awaiting waiting("a read of the data, made ahead of the step (--prefetch)", -1);
            source.lock();
        }
        make();
    }

    // The reader thread: step after step within `depth` of the step's own, every block of the pattern in
    // order, until one fails.
    void read_ahead() {
        data::reading_ahead = true;  // the watchdog hears of the step's waits for it, not of its reads
        {
            const std::lock_guard source(source_mutex_);
            H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // this thread's error stack, where HDF5 has one a thread
        }
        std::unique_lock lock(mutex_);
        for (;;) {
            changed_.wait(lock, [&] {
                return stop_ ||
                       (learnt_ && !failed_ && next_ < options_.end_step && next_ <= current_ + options_.depth);
            });
            if (stop_) return;
            next_ = std::max(next_, current_);
            const std::int64_t step = next_++;
            reading_ = step;
            std::vector<Item>& items = steps_[step];  // a map's elements stay where they are
            items.resize(pattern_.size());
            for (std::size_t i = 0; i < items.size(); ++i) items[i].buffer = acquire(pattern_[i].bytes());
            for (std::size_t i = 0; i < items.size() && !stop_; ++i) {
                const Block& b = pattern_[i];
                void* into = items[i].buffer.data;
                lock.unlock();
                std::exception_ptr error;
                try {
                    const std::lock_guard source(source_mutex_);
                    read(b, step * options_.batch + b.offset, into);
                } catch (...) {
                    error = std::current_exception();
                }
                lock.lock();
                items[i].error = error;
                items[i].done = true;
                failed_ = failed_ || error;
                changed_.notify_all();
                if (error) break;
            }
            reading_ = -1;
            release_before(current_);  // a step that the step went past while it was read
            if (failed_) changed_.notify_all();
        }
    }

    void read(const Block& b, std::int64_t first, void* into) {
        switch (b.read) {
            case Read::inputs:
                return source_->inputs(b.layer, first, b.at, dense_view(static_cast<float*>(into), b.dims));
            case Read::labels:
                return source_->labels(b.layer, first, b.at, dense_view(static_cast<std::int32_t*>(into), b.dims));
            case Read::targets:
                return source_->targets(b.layer, first, b.at, dense_view(static_cast<float*>(into), b.dims));
        }
    }

    // A buffer of `bytes` from the pool (the steps' blocks repeat), else a new one.
    Buffer acquire(std::size_t bytes) {
        const auto it = std::find_if(free_.begin(), free_.end(), [&](const Buffer& b) { return b.bytes == bytes; });
        if (it != free_.end()) {
            const Buffer b = *it;
            free_.erase(it);
            return b;
        }
        Buffer b{nullptr, bytes, false};
        if (options_.allocate) b.data = options_.allocate(bytes), b.pinned = b.data != nullptr;
        if (!b.data) b.data = ::operator new(bytes);
        return b;
    }
    void release(const Buffer& b) const {
        if (b.pinned)
            options_.release(b.data);
        else
            ::operator delete(b.data);
    }

    std::unique_ptr<DataSource> source_;
    const ReadAhead options_;
    std::mutex source_mutex_;  // a call into the source, by one thread at a time
    // The rest, under `mutex_`: `current_` is the latest step asked for, `learning_` the first (whose blocks
    // are the pattern, complete once `learnt_`), `next_` the step the reader reads next, `reading_` the one
    // it reads now (-1: none), `steps_` the blocks read ahead by step, in the pattern's order.
    std::mutex mutex_;
    std::condition_variable changed_;
    std::int64_t current_ = -1, learning_ = -1, next_ = 0, reading_ = -1;
    bool learnt_ = false, failed_ = false, stop_ = false;
    std::vector<Block> pattern_;
    std::map<std::int64_t, std::vector<Item>> steps_;
    std::vector<Buffer> free_;
    std::thread reader_;
};

}  // namespace

std::unique_ptr<DataSource> read_ahead(std::unique_ptr<DataSource> source, const ReadAhead& options) {
    DSL_INTERNAL_CHECK(options.depth > 0 && options.batch > 0, "read_ahead: depth and batch must be positive");
    return std::make_unique<ReadAheadSource>(std::move(source), options);
}

}  // namespace dsl::backend
