// Print/parse round trips over every file in stdlib/ and samples/, and every sample checked as a whole.
#include "support.hpp"

#include <catch2/catch.hpp>

#include <dsl/frontend/parse.hpp>
#include <dsl/frontend/passes.hpp>
#include <dsl/frontend/print.hpp>
#include <dsl/scheduler/schedule.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <type_traits>

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

}  // namespace

TEMPLATE_TEST_CASE("every file of the language prints to text that parses back to the same tree", "[roundtrip]",
                   NetFile, SchedFile, PlatformFile) {
    const std::string ext = std::is_same_v<TestType, NetFile>     ? ".net"
                            : std::is_same_v<TestType, SchedFile> ? ".sched"
                                                                  : ".platform";
    const auto files = files_with(ext);
    REQUIRE(files.size() >= (ext == ".platform" ? 3u : 5u));
    for (const fs::path& p : files) {
        SECTION(p.filename().string()) {
            std::ifstream in(p, std::ios::binary);
            const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
            test::check_round_trip<TestType>(text, p.string());
        }
    }
}

TEST_CASE("a network of every layer kind prints to text that parses back to the same tree", "[roundtrip]") {
    // tests/dist/sigmoid.net has sigmoids (the newest kind); the text below calls every kind the table has.
    std::ifstream in(fs::path(DSL_SOURCE_DIR) / "tests" / "dist" / "sigmoid.net", std::ios::binary);
    test::check_round_trip<NetFile>(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()),
                                    "sigmoid.net");
    std::string text = "input x [N, 3, 8, 8]\nlabel y [N]\n";
    for (const LayerKind& k : layer_kinds()) {
        if (k.data()) continue;
        text += std::string("l_") + k.name + " = " + k.name;
        std::string args;
        for (const ParamSpec& p : k.params)
            if (p.required) args += (args.empty() ? "" : ", ") + std::string(p.name) + " = 2";
        if (!args.empty()) text += "(" + args + ")";
        text += k.min_inputs == 2 ? " from x, y\n" : "\n";
    }
    test::check_round_trip<NetFile>(text, "kinds.net");
}

TEST_CASE("every stdlib network and sample checks without errors", "[roundtrip]") {
    for (const fs::path& p : files_with(".net")) {
        SECTION(p.filename().string()) {
            SourceManager sources;
            Diagnostics diags;
            auto net = load_network(p.string(), sources, diags);
            INFO(diags.text());
            REQUIRE(net);
            CHECK(diags.all().empty());
            CHECK(net->net.layers.size() > 3);
        }
    }
}

TEST_CASE("every sample schedule applies to its network", "[roundtrip]") {
    for (const fs::path& p : files_with(".sched")) {
        const std::string stem = p.stem().string();
        // Its network is the longest prefix of its name, cut at a '_', that names a .net file beside it:
        // mesh_tiny_spatial_h_2 is mesh_tiny's, unet2k_dgx_64 unet2k's.
        std::string net_name;
        for (std::size_t cut = stem.find('_'); cut != std::string::npos; cut = stem.find('_', cut + 1))
            if (fs::exists(p.parent_path() / (stem.substr(0, cut) + ".net"))) net_name = stem.substr(0, cut) + ".net";
        SECTION(stem) {
            SourceManager sources;
            Diagnostics diags;
            auto net = load_network((p.parent_path() / net_name).string(), sources, diags);
            INFO(diags.text());
            REQUIRE(net);
            auto tree = parse_sched(*sources.load(p.string()), diags);
            REQUIRE(tree);
            auto schedule = scheduler::apply_schedule(net->net, *tree, diags);
            INFO(diags.text());
            REQUIRE(schedule);
            REQUIRE(schedule->procs);
            // The name says the process count: mesh_tiny_spatial_h_2 runs on 2.
            CHECK(std::to_string(*schedule->procs) == stem.substr(stem.rfind('_') + 1));
            CHECK(schedule->complete() == (stem.find("partial") == std::string::npos));
        }
    }
}
