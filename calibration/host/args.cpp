#include "host/args.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

namespace dtsim::calib {
namespace {

std::size_t edit_distance(std::string_view a, std::string_view b) {
    std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
        cur[0] = i;
        for (std::size_t j = 1; j <= b.size(); ++j) {
            const std::size_t subst = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
            cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, subst});
        }
        std::swap(prev, cur);
    }
    return prev[b.size()];
}

std::string shell_quote(std::string_view arg) {
    const bool plain = !arg.empty() && std::all_of(arg.begin(), arg.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || std::string_view("-_=./:,@+%").find(c) !=
                                                                   std::string_view::npos;
    });
    if (plain) return std::string(arg);
    std::string out = "'";
    for (char c : arg) {
        if (c == '\'')
            out += "'\\''";
        else
            out += c;
    }
    out += '\'';
    return out;
}

}  // namespace

std::uint64_t parse_bytes(std::string_view text) {
    const auto bad = [&](std::string_view why) {
        return ArgError(fmt::format("invalid size \"{}\": {} (expected e.g. 1024, 1K, 64M, 4G)", text, why));
    };
    if (text.empty()) throw bad("empty");
    std::uint64_t value = 0;
    const char* first = text.data();
    const char* last = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(first, last, value);
    if (ec == std::errc::result_out_of_range) throw bad("too large");
    if (ec != std::errc() || ptr == first) throw bad("does not start with a number");
    std::string_view suffix(ptr, static_cast<std::size_t>(last - ptr));
    unsigned shift = 0;
    if (!suffix.empty()) {
        switch (suffix.front()) {
            case 'k': case 'K': shift = 10; break;
            case 'm': case 'M': shift = 20; break;
            case 'g': case 'G': shift = 30; break;
            case 't': case 'T': shift = 40; break;
            case 'b': case 'B': shift = 0; break;
            default: throw bad(fmt::format("unknown unit \"{}\"", suffix));
        }
        if (shift != 0) suffix.remove_prefix(1);
        if (suffix == "iB" || suffix == "ib" || suffix == "B" || suffix == "b" || suffix.empty()) {
            // accepted
        } else {
            throw bad(fmt::format("unknown unit \"{}\"", suffix));
        }
    }
    if (shift != 0 && value > (std::numeric_limits<std::uint64_t>::max() >> shift)) throw bad("too large");
    return value << shift;
}

std::string format_bytes(std::uint64_t bytes) {
    static constexpr std::string_view units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    std::size_t u = 0;
    while (u + 1 < std::size(units) && bytes != 0 && bytes % 1024 == 0) {
        bytes /= 1024;
        ++u;
    }
    return fmt::format("{} {}", bytes, units[u]);
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
    std::string best;
    std::size_t best_distance = 4;
    for (const auto& c : candidates) {
        const std::size_t d = edit_distance(word, c);
        if (d < best_distance) {
            best_distance = d;
            best = c;
        }
    }
    return best;
}

ArgParser::ArgParser(std::string program, std::string summary)
    : program_(std::move(program)), summary_(std::move(summary)) {
    add_flag("help", "print this help and exit");
}

void ArgParser::add_flag(const std::string& name, std::string help) {
    specs_[name] = Spec{true, {}, std::move(help), {}};
    order_.push_back(name);
}

void ArgParser::add_option(const std::string& name, std::string value_name, std::string help,
                           std::string default_value) {
    specs_[name] = Spec{false, std::move(value_name), std::move(help), std::move(default_value)};
    order_.push_back(name);
}

void ArgParser::parse(int argc, const char* const* argv) {
    std::vector<std::string> args;
    for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
    parse(args);
    // The program name as invoked leads the recorded command line.
    if (argc > 0) command_line_ = shell_quote(argv[0]) + (command_line_.empty() ? "" : " ") + command_line_;
}

