// The action notation and the two file formats: PyTorch's CSV and the per-rank
// text lists, read back exactly as written, and errors that name the file, the
// line and the column or cell.
#include "dtsim/sched/format.hpp"
#include "dtsim/sched/generators.hpp"
#include "dtsim/sched/lowering.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using namespace dtsim::sched;

namespace {

std::string error_of_text(const std::string& text, const std::string& source = "f.txt") {
    std::istringstream in(text);
    try {
        read_schedule_text(in, source);
    } catch (const ScheduleFormatError& e) {
        return e.what();
    }
    return "no error";
}

std::string error_of_csv(const std::string& text, const std::string& source = "f.csv") {
    std::istringstream in(text);
    try {
        read_schedule_csv(in, source);
    } catch (const ScheduleFormatError& e) {
        return e.what();
    }
    return "no error";
}

Schedule text_round_trip(const Schedule& s) {
    std::ostringstream out;
    write_schedule_text(s, out);
    std::istringstream in(out.str());
    return read_schedule_text(in, "round-trip.txt");
}

Schedule csv_round_trip(const Schedule& s) {
    std::ostringstream out;
    write_schedule_csv(s, out);
    std::istringstream in(out.str());
    return read_schedule_csv(in, "round-trip.csv");
}

std::string parse_error(const std::string& token) {
    try {
        parse_action(token);
    } catch (const std::invalid_argument& e) {
        return e.what();
    }
    return "no error";
}

}  // namespace

TEST_CASE("every action type prints in PyTorch's spelling and parses back") {
    const Action all[] = {
        {0, ActionType::forward, 0},          {1, ActionType::full_backward, 0},
        {0, ActionType::backward_input, 2},   {0, ActionType::backward_weight, 2},
        {3, ActionType::send_f, 12},          {4, ActionType::recv_f, 12},
        {4, ActionType::send_b, 7},           {3, ActionType::recv_b, 7},
        {1, ActionType::unshard, kNoMicrobatch}, {1, ActionType::reshard, kNoMicrobatch},
        {2, ActionType::reduce_grad, kNoMicrobatch},
    };
    const char* text[] = {"0F0",       "1B0",      "0I2",      "0W2",      "3SEND_F12",    "4RECV_F12",
                          "4SEND_B7",  "3RECV_B7", "1UNSHARD", "1RESHARD", "2REDUCE_GRAD"};
    for (std::size_t i = 0; i < std::size(all); ++i) {
        CHECK(to_string(all[i]) == text[i]);
        CHECK(parse_action(text[i]) == all[i]);
    }
    CHECK(parse_action("  12F345 ") == act::F(12, 345));
}

TEST_CASE("a malformed action says what was expected and what was found") {
    CHECK(parse_error("F0").find("'F0' does not start with a stage index") != std::string::npos);
    CHECK(parse_error("0X1").find("unknown action type 'X'") != std::string::npos);
    CHECK(parse_error("0X1").find("expected an action <stage><type><microbatch> such as 0F0") != std::string::npos);
    CHECK(parse_error("0F").find("F needs a microbatch index, as in 0F0") != std::string::npos);
    CHECK(parse_error("0UNSHARD3").find("UNSHARD takes no microbatch index") != std::string::npos);
    CHECK(parse_error("0F0x").find("unexpected 'x' after the action") != std::string::npos);
    CHECK(parse_error("0f0").find("unknown action type 'f'") != std::string::npos);
    CHECK(parse_error("99999999F0").find("the stage index is too large") != std::string::npos);
    CHECK(parse_error("").find("empty action") != std::string::npos);
}

TEST_CASE("every generated schedule survives the text and CSV formats unchanged") {
    for (const auto& g : generators())
        for (int p : {1, 2, 4})
            for (int m : {4, 8}) {
                GenerateParams q;
                q.p = p;
                q.m = m;
                q.v = g.takes_chunks ? 2 : 1;
                Schedule s;
                try {
                    s = generate(g.name, q);
                } catch (const std::invalid_argument&) {
                    continue;  // e.g. interleaved needs m >= p
                }
                CAPTURE(g.name);
                CAPTURE(p);
                CAPTURE(m);
                CHECK(text_round_trip(s) == s);
                CHECK(csv_round_trip(s) == s);
                const Schedule lowered = lower(s);
                CHECK(text_round_trip(lowered) == lowered);
                CHECK(csv_round_trip(lowered) == lowered);
            }
}

