// read_trace_fast (fast_reader.hpp): the trace format as dtsim writes it, scanned in blocks of
// 1 MiB. Whatever it meets that it does not read exactly as the checking reader would, it gives
// up on (throws GiveUp), and read_trace_json reads the input again with the checking reader: a
// value the format refuses, a syntax error, a string with an escape or a byte outside printable
// ASCII (but in the meta, which nlohmann parses from its text), a number that nlohmann would
// read as a float where it looks like an integer (one beyond 64 bits) or that from_chars cannot
// read exactly (out of range), a key given twice, values nested more than kMaxSkipDepth deep.
#include "trace/fast_reader.hpp"

#include "dtsim/interrupt.hpp"

#include <nlohmann/json.hpp>

#include <array>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <exception>
#include <istream>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dtsim::detail {
namespace {

struct GiveUp {};

[[noreturn]] void give_up() { throw GiveUp{}; }

constexpr int kMaxSkipDepth = 64;           // below the checking reader's 256

// A number as nlohmann reads it: an integer (no '.', 'e' or 'E'), negative or not, or a float.
struct Number {
    enum class Kind : std::uint8_t { integer, unsigned_integer, real };
    Kind kind = Kind::integer;
    std::int64_t i = 0;
    std::uint64_t u = 0;
    double d = 0;

    [[nodiscard]] double value() const {
        return kind == Kind::integer ? static_cast<double>(i) : kind == Kind::unsigned_integer ? static_cast<double>(u) : d;
    }
    // The checking reader's int64(): an integer that fits in 64 bits signed.
    [[nodiscard]] std::int64_t int64() const {
        if (kind == Kind::integer) return i;
        if (kind == Kind::unsigned_integer && u <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
            return static_cast<std::int64_t>(u);
        give_up();
    }
    // A time, an amount of memory or an amount: finite and >= 0.
    [[nodiscard]] double amount() const {
        const double x = value();
        if (!(x >= 0) || !std::isfinite(x)) give_up();
        return x;
    }
};

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Whether the eight bytes at `q` are ASCII digits, and then their value (the usual SWAR test and
// conversion of little-endian words, as fast_float and simdjson do them). The buffer's zero padding
// makes the eight bytes readable wherever a number's digits are.
bool eight_digits(const char* q, std::uint64_t& value) {
    if constexpr (std::endian::native != std::endian::little) {
        return false;
    } else {
        std::uint64_t v = 0;
        std::memcpy(&v, q, 8);
        if (((v + 0x4646464646464646) | (v - 0x3030303030303030)) & 0x8080808080808080) return false;
        v -= 0x3030303030303030;
        v = v * 10 + (v >> 8);  // pairs of digits in every other byte
        value = ((v & 0x000000FF000000FF) * (100 + (1000000ULL << 32)) +
                 ((v >> 16) & 0x000000FF000000FF) * (1 + (10000ULL << 32))) >> 32;
        return true;
    }
}

// Decimal digits of 0 < x < 10^8: log10 from the bit width (1233 / 4096 ~ log10 2), then one
// comparison.
int decimal_digits(std::uint64_t x) {
    static constexpr std::uint64_t kPow10[] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000};
    const int t = (static_cast<int>(std::bit_width(x)) * 1233) >> 12;
    return t + (x >= kPow10[t] ? 1 : 0);
}

// The bytes a string of the subset holds: printable ASCII but '"' and '\\'.
constexpr auto kPlain = [] {
    std::array<bool, 256> plain{};
    for (int c = 0x20; c < 0x7f; ++c) plain[static_cast<std::size_t>(c)] = c != '"' && c != '\\';
    return plain;
}();

// Whether `s` is `lit`: a comparison of a known length, which the compiler inlines.
template <std::size_t N>
bool is(std::string_view s, const char (&lit)[N]) {
    return s.size() == N - 1 && std::memcmp(s.data(), lit, N - 1) == 0;
}

class FastReader {
public:
    FastReader(std::streambuf* source, std::uint64_t max_bytes, const RankHook& hook)
        : source_(source), max_(max_bytes), hook_(hook), buf_(kBlock + kWindow + kPad, '\0') {
        p_ = end_ = buf_.data();
    }

