#!/usr/bin/env python3
"""Writes the tokenizer test corpus (a JSON array of strings) to the path given.

A fixed list covers each kind of text the tokenizers must agree on; a seeded
generator adds mixtures of the same character classes, so the comparison also
meets combinations nobody wrote by hand. Same output on every run.
"""
import json
import random
import sys

FIXED = [
    "Hello, world! 안녕하세요 12345 café\n\n  x",
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure you'll see they've done it; we'd say it's HIS, isn't it? SHE'LL, WE'VE, I'D, YOU'RE",
    "안녕하세요, 세계! 오늘 날씨가 정말 좋네요. 한국어 토크나이저 시험입니다.",
    "你好，世界！今天天气很好。我们正在测试分词器。",
    "こんにちは、世界！カタカナとひらがなと漢字を混ぜた文章です。",
    "def add(a, b):\n    return a + b\n\nfor i in range(10):\n\tprint(f\"{i:03d}\")\n",
    "int main(int argc, char** argv) { std::vector<int> v{1, 2, 3}; return v[0] != 1; }",
    "Emoji: 😀 👍🏽 👨‍👩‍👧‍👦 🇰🇷 ❤️ and text after.",
    "Accents: naïve façade résumé São Paulo Zürich Ångström ﬁ ligature",
    "Decomposed: cafe\u0301 nai\u0308ve A\u030a \u1100\u1161\u11a8 (NFC composes these)",
    "    leading spaces, trailing spaces    ",
    "tabs\t\tand   runs     of\u00a0spaces\u3000ideographic",
    "line one\r\nline two\r\n\r\nline four\n\n\n\nend",
    "\n\n\n",
    "   ",
    "",
    "a",
    "Numbers: 0 7 42 123 1234 12345 123456789 3.14159 -273.15 1,000,000 ١٢٣ ٤٥٦",
    "Mixed123abc456DEF 2024-06-01T12:34:56Z v1.2.3",
    "URLs https://example.com/path?q=1&r=two#frag and e-mail a.b@c.org",
    "Punctuation!!! ??? ... --- *** ((())) [[[]]] {{{}}} <<<>>> ''' \"\"\"",
    "Special tokens: <|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>",
    "<think>\nreasoning\n</think>\n\nanswer <tool_call>{}</tool_call>",
    "Partial <|im_end and <|eot_id| and <| |> and <|endoftext|><|endoftext|>",
    "Русский текст, Ελληνικά, עברית, العربية, हिन्दी, ไทย",
    "Ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３ and halfwidth ｶﾀｶﾅ",
    "Zero\u200bwidth\u200djoiner\u2060word",
    "'s 't 're 've 'm 'll 'd 'S 'T 'RE 'VE 'M 'LL 'D ’s",
    "x" * 300,
    "😀" * 40,
    "ab " * 100,
    "\t\n \t\n" * 20,
]

POOLS = [
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "0123456789",
    " \t\n\r",
    "   ",
    ".,;:!?'\"()[]{}<>-_=+*/\\|@#$%^&~`",
    "가나다라마바사아자차카타파하한국어",
    "的一是不了人我在有他这中大来上个国",
    "あいうえおかきくけこアイウエオカタ漢字",
    "éèêëàâäôöûüçñåøæ",
    "😀😂👍🏽🎉🚀🇰🇷",
    "ΑαΒβΓγДдЖжЯя",
]
PHRASES = ["'s", "'LL", "<|im_end|>", "<|eot_id|>", "\r\n", "  \n", "2024", "don't"]


def generated(count, seed=12345):
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(1, 12)):
            if rng.random() < 0.1:
                parts.append(rng.choice(PHRASES))
            else:
                pool = rng.choice(POOLS)
                parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 8))))
        out.append("".join(parts))
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_corpus.py OUT.json")
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        json.dump(FIXED + generated(3000), f, ensure_ascii=False)


if __name__ == "__main__":
    main()