void ArgParser::parse(const std::vector<std::string>& args) {
    values_.clear();
    help_ = false;
    command_line_.clear();
    for (const auto& a : args) {
        if (!command_line_.empty()) command_line_ += ' ';
        command_line_ += shell_quote(a);
    }
    std::vector<std::string> names(order_.begin(), order_.end());
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& arg = args[i];
        if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) {
            if (arg == "-h") {
                help_ = true;
                continue;
            }
            throw ArgError(fmt::format("unexpected argument \"{}\" (options are written --name VALUE)", arg));
        }
        std::string name = arg.substr(2);
        std::optional<std::string> value;
        if (auto eq = name.find('='); eq != std::string::npos) {
            value = name.substr(eq + 1);
            name.resize(eq);
        }
        auto it = specs_.find(name);
        if (it == specs_.end()) {
            const std::string guess = did_you_mean(name, names);
            throw ArgError(fmt::format("unknown option --{}{}", name,
                                       guess.empty() ? std::string() : fmt::format(" (did you mean --{}?)", guess)));
        }
        if (values_.count(name) != 0) throw ArgError(fmt::format("option --{} given twice", name));
        if (it->second.is_flag) {
            if (value) throw ArgError(fmt::format("option --{} takes no value", name));
            if (name == "help") help_ = true;
            values_.emplace(name, std::string(1, '1'));
            continue;
        }
        if (!value) {
            if (i + 1 >= args.size())
                throw ArgError(fmt::format("option --{} needs a value ({})", name,
                                           it->second.value_name));
            value = args[++i];
        }
        values_.emplace(name, std::move(*value));
    }
}

const ArgParser::Spec& ArgParser::spec(std::string_view name) const {
    auto it = specs_.find(name);
    if (it == specs_.end())
        throw std::logic_error(fmt::format("{}: option --{} was never declared", program_, name));
    return it->second;
}

std::string ArgParser::help() const {
    std::string out = fmt::format("{}: {}\n\nOptions:\n", program_, summary_);
    for (const auto& name : order_) {
        const Spec& s = specs_.at(name);
        std::string left = s.is_flag ? fmt::format("--{}", name) : fmt::format("--{} {}", name, s.value_name);
        out += fmt::format("  {:<28} {}", left, s.help);
        if (!s.default_value.empty()) out += fmt::format(" [default: {}]", s.default_value);
        out += '\n';
    }
    return out;
}

bool ArgParser::flag(std::string_view name) const {
    if (!spec(name).is_flag) throw std::logic_error(fmt::format("--{} is not a flag", name));
    return values_.count(name) != 0;
}

bool ArgParser::given(std::string_view name) const {
    (void)spec(name);
    return values_.count(name) != 0;
}

bool ArgParser::has(std::string_view name) const { return given(name) || !spec(name).default_value.empty(); }

std::optional<std::string> ArgParser::maybe(std::string_view name) const {
    if (auto it = values_.find(name); it != values_.end()) return it->second;
    const Spec& s = spec(name);
    if (!s.default_value.empty()) return s.default_value;
    return std::nullopt;
}

std::string ArgParser::str(std::string_view name) const {
    auto v = maybe(name);
    if (!v) throw ArgError(fmt::format("option --{} is required", name));
    return *v;
}

std::int64_t ArgParser::integer(std::string_view name) const {
    const std::string v = str(name);
    std::int64_t out = 0;
    auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
    if (ec != std::errc() || ptr != v.data() + v.size())
        throw ArgError(fmt::format("--{} expects an integer, got \"{}\"", name, v));
    return out;
}

std::int64_t ArgParser::integer_at_least(std::string_view name, std::int64_t min) const {
    const std::int64_t v = integer(name);
    if (v < min) throw ArgError(fmt::format("--{} must be at least {}, got {}", name, min, v));
    return v;
}

double ArgParser::number(std::string_view name) const {
    const std::string v = str(name);
    double out = 0;
    auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
    if (ec != std::errc() || ptr != v.data() + v.size() || !std::isfinite(out))
        throw ArgError(fmt::format("--{} expects a number, got \"{}\"", name, v));
    return out;
}

std::uint64_t ArgParser::bytes(std::string_view name) const {
    const std::string v = str(name);
    try {
        return parse_bytes(v);
    } catch (const ArgError& e) {
        throw ArgError(fmt::format("--{}: {}", name, e.what()));
    }
}

std::vector<std::string> ArgParser::list(std::string_view name) const {
    std::vector<std::string> out;
    auto v = maybe(name);
    if (!v) return out;
    std::size_t start = 0;
    while (start <= v->size()) {
        std::size_t end = v->find(',', start);
        if (end == std::string::npos) end = v->size();
        if (end > start) out.push_back(v->substr(start, end - start));
        start = end + 1;
    }
    return out;
}

}  // namespace dtsim::calib
