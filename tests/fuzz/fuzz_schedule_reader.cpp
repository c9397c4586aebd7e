// libFuzzer target: the schedule readers (text and CSV; the first byte picks
// which). An input must be read or rejected with a ScheduleFormatError; an
// accepted schedule must pass through the static checks without crashing and
// must write out and read back to the same schedule in both formats.
#include "dtsim/sched/format.hpp"
#include "dtsim/sched/schedule.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    const bool csv = (data[0] & 1) != 0;
    std::istringstream in(std::string(reinterpret_cast<const char*>(data + 1), size - 1));
    dtsim::sched::Schedule s;
    try {
        s = csv ? dtsim::sched::read_schedule_csv(in, "fuzz.csv") : dtsim::sched::read_schedule_text(in, "fuzz.txt");
    } catch (const dtsim::sched::ScheduleFormatError&) {
        return 0;
    }
    (void)dtsim::sched::find_problems(s);
    for (int r = 0; r < s.num_ranks(); ++r)
        for (std::size_t i = 0; i < s.ranks[static_cast<std::size_t>(r)].size(); ++i) (void)s.where(r, i);

    std::ostringstream text, table;
    dtsim::sched::write_schedule_text(s, text);
    dtsim::sched::write_schedule_csv(s, table);
    std::istringstream text_in(text.str()), table_in(table.str());
    if (!(dtsim::sched::read_schedule_text(text_in, "roundtrip.txt") == s)) std::abort();
    if (!(dtsim::sched::read_schedule_csv(table_in, "roundtrip.csv") == s)) std::abort();
    return 0;
}
