#pragma once
// What every `m3 bench` subcommand prints, in the format -o chooses (llama-bench's convention):
//   md    markdown: the run's facts as "key: value" lines, then one table per section (default);
//   csv   one header line and rows per table, the facts as "# key,value" lines before it;
//   json  one document at the end: {"run": {facts}, "tables": [{"title", "rows": [{key: value}]}]};
//   jsonl one object per row as it is measured, with its table's title and the run's facts.
// The facts always name the CPU path the kernels ran on and the bounds measured in the same run,
// so that a figure can be read against them wherever it ends up.
#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "m3/bench_clock.h"

namespace m3::cli {

enum class ReportFormat { Md, Csv, Json, Jsonl };

// -o/--output md|csv|json|jsonl on a bench subcommand.
CLI::Option* add_report_option(CLI::App* cmd, std::string& value);
ReportFormat report_format_of(const std::string& value);  // value was checked by the option

// One table cell: a number (printed with `format` in md and csv, as a number in JSON) or text.
struct Cell {
  std::string text;
  std::optional<double> number;
  bool integral = false;  // JSON writes the number without a fraction
  Cell(std::string t) : text(std::move(t)) {}  // NOLINT: cells are written as literals in rows
  Cell(const char* t) : text(t) {}              // NOLINT
  Cell(double v, const char* format = "%.1f");
  Cell(long long v) : Cell(double(v), "%.0f") { integral = true; }  // NOLINT
  Cell(int v) : Cell(double(v), "%.0f") { integral = true; }         // NOLINT
};

struct Column {
  std::string key;     // JSON and CSV name
  std::string header;  // markdown header (key when empty)
};

struct MachineBounds {
  double read_bandwidth_gbs = 0, fma_peak_gflops = 0;
};
// Read bandwidth and fp32 FMA peak on `threads` threads (base/machine_bounds), as every bench
// subcommand reports them beside its figures.
MachineBounds measure_machine_bounds(int threads, const BenchClock& clock);

class BenchReport {
 public:
  explicit BenchReport(ReportFormat format) : format_(format) {}
  ~BenchReport();  // json: prints the document if finish() was not called
  BenchReport(const BenchReport&) = delete;
  BenchReport& operator=(const BenchReport&) = delete;

  ReportFormat format() const { return format_; }
  // A fact of the whole run (cpu_path, threads, read_bandwidth_gbs, fma_peak_gflops, ...).
  void fact(const std::string& key, Cell value);
  // Facts every subcommand reports: the CPU paths of the attention and matmul kernels, the
  // threads, and the bounds when measured (0 = not measured).
  void machine_facts(int threads, const MachineBounds& bounds);
  // Starts a table; rows follow until the next table.
  void table(const std::string& title, std::vector<Column> columns);
  void row(std::vector<Cell> cells);
  // A line of prose under a table (md only: footnotes).
  void note(const std::string& text);
  void finish();

 private:
  void print_facts_once();
  ReportFormat format_;
  nlohmann::ordered_json facts_ = nlohmann::ordered_json::object();
  std::vector<std::pair<std::string, std::string>> fact_text_;
  bool facts_printed_ = false, finished_ = false, any_table_ = false;
  std::string title_;
  std::vector<Column> columns_;
  nlohmann::ordered_json tables_ = nlohmann::ordered_json::array();
};

}  // namespace m3::cli
