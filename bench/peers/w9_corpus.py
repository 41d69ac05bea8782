"""W9's labelled corpus, the same bytes for Weft and its peer.

Writes into DIR:

- `corpus.jsonl`: DOCS documents, one per line (`{"text", "source"}`),
  each under 800 characters (one chunk on both sides);
- `queries.json`: QUERIES questions with the source that answers each;
- `vectors.f32`, `query_vectors.f32`: every document's and every
  question's embedding, DIM little-endian f32s each, in order.

The words are made up (syllables), so no side's stemmer or stop words
favour it. Documents come in clusters of five that share four topic words;
each also has two words of its own and filler drawn from a long-tailed
vocabulary. A question names two of its cluster's topic words and three
of its filler words, and half the time one of its own words, so ranking
must tell cluster mates apart, some by their filler alone. Embeddings are hashed bags of words (FNV-1a of each lower-cased
word picks a bucket; unit length), as the test endpoint's are.

    python3 bench/peers/w9_corpus.py DIR [--docs 10000] [--queries 200] [--dim 256]
"""

import argparse
import json
import random
import re
import struct
from pathlib import Path

SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]


def words(rng, count, syllables, taken):
    out = []
    while len(out) < count:
        word = "".join(rng.choice(SYLLABLES) for _ in range(syllables))
        if word not in taken:
            taken.add(word)
            out.append(word)
    return out


def embedding(text, dim):
    vector = [0.0] * dim
    for word in re.findall(r"[^\W_]+", text):
        h = 0xCBF29CE484222325
        for byte in word.lower().encode():
            h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
        vector[h % dim] += 1.0
    norm = sum(x * x for x in vector) ** 0.5
    return [x / norm for x in vector] if norm else vector


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("--docs", type=int, default=10_000)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--dim", type=int, default=256)
    a = p.parse_args()
    rng = random.Random(9)
    taken = set()
    filler = words(rng, 4_000, 2, taken)
    weights = [1.0 / (rank + 1) for rank in range(len(filler))]
    clusters = (a.docs + 4) // 5
    topics = [words(rng, 4, 3, taken) for _ in range(clusters)]
    docs = []
    for n in range(a.docs):
        own = words(rng, 2, 4, taken)
        body = rng.choices(filler, weights, k=54)
        text_words = topics[n // 5] + own + body
        rng.shuffle(text_words)
        sentences = [" ".join(text_words[i:i + 10]).capitalize() + "." for i in range(0, len(text_words), 10)]
        text = " ".join(sentences)
        assert len(text) < 800, len(text)
        docs.append({"text": text, "source": f"doc-{n:05d}", "own": own, "body": body})
    queries = []
    for _ in range(a.queries):
        n = rng.randrange(a.docs)
        doc = docs[n]
        # Half the questions name the document's own word; the rest must be
        # told from its cluster mates by their filler words alone.
        own = [doc["own"][0]] if rng.random() < 0.5 else []
        asked = rng.sample(topics[n // 5], 2) + own + rng.sample(doc["body"], 3)
        rng.shuffle(asked)
        queries.append({"query": " ".join(asked), "source": doc["source"]})
    out = Path(a.dir)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "corpus.jsonl", "w") as f:
        for doc in docs:
            f.write(json.dumps({"text": doc["text"], "source": doc["source"]}) + "\n")
    (out / "queries.json").write_text(json.dumps({"dim": a.dim, "queries": queries}))
    for name, texts in (("vectors.f32", [d["text"] for d in docs]), ("query_vectors.f32", [q["query"] for q in queries])):
        with open(out / name, "wb") as f:
            for text in texts:
                f.write(struct.pack(f"<{a.dim}f", *embedding(text, a.dim)))


main()
