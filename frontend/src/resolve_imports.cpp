// Import resolution: reads and parses every file a `.net` file imports, transitively, each once.
#include <dsl/frontend/parse.hpp>
#include <dsl/frontend/passes.hpp>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <system_error>

namespace dsl::frontend {

namespace fs = std::filesystem;

std::vector<std::string> stdlib_dirs() {
    std::vector<std::string> dirs;
    // $DSL_STDLIB may list several folders, separated by ':' as in PATH.
    if (const char* env = std::getenv("DSL_STDLIB"); env && *env) {
        std::string list = env;
        std::size_t begin = 0;
        while (begin <= list.size()) {
            std::size_t end = list.find(':', begin);
            if (end == std::string::npos) end = list.size();
            if (end > begin) dirs.push_back(list.substr(begin, end - begin));
            begin = end + 1;
        }
    }
#ifdef DSL_STDLIB_DIR
    dirs.emplace_back(DSL_STDLIB_DIR);
#endif
    return dirs;
}

namespace {

// The same file reached by two spellings must count once, and a cycle must be seen as one.
std::string identity(const std::string& path) {
    std::error_code ec;
    fs::path p = fs::weakly_canonical(fs::path(path), ec);
    return ec ? fs::absolute(fs::path(path), ec).lexically_normal().string() : p.string();
}

// A folder as messages show it: relative to the working directory when inside it, so that messages
// (and the golden files that hold them) do not depend on where the repository lies.
std::string shown(const fs::path& p) {
    std::error_code ec;
    const fs::path cwd = fs::current_path(ec);
    if (ec || !p.is_absolute()) return p.string();
    const fs::path rel = p.lexically_proximate(cwd);
    if (rel.empty() || *rel.begin() == "..") return p.string();
    return rel.string();
}

bool is_file(const fs::path& p) {
    std::error_code ec;
    return fs::is_regular_file(p, ec);
}

class Resolver {
public:
    Resolver(SourceManager& sources, Diagnostics& diags) : sources_(sources), diags_(diags) {}

    std::vector<NetFile> run(const NetFile& main) {
        const std::string path = main.source ? main.source->path : std::string("<input>");
        state_[identity(path)] = State::open;
        stack_.push_back(path);
        visit(main);
        return std::move(files_);
    }

private:
    enum class State { open, done };

    SourceManager& sources_;
    Diagnostics& diags_;
    std::map<std::string, State> state_;
    std::vector<std::string> stack_;  // the chain of files being read, for cycle messages
    std::vector<NetFile> files_;

    // Depth-first: a file's own imports become visible before it. The depth is bounded by the number of
    // distinct files, since a file already open is a cycle and a finished one is skipped.
    void visit(const NetFile& file) {
        const fs::path dir = file.source ? fs::path(file.source->path).parent_path() : fs::path();
        for (const Import& imp : file.imports) {
            std::vector<fs::path> tried;
            fs::path found;
            if (fs::path(imp.path).is_absolute()) {
                tried.push_back(imp.path);
            } else {
                tried.push_back(dir.empty() ? fs::path(".") : dir);
                for (const std::string& s : stdlib_dirs()) tried.emplace_back(s);
            }
            for (const fs::path& where : tried) {
                const fs::path candidate = fs::path(imp.path).is_absolute() ? where : where / imp.path;
                if (is_file(candidate)) {
                    found = candidate;
                    break;
                }
            }
            if (found.empty()) {
                Diagnostic& d = diags_.error(imp.loc, "cannot find imported file '" + imp.path + "'");
                std::string where;
                for (const fs::path& t : tried) where += (where.empty() ? "'" : ", '") + shown(t) + "'";
                Diagnostics::note(d, imp.loc, "looked in " + where);
                continue;
            }
            const std::string key = identity(found.string());
            if (auto it = state_.find(key); it != state_.end()) {
                if (it->second == State::open) {
                    std::string chain;
                    for (const std::string& s : stack_) chain += "'" + s + "' -> ";
                    diags_.error(imp.loc, "import cycle: " + chain + "'" + found.string() + "'");
                }
                continue;
            }
            const SourceFile* src = sources_.load(found.string());
            if (!src) {
                diags_.error(imp.loc, "cannot read '" + found.string() + "': " + sources_.last_error());
                continue;
            }
            state_[key] = State::open;
            auto parsed = parse_net(*src, diags_);
            if (parsed) {
                stack_.push_back(found.string());
                visit(*parsed);
                stack_.pop_back();
                files_.push_back(std::move(*parsed));
            }
            state_[key] = State::done;
        }
    }
};

}  // namespace

std::vector<NetFile> resolve_imports(const NetFile& main, SourceManager& sources, Diagnostics& diags) {
    return Resolver(sources, diags).run(main);
}

}  // namespace dsl::frontend
