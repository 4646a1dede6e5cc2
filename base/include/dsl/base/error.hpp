// The two kinds of failure: a user's mistake (UserError, and OutOfMemory where the machine or a GPU has less
// memory than the run asks for: exit code 1) and a bug in dsl (InternalError and DSL_INTERNAL_CHECK, exit
// code 3). A user error never shows as an internal one.
#pragma once

#include <dsl/base/source.hpp>

#include <new>
#include <stdexcept>
#include <string>

namespace dsl {

// A mistake in what the user gave (a file, an option, a schedule that does not fit the run), found where
// reporting it through Diagnostics is not at hand. The command writes `render` and exits with code 1;
// `what()` is the message alone (lowercase, no trailing period).
class UserError : public std::runtime_error {
public:
    explicit UserError(const std::string& message, Location loc = {}) : std::runtime_error(message), loc_(loc) {}

    const Location& location() const { return loc_; }

    // As a Diagnostic renders: `file:line:col: error: message`, the source line and a caret when the error has
    // a place in a file, else `error: message`; `color` adds ANSI colours as Diagnostics::render does.
    std::string render(bool color = false) const;

private:
    Location loc_;
};

// Memory that the run asks for and the machine or a GPU does not have, with the sentence that says how much
// was asked and what needs less (a smaller mini-batch, more processes). A std::bad_alloc, so that code which
// can do with less memory catches it as any allocation's failure; the command reports it as a user error.
class OutOfMemory : public std::bad_alloc {
public:
    explicit OutOfMemory(const std::string& message) : message_(message) {}
    const char* what() const noexcept override { return message_.what(); }

private:
    std::runtime_error message_;  // whose copies share the text and never throw, as an exception's must not
};

// A bug in dsl, never a user's mistake: thrown by DSL_INTERNAL_CHECK, reported with exit code 3.
class InternalError : public std::logic_error {
public:
    using std::logic_error::logic_error;
};

[[noreturn]] void internal_failure(const char* file, int line, const char* condition, const std::string& what);

}  // namespace dsl

// Internal consistency checks; never compiled out.
#define DSL_INTERNAL_CHECK(cond, what)                                           \
    do {                                                                         \
        if (!(cond)) ::dsl::internal_failure(__FILE__, __LINE__, #cond, (what)); \
    } while (false)
