#include "bench_report.h"

#include <cstdio>

#include "attention/attention_kernels.h"
#include "base/cpu_features.h"
#include "base/machine_bounds.h"
#include "base/thread_pool.h"
#include "kernels/matmul.h"
#include "m3/error.h"

namespace m3::cli {

namespace {

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

nlohmann::ordered_json json_of(const Cell& c) {
  if (c.number && c.integral) return (long long)*c.number;
  if (c.number) return *c.number;
  return c.text;
}

}  // namespace

CLI::Option* add_report_option(CLI::App* cmd, std::string& value) {
  return cmd->add_option("-o,--output", value, "Output format: md, csv, json (one document) or jsonl (one object per row)")
      ->check(CLI::IsMember({"md", "csv", "json", "jsonl"}))
      ->capture_default_str();
}

ReportFormat report_format_of(const std::string& value) {
  if (value == "csv") return ReportFormat::Csv;
  if (value == "json") return ReportFormat::Json;
  if (value == "jsonl") return ReportFormat::Jsonl;
  return ReportFormat::Md;
}

Cell::Cell(double v, const char* format) : number(v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  text = buf;
}

BenchReport::~BenchReport() {
  if (!finished_ && format_ == ReportFormat::Json) finish();
}

void BenchReport::fact(const std::string& key, Cell value) {
  M3_CHECK(!facts_printed_, "bench report: fact '", key, "' after the first table");
  facts_[key] = json_of(value);
  fact_text_.emplace_back(key, value.text);
}

MachineBounds measure_machine_bounds(int threads, const BenchClock& clock) {
  ThreadPool pool(threads);
  return {measure_read_bandwidth(pool, size_t(1) << 30, 3, clock), measure_fma_peak(pool, 3, clock)};
}

void BenchReport::machine_facts(int threads, const MachineBounds& bounds) {
  fact("cpu_path", cpu_path_name(cpu_active_path()));
  fact("best_cpu_path", cpu_path_name(cpu_best_path()));
  fact("attention_kernels", attention_kernel_name());
  fact("matmul_kernels", matmul_kernel_name());
  fact("mxfp8_widening", mxfp8_widening_name());
  fact("threads", threads);
  if (bounds.read_bandwidth_gbs > 0) fact("read_bandwidth_gbs", Cell(bounds.read_bandwidth_gbs, "%.1f"));
  if (bounds.fma_peak_gflops > 0) fact("fma_peak_gflops", Cell(bounds.fma_peak_gflops, "%.0f"));
}

void BenchReport::print_facts_once() {
  if (facts_printed_) return;
  facts_printed_ = true;
  if (format_ == ReportFormat::Md) {
    std::string line;
    for (const auto& [k, v] : fact_text_) line += (line.empty() ? "" : ", ") + k + " " + v;
    if (!line.empty()) std::printf("%s\n\n", line.c_str());
  } else if (format_ == ReportFormat::Csv) {
    for (const auto& [k, v] : fact_text_) std::printf("# %s,%s\n", csv_field(k).c_str(), csv_field(v).c_str());
  }
}

void BenchReport::table(const std::string& title, std::vector<Column> columns) {
  print_facts_once();
  title_ = title;
  columns_ = std::move(columns);
  switch (format_) {
    case ReportFormat::Md: {
      std::printf("%s## %s\n\n|", any_table_ ? "\n" : "", title.c_str());
      any_table_ = true;
      for (const Column& c : columns_) std::printf(" %s |", (c.header.empty() ? c.key : c.header).c_str());
      std::printf("\n|");
      for (size_t i = 0; i < columns_.size(); ++i) std::printf("---|");
      std::printf("\n");
      break;
    }
    case ReportFormat::Csv: {
      std::printf("\n# %s\n", csv_field(title).c_str());
      for (size_t i = 0; i < columns_.size(); ++i) std::printf("%s%s", i ? "," : "", csv_field(columns_[i].key).c_str());
      std::printf("\n");
      break;
    }
    case ReportFormat::Json:
      tables_.push_back({{"title", title}, {"rows", nlohmann::ordered_json::array()}});
      break;
    case ReportFormat::Jsonl: break;
  }
}

void BenchReport::row(std::vector<Cell> cells) {
  M3_CHECK(cells.size() == columns_.size(), "bench report: a row of ", cells.size(), " cells in a table of ",
           columns_.size(), " columns (", title_, ")");
  switch (format_) {
    case ReportFormat::Md:
      std::printf("|");
      for (const Cell& c : cells) std::printf(" %s |", c.text.c_str());
      std::printf("\n");
      break;
    case ReportFormat::Csv:
      for (size_t i = 0; i < cells.size(); ++i) std::printf("%s%s", i ? "," : "", csv_field(cells[i].text).c_str());
      std::printf("\n");
      break;
    case ReportFormat::Json: {
      nlohmann::ordered_json r = nlohmann::ordered_json::object();
      for (size_t i = 0; i < cells.size(); ++i) r[columns_[i].key] = json_of(cells[i]);
      tables_.back()["rows"].push_back(std::move(r));
      break;
    }
    case ReportFormat::Jsonl: {
      nlohmann::ordered_json r = nlohmann::ordered_json::object();
      r["table"] = title_;
      for (size_t i = 0; i < cells.size(); ++i) r[columns_[i].key] = json_of(cells[i]);
      for (const auto& [k, v] : facts_.items())
        if (!r.contains(k)) r[k] = v;
      std::printf("%s\n", r.dump().c_str());
      break;
    }
  }
  std::fflush(stdout);
}

void BenchReport::note(const std::string& text) {
  if (format_ == ReportFormat::Md) std::printf("\n%s\n\n", text.c_str());
}

void BenchReport::finish() {
  if (finished_) return;
  finished_ = true;
  print_facts_once();
  if (format_ == ReportFormat::Json) {
    nlohmann::ordered_json doc = {{"run", facts_}, {"tables", tables_}};
    std::printf("%s\n", doc.dump(2).c_str());
  }
  std::fflush(stdout);
}

}  // namespace m3::cli