    void read(Trace& t) {
        fill();
        ws();
        expect('{');
        ws();
        if (*p_ == '}') give_up();  // no format, version or ranks
        enum : unsigned { kFormat = 1, kVersion = 2, kTimeUnit = 4, kMemoryUnit = 8, kCapacity = 16, kMeta = 32,
                          kKinds = 64, kSummary = 128, kRanks = 256 };
        unsigned seen = 0;
        const auto once = [&](unsigned bit) {
            if (seen & bit) give_up();
            seen |= bit;
        };
        std::optional<bool> correct;
        members([&] {
            const std::string k = key();
            if (k == "format") {
                once(kFormat);
                if (string() != "dtsim-trace") give_up();
            } else if (k == "version") {
                once(kVersion);
                if (*p_ != '-' && !is_digit(*p_)) give_up();
                if (number().value() != 1) give_up();
            } else if (k == "time_unit") {
                once(kTimeUnit);
                const std::string_view u = string();
                if (u != "step" && u != "s") give_up();
                t.time_unit = std::string(u);
            } else if (k == "memory_unit") {
                once(kMemoryUnit);
                const std::string_view u = string();
                if (u != "unit" && u != "byte") give_up();
                t.memory_unit = std::string(u);
            } else if (k == "memory_capacity") {
                once(kCapacity);
                t.memory_capacity = number().amount();
            } else if (k == "meta") {
                once(kMeta);
                t.meta = meta();
            } else if (k == "memory_kinds") {
                once(kKinds);
                memory_kinds(t);
            } else if (k == "summary") {
                once(kSummary);
                correct = summary();
            } else if (k == "ranks") {
                once(kRanks);
                ranks(t);
            } else {
                skip(1, /*lenient=*/false);
            }
        });
        ws();
        if (p_ != end_ || !eof_) give_up();  // anything after the document
        if ((seen & (kFormat | kVersion | kRanks)) != (kFormat | kVersion | kRanks)) give_up();
        if (sample_width_ != 0 && sample_width_ != 1 + t.memory_kinds.size()) give_up();
        summarize(t);
        t.summary.correct = correct;
    }

private:
    static constexpr std::size_t kBlock = std::size_t{1} << 20;
    // Every token shorter than this lies whole in the buffer (or the input ends within it).
    static constexpr std::size_t kWindow = std::size_t{1} << 16;
    static constexpr std::size_t kPad = 64;  // zeros after the data: a '\0' ends every scan

    // Moves what is left to the buffer's start and reads a block after it.
    void fill() {
        check_interrupt();
        if (capture_) {
            capture_->append(capture_from_, p_);
            capture_from_ = buf_.data();
        }
        const std::size_t left = static_cast<std::size_t>(end_ - p_);
        std::memmove(buf_.data(), p_, left);
        const std::size_t want = kBlock + kWindow - left;
        std::size_t got = 0;
        try {
            while (got < want) {
                const std::streamsize n =
                    source_->sgetn(buf_.data() + left + got, static_cast<std::streamsize>(want - got));
                if (n <= 0) {
                    eof_ = true;
                    break;
                }
                got += static_cast<std::size_t>(n);
            }
        } catch (const std::exception&) {
            give_up();  // the checking reader says why it cannot be read
        }
        read_ += got;
        if (read_ > max_) give_up();
        p_ = buf_.data();
        end_ = p_ + left + got;
        std::memset(const_cast<char*>(end_), 0, kPad);
    }

    // Skips whitespace; then at least kWindow bytes are in the buffer, or the input ends there.
    [[gnu::always_inline]] void ws() {
        while (is_ws(*p_)) ++p_;
        if (static_cast<std::size_t>(end_ - p_) < kWindow && !eof_) [[unlikely]]
            more();
    }
    [[gnu::noinline]] void more() {
        for (;;) {
            fill();
            while (is_ws(*p_)) ++p_;
            if (static_cast<std::size_t>(end_ - p_) >= kWindow || eof_) return;
        }
    }

