// Diagnostics in clang's form (`file:line:col: error: message`, the source line, a caret), collected per run.
#pragma once

#include <dsl/base/source.hpp>

#include <ostream>
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
//
// Only the first `error_limit` errors are kept (a file of 20,000 broken lines would otherwise print 20,000
// messages); later ones are counted, and `render` ends with a line that says so. Passes that loop over what
// the user wrote stop once `full()`, so that checking such a file stays linear in its size.
class Diagnostics {
public:
    static constexpr std::size_t error_limit = 20;

    Diagnostic& error(Location loc, std::string message);
    Diagnostic& warning(Location loc, std::string message);
    static void note(Diagnostic& d, Location loc, std::string message);

    bool has_errors() const { return errors_ > 0; }
    std::size_t error_count() const { return errors_; }   // kept and dropped
    bool full() const { return errors_ >= error_limit; }  // the next error will be dropped
    // Whether `d` (as `error` returned it) was dropped: a pass spares the cost of its notes ("did you mean").
    bool dropped(const Diagnostic& d) const { return &d == &dropped_; }
    const std::vector<Diagnostic>& all() const { return list_; }  // the kept ones
    void clear() {
        list_.clear();
        errors_ = 0;
    }
    // Sorts the diagnostics from the `first` on by place: files in the order they first appear among them,
    // then line and column (a pass that finds errors out of the text's order reports them in it).
    void sort_from(std::size_t first);

    // Writes every diagnostic in order; `color` adds ANSI bold and colours as clang does.
    void render(std::ostream& os, bool color) const;
    std::string text() const;  // every diagnostic as `render` writes it without colour

private:
    std::string colored(bool color = true) const;

    std::vector<Diagnostic> list_;
    std::size_t errors_ = 0;
    Diagnostic dropped_;  // what a dropped error's notes are written to
};

// One diagnostic as text (the location line, the source line and the caret), without colour.
std::string format_diagnostic(const Diagnostic& d);

// "did you mean 'x'?" helper: the candidate closest to `name` by edit distance, or empty when none is close.
std::string closest_match(const std::string& name, const std::vector<std::string>& candidates);

}  // namespace dsl
