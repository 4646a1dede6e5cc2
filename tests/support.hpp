// What several test files share: parsing either language from text, and the print/parse round trip.
#pragma once

#include <dsl/frontend/parse.hpp>
#include <dsl/frontend/print.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>

namespace dsl::test {

// The parser, printer and JSON of each language, so that one template serves both.
inline std::optional<frontend::NetFile> parse_tree(const SourceFile& f, Diagnostics& d, const frontend::NetFile*) {
    return frontend::parse_net(f, d);
}
inline std::optional<frontend::SchedFile> parse_tree(const SourceFile& f, Diagnostics& d, const frontend::SchedFile*) {
    return frontend::parse_sched(f, d);
}
inline std::string print_tree(const frontend::NetFile& t) { return frontend::print_net(t); }
inline std::string print_tree(const frontend::SchedFile& t) { return frontend::print_sched(t); }
inline nlohmann::json tree_json(const frontend::NetFile& t) { return frontend::net_to_json(t, false); }
inline nlohmann::json tree_json(const frontend::SchedFile& t) { return frontend::sched_to_json(t, false); }

template <typename Tree>
struct Parsed {
    SourceManager sources;
    Diagnostics diags;
    std::optional<Tree> file;
};

template <typename Tree>
std::unique_ptr<Parsed<Tree>> parse(const std::string& text, const std::string& path) {
    auto p = std::make_unique<Parsed<Tree>>();
    p->file = parse_tree(*p->sources.add(path, text), p->diags, static_cast<const Tree*>(nullptr));
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

}  // namespace dsl::test
