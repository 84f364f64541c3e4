// xgrammar's side of the cross-check (README.md here): replays kvlane's decisions, written by
// kvlane-grammar-xcheck-driver, through @mlc-ai/web-xgrammar and compares every one.
//
//   node xcheck.mjs DECISIONS.json CORPUS.json XGRAMMAR_PACKAGE_DIR
//
// Per case:
// - examples: the bytes accepted before the first rejected one, and whether the whole is a
//   sentence, under the same grammar text in both engines; and kvlane's verdict against the
//   corpus' expectation (valid or invalid);
// - walks: the full token mask at every step of kvlane's seeded walks, token by token;
// - schemas: the complete examples under xgrammar's own JSON Schema compiler (compact
//   separators, strict mode), except where the corpus documents a difference.
// Exit status 0 when everything agrees, 1 otherwise (each disagreement is printed).

import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const [decisionsPath, corpusPath, pkgDir] = process.argv.slice(2);
if (!pkgDir) {
  console.error('usage: node xcheck.mjs DECISIONS.json CORPUS.json XGRAMMAR_PACKAGE_DIR');
  process.exit(64);
}

// The package is a UMD bundle (with the WASM inlined) inside a package that declares
// "type": "module", so Node neither imports it as an ES module (it has no exports and reads
// __filename) nor requires it as CommonJS (the .js extension says ESM). Evaluate it as the
// CommonJS module it is written as.
function loadXgrammar(dir) {
  const file = path.resolve(dir, 'lib', 'index.js');
  const module = { exports: {} };
  const body = fs.readFileSync(file, 'utf8');
  new Function('exports', 'module', 'require', '__filename', '__dirname', body)(
    module.exports, module, createRequire(file), file, path.dirname(file));
  return module.exports;
}

const xg = loadXgrammar(pkgDir);
const { Grammar, GrammarCompiler, GrammarMatcher, TokenizerInfo } = xg;

const decisions = JSON.parse(fs.readFileSync(decisionsPath, 'utf8'));
const corpus = JSON.parse(fs.readFileSync(corpusPath, 'utf8'));
const corpusByName = new Map(corpus.cases.map((c) => [c.name, c]));

const fromHex = (h) => Buffer.from(h, 'hex');

// GPT-2's byte-to-unicode table: a byte-level BPE vocabulary spells every byte as one printable
// character; xgrammar's "byte_level" vocabulary type decodes it back, so a token can be any
// bytes, invalid UTF-8 included.
const byteToChar = (() => {
  const keep = [];
  for (let b = 33; b <= 126; b++) keep.push(b);
  for (let b = 161; b <= 172; b++) keep.push(b);
  for (let b = 174; b <= 255; b++) keep.push(b);
  const table = new Array(256);
  let extra = 0;
  for (let b = 0; b < 256; b++) table[b] = String.fromCodePoint(keep.includes(b) ? b : 256 + extra++);
  return table;
})();
const byteLevel = (bytes) => Array.from(bytes, (b) => byteToChar[b]).join('');

const vocabBytes = decisions.vocab.map(fromHex);
const endId = decisions.end;
const n = vocabBytes.length;
// The end token has no bytes: xgrammar treats an empty token as special and, named as the stop
// token, allows it exactly where the grammar can end (kvlane's end-token rule).
const tokenizer = await TokenizerInfo.createTokenizerInfo(vocabBytes.map(byteLevel), 'byte_level', false, n, [endId]);
const compiler = await GrammarCompiler.createGrammarCompiler(tokenizer);

let failures = 0;
let illFormedOnly = 0;
let maskDefects = 0;
let checks = 0;
const fail = (name, what) => {
  failures++;
  console.log(`MISMATCH ${name}: ${what}`);
};

/// The mask as the same little-endian hex nibbles the driver writes.
function maskHex(words) {
  let out = '';
  for (let d = 0; d * 4 < n; d++) {
    const word = words[d >> 3] >>> 0;
    let nibble = (word >>> ((d & 7) * 4)) & 15;
    const left = n - d * 4;
    if (left < 4) nibble &= (1 << left) - 1;
    out += nibble.toString(16);
  }
  return out;
}

