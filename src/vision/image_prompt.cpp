#include "vision/image_prompt.h"

#include <algorithm>
#include <cstring>

#include "m3/error.h"

namespace m3::vision {

ImagePrompt build_image_prompt(const Tokenizer& tok, const std::string& text,
                               const std::vector<int64_t>& tokens_per_image) {
  const std::string ph = kImagePlaceholder;
  std::vector<std::string> pieces;
  for (size_t at = 0;;) {
    const size_t next = text.find(ph, at);
    if (next == std::string::npos) {
      pieces.push_back(text.substr(at));
      break;
    }
    pieces.push_back(text.substr(at, next - at));
    at = next + ph.size();
  }
  const size_t placeholders = pieces.size() - 1, images = tokens_per_image.size();
  if (placeholders == 0)  // images go after the text
    pieces.resize(images + 1);
  else
    M3_CHECK(placeholders == images, "the text has ", placeholders, " ", ph, " placeholder(s) but ", images,
             " image(s) were given (one placeholder per image, or none to append the images)");

  const int32_t start = tok.require_token("]<]start of image[>["), image = tok.require_token(ph),
                end = tok.require_token("]<]end of image[>[");
  ImagePrompt p;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const std::vector<int32_t> ids = tok.encode(pieces[i]);
    p.ids.insert(p.ids.end(), ids.begin(), ids.end());
    if (i == images) break;
    M3_CHECK(tokens_per_image[i] > 0, "image ", i + 1, " has no tokens");
    p.ids.push_back(start);
    std::vector<int64_t> rows;
    for (int64_t k = 0; k < tokens_per_image[i]; ++k) {
      rows.push_back(int64_t(p.ids.size()));
      p.ids.push_back(image);
    }
    p.image_rows.push_back(std::move(rows));
    p.ids.push_back(end);
  }
  return p;
}

void place_image_embeddings(const ImagePrompt& prompt, const std::vector<std::vector<float>>& embeddings,
                            int64_t dim, float* x) {
  M3_CHECK(prompt.image_rows.size() == embeddings.size(), "vision: ", embeddings.size(), " image embeddings for ",
           prompt.image_rows.size(), " images in the prompt");
  for (size_t i = 0; i < embeddings.size(); ++i) {
    const std::vector<int64_t>& rows = prompt.image_rows[i];
    M3_CHECK(int64_t(embeddings[i].size()) == int64_t(rows.size()) * dim, "vision: image ", i + 1, " has ",
             embeddings[i].size() / size_t(std::max<int64_t>(dim, 1)), " embedding rows for ", rows.size(),
             " image tokens");
    for (size_t k = 0; k < rows.size(); ++k)
      std::memcpy(x + rows[k] * dim, embeddings[i].data() + k * size_t(dim), size_t(dim) * sizeof(float));
  }
}

}  // namespace m3::vision
