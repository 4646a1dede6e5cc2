// What several test files share: parsing either language from text, networks from text and from the source
// tree, and the print/parse round trip.
#pragma once

#include "languages.hpp"

#include <dsl/frontend/passes.hpp>
#include <dsl/scheduler/plan.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace dsl::test {

template <typename Tree>
struct Parsed {
    SourceManager sources;
    Diagnostics diags;
    std::optional<Tree> file;
};

template <typename Tree>
std::unique_ptr<Parsed<Tree>> parse(const std::string& text, const std::string& path) {
    auto p = std::make_unique<Parsed<Tree>>();
    p->file = parse_tree<Tree>(*p->sources.add(path, text), p->diags);
    return p;
}

// The tree of `text` must survive print -> parse, and printing must be idempotent.
template <typename Tree>
void check_round_trip(const std::string& text, const std::string& path) {
    INFO("source:\n" << text);
    auto first = parse<Tree>(text, path);
    INFO(first->diags.text());
    REQUIRE(first->file);
    const std::string printed = print_tree(*first->file);
    INFO("printed:\n" << printed);
    auto second = parse<Tree>(printed, path);
    INFO(second->diags.text());
    REQUIRE(second->file);
    CHECK(tree_json(*second->file) == tree_json(*first->file));
    CHECK(print_tree(*second->file) == printed);
}

// `text` must fail to parse with exactly one error, `message`, at `line`:`col`, `length` characters long
// (any length when `length` is 0).
template <typename Tree>
void check_syntax_error(const std::string& text, const std::string& path, unsigned line, unsigned col, unsigned length,
                        const std::string& message) {
    INFO("source: " << text);
    auto p = parse<Tree>(text, path);
    CHECK_FALSE(p->file);
    REQUIRE(p->diags.all().size() == 1);
    const auto& d = p->diags.all()[0];
    CHECK(d.severity == Severity::error);
    CHECK(d.message == message);
    CHECK(d.loc.line == line);
    CHECK(d.loc.col == col);
    if (length != 0) CHECK(d.loc.length == length);
}

// A checked network from text: parsed, elaborated (without imports) and its shapes inferred.
struct NetworkFromText {
    SourceManager sources;
    Diagnostics diags;
    frontend::Network net;

    explicit NetworkFromText(const std::string& text) {
        auto file = frontend::parse_net(*sources.add("t.net", text), diags);
        INFO(diags.text());
        REQUIRE(file);
        auto n = frontend::elaborate(*file, {}, diags);
        REQUIRE(n);
        REQUIRE(frontend::infer_shapes(*n, diags));
        net = std::move(*n);
    }
};

// A network of the source tree (`path` from its root: samples/, stdlib/), loaded and checked as `dsl` does.
struct NetworkFromFile {
    SourceManager sources;
    Diagnostics diags;
    frontend::Network net;

    explicit NetworkFromFile(const std::string& path) {
        auto loaded = frontend::load_network(std::string(DSL_SOURCE_DIR) + "/" + path, sources, diags);
        INFO(diags.text());
        REQUIRE(loaded);
        net = std::move(loaded->net);
    }
};

// The plan of a run on one process with mini-batches of `batch`: what a Trainer of a test without a schedule
// executes.
inline scheduler::Plan one_process(const frontend::Network& net, std::int64_t batch) {
    return scheduler::make_plan(net, scheduler::Schedule{}, batch, 0, 1);
}

}  // namespace dsl::test
