// Print/parse round trips over every file in stdlib/ and samples/, and every sample checked as a whole.
#include <catch2/catch.hpp>

#include <dsl/frontend/parse.hpp>
#include <dsl/frontend/passes.hpp>
#include <dsl/frontend/print.hpp>
#include <dsl/scheduler/schedule.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>

namespace fs = std::filesystem;
using namespace dsl;
using namespace dsl::frontend;

namespace {

std::vector<fs::path> files_with(const std::string& ext) {
    std::vector<fs::path> out;
    for (const char* dir : {"stdlib", "samples"})
        for (const auto& e : fs::recursive_directory_iterator(fs::path(DSL_SOURCE_DIR) / dir))
            if (e.path().extension() == ext) out.push_back(e.path());
    std::sort(out.begin(), out.end());
    return out;
}

std::string rendered(const Diagnostics& d) {
    std::string out;
    for (const auto& x : d.all()) out += format_diagnostic(x);
    return out;
}

}  // namespace

TEST_CASE("every .net file prints to text that parses back to the same tree", "[roundtrip]") {
    const auto files = files_with(".net");
    REQUIRE(files.size() >= 5);
    for (const fs::path& p : files) {
        SECTION(p.filename().string()) {
            SourceManager sources;
            Diagnostics diags;
            const SourceFile* file = sources.load(p.string());
            REQUIRE(file != nullptr);
            auto tree = parse_net(*file, diags);
            INFO(rendered(diags));
            REQUIRE(tree);
            const std::string printed = print_net(*tree);
            auto again = parse_net(*sources.add("printed.net", printed), diags);
            INFO(printed);
            REQUIRE(again);
            CHECK(net_to_json(*again, false) == net_to_json(*tree, false));
            CHECK(print_net(*again) == printed);
        }
    }
}

TEST_CASE("every .sched file prints to text that parses back to the same tree", "[roundtrip]") {
    const auto files = files_with(".sched");
    REQUIRE(files.size() >= 10);
    for (const fs::path& p : files) {
        SECTION(p.filename().string()) {
            SourceManager sources;
            Diagnostics diags;
            const SourceFile* file = sources.load(p.string());
            REQUIRE(file != nullptr);
            auto tree = parse_sched(*file, diags);
            INFO(rendered(diags));
            REQUIRE(tree);
            const std::string printed = print_sched(*tree);
            auto again = parse_sched(*sources.add("printed.sched", printed), diags);
            INFO(printed);
            REQUIRE(again);
            CHECK(sched_to_json(*again, false) == sched_to_json(*tree, false));
            CHECK(print_sched(*again) == printed);
        }
    }
}

TEST_CASE("every stdlib network and sample checks without errors", "[roundtrip]") {
    for (const fs::path& p : files_with(".net")) {
        SECTION(p.filename().string()) {
            SourceManager sources;
            Diagnostics diags;
            auto net = load_network(p.string(), sources, diags);
            INFO(rendered(diags));
            REQUIRE(net);
            CHECK(diags.all().empty());
            CHECK(net->net.layers.size() > 3);
        }
    }
}

TEST_CASE("every sample schedule applies to its network", "[roundtrip]") {
    for (const fs::path& p : files_with(".sched")) {
        const std::string stem = p.stem().string();
        const std::string net_name = stem.substr(0, stem.find('_', stem.find('_') + 1)) + ".net";
        SECTION(stem) {
            SourceManager sources;
            Diagnostics diags;
            auto net = load_network((p.parent_path() / net_name).string(), sources, diags);
            INFO(rendered(diags));
            REQUIRE(net);
            auto tree = parse_sched(*sources.load(p.string()), diags);
            REQUIRE(tree);
            auto schedule = scheduler::apply_schedule(net->net, *tree, diags);
            INFO(rendered(diags));
            REQUIRE(schedule);
            REQUIRE(schedule->procs);
            // The name says the process count: mesh_tiny_spatial_h_2 runs on 2.
            CHECK(std::to_string(*schedule->procs) == stem.substr(stem.rfind('_') + 1));
            CHECK(schedule->complete() == (stem.find("partial") == std::string::npos));
        }
    }
}