TEST_CASE("the CSV form is PyTorch's: one row per rank, one action per cell") {
    std::ostringstream out;
    write_schedule_csv(one_f_one_b(2, 3), out);
    CHECK(out.str() == "0F0,0F1,0B0,0F2,0B1,0B2\n1F0,1B0,1F1,1B1,1F2,1B2\n");
}

TEST_CASE("the text form lists each rank on one line after a comment") {
    std::ostringstream out;
    write_schedule_text(one_f_one_b(2, 2), out);
    CHECK(out.str() ==
          "# dtsim pipeline schedule 1f1b: 2 ranks, 2 stages, 2 microbatches\n"
          "# rank R: its actions in order; <stage><F|B|I|W|SEND_F|RECV_F|SEND_B|RECV_B><microbatch>\n"
          "rank 0: 0F0 0F1 0B0 0B1\n"
          "rank 1: 1F0 1B0 1F1 1B1\n");
}

TEST_CASE("CSV written by Python's csv module reads: CRLF, empty cells for None, quoting") {
    // PyTorch's pipeline_order pads ranks with None, which csv.writer writes as empty cells.
    std::istringstream in("0F0,0F1,,0B0,0B1\r\n,1F0,1B0,1F1,1B1\r\n");
    const Schedule s = read_schedule_csv(in, "torch.csv");
    CHECK(s == one_f_one_b(2, 2));
    CHECK(s.source == "torch.csv");
    CHECK(s.where(1, 0) == "torch.csv:2: cell 2");

    std::istringstream quoted("\"0F0\",\" 0B0 \"\n\"1F0\",1B0\n");
    CHECK(read_schedule_csv(quoted, "q.csv") == gpipe(2, 1));
}

TEST_CASE("an empty CSV line is a rank without actions, as for csv.reader") {
    std::istringstream in("0F0,0B0\n\n");
    const Schedule s = read_schedule_csv(in, "f.csv");
    CHECK(s.num_ranks() == 2);
    CHECK(s.ranks[1].empty());
}

TEST_CASE("the text form accepts Python's printed lists, commas, None and continuation lines") {
    std::istringstream in(
        "# comment\n"
        "0: [0F0, 0F1, None, 0B0, 0B1]   # trailing comment\n"
        "rank 1:\n"
        "  1F0 1B0\n"
        "  1F1,1B1\n");
    const Schedule s = read_schedule_text(in, "py.txt");
    CHECK(s == one_f_one_b(2, 2));
    CHECK(s.where(0, 2) == "py.txt:2:21");
    CHECK(s.where(1, 2) == "py.txt:5:3");
}

TEST_CASE("ranks may be listed in any order, each exactly once") {
    std::istringstream in("rank 1: 1F0 1B0\nrank 0: 0F0 0B0\n");
    CHECK(read_schedule_text(in, "f.txt") == gpipe(2, 1));
    CHECK(error_of_text("rank 0: 0F0\nrank 0: 0B0\n") == "f.txt:2:1: rank 0 is listed twice (first at line 1)");
    CHECK(error_of_text("rank 0: 0F0 0B0\nrank 2: 2F0\n") ==
          "f.txt: rank 1 is missing: the ranks must be 0..2, each listed once");
    CHECK(error_of_text("# nothing\n") == "f.txt: no ranks: the file lists no schedule");
}

TEST_CASE("text errors name the file, the line and the column") {
    CHECK(error_of_text("rank 0: 0F0 0B0\nrank 1: 1F0 1Q0\n").rfind("f.txt:2:13: rank 1: '1Q0': unknown action type 'Q'",
                                                                   0) == 0);
    CHECK(error_of_text("0F0 0B0\n") == "f.txt:1:1: expected 'rank N:' before the first action, got '0F0'");
    CHECK(error_of_text("rank x: 0F0\n") == "f.txt:1:1: expected a rank number after 'rank'");
    CHECK(error_of_text("rank 0 0F0\n") == "f.txt:1:1: expected ':' after 'rank 0'");
}

TEST_CASE("CSV errors name the file, the line, the cell and the rank") {
    CHECK(error_of_csv("0F0,0B0\n1F0,,1B\n").rfind("f.csv:2: cell 3 (rank 1): '1B': B needs a microbatch index", 0) ==
          0);
    CHECK(error_of_csv("0F0,\"0B0\n") == "f.csv:1: cell 2 (rank 0): unterminated quoted field");
    CHECK(error_of_csv("0F0,\"0B0\"x\n") == "f.csv:1: cell 2 (rank 0): unexpected 'x' after a quoted field");
}

