// The cases that skipped, and the run's exit status that says so (skip.hpp).
#include "skip.hpp"

#include <catch2/catch.hpp>

#include <iostream>
#include <utility>
#include <vector>

namespace dsl::test {

namespace {

std::vector<std::pair<std::string, std::string>>& skipped() {
    static std::vector<std::pair<std::string, std::string>> cases;
    return cases;
}

}  // namespace

void skip(const std::string& why) {
    const std::string name = Catch::getResultCapture().getCurrentTestName();
    // A case of generated values enters once per value: its reason once.
    for (const auto& [case_name, reason] : skipped())
        if (case_name == name && reason == why) return;
    skipped().emplace_back(name, why);
}

int exit_status(int result) {
    if (result != 0) return result == skipped_exit ? 1 : result;
    for (const auto& [name, why] : skipped()) std::cout << "skipped: " << name << ": " << why << "\n";
    return skipped().empty() ? 0 : skipped_exit;
}

}  // namespace dsl::test
