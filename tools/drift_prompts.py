#!/usr/bin/env python3
"""Writes the prompt file of `kvq drift` (models/northanger-prompts.txt):
sentence starts drawn from the held-out novel's evaluation text.

Method (deterministic): the text from "CHAPTER 1" on, paragraphs joined
into single lines, split into sentences after '.', '!' or '?' (a closing
quote may follow; not after Mr., Mrs., Dr., St.) where the next one
starts with a capital or a quote;
sentences of at least 12 words are kept; COUNT of them are taken evenly
spaced through the text (the middle one of each of COUNT equal runs) and
their first WORDS words become the prompts, one per line.

Usage: python3 tools/drift_prompts.py ../shared/text/austen-northanger-120k.txt \
           > models/northanger-prompts.txt
"""
import re
import sys

COUNT, WORDS, MIN_WORDS = 48, 8, 12


def sentences(text):
    text = text[text.index("CHAPTER 1"):]
    for para in re.split(r"\n\s*\n", text):
        para = " ".join(para.split())
        if not para or para.startswith("CHAPTER"):
            continue
        for s in re.split(r"(?<=[.!?])(?<!Mr\.)(?<!Mrs\.)(?<!Dr\.)(?<!St\.)(?:[\"'])?\s+(?=[\"']?[A-Z])",
                          para):
            yield s


def main():
    text = open(sys.argv[1], encoding="utf-8").read()
    kept = [s for s in sentences(text) if len(s.split()) >= MIN_WORDS]
    n = len(kept)
    for i in range(COUNT):
        s = kept[(2 * i + 1) * n // (2 * COUNT)]
        print(" ".join(s.split()[:WORDS]))


if __name__ == "__main__":
    main()