TEST_CASE("files: the extension picks the format, the stem names the schedule") {
    const auto dir = std::filesystem::temp_directory_path() / "dtsim-sched-format-test";
    std::filesystem::create_directories(dir);
    const Schedule s = interleaved_1f1b(2, 4, 2);
    for (const char* name : {"s.csv", "s.CSV", "s.txt", "s.schedule"}) {
        const std::string path = (dir / name).string();
        write_schedule_file(s, path);
        const Schedule back = read_schedule_file(path);
        CHECK(back == s);
        CHECK(back.name == "s");
        CHECK(back.source == path);
    }
    std::ifstream csv(dir / "s.csv");
    std::string first;
    std::getline(csv, first);
    CHECK(first.rfind("0F0,0F1,2F0,2F1", 0) == 0);  // CSV, not the text form's comment
    CHECK(format_from_path("a/b.CsV") == FileFormat::csv);
    CHECK(format_from_path("a/b.txt") == FileFormat::text);
    try {
        read_schedule_file((dir / "missing.csv").string());
        FAIL("no error");
    } catch (const ScheduleFormatError& e) {
        CHECK(std::string(e.what()).find("missing.csv: cannot open") != std::string::npos);
    }
    std::filesystem::remove_all(dir);
}

TEST_CASE("the example files in configs/schedules read as the generators' schedules") {
    const std::string dir = DTSIM_SCHEDULES;
    CHECK(read_schedule_file(dir + "/1f1b_p4_m8.txt") == one_f_one_b(4, 8));
    CHECK(read_schedule_file(dir + "/1f1b_p4_m8.csv") == one_f_one_b(4, 8));
    CHECK(read_schedule_file(dir + "/1f1b_p4_m8_comms.csv") == lower(one_f_one_b(4, 8)));
    CHECK(read_schedule_file(dir + "/interleaved_p4_m8_v2.csv") == interleaved_1f1b(4, 8, 2));
    CHECK(read_schedule_file(dir + "/zbh1_p4_m8.txt") == zb_h1(4, 8));
    CHECK(read_schedule_file(dir + "/dualpipev_p4_m8.txt") == dualpipev(4, 8));
    try {
        read_schedule_file(dir + "/broken_syntax.csv");
        FAIL("no error");
    } catch (const ScheduleFormatError& e) {
        CHECK(std::string(e.what()).find("broken_syntax.csv:2: cell 2 (rank 1): '1X1': unknown action type 'X'") !=
              std::string::npos);
    }
}

TEST_CASE("OVERLAP_F_B pairs read and write as PyTorch's _Action with sub_actions") {
    // torch/distributed/pipelining/schedules.py: _Action.__repr__ writes an action
    // with sub_actions as "(" + ";".join(sub reprs) + ")" + computation type, and
    // _Action.from_str reads it back (strip()ing each sub-action).
    std::istringstream in("rank 0: 0F0 (0F1; 1B0)OVERLAP_F_B, 0B1\nrank 1: 1F0 1F1 1B1\n");
    const Schedule s = read_schedule_text(in, "p.txt");
    REQUIRE(s.ranks[0].size() == 4);
    CHECK(s.ranks[0][1] == act::F_overlapped(0, 1));
    CHECK(s.ranks[0][2] == act::B(1, 0));
    CHECK(s.where(0, 1) == "p.txt:1:13");
    CHECK(s.where(0, 2) == "p.txt:1:13");
    CHECK(action_strings(s.ranks[0]) == std::vector<std::string>{"0F0", "(0F1;1B0)OVERLAP_F_B", "0B1"});
    CHECK(text_round_trip(s) == s);
    CHECK(csv_round_trip(s) == s);
    std::ostringstream csv;
    write_schedule_csv(s, csv);
    CHECK(csv.str() == "0F0,(0F1;1B0)OVERLAP_F_B,0B1\n1F0,1F1,1B1\n");
    std::istringstream cin(csv.str());
    const Schedule c = read_schedule_csv(cin, "p.csv");
    CHECK(c == s);
    CHECK(c.where(0, 2) == "p.csv:1: cell 2");
    const Schedule d = dualpipev(3, 7);
    CHECK(text_round_trip(d) == d);
    CHECK(csv_round_trip(d) == d);
}

