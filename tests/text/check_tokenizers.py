#!/usr/bin/env python3
"""Checks lw::text tokenizers against Hugging Face `tokenizers`.

Trains small BPE tokenizers of the common model families on a generated corpus, then
compares lw_tokenize_tool's ids and decoded text with Tokenizer.encode/decode on a
different generated corpus (and on random id sequences, which hit invalid UTF-8 and
byte-fallback runs). The same vocabularies are also checked through the GGUF-style
TokenizerSpec path. Exits nonzero on any mismatch.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import time
import unicodedata

from tokenizers import AddedToken, Tokenizer, Regex, models, normalizers, pre_tokenizers, decoders, processors, trainers

GPT2_RE = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_RE = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2_RE = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>"]
# Added after training: absorbs whitespace on both sides, and a non-special added token.
STRIPPED = "<|mask|>"
PLAIN_ADDED = "<tool>"

WORDS = {
    "en": "the quick brown fox jumps over lazy dog I'll we're they've she'd it's don't HELLO World's "
          "tokenizer inference engine kernel attention matrix THE'S I'M YOU'LL".split(),
    "latin": "café naïve façade résumé Übermäßig straße coração niño ÅNGSTRÖM œuvre żółć čeština".split(),
    "cyr": "Привет мир пример текста Москва ЁЛКА съешь же ещё этих мягких французских булок".split(),
    "greek": "Καλημέρα κόσμε ελληνικά ΑΒΓΔ λόγος ψυχή".split(),
    "cjk": "你好 世界 中文 分词器 日本語 の テキスト カタカナ 한국어 텍스트 龘 𠀋 𪚥".split(),
    "arabic": "مرحبا بالعالم العربية النص".split(),
    "hindi": "नमस्ते दुनिया हिन्दी पाठ क्षत्रिय".split(),
    "emoji": ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇩🇪", "🇯🇵", "❤️", "🤖", "✨", "🧑🏿‍💻"],
    "code": ["def f(x):", "return x**2", "for (int i = 0; i < n; ++i) {", "}", "std::vector<int>",
             "if x != None:", "#include <stdio.h>", "printf(\"%d\\n\", x);", "a[i]+=b[j];", "=>", "===",
             "/* comment */", "// TODO", "0x1F", "λx.x", "$HOME/.bashrc", "SELECT * FROM t;"],
    "num": ["0", "7", "42", "123", "1234", "12345678", "3.14159", "1,000,000", "2026-11-30", "٣٤٥", "५६"],
}
RANGES = [(0x4E00, 0x9FFF), (0x0400, 0x04FF), (0x00C0, 0x024F), (0x1F300, 0x1FAFF), (0x0900, 0x097F),
          (0x0600, 0x06FF), (0xAC00, 0xD7A3), (0x2000, 0x206F), (0x0021, 0x007E)]
ODD_SPACES = ["\u2009", "\u200b", "\u0085", "\u2028", "\ufeff", "\u000b", "\u000c", "\u1680", "\u202f"]
SPACES = [" ", " ", " ", "  ", "   ", "\t", "\n", "\n\n", " \n", "\r\n", "\t\t", "\u00a0", "\u3000", "    "]


def make_corpus(seed, n):
    rng = random.Random(seed)
    keys = list(WORDS)
    lines = []
    for _ in range(n):
        parts = []
        if rng.random() < 0.1:
            parts.append(rng.choice([" ", "  ", "\n", "\t"]))
        for _ in range(rng.randint(1, 14)):
            k = rng.choice(keys)
            w = rng.choice(WORDS[k])
            if rng.random() < 0.15:  # random characters, so that byte fallback and unknown pieces occur
                lo, hi = rng.choice(RANGES)
                w = "".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 5)))
            if rng.random() < 0.03:
                w += rng.choice(ODD_SPACES)
            r = rng.random()
            if r < 0.05:
                w = w.upper()
            elif r < 0.08:
                w = unicodedata.normalize("NFD", w)  # decomposed accents (NFC matters)
            parts.append(w)
            if rng.random() < 0.07:
                parts.append(rng.choice(SPECIALS + [STRIPPED, PLAIN_ADDED]))
            parts.append(rng.choice(SPACES) if rng.random() < 0.3 else " ")
        if rng.random() < 0.3:
            parts.pop()
        if rng.random() < 0.05:
            parts.append(rng.choice(["!", "?", "...", "。", "!!!", "'s", "’"]))
        lines.append("".join(parts))
    return lines


def train(kind, corpus):
    if kind == "mistral":
        # Newer SentencePiece-style conversions: Metaspace pre-tokenizer and decoder.
        tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
        tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first", split=False)
        trainer = trainers.BpeTrainer(vocab_size=2500, special_tokens=["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"],
                                      limit_alphabet=160, show_progress=False)
    elif kind == "llama2":
        tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
        specials = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
        trainer = trainers.BpeTrainer(vocab_size=2500, special_tokens=specials, limit_alphabet=160,
                                      show_progress=False)
    else:
        tok = Tokenizer(models.BPE())
        if kind == "gpt2":
            tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        elif kind == "llama3":
            tok.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(LLAMA3_RE), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        elif kind == "qwen2":
            tok.normalizer = normalizers.NFC()
            tok.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(QWEN2_RE), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        elif kind == "smollm":
            tok.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=SPECIALS, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer=trainer)
    tok.add_special_tokens([AddedToken(STRIPPED, lstrip=True, rstrip=True, normalized=False, special=True)])
    # normalized=True (the default for added tokens): matched in the normalized text.
    tok.add_tokens([AddedToken(PLAIN_ADDED, normalized=True, special=False)])
    j = json.loads(tok.to_str())
    vocab = j["model"]["vocab"]
    if kind in ("llama2", "mistral"):
        # SentencePiece-style vocabularies carry the 256 byte tokens in the model vocabulary.
        nxt = max(max(vocab.values()), max(a["id"] for a in j["added_tokens"])) + 1
        for b in range(256):
            name = "<0x%02X>" % b
            if name not in vocab:
                vocab[name] = nxt
                nxt += 1
        j["post_processor"] = {"type": "TemplateProcessing",
                               "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                          {"Sequence": {"id": "A", "type_id": 0}}],
                               "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                               "special_tokens": {"<s>": {"id": "<s>", "ids": [vocab["<s>"]], "tokens": ["<s>"]}}}
    if kind == "llama3":
        j["model"]["ignore_merges"] = True
        bid = [a["id"] for a in j["added_tokens"] if a["content"] == "<|begin_of_text|>"][0]
        j["post_processor"] = {"type": "TemplateProcessing",
                               "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                                          {"Sequence": {"id": "A", "type_id": 0}}],
                               "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                               "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [bid],
                                                                        "tokens": ["<|begin_of_text|>"]}}}
    if kind == "gpt2":
        # Pairs instead of "a b" strings: the newer merges format.
        j["model"]["merges"] = [m.split(" ") if isinstance(m, str) else m for m in j["model"]["merges"]]
    return Tokenizer.from_str(json.dumps(j)), j


def spec_of(kind, j):
    vocab = dict(j["model"]["vocab"])
    types = {}
    for a in j["added_tokens"]:
        vocab[a["content"]] = a["id"]
        types[a["id"]] = 3 if a["special"] else 4
    n = max(vocab.values()) + 1
    tokens = [""] * n
    for s, i in vocab.items():
        tokens[i] = s
    tt = []
    for i, s in enumerate(tokens):
        if i in types:
            tt.append(types[i])
        elif kind in ("llama2", "mistral") and len(s) == 6 and s.startswith("<0x"):
            tt.append(6)
        else:
            tt.append(1)
    merges = [m if isinstance(m, str) else " ".join(m) for m in j["model"]["merges"]]
    spec = {"tokens": tokens, "token_types": tt, "merges": merges}
    if kind == "llama2":
        spec.update(kind="llama", bos_id=vocab["<s>"], eos_id=vocab["</s>"], unk_id=vocab["<unk>"], add_bos=True,
                    add_space_prefix=True)
    else:
        spec.update(kind="gpt2", pre={"gpt2": "gpt2", "llama3": "llama-bpe", "qwen2": "qwen2", "smollm": "smollm"}[kind])
        if kind == "llama3":
            spec.update(bos_id=vocab["<|begin_of_text|>"], add_bos=True)
    return spec


def run_tool(tool, mode, path, payload, work, tag):
    inp = os.path.join(work, tag + ".in.json")
    out = os.path.join(work, tag + ".out.json")
    with open(inp, "w", encoding="utf-8") as f:
        json.dump(payload, f, ensure_ascii=False)
    r = subprocess.run([tool, mode, path, inp, out], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"[{tag}] tool failed: {r.stderr}")
        return None
    with open(out, encoding="utf-8") as f:
        return json.load(f)


def compare(tag, what, got, want, inputs):
    bad = [i for i in range(len(want)) if got[i] != want[i]]
    if bad:
        i = bad[0]
        print(f"[{tag}] {what}: {len(bad)}/{len(want)} mismatches; first #{i} input={inputs[i]!r}\n"
              f"   lw={got[i]!r}\n   hf={want[i]!r}")
    return len(bad)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--kinds", default="gpt2,llama3,qwen2,smollm,llama2,mistral")
    ap.add_argument("--lines", type=int, default=3000)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    train_corpus = make_corpus(1, 4000)
    test_corpus = make_corpus(2, args.lines)
    test_corpus += ["", " ", "  leading", "trailing  ", "\n\n\n", "<|im_start|>user\nhi<|im_end|>\n",
                    "<s>[INST] hello [/INST]</s>", "a<|im_end|><|im_end|>b", "I'll've  \t x", "𠀋𪚥龘" * 5,
                    "x" * 3000, " ".join(["word"] * 2000)]
    failures = 0
    for kind in args.kinds.split(","):
        t0 = time.time()
        hf, j = train(kind, train_corpus)
        path = os.path.join(args.work, f"{kind}.tokenizer.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(j, f, ensure_ascii=False)
        hf = Tokenizer.from_file(path)
        rng = random.Random(3)
        n = hf.get_vocab_size()
        id_seqs = [[rng.randrange(n) for _ in range(rng.randint(1, 12))] for _ in range(800)]
        payload = {"texts": test_corpus, "id_seqs": id_seqs}
        res = run_tool(args.tool, "hf", path, payload, args.work, kind)
        if res is None:
            failures += 1
            continue
        want = [e.ids for e in hf.encode_batch(test_corpus, add_special_tokens=False)]
        want_bos = [e.ids for e in hf.encode_batch(test_corpus, add_special_tokens=True)]
        bad = compare(kind, "encode", res["enc"], want, test_corpus)
        bad += compare(kind, "encode+bos", res["enc_bos"], want_bos, test_corpus)
        bad += compare(kind, "decode", res["dec"], hf.decode_batch(want, skip_special_tokens=False), want)
        bad += compare(kind, "decode skip_special", res["dec_skip"], hf.decode_batch(want, skip_special_tokens=True), want)
        bad += compare(kind, "decode random ids", res["rand_dec"], hf.decode_batch(id_seqs, skip_special_tokens=False), id_seqs)
        bad += compare(kind, "decode random ids skip_special", res["rand_dec_skip"],
                       hf.decode_batch(id_seqs, skip_special_tokens=True), id_seqs)
        if not res["stream_ok"]:
            print(f"[{kind}] StreamDecoder output differs from decode()")
            bad += 1
        # The GGUF-style path: same vocabulary and merges through TokenizerSpec. (The Metaspace
        # "first" scheme has no GGUF equivalent: GGUF prefixes every segment.)
        if kind == "mistral":
            print(f"[{kind}] vocab {n}, {len(test_corpus)} texts: {'OK' if bad == 0 else f'{bad} FAILED checks'} "
                  f"({time.time() - t0:.1f}s)")
            failures += bad
            continue
        spath = os.path.join(args.work, f"{kind}.spec.json")
        with open(spath, "w", encoding="utf-8") as f:
            json.dump(spec_of(kind, j), f, ensure_ascii=False)
        # GGUF carries no lstrip/rstrip or "normalized" flags, so those tokens stay out.
        nfc_corpus = [unicodedata.normalize("NFC", t).replace(STRIPPED, "").replace(PLAIN_ADDED, "")
                      for t in test_corpus]
        sres = run_tool(args.tool, "spec", spath, {"texts": nfc_corpus, "id_seqs": []}, args.work, kind + ".spec")
        if sres is None:
            bad += 1
        else:
            bad += compare(kind + "/spec", "encode", sres["enc"],
                           [e.ids for e in hf.encode_batch(nfc_corpus, add_special_tokens=False)], nfc_corpus)
            bad += compare(kind + "/spec", "encode+bos", sres["enc_bos"],
                           [e.ids for e in hf.encode_batch(nfc_corpus, add_special_tokens=True)], nfc_corpus)
            bad += compare(kind + "/spec", "decode", sres["dec"], hf.decode_batch(sres["enc"], skip_special_tokens=False),
                           sres["enc"])
        print(f"[{kind}] vocab {n}, {len(test_corpus)} texts, {len(id_seqs)} random id sequences: "
              f"{'OK' if bad == 0 else f'{bad} FAILED checks'} ({time.time() - t0:.1f}s)")
        failures += bad
    print("FAIL" if failures else "all tokenizer checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
