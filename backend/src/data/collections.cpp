// A collection of data files read as one array (array.hpp): a glob, a folder or a list of files, each holding
// one sample or a block of them, numbered across the files in order. Every file is opened once, before the
// first step, to check it and count its samples, and closed; a read opens the file it needs again, and a few
// stay open (a bounded cache), so that a collection of hundreds of thousands of files holds neither their
// descriptors nor their mappings.
#include "array.hpp"
#include "file_guard.hpp"

#include <dsl/backend/data.hpp>
#include <dsl/backend/npy.hpp>

#include <fmt/format.h>

#include <glob.h>
#include <sys/stat.h>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <list>

namespace dsl::backend::data {

namespace {

namespace fs = std::filesystem;

// The path part of a spec and its data set (":/path", HDF5), split as hdf5_dataset_name does, with a folder's
// or a list's data set too ("boxes:/full", "@list.txt:/full").
std::pair<std::string, std::string> split_dataset(const std::string& spec) {
    const std::size_t at = spec.find(":/");
    if (at == std::string::npos) return {spec, ""};
    return {spec.substr(0, at), spec.substr(at + 1)};
}

bool has_glob(const std::string& path) { return path.find_first_of("*?[") != std::string::npos; }

}  // namespace

bool is_collection(const std::string& spec) {
    const std::string path = split_dataset(spec).first;
    std::error_code ec;
    return (!path.empty() && path[0] == '@') || has_glob(path) || fs::is_directory(path, ec);
}

std::vector<std::string> collection_files(const std::string& spec, std::string& error) {
    const auto [path, dataset] = split_dataset(spec);
    std::vector<std::string> out;
    const auto with_dataset = [&](const std::string& file) { return dataset.empty() ? file : file + ":" + dataset; };
    std::error_code ec;
    if (path[0] == '@') {
        // One path a line, in the list's order; relative ones from the list's folder.
        const fs::path list = path.substr(1);
        std::ifstream in(list);
        if (!in) {
            error = fmt::format("{}: cannot read the list of files", list.string());
            return {};
        }
        for (std::string line; std::getline(in, line);) {
            if (!line.empty() && line.back() == '\r') line.pop_back();
            if (line.empty() || line[0] == '#') continue;
            const fs::path file = fs::path(line).is_absolute() ? fs::path(line) : list.parent_path() / line;
            out.push_back(with_dataset(file.lexically_normal().string()));
        }
    } else if (has_glob(path)) {
        glob_t found{};
        const int status = ::glob(path.c_str(), 0, nullptr, &found);
        for (std::size_t i = 0; status == 0 && i < found.gl_pathc; ++i)
            if (fs::is_regular_file(found.gl_pathv[i], ec)) out.push_back(with_dataset(found.gl_pathv[i]));
        ::globfree(&found);
        std::sort(out.begin(), out.end());
    } else {
        for (const fs::directory_entry& e : fs::directory_iterator(path, ec))
            if (e.is_regular_file(ec)) out.push_back(with_dataset(e.path().string()));
        std::sort(out.begin(), out.end());
    }
    if (out.empty() && error.empty())
        error = fmt::format("{}: names no file{}", spec,
                            path[0] == '@' ? " (the list is empty)"
                            : has_glob(path) ? " (no file matches the pattern)"
                                             : " (the folder holds no file)");
    return out;
}

namespace {

class Collection final : public Array {
public:
    struct Member {
        std::string spec;
        std::int64_t first = 0, samples = 0;
        bool one_sample = false;
        struct stat checked {};  // the file's status when the run checked it, before the first step
    };

    Collection(std::vector<Member> members, std::vector<std::int64_t> shape, std::string type, bool integer)
        : members_(std::move(members)), shape_(std::move(shape)), type_(std::move(type)), integer_(integer) {}

    const std::vector<std::int64_t>& shape() const override { return shape_; }
    std::string type_name() const override { return type_; }
    bool integer() const override { return integer_; }
    bool number() const override { return true; }