/// True when `bytes` hold an ill-formed UTF-8 sequence (RFC 3629: no overlong forms, no
/// surrogates, nothing above U+10FFFF); a sequence cut short by the end is not ill-formed.
function illFormed(bytes) {
  for (let i = 0; i < bytes.length;) {
    const b = bytes[i];
    let len, lo = 0x80, hi = 0xbf;
    if (b < 0x80) { i++; continue; }
    if (b >= 0xc2 && b <= 0xdf) len = 2;
    else if (b >= 0xe0 && b <= 0xef) { len = 3; if (b === 0xe0) lo = 0xa0; if (b === 0xed) hi = 0x9f; }
    else if (b >= 0xf0 && b <= 0xf4) { len = 4; if (b === 0xf0) lo = 0x90; if (b === 0xf4) hi = 0x8f; }
    else return true;
    for (let k = 1; k < len; k++) {
      if (i + k >= bytes.length) return false;
      const c = bytes[i + k];
      if (k === 1 ? c < lo || c > hi : c < 0x80 || c > 0xbf) return true;
    }
    i += len;
  }
  return false;
}

/// The ids set in one mask and not the other: [id, inKvlane].
function differences(a, b) {
  const out = [];
  for (let d = 0; d < a.length; d++) {
    const x = parseInt(a[d], 16) ^ parseInt(b[d], 16);
    for (let k = 0; k < 4; k++) if ((x >> k) & 1) out.push([d * 4 + k, (parseInt(a[d], 16) >> k) & 1]);
  }
  return out;
}

function describeDiff(a, b) {
  const ids = [];
  for (let d = 0; d < a.length && ids.length < 8; d++) {
    const x = parseInt(a[d], 16) ^ parseInt(b[d], 16);
    for (let k = 0; k < 4; k++) {
      if ((x >> k) & 1) {
        const id = d * 4 + k;
        const inKvlane = (parseInt(a[d], 16) >> k) & 1;
        const shown = id === endId ? '<end>' : JSON.stringify(vocabBytes[id].toString('latin1'));
        ids.push(`${id} ${shown} ${inKvlane ? 'kvlane only' : 'xgrammar only'}`);
      }
    }
  }
  return ids.join('; ');
}

/// Bytes accepted before the first rejected one, and whether all of `bytes` is a sentence, fed
/// as single-byte tokens (ids 0..255 are the bytes).
async function verdict(compiled, bytes) {
  const m = await GrammarMatcher.createGrammarMatcher(compiled, [endId]);
  let accepted = 0;
  for (const b of bytes) {
    if (!m.acceptToken(b)) break;
    accepted++;
  }
  let complete = false;
  if (accepted === bytes.length) {
    const mask = await m.getNextTokenBitmask();
    complete = ((mask[endId >> 5] >>> (endId & 31)) & 1) === 1;
  }
  m.dispose();
  return { accepted, complete };
}

