// The text the small test tokenizer learns its merges from (see bpe_trainer.cpp). Written for this
// project: a mix of prose, dialogue, code, numbers and several scripts, so that small models built
// by `m3 make-checkpoint` see realistic token statistics. Changing it changes every small
// tokenizer, so treat it as frozen.
#include "tokenizer/bpe_trainer.h"

namespace m3::tok {

std::string_view training_sample() {
  return R"SAMPLE(The lighthouse keeper wrote in her logbook every evening at seven. The wind came from the
north-west, the sea was grey, and the lamp turned once every twelve seconds. She wrote the date,
the weather, the ships she had seen, and one sentence about something that surprised her. On most
days the sentence was short: "A heron stood on the rocks for an hour." On other days it was longer,
because the surprise was bigger, and because there was nobody else to tell.

It's not that she didn't like people. She'd simply learned that the island was quieter than any
town, and that quiet has a sound of its own. When the supply boat arrived on Thursdays, the captain
asked the same three questions: "Are you well? Do you need anything? Will you stay another year?"
She answered yes, no, and we'll see.

A good explanation starts with what the reader already knows. If you are describing a new idea,
connect it to an old one first; then show an example; then state the rule; then show a second
example that breaks the obvious guess. People remember the surprise, not the definition.

system
You are a helpful assistant. Answer briefly and cite the section you used.
user
How many seconds are there in a day, and how many in a leap year?
ai
A day has 24 * 60 * 60 = 86,400 seconds. A leap year has 366 days, so 366 * 86,400 = 31,622,400 seconds.
tool
{"name": "calculator", "arguments": {"expression": "366 * 86400"}, "result": 31622400}

def merge_sorted(left, right):
    """Merge two sorted lists into one sorted list."""
    result = []
    i, j = 0, 0
    while i < len(left) and j < len(right):
        if left[i] <= right[j]:
            result.append(left[i])
            i += 1
        else:
            result.append(right[j])
            j += 1
    result.extend(left[i:])
    result.extend(right[j:])
    return result

for n in range(1, 11):
    print(f"{n:2d} squared is {n * n:3d}")

#include <cstdio>
#include <vector>

// Returns the sum of the values, or 0 for an empty vector.
static long long sum(const std::vector<int>& values) {
  long long total = 0;
  for (int v : values) total += v;
  return total;
}

int main(int argc, char** argv) {
  std::vector<int> numbers = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5};
  std::printf("sum = %lld, count = %zu\n", sum(numbers), numbers.size());
  return argc > 1 ? 1 : 0;
}

{
  "model_type": "minimax_m3",
  "hidden_size": 512,
  "num_attention_heads": 8,
  "num_key_value_heads": 2,
  "rope_theta": 5000000.0,
  "vocab_size": 200064,
  "torch_dtype": "bfloat16"
}

Inventory, 2024-03-15: 128 boxes, 64 crates, 3.25 kg of nails, 0.5 L of oil, $1,299.99 total.
Phone: +1 (555) 010-4477. Order #A-7781/B. Version 2.10.3 released on 12/31/2025 at 23:59:59 UTC.
Pi is about 3.14159265358979; e is about 2.71828182845904; the answer is 42.
Temperatures: -12°C at night, 18°C at noon, 25% humidity, wind 40 km/h.

| name    | size | status |
|---------|------|--------|
| alpha   | 1024 | ok     |
| beta    | 2048 | failed |

La bibliothèque ouvre à neuf heures; les élèves y travaillent jusqu'au soir. Où est la gare ?
Die Straße war nass, und die Bäume rauschten über den Dächern. Größere Häuser standen weiter oben.
El niño comió una manzana y después corrió al jardín con su hermana. ¿Qué hora es? ¡Vamos!
Москва — столица России. Сегодня холодно, но солнечно, и люди гуляют по набережной.
Η θάλασσα ήταν ήρεμη και ο ουρανός καθαρός. Καλημέρα σας!
今天天气很好，我们去公园散步吧。这个模型可以理解中文、英文和代码。
東京の朝は早い。駅には多くの人がいて、電車は時間どおりに来る。ありがとうございます。
서울의 가을은 아름답습니다. 우리는 함께 산책을 했습니다.
नमस्ते, आप कैसे हैं? यह एक छोटा वाक्य है।
مرحبا بكم في المكتبة. الكتب على الرفوف.
Emoji: 🙂 👍 🚀 ❤️ 👨‍👩‍👧 🇫🇷 ✅ — and symbols: → ← ≤ ≥ ≠ ∑ ∞ © ® ™ € £ ¥.

Whitespace matters in code:	tabs,  double spaces,   and trailing spaces   
and blank lines.


