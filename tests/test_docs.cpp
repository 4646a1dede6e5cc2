// The examples in README.md and docs/*.md are checked as the files they show. A fenced block tagged `net`,
// `sched` or `platform` is a whole file of that kind: a `.net` is checked by `dsl check`, a `.sched` by
// `dsl check` with the `net` block closest above it in the same document, a `.platform` by `dsl print`. A
// fragment is tagged otherwise (`text`, `sh`, ...), and a block with no tag is an error, so that no new
// example goes unchecked for want of one.
#include "run_dsl.hpp"

#include <dsl/frontend/layer_kinds.hpp>

#include <fmt/format.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
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

namespace {

// The `name` of every "`name`" in `text`, in order.
std::vector<std::string> quoted(const std::string& text) {
    std::vector<std::string> out;
    for (std::size_t a = text.find('`'); a != std::string::npos; a = text.find('`', a + 1)) {
        const std::size_t b = text.find('`', a + 1);
        if (b == std::string::npos) break;
        out.push_back(text.substr(a + 1, b - a - 1));
        a = b;
    }
    return out;
}

// A row of a markdown table, split into its cells.
std::vector<std::string> cells(const std::string& line) {
    std::vector<std::string> out;
    std::istringstream in(line);
    std::string cell;
    std::getline(in, cell, '|');  // before the first bar
    while (std::getline(in, cell, '|')) out.push_back(cell);
    return out;
}

}  // namespace

TEST_CASE("the docs' layer kinds are the table's: every kind, its parameters and their defaults", "[docs]") {
    using namespace dsl::frontend;
    // docs/language.md: "| `maxpool`, `avgpool` | `kernel`, `stride=kernel`, `pad=0` | ..." under "### Layer kinds".
    const std::string doc = read(fs::path(source_dir()) / "docs" / "language.md");
    const std::size_t start = doc.find("### Layer kinds");
    REQUIRE(start != std::string::npos);
    std::istringstream in(doc.substr(start));
    std::map<std::string, std::vector<std::string>> documented;  // kind -> its parameters as documented
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line) && (line.empty() || line[0] == '|')) {
        const auto row = cells(line);
        if (row.size() < 2 || line.find("---") != std::string::npos || row[0].find("kind") != std::string::npos)
            continue;
        for (const std::string& kind : quoted(row[0])) documented[kind] = quoted(row[1]);
    }
    for (const LayerKind& k : layer_kinds()) {
        if (k.data()) continue;
        INFO("layer kind '" << k.name << "'");
        auto it = documented.find(k.name);
        if (it == documented.end()) {
            FAIL_CHECK("missing from the layer kinds of docs/language.md");
            continue;
        }
        std::vector<std::string> want;
        for (const ParamSpec& p : k.params) {
            if (p.required) {
                want.emplace_back(p.name);
            } else if (*p.default_of) {
                want.push_back(std::string(p.name) + "=" + p.default_of);
            } else {
                // The default as the docs write it: the number, or true and false.
                std::string value = fmt::format("{}", p.default_value);
                if (p.type == ParamType::boolean) value = p.default_value != 0 ? "true" : "false";
                if (p.type == ParamType::choice) value = p.choices.at(static_cast<std::size_t>(p.default_value));
                if (value.find("e-0") != std::string::npos) value.erase(value.find("e-0") + 2, 1);  // 1e-05: 1e-5
                want.push_back(std::string(p.name) + "=" + value);
            }
        }
        CHECK(it->second == want);
        documented.erase(it);
    }
    for (const auto& [kind, params] : documented)
        FAIL_CHECK("docs/language.md documents layer kind '" << kind << "', which is no kind");

    // README.md lists the kinds by name.
    const std::string readme = read(fs::path(source_dir()) / "README.md");
    const std::size_t list = readme.find("Layer kinds: ");
    REQUIRE(list != std::string::npos);
    const std::string sentence = readme.substr(list, readme.find('.', list) - list);
    CHECK(quoted(sentence) == layer_kind_names());
}