for (const c of decisions.cases) {
  const source = corpusByName.get(c.name);
  if (source.xgrammar_skip) { // a construct xgrammar 0.1.27 gets wrong (README.md)
    console.log(`not compared (xgrammar defect): ${c.name}: ${source.xgrammar_skip}`);
    for (const ex of c.examples ?? []) {
      checks++;
      if (ex.complete !== ex.expect)
        fail(c.name, `kvlane ${ex.complete ? 'accepts' : 'rejects'} ${JSON.stringify(fromHex(ex.text).toString('utf8'))}, which the corpus lists as ${ex.expect ? 'valid' : 'invalid'}`);
    }
    continue;
  }
  if (c.error !== undefined) {
    console.log(`refused by kvlane (as the corpus requires): ${c.name}: ${c.error}`);
    continue;
  }
  let compiled;
  try {
    compiled = await compiler.compileGrammar(c.gbnf, 'root');
  } catch (e) {
    fail(c.name, `xgrammar does not compile the grammar: ${e.message ?? e}`);
    continue;
  }
  for (const ex of c.examples) {
    const bytes = fromHex(ex.text);
    const shown = JSON.stringify(bytes.toString('utf8'));
    checks++;
    if (ex.complete !== ex.expect)
      fail(c.name, `kvlane ${ex.complete ? 'accepts' : 'rejects'} ${shown}, which the corpus lists as ${ex.expect ? 'valid' : 'invalid'}`);
    const x = await verdict(compiled, bytes);
    if (x.accepted !== ex.accepted || x.complete !== ex.complete)
      fail(c.name, `${shown}: kvlane accepts ${ex.accepted} bytes (complete: ${ex.complete}), xgrammar ${x.accepted} (complete: ${x.complete})`);
  }
  for (const [w, walk] of c.walks.entries()) {
    const m = await GrammarMatcher.createGrammarMatcher(compiled, [endId]);
    for (const [s, expected] of walk.masks.entries()) {
      checks++;
      const got = maskHex(await m.getNextTokenBitmask());
      // xgrammar's negated classes take ill-formed UTF-8 (overlong forms, surrogates, bytes
      // past U+10FFFF); kvlane's never do: such tokens may be in xgrammar's mask only.
      const prefix = Buffer.concat(walk.tokens.slice(0, s).map((t) => vocabBytes[t]));
      // xgrammar's mask also leaves out, now and then, a token its own matcher accepts (its
      // mask cache, not the grammar): for a token only kvlane allows, xgrammar's acceptToken
      // is the decision compared.
      let tolerated = got !== expected;
      for (const [id, inKvlane] of got === expected ? [] : differences(expected, got)) {
        if (!inKvlane) {
          if (illFormed(Buffer.concat([prefix, vocabBytes[id]]))) { illFormedOnly++; continue; }
        } else if (id !== endId && m.acceptToken(id)) {
          m.rollBack(1);
          maskDefects++;
          continue;
        }
        tolerated = false;
      }
      if (got !== expected && !tolerated) {
        fail(c.name, `walk ${w} step ${s} after ${JSON.stringify(prefix.toString('latin1'))}: masks differ: ${describeDiff(expected, got)}`);
        break;
      }
      if (s < walk.tokens.length && !m.acceptToken(walk.tokens[s])) {
        fail(c.name, `walk ${w} step ${s}: xgrammar rejects token ${walk.tokens[s]} from its own mask`);
        break;
      }
    }
    m.dispose();
  }
  compiled.dispose();

  // The schema's own meaning, as xgrammar's compiler reads it (compact JSON, strict mode).
  if (c.schema !== undefined) {
    const differs = source.xgrammar_differs ?? {};
    if (source.xgrammar_schema_skip) { // xgrammar aborts its WASM module on what it cannot compile
      console.log(`documented difference, ${c.name}: not compiled by xgrammar: ${source.xgrammar_schema_skip}`);
      continue;
    }
    let own;
    try {
      own = await compiler.compileJSONSchema(c.schema, false, -1, [',', ':'], true);
    } catch (e) {
      fail(c.name, `xgrammar does not compile the schema: ${e.message ?? e}`);
      continue;
    }
    for (const ex of c.examples) {
      const bytes = fromHex(ex.text);
      const text = bytes.toString('utf8');
      const x = await verdict(own, bytes);
      checks++;
      if (x.complete === ex.complete) continue;
      const why = differs[text] ?? differs['*'];
      if (why) console.log(`documented difference, ${c.name}: ${JSON.stringify(text)}: ${why}`);
      else fail(c.name, `schema semantics: kvlane ${ex.complete ? 'accepts' : 'rejects'} ${JSON.stringify(text)}, xgrammar's schema compiler ${x.complete ? 'accepts' : 'rejects'} it`);
    }
    own.dispose();
  }
}

console.log(`${decisions.cases.length} cases, ${checks} decisions compared, ${failures} mismatches; ` +
  `tolerated: ${illFormedOnly} tokens xgrammar allows that make ill-formed UTF-8, ` +
  `${maskDefects} tokens missing from xgrammar's mask that its matcher accepts`);
process.exit(failures === 0 ? 0 : 1);