    void expect(char c) {
        if (*p_ != c) give_up();
        ++p_;
    }

    // A string of printable ASCII without escapes, as a view into the buffer (valid until the
    // next ws()).
    std::string_view string() {
        if (*p_ != '"') give_up();
        const char* s = ++p_;
        const char* q = s;
        while (kPlain[static_cast<unsigned char>(*q)]) ++q;
        if (*q != '"') give_up();
        p_ = q + 1;
        return {s, static_cast<std::size_t>(q - s)};
    }

    // The colon after a key; then the value's first byte. (A key's view is gone after it.)
    void colon() {
        ws();
        expect(':');
        ws();
    }

    // A key (copied), and its colon.
    std::string key() {
        std::string k(string());
        colon();
        return k;
    }

    // Any string, escapes and bytes beyond ASCII included (the meta's: nlohmann checks them).
    void lenient_string() {
        if (*p_ != '"') give_up();
        const char* q = p_ + 1;
        for (;;) {
            const char c = *q;
            if (c == '"') break;
            if (q == end_) give_up();
            if (c == '\\') {
                ++q;
                if (q == end_) give_up();
            }
            ++q;
        }
        p_ = q + 1;
    }

    // A number as nlohmann's lexer reads it (the JSON grammar; an integer where there is no '.',
    // 'e' or 'E', signed where negative), converted as strtod, strtoll and strtoull convert it.
    Number number() {
        const char* q = p_;
        const bool negative = *q == '-';
        if (negative) ++q;
        // The significant digits, while 19 of them fit in 64 bits.
        std::uint64_t m = 0;
        int digits = 0;  // significant digits (from the first that is not 0)
        const auto digit = [&](char c) {
            if (m != 0 || c != '0') {
                m = m * 10 + static_cast<std::uint64_t>(c - '0');
                ++digits;
            }
        };
        // Eight digits as `digit` takes them one by one: the same m (modulo 2^64) and count.
        const auto eight = [&]() {
            std::uint64_t x = 0;
            if (!eight_digits(q, x)) return false;
            if (m != 0) {
                m = m * 100000000 + x;
                digits += 8;
            } else if (x != 0) {
                m = x;
                digits += decimal_digits(x);
            }
            q += 8;
            return true;
        };
        if (*q == '0') {
            ++q;
        } else if (*q >= '1' && *q <= '9') {
            digit(*q++);
            while (eight()) {}
            while (is_digit(*q)) digit(*q++);
        } else {
            give_up();
        }
        Number n;
        if (*q != '.' && *q != 'e' && *q != 'E') {
            if (digits > 18) {  // perhaps beyond 64 bits: as strtoll and strtoull say
                const char* s = p_;  // the sign included
                if (negative) {
                    n.kind = Number::Kind::integer;
                    const auto r = std::from_chars(s, q, n.i);
                    if (r.ec != std::errc() || r.ptr != q) give_up();  // nlohmann: a float
                } else {
                    n.kind = Number::Kind::unsigned_integer;
                    const auto r = std::from_chars(s, q, n.u);
                    if (r.ec != std::errc() || r.ptr != q) give_up();
                }
            } else if (negative) {
                n.kind = Number::Kind::integer;
                n.i = -static_cast<std::int64_t>(m);
            } else {
                n.kind = Number::Kind::unsigned_integer;
                n.u = m;
            }
            p_ = q;
            return n;
        }
        int exponent = 0;  // of 10, applied to m
        if (*q == '.') {
            ++q;
            if (!is_digit(*q)) give_up();
            while (eight()) exponent -= 8;
            while (is_digit(*q)) {
                digit(*q++);
                --exponent;
            }
        }
        if (*q == 'e' || *q == 'E') {
            ++q;
            const bool minus = *q == '-';
            if (*q == '+' || *q == '-') ++q;
            if (!is_digit(*q)) give_up();
            int e = 0;
            do {
                if (e < 100000) e = e * 10 + (*q - '0');
                ++q;
            } while (is_digit(*q));
            exponent += minus ? -e : e;
        }
        n.kind = Number::Kind::real;
        // Exact: a mantissa below 2^53 and a power of 10 that a double holds, one rounding.
        static constexpr double kPow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                            1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
        if (digits <= 19 && m <= (std::uint64_t{1} << 53) && exponent >= -22 && exponent <= 22) {
            const double v = static_cast<double>(m);
            n.d = exponent < 0 ? v / kPow10[-exponent] : v * kPow10[exponent];
            if (negative) n.d = -n.d;
        } else {
            const auto r = std::from_chars(p_, q, n.d, std::chars_format::general);
            if (r.ec != std::errc() || r.ptr != q) give_up();  // beyond a double, or below its smallest
        }
        p_ = q;
        return n;
    }