    Indented block line one.
    Indented block line two.

SHOUTING WORDS AND CamelCaseNames like HTTPServer, getUserName, XMLHttpRequest, snake_case_name.
Contractions: I'm, you're, he's, we've, they'll, I'd, don't, CAN'T, WON'T, It'S.
URLs and paths: https://example.com/docs/index.html?q=token&lang=en /usr/local/bin/m3 C:\Temp\file.txt
Markdown: **bold**, _italic_, `code`, [link](https://example.org), > quote, - item, 1. first.
<html><body><p class="note">Hello &amp; welcome!</p></body></html>
SELECT id, name FROM users WHERE age >= 18 ORDER BY name LIMIT 10;
x = (a + b) * c / d - e % f; y = x << 2 | 0xFF & ~mask; z = a != b && c == d || !e;

Attention lets every position look back at earlier positions. A query vector is compared with each
key vector; the scores are scaled, passed through a softmax, and used to average the value vectors.
Sparse attention keeps only the most useful blocks of keys, which saves memory bandwidth when the
context grows to hundreds of thousands of tokens. Mixture-of-experts layers route each token to a
few specialised feed-forward networks, chosen by a small router, and add a shared expert on top.

Recipe for bread (makes 2 loaves): 1000 g flour, 650 ml water, 20 g salt, 7 g dried yeast.
Mix, knead for 10 minutes, rest 90 minutes, shape, rest 45 minutes, bake at 230 degrees for 35-40
minutes. Cool on a rack before slicing. Keeps 3 days wrapped in cloth; freeze slices for later.

fn parse_port(text: &str) -> Result<u16, String> {
    let value: u32 = text.trim().parse().map_err(|e| format!("bad port {text:?}: {e}"))?;
    if value == 0 || value > 65535 {
        return Err(format!("port out of range: {value}"));
    }
    Ok(value as u16)
}

#!/usr/bin/env bash
set -euo pipefail
for file in "$@"; do
  if [[ -f "$file" ]]; then
    wc -l "$file" | awk '{print $1}'
  else
    echo "missing: $file" >&2
  fi
done

const total = items.filter((item) => item.price > 0).reduce((sum, item) => sum + item.price, 0);
console.log(`Total: ${total.toFixed(2)} EUR`);

Quarterly report: revenue grew from 4.8 million to 5.6 million (+16.7%), costs fell by 3%, and the
team hired 12 engineers. Q1: 1,204 orders; Q2: 1,577 orders; Q3: 1,932 orders; Q4: 2,410 orders.

春天来了，山上的花都开了。孩子们在河边玩水，老人们坐在树下聊天。学习一门新的语言需要时间和耐心。
日本語の文章には、ひらがな、カタカナ、漢字が混ざっています。コンピューターで文字を扱うのは面白い。
Le printemps est arrivé : les cerisiers fleurissent, les cafés sortent leurs terrasses, et l'on
entend de nouveau les oiseaux chanter très tôt le matin. Ça fait du bien, n'est-ce pas ?
Über sieben Brücken musst du gehen; die Prüfung war schwierig, aber fair. Schöne Grüße aus Köln!
Привет! Как дела? Я читаю книгу о звёздах и планетах, и она очень интересная.
Türkçe, Polski (zażółć gęślą jaźń), Čeština, Tiếng Việt (Xin chào các bạn), Svenska (smörgåsbord).

The end. Thank you for reading, and good night.
)SAMPLE";
}

}  // namespace m3::tok
