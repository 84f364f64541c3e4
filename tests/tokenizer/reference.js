// The reference tokenizer for kvlane's tokenizer tests and benchmark:
// @lenml/tokenizers (a fork of transformers.js) under node, on the same
// tokenizer.json / tokenizer_config.json files kvlane loads.
//
//   node reference.js ids   MODEL_DIR CORPUS.json OUT.json
//       CORPUS.json: an array of strings. OUT.json: {"special": [[ids]...], "plain": [[ids]...]}
//       special = encode(text) (added tokens recognised, post-processor BOS);
//       plain   = encode(text, {add_special_tokens: false}).
//   node reference.js bench MODEL_DIR INPUT REPEAT
//       encodes the input's texts (a JSON array of strings if INPUT ends in .json, else its
//       lines) REPEAT times, added tokens recognised, no BOS; prints {"bytes": N, "tokens": N, "seconds": S}
//       for the timed passes (after one untimed warm-up pass).
'use strict';
const fs = require('fs');
const path = require('path');
const { TokenizerLoader } = require('@lenml/tokenizers');

function load(dir) {
  const tokenizerJSON = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8'));
  const tokenizerConfig = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8'));
  return TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
}

const [mode, dir, input, extra] = process.argv.slice(2);
if (!mode || !dir || !input) {
  process.stderr.write('usage: node reference.js ids|bench MODEL_DIR INPUT [OUT|REPEAT]\n');
  process.exit(64);
}
const tok = load(dir);
if (mode === 'ids') {
  const corpus = JSON.parse(fs.readFileSync(input, 'utf8'));
  const out = {
    special: corpus.map((t) => Array.from(tok.encode(t))),
    plain: corpus.map((t) => Array.from(tok.encode(t, { add_special_tokens: false }))),
  };
  fs.writeFileSync(extra, JSON.stringify(out));
} else if (mode === 'bench') {
  const raw = fs.readFileSync(input, 'utf8');
  const lines = input.endsWith('.json') ? JSON.parse(raw) : raw.split('\n');
  const repeat = Number(extra || 1);
  let bytes = 0;
  let tokens = 0;
  for (const l of lines) tok.encode(l, { add_special_tokens: false }); // warm-up pass
  const start = process.hrtime.bigint();
  for (let r = 0; r < repeat; ++r)
    for (const l of lines) tokens += tok.encode(l, { add_special_tokens: false }).length;
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  for (const l of lines) bytes += Buffer.byteLength(l, 'utf8');
  process.stdout.write(JSON.stringify({ bytes: bytes * repeat, tokens, seconds }) + '\n');
} else {
  process.stderr.write(`unknown mode ${mode}\n`);
  process.exit(64);
}
