// The texts both comparisons run on: several scripts, emoji with ZWJ sequences, digit and
// whitespace runs, newlines, code, contractions in several cases, long words, control-token
// strings, invalid UTF-8, and seeded random mixes of fragments that exercise each branch of the
// o200k split pattern.
'use strict';

// Returns [{name, bytes, text?, special}]: `text` is set for valid UTF-8 cases (what string-only
// tokenizers can take); `special` asks for special tokens to be matched (m3 --special).
function buildCorpus() {
  const cases = [];
  const text = (name, s, { special = false } = {}) =>
    cases.push({ name, text: s, bytes: Buffer.from(s, 'utf8'), special });
  const bytes = (name, b) => cases.push({ name, bytes: b, special: false });

  text('english-prose', 'The quick brown fox jumps over the lazy dog. She sells sea shells by the sea shore; ' +
    'meanwhile, in 1999, a well-known author wrote "Hello, World!" (twice) — and nobody noticed…\n');
  text('contractions', "I'm sure you're right: he's gone, we've won, they'll stay, I'd go, don't, can't.\n" +
    "I'M SURE YOU'RE RIGHT: HE'S GONE, WE'VE WON, THEY'LL STAY, I'D GO, DON'T, CAN'T.\n" +
    "You'Re, It'S, They'Ll, We'Ve, I'M, she'D, 'tis, rock'n'roll, O'Neil's, '''quoted''', ' s 'll\n");
  text('mixed-case', 'HTTPServer getHTTPResponseCode iPhone McDonald\'s XMLHttpRequest ÉCOLE École straße STRASSE ' +
    'ǅemal ǈ Dž ʰʲ ᵃᵇ camelCaseWord snake_case_word SCREAMING_SNAKE kebab-case-word\n');
  text('scripts', 'Русский текст: Съешь же ещё этих мягких французских булок. Ελληνικά: Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.\n' +
    'עברית: דג סקרן שט בים מאוכזב. العربية: نص حكيم له سر قاطع وذو شأن عظيم.\n' +
    'हिन्दी: ऋषियों को सताने वाले दुष्ट राक्षसों के राजा रावण का सर्वनाश करने वाले विष्णुवतार भगवान श्रीराम।\n' +
    'ไทย: เป็นมนุษย์สุดประเสริฐเลิศคุณค่า  Tiếng Việt: Tôi có thể ăn thủy tinh mà không hại gì.\n' +
    '中文：我能吞下玻璃而不伤身体。日本語：私はガラスを食べられます。それは私を傷つけません。\n' +
    '한국어: 나는 유리를 먹을 수 있어요. 그래도 아프지 않아요. ქართული: მინას ვჭამ. Հայերեն: Կրնամ ապակի ուտել։\n');
  text('combining-marks', 'e\u0301 n\u0303 a\u0308\u0304 Z\u0351\u036b\u0343a\u0352l\u0366g\u030do \u0915\u093f \u0d15\u0d4d\u0d37 ' +
    'cafe\u0301 re\u0301sume\u0301 \u0301\u0301 leading-mark\n');
  text('emoji', 'Emoji 🙂😀🎉 thumbs 👍👍🏽👍🏿 family 👨‍👩‍👧‍👦 couple 👩‍❤️‍💋‍👨 flags 🇫🇷🇯🇵🇺🇸 🏳️‍🌈 🏴‍☠️ ' +
    'keycaps 1️⃣#️⃣ hearts ❤️🧡 ❤ text: ok👌done, 🚀🚀🚀 and ☕︎ ✔️ © ® ™\n');
  text('digits', '0 1 12 123 1234 12345 123456 1234567890 3.14159265358979 -42 +7 1,000,000 1.000.000,50 ' +
    '2024-03-15T12:34:56Z 0xDEADBEEF 1e-9 6.022e23 007 ０１２３４５ ٠١٢٣٤٥٦ १२३४ ²³¹ ½¾ ⅫⅣ v1.2.3-rc.4\n');
  text('whitespace-runs', 'a b  c   d    e     f\t\tg \t h\t \tj\n  k   \n\n\nl\r\nm\r\n\r\nn \r\n o' +
    ' '.repeat(40) + 'p' + '\t'.repeat(12) + 'q' + '\n'.repeat(9) + 'r    \n    s\u00a0t\u3000u\u2003v\u2009w   ');
  text('leading-trailing-space', '   leading spaces and trailing spaces   ');
  text('newlines-and-slashes', 'path/to/file/\nfoo!!!\n\nbar?/\n/ root//double///triple\n' +
    'end.\r\n\r\n// comment\n/* block */\n#!/bin/sh\n...\n\n\n  \n\t\n');
  text('python-code', [
    'import os, sys', '', 'class Greeter:', '    """Says hello."""', '    def __init__(self, name: str) -> None:',
    '        self.name = name', '', '    def greet(self, times=3):', "        for i in range(times):",
    "            print(f'Hello, {self.name}! #{i:02d}')", '', "if __name__ == '__main__':",
    '    Greeter(sys.argv[1] if len(sys.argv) > 1 else "world").greet()', ''].join('\n'));
  text('cpp-code', '#include <vector>\ntemplate <typename T>\nT sum(const std::vector<T>& v) {\n  T s{};\n' +
    '  for (auto& x : v) s += x;  // accumulate\n  return s;\n}\nint main(){return sum<int>({1,2,3})==6?0:1;}\n');
  text('json-html-sql', '{"id": 17, "tags": ["a", "b"], "nested": {"ok": true, "v": null, "pi": 3.14}}\n' +
    '<div class="x" data-id=\'7\'><a href="https://example.com/?q=1&r=2">link</a></div>\n' +
    "SELECT u.id, COUNT(*) AS n FROM users u JOIN orders o ON o.user_id = u.id WHERE u.name LIKE '%ann%' GROUP BY u.id;\n");
  text('long-words', 'Pneumonoultramicroscopicsilicovolcanoconiosis Donaudampfschifffahrtsgesellschaftskapitän ' +
    'supercalifragilisticexpialidocious ' + 'a'.repeat(300) + ' ' + 'ab'.repeat(150) + ' ' + 'Zz'.repeat(100) +
    ' 7f3a9c0e4b1d2f6a8c5e0b9d7f1a3c5e ' + 'QmFzZTY0IGVuY29kZWQgdGV4dCBmb3IgYSB0b2tlbml6ZXIgdGVzdA== ' +
    'https://example.com/a/very/long/path/with-many-segments/and_underscores/index.html?query=string&x=1#frag\n');
  text('punctuation-runs', '!!!??? ... --- === *** ### @@@ $$$ %%% ^^^ &&& ((( ))) [[[ ]]] {{{ }}} <<< >>> ||| ~~~ ``` ' +
    '+-*/ :=  ;; ,, ... …… —— «» ¿¡ 。、！？ 【】 「」\n');
  text('long-space-run', 'x' + ' '.repeat(1000) + 'y' + ' '.repeat(999) + '\n');
  text('special-strings-as-text', 'before <|endoftext|> middle <|endofprompt|> after <|endoftext');
  text('special-strings-allowed', 'before <|endoftext|> middle <|endofprompt|> after <|endoftext', { special: true });
  text('single-char', 'x');
  text('only-newlines', '\n\n\n');
  text('chat-like', ']~!b[]~b]system\nYou are helpful.[e~[\n]~b]user\nWhat is 2+2?[e~[\n]~b]ai\n<mm:think>easy</mm:think>4[e~[\n');

  text('m3-control-strings', ']~!b[]~b]system\nX[e~[]~b]user\n]<]start of image[>[]<]image[>[]<]end of image[>[\n' +
    ']<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name="f">]<]minimax[>[</invoke>\n]<]minimax[>[</tool_call>[e~[\n' +
    'partial: ]~b ]<]minimax[> <mm:think <|content_altered_placeholder|> </mm:think>done');
  // Invalid UTF-8: stray continuation bytes, truncated sequences, overlongs, surrogates, bytes
  // that never occur in UTF-8, a truncated character at the very end.
  bytes('invalid-utf8', Buffer.concat([
    Buffer.from('valid text '), Buffer.from([0x80, 0xbf]), Buffer.from(' then '), Buffer.from([0xc3]),
    Buffer.from('x overlong '), Buffer.from([0xc0, 0xaf, 0xe0, 0x80, 0xaf]), Buffer.from(' surrogate '),
    Buffer.from([0xed, 0xa0, 0x80]), Buffer.from(' ff '), Buffer.from([0xff, 0xfe, 0xf5]),
    Buffer.from(' truncated euro '), Buffer.from([0xe2, 0x82]), Buffer.from('abc'), Buffer.from([0xf0, 0x9f, 0x98]),
    Buffer.from(' 你好'), Buffer.from([0xe4, 0xbd]),
  ]));
  bytes('invalid-utf8-between-spaces', Buffer.concat([
    Buffer.from('   '), Buffer.from([0x80]), Buffer.from('   \n'), Buffer.from([0xfe]), Buffer.from('\n\n word'),
    Buffer.from([0xc2]), Buffer.from("'s ")]));
  bytes('all-bytes', Buffer.from(Array.from({ length: 256 }, (_, i) => i)));

  // Random strings from fragments that exercise each branch of the split pattern.
  function mulberry32(seed) {
    return () => {
      seed |= 0; seed = (seed + 0x6d2b79f5) | 0;
      let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
      t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
  }
  const fragments = [
    ...'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ', 'é', 'É', 'ß', 'Ω', 'ω', 'ж', 'Ж', '中', '文', 'あ',
    'ア', '한', 'ب', 'ע', 'क', 'ि', '\u0301', 'ก', 'ǅ', 'ʰ', 'ı', 'İ',
    ...'0123456789', '٣', '०', '²', 'Ⅻ', '½', '１',
    ...'.,!?\'"/\\-_(){}<>@#$%&*+=~`|:;[]^', '…', '—', '«', '»', '¿', '。', '、', '€',
    ' ', ' ', ' ', '  ', '\t', '\n', '\n', '\r\n', '\r', '\u00a0', '\u3000', '\u2003',
    "'s", "'S", "'t", "'re", "'RE", "'rE", "'ll", "'Ll", "'d", "'D", "'m", "'ve", "'VE",
    '🙂', '👍🏽', '👨‍👩‍👧', '🇯🇵', '❤️', '1️⃣', '🏳️‍🌈',
    'the', 'The', 'THE', ' the', 'hello', 'World', 'iPhone', 'HTTP', 'x86_64', 'don', 'can', 'ing', 'tion',
    '123', '4567', ' 89', 'http://', '/usr/', '\n\n', '  \n', ' \t ', '<|endoftext|>',
  ];
  const rand = mulberry32(20261129);
  for (let file = 0; file < 10; file++) {
    let s = '';
    for (let k = 0; k < 40; k++) {
      const n = 1 + Math.floor(rand() * 40);
      for (let i = 0; i < n; i++) s += fragments[Math.floor(rand() * fragments.length)];
    }
    text(`random-${file}`, s);
  }
  return cases;
}

// Strict UTF-8 scan (no overlongs, surrogates or code points past U+10FFFF), written separately
// from m3's: returns [kind, length] with kind 'ok' | 'bad' (length = maximal invalid subpart).
function scanUtf8(buf, pos) {
  const lead = buf[pos];
  if (lead < 0x80) return ['ok', 1];
  let len, lo = 0x80, hi = 0xbf;
  if (lead >= 0xc2 && lead <= 0xdf) len = 2;
  else if (lead >= 0xe0 && lead <= 0xef) { len = 3; if (lead === 0xe0) lo = 0xa0; if (lead === 0xed) hi = 0x9f; }
  else if (lead >= 0xf0 && lead <= 0xf4) { len = 4; if (lead === 0xf0) lo = 0x90; if (lead === 0xf4) hi = 0x8f; }
  else return ['bad', 1];
  for (let i = 1; i < len; i++) {
    if (pos + i >= buf.length) return ['bad', i];
    const b = buf[pos + i];
    const ok = i === 1 ? b >= lo && b <= hi : b >= 0x80 && b <= 0xbf;
    if (!ok) return ['bad', i];
  }
  return ['ok', len];
}

module.exports = { buildCorpus, scanUtf8 };
