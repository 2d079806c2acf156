// `m3 tokenize`: encode text to ids (or decode ids to text) with a model's tokenizer.json.
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "m3/error.h"
#include "commands.h"
#include "tokenizer_path.h"
#include "m3/tokenizer.h"

namespace m3::cli {
namespace {

struct TokenizeOptions {
  std::string model;
  std::string text;
  std::vector<std::string> files;
  bool special = false;
  bool decode = false;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  M3_CHECK(in.good(), path, ": cannot open input file");
  std::ostringstream text;
  text << in.rdbuf();
  M3_CHECK(!in.bad(), path, ": read error");
  return text.str();
}

// Parses "1,2, 3" (commas and/or whitespace between ids).
std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos < text.size()) {
    if (text[pos] == ',' || std::isspace(static_cast<unsigned char>(text[pos]))) {
      ++pos;
      continue;
    }
    size_t end = pos;
    while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
    M3_CHECK(end > pos && end - pos <= 9, "--decode: expected token ids like \"1,2,3\", got \"",
             text.substr(pos, 20), "\" at offset ", pos);
    ids.push_back(static_cast<int32_t>(std::stol(text.substr(pos, end - pos))));
    pos = end;
  }
  return ids;
}

// One line of comma-separated ids (an empty line for no ids).
void print_ids(const std::vector<int32_t>& ids) {
  std::string line;
  for (int32_t id : ids) {
    if (!line.empty()) line += ',';
    line += std::to_string(id);
  }
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stdout);
}

void run_tokenize(const TokenizeOptions& opt) {
  M3_CHECK(!opt.decode || opt.files.size() <= 1, "tokenize: --decode takes one --file (got ", opt.files.size(), ")");
  // Every input is read before the tokenizer loads (a 200k vocabulary takes ~2 s): a missing
  // file fails at once.
  std::vector<std::string> inputs;
  if (opt.files.empty()) inputs.push_back(opt.text);
  for (const std::string& f : opt.files) inputs.push_back(read_file(f));
  auto tok = Tokenizer::from_file(tokenizer_path(opt.model));
  if (opt.decode) {
    // Exactly the decoded bytes, no newline added: output can be compared byte for byte.
    const std::string text = tok->decode(parse_ids(inputs[0]));
    std::fwrite(text.data(), 1, text.size(), stdout);
    return;
  }
  for (const std::string& input : inputs) print_ids(tok->encode(input, opt.special));
}

}  // namespace

void register_tokenize(CLI::App& app) {
  auto opt = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Print the token ids of a text (or, with --decode, the text of ids)");
  cmd->add_option("-m,--model", opt->model, "Model folder (uses its tokenizer.json) or a tokenizer.json file")
      ->required();
  CLI::Option* text = cmd->add_option("--text", opt->text, "Text to encode (or ids \"1,2,3\" with --decode)");
  CLI::Option* file = cmd->add_option("--file", opt->files,
                                      "Read the text (or ids) from this file, bytes as they are. Several files: one "
                                      "line of ids each, in order, from one load of the tokenizer");
  text->excludes(file);
  cmd->add_flag("--special", opt->special, "Match special tokens such as ]~b] in the text (off: they stay plain text)");
  cmd->add_flag("--decode", opt->decode, "Decode comma-separated ids and print the text, no newline added");
  cmd->callback([opt, text, file] {
    M3_CHECK((text->count() > 0) != (file->count() > 0), "tokenize: give --text or --file (one or more files)");
    run_tokenize(*opt);
  });
}

}  // namespace m3::cli
