"""Reference for TokenizerTest: llama2.c run.c's `encode`, written out step by step in Python.

  llama2c_tokenizer_reference.py TOKENIZER.bin STRINGS.bin OUT.txt

STRINGS.bin holds the test strings as (uint32 little-endian byte length, bytes) records; OUT.txt
gets one line per string: the ids of encode(string, bos=True, eos=False), separated by spaces.
The merge loop rescans the whole sequence for the best pair at every step, as run.c does.
"""
import struct
import sys


def read_tokenizer(path):
    data = open(path, "rb").read()
    (max_len,) = struct.unpack_from("<i", data, 0)
    pos, vocab, scores = 4, [], []
    while pos < len(data):
        score, length = struct.unpack_from("<fi", data, pos)
        pos += 8
        vocab.append(data[pos:pos + length])
        scores.append(score)
        pos += length
    return vocab, scores


def encode(text, vocab, scores, lookup):
    tokens = [1]  # BOS
    if text:
        tokens.append(lookup[b" "] if b" " in lookup else 3 + 0x20)  # the dummy prefix
    i = 0
    while i < len(text):
        # One UTF-8 character: this byte and the continuation bytes after it, at most 4 in all.
        j = i + 1
        while j < len(text) and j - i < 4 and (text[j] & 0xC0) == 0x80:
            j += 1
        piece = text[i:j]
        if piece in lookup:
            tokens.append(lookup[piece])
        else:
            tokens.extend(3 + b for b in piece)
        i = j
    while True:
        best_score, best_id, best_idx = -1e10, -1, -1
        for k in range(len(tokens) - 1):
            merged = vocab[tokens[k]] + vocab[tokens[k + 1]]
            tid = lookup.get(merged, -1)
            if tid != -1 and scores[tid] > best_score:
                best_score, best_id, best_idx = scores[tid], tid, k
        if best_idx == -1:
            break
        tokens[best_idx:best_idx + 2] = [best_id]
    return tokens


def main():
    vocab, scores = read_tokenizer(sys.argv[1])
    lookup = {}
    for i, piece in enumerate(vocab):
        lookup.setdefault(piece, i)
    data = open(sys.argv[2], "rb").read()
    pos, lines = 0, []
    while pos < len(data):
        (n,) = struct.unpack_from("<I", data, pos)
        text = data[pos + 4:pos + 4 + n]
        pos += 4 + n
        lines.append(" ".join(map(str, encode(text, vocab, scores, lookup))))
    open(sys.argv[3], "w").write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
