// An array stored channels-last, read channels-first (array.hpp). MLPerf HPC's CosmoFlow stores each sample
// as [128, 128, 128, 4]; the trainer's tiles are [C, D, H, W]. A read takes the tile's block of every channel
// as the file lays it out, [D, H, W, C] (the stored array seen as [S, D, (H, W, C)], so that the block is one
// read of the first axis's range and the rest's), and transposes it into the tile.
#include "array.hpp"

#include <dsl/base/error.hpp>

#include <fmt/format.h>

namespace dsl::backend::data {

namespace {

class ChannelsLast final : public Array {
public:
    explicit ChannelsLast(std::unique_ptr<Array> stored) : stored_(std::move(stored)) {
        const auto& s = stored_->shape();
        DSL_INTERNAL_CHECK(s.size() >= 3, "a channels-last array has a sample axis, places and channels");
        shape_ = {s.front(), s.back()};
        shape_.insert(shape_.end(), s.begin() + 1, s.end() - 1);
    }

    const std::vector<std::int64_t>& shape() const override { return shape_; }
    std::string type_name() const override { return stored_->type_name(); }
    bool integer() const override { return stored_->integer(); }
    bool number() const override { return stored_->number(); }

    void read(std::int64_t s, const Index& at, View out) override {
        const Dims d = out.dims;
        DSL_INTERNAL_CHECK(d.n == 1 && d.rank() >= 1 && d.c == shape_[1], "a channels-last read of every channel");
        // The block as stored: [first place axis] by (the other place axes..., C), from `at` and channel 0.
        Index rest = Index::filled(d.rank(), 0), extents = Index::filled(d.rank(), 0);
        for (int k = 1; k < d.rank(); ++k) rest[k - 1] = at[k], extents[k - 1] = d.space[k];
        extents[d.rank() - 1] = d.c;
        const Dims stored{1, d.space[0], extents};
        block_.resize(static_cast<std::size_t>(stored.elements()));
        stored_->read_dense(s, at[0], rest, dense_view(block_.data(), stored));
        // Each row of the tile (channel c, outer places, the last axis's run) gathers every C-th value.
        const std::int64_t channels = d.c, run = d.space[d.rank() - 1];
        for_each_row(out, [&](std::int64_t, std::int64_t c, const Index& place, float* row) {
            std::int64_t offset = 0;
            for (int k = 0; k < d.rank(); ++k) offset = offset * d.space[k] + place[k];
            const float* from = block_.data() + offset * channels + c;
            for (std::int64_t x = 0; x < run; ++x) row[x] = from[x * channels];
        });
    }
    void read(std::int64_t, const Index&, BasicView<std::int32_t>) override {
        DSL_INTERNAL_CHECK(false, "class labels are never channels-last (--layout names inputs)");
    }
    std::string out_of_range(std::int64_t classes) override { return stored_->out_of_range(classes); }
    bool attribute(const std::string& name, std::vector<double>& out, std::string& error) override {
        return stored_->attribute(name, out, error);
    }
    void read_dense(std::int64_t, std::int64_t, const Index&, View) override {
        DSL_INTERNAL_CHECK(false, "a channels-last array read densely as stored twice");
    }
    std::vector<std::pair<std::string, std::int64_t>> files() const override { return stored_->files(); }

private:
    std::unique_ptr<Array> stored_;
    std::vector<std::int64_t> shape_;
    std::vector<float> block_;
};

}  // namespace

std::unique_ptr<Array> channels_last(std::unique_ptr<Array> stored) {
    return std::make_unique<ChannelsLast>(std::move(stored));
}

}  // namespace dsl::backend::data
