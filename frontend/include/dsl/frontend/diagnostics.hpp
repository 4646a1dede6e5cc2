// Diagnostics in clang's form (`file:line:col: error: message`, the source line, a caret), collected per run.
#pragma once

#include <dsl/frontend/source.hpp>

#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace dsl {

enum class Severity { error, warning, note };

struct Diagnostic {
    Severity severity = Severity::error;
    Location loc;
    std::string message;            // lowercase, no trailing period
    std::vector<Diagnostic> notes;  // related places: "layer declared here", "did you mean 'conv2'?"
};

// Collects the user errors of one run. Library code reports here and never exits; the command maps
// `has_errors()` to exit code 1.
class Diagnostics {
public:
    Diagnostic& error(Location loc, std::string message);
    Diagnostic& warning(Location loc, std::string message);
    static void note(Diagnostic& d, Location loc, std::string message);

    bool has_errors() const;
    std::size_t error_count() const;
    const std::vector<Diagnostic>& all() const { return list_; }
    void clear() { list_.clear(); }

    // Writes every diagnostic in order; `color` adds ANSI bold and colours as clang does.
    void render(std::ostream& os, bool color) const;
    std::string text() const;  // every diagnostic as `render` writes it without colour

private:
    std::vector<Diagnostic> list_;
};

// One diagnostic as text (the location line, the source line and the caret), without colour.
std::string format_diagnostic(const Diagnostic& d);

// A bug in dsl, never a user's mistake: thrown by DSL_INTERNAL_CHECK, reported with exit code 3.
class InternalError : public std::logic_error {
public:
    using std::logic_error::logic_error;
};

[[noreturn]] void internal_failure(const char* file, int line, const char* condition, const std::string& what);

// "did you mean 'x'?" helper: the candidate closest to `name` by edit distance, or empty when none is close.
std::string closest_match(const std::string& name, const std::vector<std::string>& candidates);

}  // namespace dsl

// Internal consistency checks; never compiled out.
#define DSL_INTERNAL_CHECK(cond, what)                                           \
    do {                                                                         \
        if (!(cond)) ::dsl::internal_failure(__FILE__, __LINE__, #cond, (what)); \
    } while (false)
