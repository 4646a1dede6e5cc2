// The examples in README.md and docs/*.md are checked as the files they show. A fenced block tagged `net`,
// `sched` or `platform` is a whole file of that kind: a `.net` is checked by `dsl check`, a `.sched` by
// `dsl check` with the `net` block closest above it in the same document, a `.platform` by `dsl print`. A
// fragment is tagged otherwise (`text`, `sh`, ...), and a block with no tag is an error, so that no new
// example goes unchecked for want of one.
#include "run_dsl.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

namespace {

struct Block {
    std::string tag;  // the fence's info string, first word
    std::size_t line = 0;
    std::string text;
};

std::vector<Block> fenced_blocks(const std::string& markdown) {
    std::vector<Block> out;
    std::istringstream in(markdown);
    std::string line;
    std::size_t number = 0;
    std::optional<Block> open;
    while (std::getline(in, line)) {
        ++number;
        const auto start = line.find_first_not_of(' ');
        const bool fence = start != std::string::npos && start < 4 && line.compare(start, 3, "```") == 0;
        if (open) {
            if (fence && line.find_first_not_of("` ", start) == std::string::npos) {
                out.push_back(std::move(*open));
                open.reset();
            } else {
                open->text += line + "\n";
            }
        } else if (fence) {
            std::istringstream info(line.substr(start + 3));
            Block b;
            info >> b.tag;
            b.line = number;
            open = std::move(b);
        }
    }
    return out;
}

std::vector<fs::path> documents() {
    const fs::path root = source_dir();
    std::vector<fs::path> out{root / "README.md"};
    for (const auto& e : fs::directory_iterator(root / "docs"))
        if (e.path().extension() == ".md") out.push_back(e.path());
    std::sort(out.begin() + 1, out.end());
    return out;
}

}  // namespace

TEST_CASE("every whole-file example in the README and docs is checked", "[cli][docs]") {
    const fs::path dir = fs::temp_directory_path() / ("dsl_docs_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    std::size_t checked = 0;
    for (const fs::path& doc : documents()) {
        const std::string name = fs::relative(doc, source_dir()).string();
        std::string net;  // the last `net` example of this document, as a file
        for (const Block& b : fenced_blocks(read(doc))) {
            const std::string where = name + ":" + std::to_string(b.line);
            INFO(where << "\n" << b.text);
            if (b.tag.empty()) {
                FAIL_CHECK(where << ": a fenced block without a tag: tag a whole file `net`, `sched` or `platform` "
                                    "(it is then checked), anything else `text` or its language");
                continue;
            }
            if (b.tag != "net" && b.tag != "sched" && b.tag != "platform") continue;
            std::string stem = name + "_" + std::to_string(b.line);
            std::replace(stem.begin(), stem.end(), '/', '_');
            const fs::path file = dir / (stem + "." + b.tag);
            std::ofstream(file) << b.text;
            std::string args;
            if (b.tag == "net") {
                net = file.string();
                args = "check '" + net + "'";
            } else if (b.tag == "sched") {
                if (net.empty()) {
                    FAIL_CHECK(where << ": a `sched` example with no `net` example above it to check it against");
                    continue;
                }
                args = "check '" + net + "' '" + file.string() + "'";
            } else {
                args = "print '" + file.string() + "'";
            }
            const Result r = run_dsl(args);
            INFO("dsl " << args << "\n" << r.err);
            CHECK(r.exit_code == 0);
            CHECK(r.err.empty());  // not even a warning
            ++checked;
        }
    }
    fs::remove_all(dir);
    // README: a network and its schedule; docs/language.md: one of each kind.
    CHECK(checked >= 5);
}
