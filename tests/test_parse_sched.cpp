// Tests of the `.sched` grammar, parser and printer: trees, round trips and syntax errors at exact places.
#include "support.hpp"

#include <dsl/frontend/parse.hpp>
#include <dsl/frontend/print.hpp>
#include <dsl/grammar/sched.hpp>

#include <tao/pegtl/contrib/analyze.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <string>
#include <tuple>

using namespace dsl;
using namespace dsl::frontend;

namespace {

std::unique_ptr<test::Parsed<SchedFile>> parse(const std::string& text) {
    return test::parse<SchedFile>(text, "test.sched");
}

void check_round_trip(const std::string& text) { test::check_round_trip<SchedFile>(text, "test.sched"); }

}  // namespace

TEST_CASE("sched grammar has no infinite loops", "[sched]") {
    CHECK(tao::pegtl::analyze<dsl::grammar::sched::grammar>() == 0);
}

TEST_CASE("sched: empty files and comments", "[sched]") {
    for (const char* text : {"", "   \n\n", "# only a comment", "# c\n  # d\n"}) {
        auto p = parse(text);
        REQUIRE(p->file);
        CHECK(p->file->globals.empty());
        CHECK(p->file->entries.empty());
        CHECK(print_sched(*p->file).empty());
    }
}

TEST_CASE("sched: globals and every kind of value", "[sched]") {
    auto p = parse("procs = 4\nplatform = \"my.platform\"\nbatch=?  # open\nmode = fast\n");
    REQUIRE(p->file);
    const auto& g = p->file->globals;
    REQUIRE(g.size() == 4);
    CHECK(g[0].key == "procs");
    CHECK(g[0].loc.line == 1);
    CHECK(g[0].loc.col == 1);
    CHECK(g[0].loc.length == 5);
    CHECK(g[0].value.kind == SchedValue::Kind::integer);
    CHECK(g[0].value.integer == 4);
    CHECK(g[0].value.loc.col == 9);
    CHECK(g[1].key == "platform");
    CHECK(g[1].value.kind == SchedValue::Kind::string);
    CHECK(g[1].value.text == "my.platform");
    CHECK(g[1].value.loc.line == 2);
    CHECK(g[1].value.loc.col == 12);
    CHECK(g[1].value.loc.length == 13);
    CHECK(g[2].key == "batch");
    CHECK(g[2].value.kind == SchedValue::Kind::open);
    CHECK(g[3].value.kind == SchedValue::Kind::word);
    CHECK(g[3].value.text == "fast");
    CHECK(p->file->entries.empty());
}

TEST_CASE("sched: entries and their settings", "[sched]") {
    auto p = parse(
        "procs = 4\n"
        "default N=2 H=2 overlap=on\n"
        "layer pred      N=4\n"
        "block cbr\n  bn = spatial\n"
        "layer body.1.*  N=1 H=? W=2\n"
        "layer *\n");
    REQUIRE(p->file);
    const auto& f = *p->file;
    REQUIRE(f.globals.size() == 1);
    REQUIRE(f.entries.size() == 5);

    CHECK(f.entries[0].selector == SchedEntry::Selector::all);
    CHECK(f.entries[0].pattern.empty());
    CHECK(f.entries[0].loc.line == 2);
    CHECK(f.entries[0].loc.col == 1);
    CHECK(f.entries[0].loc.length == 7);
    REQUIRE(f.entries[0].settings.size() == 3);
    CHECK(f.entries[0].settings[2].key == "overlap");
    CHECK(f.entries[0].settings[2].value.kind == SchedValue::Kind::word);
    CHECK(f.entries[0].settings[2].value.text == "on");
    CHECK(f.entries[0].settings[1].loc.col == 13);

    CHECK(f.entries[1].selector == SchedEntry::Selector::layer);
    CHECK(f.entries[1].pattern == "pred");
    CHECK(f.entries[1].pattern_loc.line == 3);
    CHECK(f.entries[1].pattern_loc.col == 7);
    CHECK(f.entries[1].pattern_loc.length == 4);

    CHECK(f.entries[2].selector == SchedEntry::Selector::block);
    CHECK(f.entries[2].pattern == "cbr");
    REQUIRE(f.entries[2].settings.size() == 1);
    CHECK(f.entries[2].settings[0].key == "bn");
    CHECK(f.entries[2].settings[0].loc.line == 5);
    CHECK(f.entries[2].settings[0].loc.col == 3);

    CHECK(f.entries[3].pattern == "body.1.*");
    REQUIRE(f.entries[3].settings.size() == 3);
    CHECK(f.entries[3].settings[1].value.kind == SchedValue::Kind::open);

    CHECK(f.entries[4].pattern == "*");
    CHECK(f.entries[4].settings.empty());
}

TEST_CASE("sched: a setting after an entry belongs to the entry", "[sched]") {
    auto p = parse("default N=2\nprocs = 4\n");
    REQUIRE(p->file);
    CHECK(p->file->globals.empty());
    REQUIRE(p->file->entries.size() == 1);
    CHECK(p->file->entries[0].settings.size() == 2);
}