    void read(std::int64_t s, const Index& at, View out) override {
        const auto [m, open] = member(s);
        open.guard.read([&] { open.array->read(s - m.first, at, out); });
    }
    void read(std::int64_t s, const Index& at, BasicView<std::int32_t> out) override {
        const auto [m, open] = member(s);
        open.guard.read([&] { open.array->read(s - m.first, at, out); });
    }
    void read_dense(std::int64_t s, std::int64_t first, const Index& at, View out) override {
        const auto [m, open] = member(s);
        open.guard.read([&] { open.array->read_dense(s - m.first, first, at, out); });
    }
    std::string out_of_range(std::int64_t classes) override {
        for (const Member& m : members_) {
            const std::string bad = opened(m).array->out_of_range(classes);
            if (!bad.empty()) return fmt::format("{} (the collection's sample {} on): {}", m.spec, m.first, bad);
        }
        return {};
    }
    // A collection's attributes are its first file's.
    bool attribute(const std::string& name, std::vector<double>& out, std::string& error) override {
        return opened(members_.front()).array->attribute(name, out, error);
    }
    std::vector<std::pair<std::string, std::int64_t>> files() const override {
        std::vector<std::pair<std::string, std::int64_t>> out;
        for (const Member& m : members_) out.emplace_back(m.spec, m.samples);
        return out;
    }

private:
    struct Open {
        const Member* member;
        std::unique_ptr<Array> array;
        FileGuard guard;
    };
    static constexpr std::size_t kept_open = 16;

    // The member that holds sample s, opened.
    std::pair<const Member&, Open&> member(std::int64_t s) {
        const auto it = std::upper_bound(members_.begin(), members_.end(), s,
                                         [](std::int64_t v, const Member& m) { return v < m.first; });
        const Member& m = *(it - 1);
        return {m, opened(m)};
    }

    // A member's array, from the cache (the most recently used first), or opened again.
    Open& opened(const Member& m) {
        for (auto it = open_.begin(); it != open_.end(); ++it)
            if (it->member == &m) {
                open_.splice(open_.begin(), open_, it);
                return open_.front();
            }
        std::string error;
        auto array = open_array(m.spec, error, m.one_sample);
        if (!array) throw UserError(error + " (it could be read before the first step)");
        open_.push_front(Open{&m, std::move(array), FileGuard(data_file_name(m.spec), m.checked)});
        if (open_.size() > kept_open) open_.pop_back();
        return open_.front();
    }

    std::vector<Member> members_;
    std::vector<std::int64_t> shape_;
    std::string type_;
    bool integer_;
    std::list<Open> open_;
};

}  // namespace

std::unique_ptr<Array> open_collection(const std::string& spec, const std::vector<std::string>& files,
                                       std::size_t sample_rank, std::string& error) {
    std::vector<Collection::Member> members;
    std::vector<std::int64_t> sample;  // the first file's sample shape
    std::string type;
    bool integer = false;
    std::int64_t total = 0;
    for (const std::string& file : files) {
        auto a = open_array(file, error);
        if (!a) return nullptr;
        const std::vector<std::int64_t> shape = a->shape();
        const bool one = shape.size() == sample_rank;
        if (!one && shape.size() != sample_rank + 1) {
            error = fmt::format("{}: holds {}: a file of {} holds one sample or a block [S, ...] of them, of {} "
                                "dimensions each",
                                file, shape_str(shape), spec, sample_rank);
            return nullptr;
        }
        const std::vector<std::int64_t> dims(shape.begin() + (one ? 0 : 1), shape.end());
        if (!a->number()) {
            error = fmt::format("{}: holds {} values, which do not convert to numbers", file, a->type_name());
            return nullptr;
        }
        if (members.empty()) {
            sample = dims, type = a->type_name(), integer = a->integer();
        } else if (dims != sample || a->integer() != integer) {
            error = fmt::format("{}: holds samples of {} ({}), but {} holds samples of {} ({}): the files of {} "
                                "hold samples of one shape and kind",
                                file, shape_str(dims), a->type_name(), members.front().spec, shape_str(sample), type,
                                spec);
            return nullptr;
        }
        const std::int64_t samples = one ? 1 : shape[0];
        members.push_back({file, total, samples, one, {}});
        ::stat(data_file_name(file).c_str(), &members.back().checked);
        total += samples;
    }
    std::vector<std::int64_t> shape{total};
    shape.insert(shape.end(), sample.begin(), sample.end());
    return std::make_unique<Collection>(std::move(members), std::move(shape), type, integer);
}

}  // namespace dsl::backend::data
