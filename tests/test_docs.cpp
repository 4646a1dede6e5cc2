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
#include <set>
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

namespace {

// The words of `text` that start with a dash: the flags of "-o, --output FILE".
std::vector<std::string> flag_words(const std::string& text) {
    std::vector<std::string> out;
    std::string word;
    std::istringstream in(text);
    while (in >> word) {
        while (!word.empty() && word.back() == ',') word.pop_back();
        if (word.size() > 1 && word[0] == '-') out.push_back(word);
    }
    return out;
}

// The lines of `text` from the one after `header` to the first empty one.
std::vector<std::string> paragraph_after(const std::string& text, const std::string& header) {
    std::vector<std::string> out;
    const std::size_t at = text.find("\n" + header + "\n");
    if (at == std::string::npos) return out;
    std::istringstream in(text.substr(at + header.size() + 2));
    for (std::string line; std::getline(in, line) && !line.empty();) out.push_back(line);
    return out;
}

// The verbs `dsl --help` lists.
std::vector<std::string> verbs() {
    std::vector<std::string> out;
    for (const std::string& line : paragraph_after(run_dsl("--help").out, "Subcommands:")) {
        std::istringstream in(line);
        std::string verb;
        if (in >> verb) out.push_back(verb);
    }
    return out;
}

// docs/commands.md's section of `verb`: from "## `dsl VERB`" to the next "## ", empty when there is none.
std::string verb_section(const std::string& doc, const std::string& verb) {
    const std::string heading = "\n## `dsl " + verb + "`\n";
    const std::size_t at = doc.find(heading);
    if (at == std::string::npos) return {};
    const std::size_t end = doc.find("\n## ", at + heading.size());
    return doc.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

// The flags a section documents: those that open its list items ("- `--batch N`: ...", "- `--data NAME=FILE`,
// `--inputs FILE`: ...", "- `-o, --output FILE`: ..."), each in the quoted words before the item's colon.
std::set<std::string> documented_flags(const std::string& section) {
    std::vector<std::string> items;  // each list item, its indented lines joined
    std::istringstream in(section);
    bool open = false;
    for (std::string line; std::getline(in, line);) {
        if (line.rfind("- ", 0) == 0)
            items.push_back(line), open = true;
        else if (open && line.rfind("  ", 0) == 0)
            items.back() += " " + line.substr(2);
        else
            open = false;
    }
    std::set<std::string> out;
    for (const std::string& item : items) {
        const std::size_t colon = item.find("`:");
        if (item.rfind("- `", 0) != 0 || colon == std::string::npos) continue;
        for (const std::string& q : quoted(item.substr(0, colon + 1)))
            for (const std::string& f : flag_words(q)) out.insert(f);
    }
    return out;
}

}  // namespace

TEST_CASE("docs/commands.md documents every verb, each with the flags of its --help and no others", "[cli][docs]") {
    const std::string doc = read(fs::path(source_dir()) / "docs" / "commands.md");
    const std::vector<std::string> all = verbs();
    REQUIRE(all.size() >= 10);  // check, print, run, eval, predict, schedule, explain, compare, calibrate, export
    for (const std::string& verb : all) {
        INFO("dsl " << verb);
        const std::string section = verb_section(doc, verb);
        if (section.empty()) {
            FAIL_CHECK("docs/commands.md has no section '## `dsl " << verb << "`'");
            continue;
        }
        const std::string help = run_dsl(verb + " --help").out;
        // The usage line: "Usage: dsl run [OPTIONS] NET [SCHED]", which the section repeats.
        const std::size_t usage = help.find("Usage: ");
        REQUIRE(usage != std::string::npos);
        const std::string synopsis = help.substr(usage + 7, help.find('\n', usage) - usage - 7);
        CHECK(section.find(synopsis) != std::string::npos);
        // "  -o,--output TEXT REQUIRED   The file...": an option's line starts with two spaces and a dash.
        std::set<std::string> flags;
        for (const std::string& line : paragraph_after(help, "Options:")) {
            if (line.rfind("  -", 0) != 0) continue;
            std::string names = line.substr(2, line.find(' ', 2) - 2);  // "-o,--output"
            std::replace(names.begin(), names.end(), ',', ' ');
            for (const std::string& f : flag_words(names))
                if (f != "-h" && f != "--help") flags.insert(f);
        }
        CHECK(!flags.empty());
        const std::set<std::string> documented = documented_flags(section);
        for (const std::string& f : flags)
            if (documented.count(f) == 0) FAIL_CHECK("'" << f << "' of 'dsl " << verb << " --help' is not documented");
        for (const std::string& f : documented)
            if (flags.count(f) == 0)
                FAIL_CHECK("docs/commands.md documents '" << f << "', which 'dsl " << verb << "' does not take");
    }
    // And no section for a verb that is not one.
    for (std::size_t at = doc.find("\n## `dsl "); at != std::string::npos; at = doc.find("\n## `dsl ", at + 1)) {
        const std::string verb = doc.substr(at + 9, doc.find('`', at + 9) - at - 9);
        CHECK(std::find(all.begin(), all.end(), verb) != all.end());
    }
}

TEST_CASE("the README's CosmoFlow commands are among those of docs/commands.md, which a test runs", "[docs]") {
    const std::string readme = read(fs::path(source_dir()) / "README.md");
    const std::string commands = read(fs::path(source_dir()) / "docs" / "commands.md");
    std::size_t lines = 0;
    for (const Block& b : fenced_blocks(readme)) {
        if (b.tag != "sh" || b.text.find("cosmoflow_tiny") == std::string::npos) continue;
        std::istringstream in(b.text);
        for (std::string line; std::getline(in, line);) {
            const auto start = line.find_first_not_of(' ');
            if (start == std::string::npos) continue;
            INFO(line);
            CHECK(commands.find(line.substr(start)) != std::string::npos);
            ++lines;
        }
    }
    CHECK(lines >= 6);
}

TEST_CASE("every example of docs/commands.md runs", "[cli][docs][mpi]") {
    // Its `sh` blocks, in order, in one folder that holds samples/ and stdlib/, as the page says: later ones
    // use what earlier ones wrote. `local` is the fixture, and the cache a folder of the test's own.
    const fs::path dir = fs::temp_directory_path() / ("dsl_commands_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir / "bin");
    fs::create_directory_symlink(fs::path(source_dir()) / "samples", dir / "samples");
    fs::create_directory_symlink(fs::path(source_dir()) / "stdlib", dir / "stdlib");
    fs::create_symlink(fs::absolute(dsl_binary()), dir / "bin" / "dsl");
    // The examples that make data files use python3 with numpy and h5py: the system's, for which the test
    // command installs them (the first python3 on PATH may be another).
    if (fs::exists("/usr/bin/python3")) fs::create_symlink("/usr/bin/python3", dir / "bin" / "python3");
    std::size_t ran = 0;
    for (const Block& b : fenced_blocks(read(fs::path(source_dir()) / "docs" / "commands.md"))) {
        if (b.tag != "sh") continue;
        const fs::path script = dir / ("example_" + std::to_string(b.line) + ".sh");
        std::ofstream(script) << b.text;
        const std::string cmd = "cd '" + dir.string() + "' && PATH='" + (dir / "bin").string() + "':\"$PATH\" " +
                                fixture_local() + " DSL_CACHE_DIR='" + (dir / "cache").string() +
                                "' NO_COLOR=1 sh -eu '" + script.string() + "' >'" + (dir / "out").string() + "' 2>'" +
                                (dir / "err").string() + "'";
        const int status = std::system(cmd.c_str());
        INFO("docs/commands.md:" << b.line << "\n"
                                 << b.text << "stdout:\n"
                                 << read(dir / "out") << "stderr:\n"
                                 << read(dir / "err"));
        CHECK(WIFEXITED(status));
        CHECK(WEXITSTATUS(status) == 0);
        ++ran;
    }
    CHECK(ran >= 10);  // an example for each verb
    CHECK(fs::exists(dir / "ckpt" / "latest"));
    CHECK(fs::exists(dir / "pred.npy"));
    CHECK(fs::exists(dir / "pred" / "b0007.npy"));  // CosmoFlow's boxes, an output each
    CHECK(fs::exists(dir / "my.platform"));
    fs::remove_all(dir);
}