    // true, false or null: 1, 0, -1.
    int literal() {
        if (std::memcmp(p_, "true", 4) == 0) {
            p_ += 4;
            return 1;
        }
        if (std::memcmp(p_, "false", 5) == 0) {
            p_ += 5;
            return 0;
        }
        if (std::memcmp(p_, "null", 4) == 0) {
            p_ += 4;
            return -1;
        }
        give_up();
    }

    // Any value, checked (in the strict subset, or with any string where lenient) and not kept.
    void skip(int depth, bool lenient) {
        const char c = *p_;
        if (c == '"') {
            if (lenient)
                lenient_string();
            else
                (void)string();
        } else if (c == '{' || c == '[') {
            if (depth >= kMaxSkipDepth) give_up();
            const char close = c == '{' ? '}' : ']';
            ++p_;
            ws();
            if (*p_ == close) {
                ++p_;
                return;
            }
            for (;;) {
                ws();
                if (c == '{') {
                    if (lenient)
                        lenient_string();
                    else
                        (void)string();
                    colon();
                }
                skip(depth + 1, lenient);
                ws();
                if (*p_ == ',') {
                    ++p_;
                    continue;
                }
                expect(close);
                return;
            }
        } else if (c == '-' || is_digit(c)) {
            (void)number();
        } else {
            (void)literal();
        }
    }

    // The meta, whatever it holds: its text parsed by nlohmann, as the checking reader's parser would.
    nlohmann::json meta() {
        std::string text;
        capture_ = &text;
        capture_from_ = p_;
        skip(2, /*lenient=*/true);
        text.append(capture_from_, p_);
        capture_ = nullptr;
        try {
            return nlohmann::json::parse(text);
        } catch (const nlohmann::json::exception&) {
            give_up();
        }
    }

    // A JSON array, `element` reading each of its elements from its first character.
    template <class F>
    [[gnu::always_inline]] void array(F&& element) {
        expect('[');
        ws();
        if (*p_ == ']') {
            ++p_;
            return;
        }
        for (;;) {
            ws();
            element();
            ws();
            if (*p_ != ',') break;
            ++p_;
        }
        expect(']');
    }

    // The members of an object whose '{' is read and which is not empty: `member` reads each, its key
    // and its value; then the '}'.
    template <class F>
    void members(F&& member) {
        for (;;) {
            ws();
            member();
            ws();
            if (*p_ != ',') break;
            ++p_;
        }
        expect('}');
    }

    void memory_kinds(Trace& t) {
        array([&] {
            const std::string_view k = string();
            if (k.empty() || t.memory_kinds.size() >= kMaxMemoryKinds) give_up();
            for (const auto& have : t.memory_kinds)
                if (have == k) give_up();
            t.memory_kinds.emplace_back(k);
        });
    }

    // The summary's "correct", where it is a boolean.
    std::optional<bool> summary() {
        if (*p_ != '{') {
            skip(1, false);
            return std::nullopt;
        }
        ++p_;
        ws();
        std::optional<bool> correct;
        bool seen = false;
        if (*p_ == '}') {
            ++p_;
            return correct;
        }
        members([&] {
            const bool is_correct = string() == "correct";
            colon();
            if (is_correct) {
                if (seen) give_up();
                seen = true;
                if (*p_ == 't' || *p_ == 'f') {
                    const int b = literal();
                    correct = b == 1;
                } else {
                    skip(2, false);
                }
            } else {
                skip(2, false);
            }
        });
        return correct;
    }