TEST_CASE("malformed OVERLAP_F_B pairs are errors at their file, line and column") {
    CHECK(error_of_text("rank 0: 0F0\nrank 1: 1F0 (1F1;0B0)OVERLAP\n") ==
          "f.txt:2:13: rank 1: '(1F1;0B0)OVERLAP': the type after the sub-actions is 'OVERLAP': expected an "
          "overlapped pair (<forward>;<full backward>)OVERLAP_F_B such as (0F5;7B2)OVERLAP_F_B");
    CHECK(error_of_text("rank 0: (0B0;0F1)OVERLAP_F_B\n").find(
              "f.txt:1:9: rank 0: '(0B0;0F1)OVERLAP_F_B': the sub-actions are 0B0 and 0F1") == 0);
    CHECK(error_of_text("rank 0: (0F1;0B0;0W0)OVERLAP_F_B\n").find("exactly two sub-actions") != std::string::npos);
    CHECK(error_of_text("rank 0: (0F1;0B0\n").find("f.txt:1:9: rank 0: '(0F1;0B0': no ')' closes") == 0);
    CHECK(error_of_text("rank 0: (0F1;0X0)OVERLAP_F_B\n").find("unknown action type 'X'") != std::string::npos);
    CHECK(error_of_csv("0F0,(0F1;0I0)OVERLAP_F_B\n").find("f.csv:1: cell 2 (rank 0): '(0F1;0I0)OVERLAP_F_B': the "
                                                          "sub-actions are 0F1 and 0I0") == 0);
    CHECK(parse_error("(0F1;0B0)OVERLAP_F_B").find("an overlapped pair is not a single action here") !=
          std::string::npos);
}

// A bad cell of 50 KB was echoed whole in its one-line error.
TEST_CASE("a long bad action is quoted shortened, in either format") {
    const std::string cell(50000, 'x');
    const std::string csv = error_of_csv("0F0," + cell + "\n");
    CHECK(csv.rfind("f.csv:1: cell 2 (rank 0): '" + std::string(48, 'x') + "... (50000 bytes)' does not start with a "
                    "stage index: expected an action",
                    0) == 0);
    CHECK(csv.size() < 400);
    const std::string text = error_of_text("rank 0: 0F0 7" + cell + "\n");
    CHECK(text.rfind("f.txt:1:13: rank 0: '7" + std::string(47, 'x') + "... (50001 bytes)': unknown action type '" +
                         std::string(48, 'x') + "... (50000 bytes)'",
                     0) == 0);
    CHECK(text.size() < 600);
    CHECK(error_of_text(cell + "\n").size() < 200);  // before the first rank header
    // Short ones stay whole.
    CHECK(error_of_csv("1B0x\n") == "f.csv:1: cell 1 (rank 0): '1B0x': unexpected 'x' after the action: expected an "
                                     "action <stage><type><microbatch> such as 0F0, with type F, B, I, W, SEND_F, RECV_F, "
                                     "SEND_B or RECV_B (or <stage>UNSHARD, RESHARD, REDUCE_GRAD, or a pair "
                                     "(<F>;<B>)OVERLAP_F_B)");
}

TEST_CASE("a schedule file that cannot be opened or written says why") {
    const auto dir = std::filesystem::temp_directory_path() / "dtsim-sched-open-test";
    std::filesystem::create_directories(dir);
    try {
        read_schedule_file(dir.string());
        FAIL("no error");
    } catch (const ScheduleFormatError& e) {
        CHECK(std::string(e.what()) == dir.string() + ": cannot open: it is a directory");
    }
    try {
        read_schedule_file((dir / "missing.csv").string());
        FAIL("no error");
    } catch (const ScheduleFormatError& e) {
        CHECK(std::string(e.what()) == (dir / "missing.csv").string() + ": cannot open: No such file or directory");
    }
    const std::string long_name = (dir / (std::string(300, 'a') + ".txt")).string();
    try {
        write_schedule_file(interleaved_1f1b(2, 4, 2), long_name);
        FAIL("no error");
    } catch (const std::runtime_error& e) {
        CHECK(std::string(e.what()) == long_name + ": cannot open for writing: File name too long");
    }
    std::filesystem::remove_all(dir);
}
