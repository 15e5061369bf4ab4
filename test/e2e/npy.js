'use strict';
// Minimal NumPy .npy reader/writer (format versions 1.0-3.0, little-endian, C order) for the dtypes
// the end-to-end tests exchange: float32, float64, float16 (raw), int64, int32, int8, uint8, bool.
// https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html
const fs = require('fs');

// descr -> [TypedArray constructor, onnxruntime tensor type]
const DTYPES = {
  '<f4': [Float32Array, 'float32'],
  '<f8': [Float64Array, 'float64'],
  '<f2': [Uint16Array, 'float16'],
  '<i8': [BigInt64Array, 'int64'],
  '<i4': [Int32Array, 'int32'],
  '|i1': [Int8Array, 'int8'],
  '|u1': [Uint8Array, 'uint8'],
  '|b1': [Uint8Array, 'bool'],
};
const DESCR_OF_TYPE = Object.fromEntries(Object.entries(DTYPES).map(([d, [, t]]) => [t, d]));
const MAGIC = Buffer.from([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59]); // \x93NUMPY

/** Reads FILE -> {type, dims, data} with `type` an onnxruntime tensor type. Throws naming the file. */
function readNpy(file) {
  const buf = fs.readFileSync(file);
  const fail = (why) => { throw new Error(`${file}: ${why}`); };
  if (buf.length < 10 || !buf.subarray(0, 6).equals(MAGIC)) fail('not a .npy file (bad magic)');
  const major = buf[6];
  let headerLen, offset;
  if (major === 1) { headerLen = buf.readUInt16LE(8); offset = 10; }
  else if (major === 2 || major === 3) { headerLen = buf.readUInt32LE(8); offset = 12; }
  else fail(`unsupported .npy version ${major}`);
  const header = buf.subarray(offset, offset + headerLen).toString('latin1');
  const descr = /'descr'\s*:\s*'([^']+)'/.exec(header);
  const fortran = /'fortran_order'\s*:\s*(True|False)/.exec(header);
  const shape = /'shape'\s*:\s*\(([^)]*)\)/.exec(header);
  if (!descr || !fortran || !shape) fail(`cannot parse header ${JSON.stringify(header)}`);
  if (fortran[1] === 'True') fail('Fortran-ordered arrays are not supported');
  let d = descr[1];
  if (d === '<b1' || d === '|b1') d = '|b1';
  if (d === '<u1') d = '|u1';
  if (d === '<i1') d = '|i1';
  if (!(d in DTYPES)) fail(`unsupported dtype ${descr[1]}`);
  const dims = shape[1].split(',').map((s) => s.trim()).filter((s) => s.length).map(Number);
  const count = dims.reduce((a, b) => a * b, 1);
  const [Ctor, type] = DTYPES[d];
  const start = offset + headerLen;
  const bytes = count * Ctor.BYTES_PER_ELEMENT;
  if (buf.length - start < bytes) fail(`truncated: ${buf.length - start} data bytes, ${bytes} expected`);
  // Copy into a fresh, aligned ArrayBuffer (the file data need not be aligned for the typed array).
  const ab = new ArrayBuffer(bytes);
  new Uint8Array(ab).set(buf.subarray(start, start + bytes));
  return { type, dims, data: new Ctor(ab) };
}

/** Writes {type, dims, data} (an onnxruntime tensor works too) to FILE as a version 1.0 .npy. */
function writeNpy(file, tensor) {
  const descr = DESCR_OF_TYPE[tensor.type];
  if (!descr) throw new Error(`${file}: cannot write tensor type ${tensor.type}`);
  const dims = Array.from(tensor.dims, Number);
  const shape = dims.length === 1 ? `(${dims[0]},)` : `(${dims.join(', ')})`;
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shape}, }`;
  // Pad with spaces so that magic + version + length + header (ending in \n) is a multiple of 64.
  const total = Math.ceil((10 + header.length + 1) / 64) * 64;
  header = header + ' '.repeat(total - 10 - header.length - 1) + '\n';
  const pre = Buffer.alloc(10);
  MAGIC.copy(pre, 0);
  pre[6] = 1; pre[7] = 0;
  pre.writeUInt16LE(header.length, 8);
  const data = tensor.data;
  const body = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  fs.writeFileSync(file, Buffer.concat([pre, Buffer.from(header, 'latin1'), body]));
}

/**
 * The file colossal-run writes tensor NAME to (runtime/TensorFileName.h, docs/cli.md "Output
 * files"): bytes other than [A-Za-z0-9_-] and a non-leading '.' as %XX; past 255 bytes, a prefix,
 * '~' and 16 hex digits of SHA-256(name).
 */
function tensorFileName(name, suffix = '.npy') {
  const raw = Buffer.from(name, 'utf8');
  let esc = '';
  raw.forEach((b, i) => {
    const c = String.fromCharCode(b);
    esc += /[A-Za-z0-9_-]/.test(c) || (c === '.' && i > 0) ? c : '%' + b.toString(16).toUpperCase().padStart(2, '0');
  });
  if (!esc) esc = '%';
  if (esc.length + suffix.length <= 255) return esc + suffix;
  const tag = '~' + require('crypto').createHash('sha256').update(raw).digest('hex').slice(0, 16);
  let keep = 255 - suffix.length - tag.length;
  if (esc[keep - 1] === '%') keep -= 1;
  else if (esc[keep - 2] === '%') keep -= 2;
  return esc.slice(0, keep) + tag + suffix;
}

module.exports = { readNpy, writeNpy, tensorFileName };