    void ranks(Trace& t) {
        array([&] { rank(t); });
    }

    void rank(Trace& t) {
        expect('{');
        RankTrace& r = t.ranks.emplace_back();
        r.rank = static_cast<int>(t.ranks.size() - 1);
        bool rank_given = false, events_given = false, samples_given = false;
        ws();
        if (*p_ == '}') give_up();
        members([&] {
            const std::string k = key();
            if (k == "rank") {
                if (rank_given) give_up();
                rank_given = true;
                if (*p_ != '-' && !is_digit(*p_)) give_up();
                if (number().int64() != r.rank) give_up();
            } else if (k == "events") {
                if (events_given) give_up();
                events_given = true;
                events(r);
            } else if (k == "memory_by_kind") {
                if (samples_given) give_up();
                samples_given = true;
                samples(r);
            } else {
                skip(3, false);
            }
        });
        if (!rank_given || !events_given) give_up();
        r.events.shrink_to_fit();  // as the checking reader
        if (hook_) hook_(t, r);
    }

    void events(RankTrace& r) {
        array([&] { event(r.events.emplace_back()); });
    }

    enum Field : unsigned {
        kOp = 1, kLayer = 2, kStart = 4, kDuration = 8, kMemory = 16, kBatches = 32, kStream = 64, kBytes = 128,
        kFlops = 256, kOther = 0
    };
    static Field event_field(std::string_view k) {
        switch (k.size()) {
            case 2: return is(k, "op") ? kOp : kOther;
            case 5: return is(k, "layer") ? kLayer : is(k, "start") ? kStart : is(k, "bytes") ? kBytes : is(k, "flops") ? kFlops : kOther;
            case 6: return is(k, "memory") ? kMemory : is(k, "stream") ? kStream : kOther;
            case 7: return is(k, "batches") ? kBatches : kOther;
            case 8: return is(k, "duration") ? kDuration : kOther;
            default: return kOther;
        }
    }

