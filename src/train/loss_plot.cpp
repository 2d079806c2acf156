#include "train/loss_plot.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

namespace m3::train {

bool write_loss_plot(const std::string& log_jsonl, const std::string& png, std::string& why) {
  // The log's rows as gnuplot data files: train.dat (step loss kl), eval.dat (step val_loss recall...).
  std::ifstream in(log_jsonl);
  if (!in) {
    why = log_jsonl + ": cannot read";
    return false;
  }
  const std::string base = png.substr(0, png.size() - 4);
  std::ofstream train(base + ".train.dat"), eval(base + ".eval.dat");
  std::string line;
  size_t layers = 0;
  std::vector<bool> measured;  // per layer: recall reported at least once (MSA layers)
  bool any_eval = false;
  double ema = 0.0, ema_kl = 0.0;  // smoothed training curves (a step's batch is noisy)
  int64_t train_rows = 0;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("step")) continue;
    if (j.value("kind", "") == "train") {
      const double loss = j.value("loss", 0.0), kl = j.value("kl", 0.0);
      const double a = std::min(0.9, 1.0 - 1.0 / double(++train_rows));  // a running mean at first
      ema = a * ema + (1 - a) * loss;
      ema_kl = a * ema_kl + (1 - a) * kl;
      train << j["step"].get<int64_t>() << " " << loss << " " << kl << " " << ema << " " << ema_kl << "\n";
    } else if (j.value("kind", "") == "eval") {
      any_eval = true;
      eval << j["step"].get<int64_t>() << " " << j.value("val_loss", 0.0) << " " << j.value("val_kl", 0.0);
      if (j.contains("recall")) {
        layers = std::max(layers, j["recall"].size());
        measured.resize(layers, false);
        size_t l = 0;
        for (const auto& r : j["recall"]) {
          const double v = r.is_number() ? r.get<double>() : -1.0;
          measured[l] = measured[l] || v >= 0;
          ++l;
          eval << " " << v;
        }
      }
      eval << "\n";
    }
  }
  train.close();
  eval.close();
  std::ostringstream gp;
  gp << "set terminal png size 1200,420 font ',10'\nset output '" << png << "'\n"
     << "set multiplot layout 1,3\nset grid\nset key top right\nset xlabel 'step'\n"
     << "set title 'language-model loss'\nset ylabel 'cross-entropy (nats)'\n"
     << "plot '" << base << ".train.dat' using 1:2 with lines lc rgb '#c0c0e0' lw 1 title 'train (per step)', '"
     << base << ".train.dat' using 1:4 with lines lc rgb '#4040a0' lw 2 title 'train (EMA 0.9)'";
  if (any_eval) gp << ", '" << base << ".eval.dat' using 1:2 with linespoints lw 2 pt 7 title 'held-out'";
  gp << "\nset title 'MSA indexer KL (sum over layers)'\nset ylabel 'KL (nats)'\n"
     << "plot '" << base << ".train.dat' using 1:3 with lines lc rgb '#c0c0e0' lw 1 title 'train (per step)', '"
     << base << ".train.dat' using 1:5 with lines lc rgb '#4040a0' lw 2 title 'train (EMA 0.9)'";
  if (any_eval) gp << ", '" << base << ".eval.dat' using 1:3 with linespoints lw 2 pt 7 title 'held-out'";
  gp << "\nset title 'indexer recall (teacher mass in the selected blocks)'\nset ylabel 'recall'\nset yrange [0:1.05]\n";
  std::vector<size_t> shown;
  for (size_t l = 0; l < measured.size(); ++l)
    if (measured[l]) shown.push_back(l);
  if (shown.empty()) gp << "set label 'no indexer recall measured yet' at graph 0.2,0.5\nplot 1/0 notitle";
  for (size_t i = 0; i < shown.size(); ++i)
    gp << (i ? ", " : "plot ") << "'" << base << ".eval.dat' using 1:(($" << 4 + shown[i] << ") >= 0 ? $"
       << 4 + shown[i] << " : 1/0) with linespoints title 'layer " << shown[i] << "'";
  gp << "\nunset multiplot\n";
  FILE* p = popen("gnuplot >/dev/null 2>&1", "w");
  if (p == nullptr) {
    why = "cannot start gnuplot";
    return false;
  }
  std::fputs(gp.str().c_str(), p);
  const int rc = pclose(p);
  if (rc != 0) {
    why = "gnuplot failed (is gnuplot-nox installed? scripts/setup.sh installs it)";
    return false;
  }
  return true;
}

}  // namespace m3::train
