// m3 bench attention: one attention layer, MSA against dense, at growing context depth.
// For each depth N: the cost of a prefill chunk of C query rows at positions N..N+C-1 (what chunked
// prefill pays there) and of one decode step at N, for MSA (index scoring + selection + sparse
// attention) and dense causal attention, with their FLOPs and bytes against the machine's FMA peak
// and read bandwidth measured in the same run.
#include <algorithm>
#include <cstdio>
#include <memory>

#include "attention/attention_kernels.h"
#include "attention/msa_attention.h"
#include "m3/error.h"
#include "base/machine_bounds.h"
#include "bench_attention_kernels.h"
#include "bench_report.h"
#include "bench_util.h"
#include "cache_type.h"
#include "commands.h"
#include "usage.h"

namespace m3::cli {

namespace {

struct AttnShape {
  std::string name;
  int q_heads, kv_heads, head_dim, index_dim, block, topk;
};

AttnShape shape_named(const std::string& n) {
  if (n == "m3") return {"m3", 64, 4, 128, 128, 128, 16};
  if (n == "small") return {"small", 8, 2, 128, 128, 128, 16};
  if (n == "tiny") return {"tiny", 4, 2, 32, 32, 16, 4};
  // One of M3's four KV groups alone: per thread, what M3 does on a machine with 4x the threads.
  if (n == "m3-group") return {"m3-group", 16, 1, 128, 128, 128, 16};
  fail("unknown attention shape '", n, "' (expected m3, m3-group, small or tiny)");
}

void fill_cache(ThreadPool& pool, KvCache& cache, int64_t tokens) {
  const KvCacheShape& sh = cache.shape();
  pool.parallel_for(tokens, [&](int64_t a, int64_t b) {
    std::vector<float> k(static_cast<size_t>(sh.head_dim)), v(static_cast<size_t>(sh.head_dim)), ik(static_cast<size_t>(sh.index_dim));
    for (int64_t t = a; t < b; ++t) {
      BenchLcg rng{uint64_t(t) * 7919 + 1};  // seeded per token: the same cache however the pool cuts the job
      for (int g = 0; g < sh.kv_heads; ++g) {
        for (auto& x : k) x = rng.next();
        for (auto& x : v) x = rng.next();
        cache.write_kv(0, t, g, k.data(), v.data());
      }
      for (auto& x : ik) x = rng.next();
      cache.write_index_k(0, t, ik.data());
    }
  }, 1024);
}

std::vector<float> random_vector(size_t n, uint64_t seed) {
  BenchLcg rng{seed};
  std::vector<float> v(n);
  for (auto& x : v) x = rng.next();
  return v;
}

struct Point {
  long long n;
  double msa_index_s, msa_attn_s, dense_s;  // prefill chunk
  double msa_decode_s, dense_decode_s;
  bool dense_extrapolated;
  int64_t sparse_pages = 0;  // distinct (group, block) pairs the chunk's rows selected
  // Attention alone of one decode step, one task per group vs blocks split across threads.
  double msa_unsplit_s, msa_split_s, dense_unsplit_s, dense_split_s;
};

}  // namespace

void register_bench_attention(CLI::App* bench) {
  struct Args {
    std::string cache_type = kDefaultCacheType, clock = "wall", output = "md";
    std::string shapes = "m3,tiny", contexts = "4096,16384,65536,131072,262144,524288,1048576", head_dims;
    int chunk = 512, threads = 0, reps = 3;
    long long dense_max = 131072;
    bool skip_bounds = false, kernels = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = bench->add_subcommand("attention", "One attention layer: MSA vs dense at growing context");
  cmd->add_option("--shapes", a->shapes, "Comma-separated: m3, m3-group, small, tiny")->capture_default_str();
  cmd->add_option("--contexts", a->contexts, "Context depths N")->capture_default_str();
  cmd->add_option("--head-dims", a->head_dims,
                  "Comma-separated head sizes (attention and index) to run each shape at, e.g. 32,64,80,96,128,256 "
                  "(default: each shape's own)");
  cmd->add_option("--chunk", a->chunk, "Prefill chunk rows")->capture_default_str()->check(Positive());
  cmd->add_option("--dense-max", a->dense_max, "Largest N at which dense is measured (beyond: extrapolated linearly)")
      ->capture_default_str();
  cmd->add_option("-r,--reps", a->reps, "Repetitions (median)")->capture_default_str()->check(Positive());
  cmd->add_option("-t,--threads", a->threads, "Threads (default: one per usable CPU)");
  add_cache_type_option(cmd, a->cache_type);
  cmd->add_option("--clock", a->clock, "wall, or cpu: process CPU time / threads (on a busy machine)")
      ->check(CLI::IsMember({"wall", "cpu"}))
      ->capture_default_str();
  cmd->add_flag("--skip-bounds", a->skip_bounds, "Do not measure bandwidth and FMA peak");
  cmd->add_flag("--kernels", a->kernels,
                "Instead: time one dense softmax step's kernels alone (q·k, softmax, P·V as the prefill walk calls "
                "them), one thread, cache-resident, on every CPU path this machine runs, for each shape");
  add_report_option(cmd, a->output);
  cmd->callback([a] {
    ThreadPool pool(a->threads);
    const BenchClock clock{a->clock == "cpu", pool.size()};
    const std::vector<long long> contexts = parse_int_list(a->contexts, "--contexts");
    M3_CHECK(!contexts.empty() && contexts.front() <= a->dense_max, "bench attention: --dense-max (", a->dense_max,
             ") is below the first context (", contexts.empty() ? 0 : contexts.front(),
             "): dense is extrapolated from a measured depth, so at least the first must be measured");
    double bw = 0, peak = 0;
    if (!a->skip_bounds && !a->kernels) {  // --kernels measures one core's peak instead
      bw = measure_read_bandwidth(pool, size_t(1) << 30, 3, clock);
      peak = measure_fma_peak(pool, 3, clock);
    }
    BenchReport report(report_format_of(a->output));
    report.machine_facts(pool.size(), {bw, peak});
    report.fact("cache", a->cache_type);
    report.fact("clock", a->clock);

    std::vector<AttnShape> shapes;
    const std::vector<long long> head_dims =
        a->head_dims.empty() ? std::vector<long long>{0} : parse_int_list(a->head_dims, "--head-dims");
    for (size_t start = 0; start <= a->shapes.size();) {
      size_t end = a->shapes.find(',', start);
      if (end == std::string::npos) end = a->shapes.size();
      const AttnShape named = shape_named(a->shapes.substr(start, end - start));
      start = end + 1;
      for (long long d : head_dims) {
        M3_CHECK(a->head_dims.empty() || (d >= 1 && d <= 1024), "--head-dims: expected sizes from 1 to 1024, got ", d);
        AttnShape s = named;
        if (d > 0) s.head_dim = s.index_dim = int(d);
        shapes.push_back(s);
      }
    }
    if (a->kernels) {
      ThreadPool one(1);
      const BenchClock one_clock{clock.cpu, 1};
      const double core_peak = a->skip_bounds ? 0.0 : measure_fma_peak(one, 3, one_clock);
      report.fact("one_core_fma_peak_gflops", Cell(core_peak, "%.0f"));
      for (const AttnShape& s : shapes)
        report_step_kernels({s.name, s.q_heads, s.kv_heads, s.head_dim, s.block}, cache_type_of(a->cache_type),
                            a->reps, one_clock, core_peak, report);
      report.finish();
      return;
    }
    for (const AttnShape& s : shapes) {
      const int C = a->chunk, G = s.kv_heads;
      char title[256];
      std::snprintf(title, sizeof title,
                    "%s: %d query heads, %d KV heads, head_dim %d, index %dx%d, block %d, top-%d; prefill chunk %d rows",
                    s.name.c_str(), s.q_heads, s.kv_heads, s.head_dim, G, s.index_dim, s.block, s.topk, C);
      report.table(title, {{"n", "N"},
                           {"msa_chunk_ms", "MSA chunk ms"},
                           {"msa_index_ms", "index ms"},
                           {"msa_attn_ms", "attn ms"},
                           {"dense_chunk_ms", "dense chunk ms"},
                           {"prefill_ratio", "prefill ratio"},
                           {"msa_decode_ms", "MSA decode ms"},
                           {"dense_decode_ms", "dense decode ms"},
                           {"decode_ratio", "decode ratio"},
                           {"index_gflops", "index GFLOP/s"},
                           {"sparse_attn_gflops", "sparse attn GFLOP/s"},
                           {"dense_gflops", "dense GFLOP/s"},
                           {"index_of_peak", "index % of peak"},
                           {"sparse_attn_of_peak", "sparse attn % of peak"},
                           {"sparse_attn_bound_ms", "sparse attn bound ms"},
                           {"sparse_attn_of_bound", "sparse attn % of bound"},
                           {"msa_decode_gbs", "MSA decode GB/s"},
                           {"decode_bound_ms", "decode bound ms"},
                           {"dense_extrapolated", "dense extrapolated"}});
      std::vector<Point> pts;
      for (long long N : contexts) {
        KvCacheShape cs;
        cs.num_layers = 1;
        cs.block_size = s.block;
        cs.kv_heads = G;
        cs.head_dim = s.head_dim;
        cs.index_dim = s.index_dim;
        cs.layer_has_index = {true};
        cs.dtype = cache_type_of(a->cache_type);
        KvCache cache(cs);
        cache.ensure_capacity(N + C);
        fill_cache(pool, cache, N + C);
        cache.set_length(N + C);
        const auto q = random_vector(size_t(C) * s.q_heads * s.head_dim, 11);
        const auto iq = random_vector(size_t(C) * G * s.index_dim, 12);
        std::vector<float> out(size_t(C) * s.q_heads * s.head_dim);
        AttentionRun run;
        run.q = q.data();
        run.iq = iq.data();
        run.first_pos = N;
        run.rows = C;
        run.q_heads = s.q_heads;
        run.kv_heads = G;
        run.head_dim = s.head_dim;
        run.index_dim = s.index_dim;
        run.topk = s.topk;
        BlockSelection sel;
        Point p{N, 0, 0, 0, 0, 0, false, 0, 0, 0, 0, 0};
        p.msa_index_s = time_runs(a->reps, 1, [&] { msa_select_run(pool, cache, 0, run, sel); }, clock).median;
        p.msa_attn_s = time_runs(a->reps, 1, [&] { attention_run(pool, cache, 0, run, &sel, out.data()); }, clock).median;
        // The pages the chunk's sparse attention cannot avoid reading: every (group, block) some
        // row selected, once (a tile reads each of its pages once; scattered selections share few).
        {
          const int64_t nblocks = (N + C + s.block - 1) / s.block;
          std::vector<char> seen(size_t(G * nblocks), 0);
          int64_t distinct = 0;
          for (int64_t t = 0; t < int64_t(sel.count.size()); ++t)
            for (int32_t j = 0; j < sel.count[size_t(t)]; ++j) {
              char& f = seen[size_t((t % G) * nblocks + sel.blocks[size_t(t * sel.topk + j)])];
              distinct += f == 0;
              f = 1;
            }
          p.sparse_pages = distinct;
        }
        AttentionRun dec = run;
        dec.rows = 1;
        p.msa_decode_s = time_runs(a->reps * 3, 1, [&] {
          msa_select_run(pool, cache, 0, dec, sel);
          attention_run(pool, cache, 0, dec, &sel, out.data());
        }, clock).median;
        if (N <= a->dense_max) {
          p.dense_s = time_runs(a->reps, 0, [&] { attention_run(pool, cache, 0, run, nullptr, out.data()); }, clock).median;
          p.dense_decode_s = time_runs(a->reps * 3, 1, [&] { attention_run(pool, cache, 0, dec, nullptr, out.data()); }, clock).median;
        } else {
          // Dense cost per chunk and per decode step grows linearly with N: scale the largest measured point.
          const Point& m = pts.back();
          p.dense_s = m.dense_s * (double(N) + C / 2.0) / (double(m.n) + C / 2.0);
          p.dense_decode_s = m.dense_decode_s * double(N) / double(m.n);
          p.dense_extrapolated = true;
        }
        if (pool.size() > G) {  // the decode split has work to do: time it against one task per group
          AttentionRun unsplit = dec;
          unsplit.split_decode = false;
          msa_select_run(pool, cache, 0, dec, sel);
          p.msa_split_s = time_runs(a->reps * 3, 1, [&] { attention_run(pool, cache, 0, dec, &sel, out.data()); }, clock).median;
          p.msa_unsplit_s = time_runs(a->reps * 3, 1, [&] { attention_run(pool, cache, 0, unsplit, &sel, out.data()); }, clock).median;
          if (N <= a->dense_max) {
            p.dense_split_s = p.dense_decode_s;
            p.dense_unsplit_s = time_runs(a->reps * 3, 1, [&] { attention_run(pool, cache, 0, unsplit, nullptr, out.data()); }, clock).median;
          }
        }
        pts.push_back(p);

        const double hd = s.head_dim, Hq = s.q_heads, kb = std::min<double>(N, double(s.topk) * s.block);
        const double index_flops = 2.0 * C * G * s.index_dim * double(N);
        const double attn_flops = 4.0 * C * Hq * hd * kb;
        const double dense_flops = 4.0 * C * Hq * hd * (double(N) + C / 2.0);
        const double eb = double(dtype_size(cs.dtype));  // bytes per cached element
        const double decode_bytes = double(N) * s.index_dim * eb + double(G) * kb * hd * 2 * eb;
        // One decode step is bandwidth-bound at depth, but at small N its arithmetic (every query
        // head against its group's selected keys, plus the index scan) takes longer than its bytes.
        const double decode_flops = 4.0 * Hq * hd * kb + 2.0 * G * s.index_dim * double(N);
        const double decode_bound_s = std::max(bw > 0 ? decode_bytes / (bw * 1e9) : 0.0, peak > 0 ? decode_flops / (peak * 1e9) : 0.0);
        const double index_rate = index_flops / p.msa_index_s / 1e9, attn_rate = attn_flops / p.msa_attn_s / 1e9;
        // Sparse attention of the chunk cannot beat its arithmetic at the FMA peak, nor reading
        // its selected K and V pages once at the measured bandwidth (the tiny shape, whose blocks
        // hold 4 KFLOP per page, is bound by the second).
        const double page_bytes = double(s.block) * hd * 2 * eb;
        const double sparse_bound_s = std::max(peak > 0 ? attn_flops / (peak * 1e9) : 0.0,
                                               bw > 0 ? double(p.sparse_pages) * page_bytes / (bw * 1e9) : 0.0);
        // An extrapolated dense time says nothing about the kernel's rate: no GFLOP/s for it.
        const Cell dense_rate = p.dense_extrapolated ? Cell("–") : Cell(dense_flops / p.dense_s / 1e9, "%.0f");
        const Cell no_peak("–");
        report.row({N, Cell(1e3 * (p.msa_index_s + p.msa_attn_s)), Cell(1e3 * p.msa_index_s), Cell(1e3 * p.msa_attn_s),
                    Cell(1e3 * p.dense_s), Cell(p.dense_s / (p.msa_index_s + p.msa_attn_s), "%.1fx"),
                    Cell(1e3 * p.msa_decode_s, "%.3f"), Cell(1e3 * p.dense_decode_s, "%.3f"),
                    Cell(p.dense_decode_s / p.msa_decode_s, "%.1fx"), Cell(index_rate, "%.0f"), Cell(attn_rate, "%.0f"),
                    dense_rate, peak > 0 ? Cell(100 * index_rate / peak, "%.0f%%") : no_peak,
                    peak > 0 ? Cell(100 * attn_rate / peak, "%.0f%%") : no_peak,
                    sparse_bound_s > 0 ? Cell(1e3 * sparse_bound_s, "%.3f") : no_peak,
                    sparse_bound_s > 0 ? Cell(100 * sparse_bound_s / p.msa_attn_s, "%.0f%%") : no_peak,
                    Cell(decode_bytes / p.msa_decode_s / 1e9, "%.1f"), Cell(1e3 * decode_bound_s, "%.3f"),
                    p.dense_extrapolated ? "yes" : "no"});
      }
      if (contexts.back() > a->dense_max) report.note("Dense beyond --dense-max is extrapolated linearly from the largest measured depth.");
      if (pool.size() > G) {
        char split_title[256];
        std::snprintf(split_title, sizeof split_title,
                      "%s: decode attention (after selection), %d threads on %d KV groups: one task per group vs each"
                      " group's blocks split across threads (log-sum-exp merge)", s.name.c_str(), pool.size(), G);
        report.table(split_title, {{"n", "N"},
                                   {"msa_unsplit_ms", "MSA one task/group ms"},
                                   {"msa_split_ms", "MSA split ms"},
                                   {"msa_speedup", "speedup"},
                                   {"dense_unsplit_ms", "dense one task/group ms"},
                                   {"dense_split_ms", "dense split ms"},
                                   {"dense_speedup", "speedup"}});
        for (const Point& p : pts) {
          const bool dense = p.dense_unsplit_s > 0;
          report.row({p.n, Cell(1e3 * p.msa_unsplit_s, "%.3f"), Cell(1e3 * p.msa_split_s, "%.3f"),
                      Cell(p.msa_unsplit_s / p.msa_split_s, "%.2fx"), dense ? Cell(1e3 * p.dense_unsplit_s, "%.3f") : Cell("–"),
                      dense ? Cell(1e3 * p.dense_split_s, "%.3f") : Cell("–"),
                      dense ? Cell(p.dense_unsplit_s / p.dense_split_s, "%.2fx") : Cell("–")});
        }
      }
    }
    report.finish();
  });
}

}  // namespace m3::cli