    // An event's field's value, at its first byte.
    void field(Field f, Event& e) {
        switch (f) {
            case kOp: {
                const std::string_view op = string();
                if (op.empty()) give_up();
                op_.assign(op);  // interned once the event is whole
                break;
            }
            case kLayer:
                if (*p_ == 'n') {
                    if (literal() != -1) give_up();
                } else {
                    if (*p_ != '-' && !is_digit(*p_)) give_up();
                    const std::int64_t l = number().int64();
                    if (l < 0 || l > 1'000'000'000) give_up();
                    e.layer = static_cast<std::int32_t>(l);
                }
                break;
            case kStart: e.start = amount(); break;
            case kDuration: {
                if (*p_ != '-' && !is_digit(*p_)) give_up();
                e.duration = number().value();
                if (e.duration < 0) give_up();
                break;
            }
            case kMemory: e.memory = amount(); break;
            case kBatches: batches(e); break;
            case kStream: {
                const std::string_view s = string();
                if (is(s, "comm"))
                    e.stream = Stream::comm;
                else if (!is(s, "compute"))
                    give_up();
                break;
            }
            case kBytes: e.bytes = amount(); break;
            case kFlops: e.flops = amount(); break;
            case kOther: skip(5, false); break;
        }
    }

    // Whether a token of up to kWindow / 2 bytes lies whole in the buffer from here.
    [[nodiscard]] bool room() const { return static_cast<std::size_t>(end_ - p_) >= kWindow / 2 || eof_; }

    // Takes `lit` and the whitespace after it where the text has them here.
    template <std::size_t N>
    bool take(const char (&lit)[N]) {
        static_assert(N - 1 <= kPad);
        if (std::memcmp(p_, lit, N - 1) != 0) return false;
        p_ += N - 1;
        while (is_ws(*p_)) ++p_;
        return true;
    }

    void event(Event& e) {
        unsigned seen = 0;
        bool after_value = false;
        // The fields as dtsim writes them, in its order, taken as whole strings; the generic loop
        // below for whatever is left (or differs).
        if (take(R"({"op":)")) {
            seen = kOp;
            field(kOp, e);
            after_value = true;
            const auto next = [&](Field f, const auto& text) {
                if (room() && take(text)) {
                    seen |= f;
                    field(f, e);
                }
            };
            next(kLayer, R"(, "layer":)");
            next(kStart, R"(, "start":)");
            next(kDuration, R"(, "duration":)");
            next(kMemory, R"(, "memory":)");
            next(kBatches, R"(, "batches":)");
            next(kStream, R"(, "stream":)");
            next(kBytes, R"(, "bytes":)");
            next(kFlops, R"(, "flops":)");
        } else {
            expect('{');
            ws();
            if (*p_ == '}') give_up();  // no op
        }
        for (;;) {
            if (after_value) {
                ws();
                if (*p_ != ',') {
                    expect('}');
                    break;
                }
                ++p_;
            }
            ws();
            const Field f = event_field(string());
            colon();
            if (f != kOther) {
                if (seen & f) give_up();
                seen |= f;
            }
            field(f, e);
            after_value = true;
        }
        if ((seen & (kOp | kStart | kDuration | kMemory)) != (kOp | kStart | kDuration | kMemory)) give_up();
        if (!std::isfinite(e.start + e.duration)) give_up();
        e.op = intern();
    }

    double amount() {
        if (*p_ != '-' && !is_digit(*p_)) give_up();
        return number().amount();
    }

    void batches(Event& e) {
        array([&] {
            if (*p_ != '-' && !is_digit(*p_)) give_up();
            const std::int64_t id = number().int64();
            if (id < 0 || id == std::numeric_limits<std::int64_t>::max()) give_up();  // (the checking reader says why)
            e.batches.insert(id);
        });
    }

    // The operation named op_, from the names this reader has met before.
    OpCode intern() {
        if (have_last_op_ && op_ == last_op_name_) return last_op_;
        auto it = ops_.find(op_);
        if (it == ops_.end()) {
            OpCode code;
            try {
                code = OpCode::of(op_);
            } catch (const std::length_error&) {  // the table is full: the checking reader says where
                give_up();
            }
            it = ops_.emplace(op_, code).first;
        }
        last_op_name_ = op_;
        last_op_ = it->second;
        have_last_op_ = true;
        return last_op_;
    }

    // A rank's memory by kind: samples as wide as every other, times not decreasing.
    void samples(RankTrace& r) {
        std::vector<double>& v = r.memory_by_kind;
        array([&] {
            const std::size_t start = v.size();
            array([&] { v.push_back(amount()); });
            const std::size_t width = v.size() - start;
            if (width < 2) give_up();
            if (sample_width_ == 0)
                sample_width_ = width;
            else if (width != sample_width_)
                give_up();
            if (start >= width && v[start] < v[start - width]) give_up();
        });
    }

    std::streambuf* source_;
    std::uint64_t max_;
    const RankHook& hook_;  // called with each rank read (may be empty)
    std::uint64_t read_ = 0;
    std::string buf_;
    const char* p_;
    const char* end_;
    bool eof_ = false;
    std::string* capture_ = nullptr;  // where the text read is copied to, from capture_from_
    const char* capture_from_ = nullptr;
    std::size_t sample_width_ = 0;  // the numbers of every sample of memory by kind so far
    std::string op_;                // the event's operation name
    std::string last_op_name_;
    OpCode last_op_;
    bool have_last_op_ = false;
    std::unordered_map<std::string, OpCode> ops_;
};

}  // namespace

bool read_trace_fast(std::istream& in, Trace& out, std::uint64_t max_bytes, const RankHook& hook) {
    try {
        FastReader(in.rdbuf(), max_bytes, hook).read(out);
        return true;
    } catch (const GiveUp&) {
        return false;
    }
}

}  // namespace dtsim::detail
