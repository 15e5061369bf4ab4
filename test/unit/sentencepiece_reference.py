"""Reference for TokenizerTest: the Python `sentencepiece` package (Debian python3-sentencepiece).

  sentencepiece_reference.py train MODEL_PREFIX TYPE CORPUS...   train a small model on CORPUS
  sentencepiece_reference.py encode MODEL STRINGS.bin OUT.txt     ids and decoded text per string

TYPE `llama` is a Llama-style BPE model (byte fallback, identity normalization, whitespace kept,
digits split), `unigram` the library's defaults (NFKC normalization, extra whitespace removed).
STRINGS.bin holds (uint32 little-endian byte length, UTF-8 bytes) records. OUT.txt gets one line
per string: the ids of encode(string), a tab, and decode(ids) as hex. Exit 77 when the package is
missing (the test then reports itself skipped).
"""
import struct
import sys

try:
    import sentencepiece as spm
except ImportError:
    sys.exit(77)


def train(prefix, kind, corpus):
    options = dict(input=corpus, model_prefix=prefix, vocab_size=1000, num_threads=1, minloglevel=2,
                   character_coverage=1.0)
    if kind == "llama":
        options.update(model_type="bpe", byte_fallback=True, normalization_rule_name="identity",
                       remove_extra_whitespaces=False, split_digits=True)
    else:
        options.update(model_type="unigram")
    spm.SentencePieceTrainer.train(**options)


def encode(model, strings, out):
    sp = spm.SentencePieceProcessor(model_file=model)
    data = open(strings, "rb").read()
    pos, lines = 0, []
    while pos < len(data):
        (n,) = struct.unpack_from("<I", data, pos)
        text = data[pos + 4:pos + 4 + n].decode("utf-8")
        pos += 4 + n
        ids = sp.encode(text)
        lines.append(" ".join(map(str, ids)) + "\t" + sp.decode(ids).encode("utf-8").hex())
    open(out, "w").write("\n".join(lines) + "\n")


if __name__ == "__main__":
    if sys.argv[1] == "train":
        train(sys.argv[2], sys.argv[3], sys.argv[4:])
    else:
        encode(sys.argv[2], sys.argv[3], sys.argv[4])
