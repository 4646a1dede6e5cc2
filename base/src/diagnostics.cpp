// Collecting and rendering diagnostics in clang's form.
#include <dsl/base/diagnostics.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <tuple>

namespace dsl {

Diagnostic& Diagnostics::error(Location loc, std::string message) {
    if (errors_++ >= error_limit) {
        dropped_ = Diagnostic{};
        return dropped_;
    }
    list_.push_back(Diagnostic{Severity::error, loc, std::move(message), {}});
    return list_.back();
}

Diagnostic& Diagnostics::warning(Location loc, std::string message) {
    list_.push_back(Diagnostic{Severity::warning, loc, std::move(message), {}});
    return list_.back();
}

void Diagnostics::note(Diagnostic& d, Location loc, std::string message) {
    d.notes.push_back(Diagnostic{Severity::note, loc, std::move(message), {}});
}

void Diagnostics::sort_from(std::size_t first) {
    if (first >= list_.size()) return;
    std::vector<const SourceFile*> files;
    auto rank = [&](const Diagnostic& d) {
        auto it = std::find(files.begin(), files.end(), d.loc.file);
        if (it == files.end()) it = files.insert(files.end(), d.loc.file);
        return std::tuple(it - files.begin(), d.loc.line, d.loc.col);
    };
    for (std::size_t i = first; i < list_.size(); ++i) rank(list_[i]);  // files in the order they appear
    std::stable_sort(list_.begin() + static_cast<std::ptrdiff_t>(first), list_.end(),
                     [&](const Diagnostic& a, const Diagnostic& b) { return rank(a) < rank(b); });
}

namespace {

const char* severity_name(Severity s) {
    switch (s) {
        case Severity::error: return "error";
        case Severity::warning: return "warning";
        case Severity::note: return "note";
    }
    return "error";
}

const char* severity_color(Severity s) {
    switch (s) {
        case Severity::error: return "\033[1;31m";
        case Severity::warning: return "\033[1;35m";
        case Severity::note: return "\033[1;30m";
    }
    return "";
}

// The most characters of a source line an error echoes.
constexpr std::size_t echoed_line = 200;

// Tabs stay tabs under the caret so that it lines up with the source line in any terminal.
std::string caret_line(std::string_view source_line, unsigned col, unsigned length) {
    std::string out;
    for (unsigned i = 1; i < col && i - 1 < source_line.size(); ++i) out += source_line[i - 1] == '\t' ? '\t' : ' ';
    out += '^';
    const std::size_t available = col <= source_line.size() ? source_line.size() - col : 0;
    out.append(std::min<std::size_t>(length > 0 ? length - 1 : 0, available), '~');
    return out;
}

void render_one(std::string& out, const Diagnostic& d, bool color) {
    const char* bold = color ? "\033[1m" : "";
    const char* reset = color ? "\033[0m" : "";
    if (d.loc.file != nullptr) {
        out += fmt::format("{}{}", bold, d.loc.file->path);
        if (d.loc.line > 0) out += fmt::format(":{}:{}", d.loc.line, d.loc.col);
        out += fmt::format(":{} ", reset);
    }
    out += fmt::format("{}{}:{} {}{}{}\n", color ? severity_color(d.severity) : "", severity_name(d.severity), reset,
                       bold, d.message, reset);
    if (d.loc.known()) {
        std::string_view line = d.loc.file->line_text(d.loc.line);
        unsigned col = d.loc.col;
        const unsigned length = d.loc.length;
        // A long line (one number of a million digits) is echoed as the part around the caret, marked with
        // "..." where cut: an error is a few lines, whatever its input.
        std::string shown;
        if (line.size() > echoed_line) {
            const std::size_t from = col > 81 ? col - 81 : 0, to = std::min(line.size(), from + echoed_line);
            const std::string_view before = from > 0 ? "..." : "", after = to < line.size() ? "..." : "";
            shown = fmt::format("{}{}{}", before, line.substr(from, to - from), after);
            col = static_cast<unsigned>(col - from + before.size());
            line = shown;
        }
        out += fmt::format("{}\n", line);
        out += fmt::format("{}{}{}\n", color ? "\033[1;32m" : "", caret_line(line, col, length), reset);
    }
    for (const Diagnostic& n : d.notes) render_one(out, n, color);
}

}  // namespace

std::string format_diagnostic(const Diagnostic& d) {
    std::string out;
    render_one(out, d, false);
    return out;
}

void Diagnostics::render(std::ostream& os, bool color) const { os << (color ? colored() : text()); }

std::string Diagnostics::text() const { return colored(false); }

std::string Diagnostics::colored(bool color) const {
    std::string out;
    for (const Diagnostic& d : list_) render_one(out, d, color);
    if (errors_ > error_limit)
        render_one(
            out,
            Diagnostic{
                Severity::error, {}, fmt::format("too many errors, stopping after the first {}", error_limit), {}},
            color);
    return out;
}

namespace {

// Edit distance where swapping two neighbouring characters counts as one edit, the commonest typo.
std::size_t edit_distance(const std::string& a, const std::string& b) {
    std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
    for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
    for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i)
        for (std::size_t j = 1; j <= b.size(); ++j) {
            d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
                d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
        }
    return d[a.size()][b.size()];
}

}  // namespace

std::string closest_match(const std::string& name, const std::vector<std::string>& candidates) {
    // A suggestion must be close relative to the name's length, or it only adds noise.
    const std::size_t limit = std::max<std::size_t>(1, name.size() / 3);
    if (name.size() > 256) return {};  // quadratic in the lengths: no suggestions for absurd names
    std::string best;
    std::size_t best_distance = limit + 1;
    for (const std::string& c : candidates) {
        if (c == name || c.size() > 256) continue;
        const std::size_t d = edit_distance(name, c);
        if (d < best_distance) {
            best_distance = d;
            best = c;
        }
    }
    return best;
}

}  // namespace dsl