TEST_CASE("sched: keywords are whole words", "[sched]") {
    auto p = parse("layers = 3\ndefaults = x\nlayer blocky N=1\n");
    REQUIRE(p->file);
    REQUIRE(p->file->globals.size() == 2);
    CHECK(p->file->globals[0].key == "layers");
    CHECK(p->file->globals[1].value.text == "x");
    REQUIRE(p->file->entries.size() == 1);
    CHECK(p->file->entries[0].pattern == "blocky");
}

TEST_CASE("sched: the largest integer", "[sched]") {
    auto p = parse("procs = 9223372036854775807");
    REQUIRE(p->file);
    CHECK(p->file->globals[0].value.integer == 9223372036854775807);
}

TEST_CASE("sched: canonical text", "[sched]") {
    auto p = parse(
        "# comment\nprocs=4 platform = \"my.platform\"\n batch = 4 default N=2   H=2 overlap=on\n"
        "layer pred N=4 block cbr bn=spatial\n");
    REQUIRE(p->file);
    CHECK(print_sched(*p->file) ==
          "procs = 4\n"
          "platform = \"my.platform\"\n"
          "batch = 4\n"
          "\n"
          "default N=2 H=2 overlap=on\n"
          "layer pred N=4\n"
          "block cbr bn=spatial\n");
}

TEST_CASE("sched: json", "[sched]") {
    auto p = parse("procs = 4\nlayer a.* N=? bn=local p=\"x\"\n");
    REQUIRE(p->file);
    const auto j = sched_to_json(*p->file, false);
    CHECK(j == nlohmann::json::parse(R"({
        "globals": [{"key": "procs", "value": 4}],
        "entries": [{"selector": "layer", "pattern": "a.*", "settings": [
            {"key": "N", "value": "?"},
            {"key": "bn", "value": {"word": "local"}},
            {"key": "p", "value": {"string": "x"}}]}]})"));
    const auto jl = sched_to_json(*p->file, true);
    CHECK(jl["globals"][0]["line"] == 1);
    CHECK(jl["entries"][0]["line"] == 2);
    CHECK(jl["entries"][0]["col"] == 1);
    CHECK(jl["entries"][0]["settings"][1]["col"] == 15);
}

TEST_CASE("sched: round trips", "[sched]") {
    const std::string text = GENERATE(as<std::string>{}, "", "procs = 4", "default", "layer * N=1",
                                      "procs = 4\nplatform = \"a b # c\"\nbatch = ?\ndefault N=2 H=2 overlap=on\nlayer "
                                      "pred N=4\nblock cbr bn=spatial\n",
                                      "default N=? overlap=?\nlayer block1.* H=4 overlap=on\n",
                                      "block b\nlayer 0.x.* x=\"\" y=0 z=007\n", "a=1 b=2 c=3");
    check_round_trip(text);
}

TEST_CASE("sched: sample schedules round-trip", "[sched]") {
    for (const char* name : {"mesh_tiny_hybrid_4.sched", "mesh_tiny_partial_4.sched", "resnet_tiny_hybrid_4.sched"}) {
        SourceManager sources;
        const SourceFile* f = sources.load(std::string(DSL_SOURCE_DIR) + "/samples/" + name);
        if (!f) continue;  // samples are owned by someone else and may move
        check_round_trip(f->text);
    }
}

TEST_CASE("sched: syntax errors", "[sched]") {
    // source, line, col, length, message
    using Row = std::tuple<std::string, unsigned, unsigned, unsigned, std::string>;
    const auto [text, line, col, length, message] =
        GENERATE(table<std::string, unsigned, unsigned, unsigned, std::string>({
            Row{"procs = \n", 1, 8, 1, "expected a value after '='"},
            Row{"procs = -4", 1, 9, 1, "expected a value after '='"},
            Row{"procs 4", 1, 6, 1, "expected '=' after the setting name"},
            Row{"default N=2\nlayer\n", 2, 6, 1, "expected a layer name or pattern after 'layer'"},
            Row{"layer = 3", 1, 7, 1, "expected a layer name or pattern after 'layer'"},
            Row{"block 3x", 1, 7, 1, "expected a block name after 'block'"},
            Row{"platform = \"abc\nprocs = 4", 1, 12, 4, "unterminated string"},
            Row{"procs = 4\n$", 2, 1, 1, "unexpected character '$'"},
            Row{"layer a N=2 = 3", 1, 13, 1, "unexpected character '='"},
            Row{"procs = 99999999999999999999", 1, 9, 20, "integer literal is too large"},
            Row{"default N=2x", 1, 12, 1, "invalid integer literal"},
            Row{"default N=2.5", 1, 12, 1, "invalid integer literal"},
            Row{"procs = default", 1, 9, 1, "expected a value after '='"},
            Row{std::string("procs = 4\n\x01"), 2, 1, 1, "unexpected character '\\x01'"},
        }));
    test::check_syntax_error<SchedFile>(text, "test.sched", line, col, length, message);
}
