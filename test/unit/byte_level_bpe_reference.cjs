// Reference for TokenizerTest: Hugging Face's own JavaScript tokenizers (npm @huggingface/tokenizers)
// on a GPT-2 tokenizer.json.
//   node byte_level_bpe_reference.cjs TOKENIZERS_JS TOKENIZER.json STRINGS.bin OUT.txt
// STRINGS.bin holds (uint32 little-endian byte length, UTF-8 bytes) records; OUT.txt gets one
// line per string: the ids of encode(string) (no BOS: GPT-2 adds none), separated by spaces.
'use strict';
const fs = require('fs');
const path = require('path');
const [lib, tokenizerPath, stringsPath, outPath] = process.argv.slice(2);
const { Tokenizer } = require(lib);
const json = JSON.parse(fs.readFileSync(tokenizerPath, 'utf8'));
const configPath = path.join(path.dirname(tokenizerPath), 'tokenizer_config.json');
const config = fs.existsSync(configPath) ? JSON.parse(fs.readFileSync(configPath, 'utf8')) : {};
const tokenizer = new Tokenizer(json, config);
const data = fs.readFileSync(stringsPath);
const lines = [];
for (let pos = 0; pos < data.length;) {
  const n = data.readUInt32LE(pos);
  const text = data.subarray(pos + 4, pos + 4 + n).toString('utf8');
  pos += 4 + n;
  lines.push(tokenizer.encode(text, { add_special_tokens: false }).ids.join(' '));
}
fs.writeFileSync(outPath, lines.join('\n') + '\n');
