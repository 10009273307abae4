#!/usr/bin/env python3
"""Checks lw::text::ChatTemplate against jinja2 rendering the way transformers'
apply_chat_template does (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
loopcontrols, its tojson and raise_exception), for the real model templates under data/.
A conversation that jinja2 rejects through raise_exception must be rejected with the same
message. Exits nonzero on any mismatch."""
import argparse
import json
import os
import subprocess
import sys

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class TemplateError(Exception):
    pass


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def reference(source, bos, eos, messages, agp):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env.from_string(source).render(messages=messages, add_generation_prompt=agp, bos_token=bos, eos_token=eos)


SYS = {"role": "system", "content": "You are a terse assistant.  Answer in one line.\n"}
U1 = {"role": "user", "content": "  Hello, who are you? 你好 👋\n"}
A1 = {"role": "assistant", "content": "I am a model. «Привет»"}
U2 = {"role": "user", "content": "Write \"quotes\", 'apostrophes', \\backslashes\\ and {{ braces }} {% tags %}."}
A2 = {"role": "assistant", "content": "\tDone.  "}
U3 = {"role": "user", "content": ""}

CONVERSATIONS = [
    [U1],
    [SYS, U1],
    [U1, A1, U2],
    [SYS, U1, A1, U2, A2],
    [SYS, U1, A1, U2, A2, U3],
    [U1, A1],
    [SYS],
    [U1, U1],  # not alternating: Mistral rejects it
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    with open(os.path.join(args.data, "templates.json")) as f:
        meta = json.load(f)
    failures = 0
    for name, (bos, eos) in sorted(meta.items()):
        path = os.path.join(args.data, name + ".jinja")
        with open(path, encoding="utf-8") as f:
            source = f.read()
        cases = [{"messages": c, "add_generation_prompt": agp} for c in CONVERSATIONS for agp in (False, True)]
        cpath = os.path.join(args.work, name + ".cases.json")
        opath = os.path.join(args.work, name + ".out.json")
        with open(cpath, "w", encoding="utf-8") as f:
            json.dump(cases, f, ensure_ascii=False)
        r = subprocess.run([args.tool, path, bos, eos, cpath, opath], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"[{name}] tool failed: {r.stderr.strip()}")
            failures += 1
            continue
        with open(opath, encoding="utf-8") as f:
            got = json.load(f)
        bad = 0
        for case, res in zip(cases, got):
            try:
                want, want_err = reference(source, bos, eos, case["messages"], case["add_generation_prompt"]), None
            except TemplateError as e:
                want, want_err = None, str(e)
            ok = (res.get("text") == want) if want_err is None else (want_err in res.get("error", ""))
            if not ok:
                if bad == 0:
                    print(f"[{name}] mismatch for {json.dumps(case, ensure_ascii=False)}\n"
                          f"   lw:     {res!r}\n   jinja2: {want if want_err is None else 'error: ' + want_err!r}")
                bad += 1
        print(f"[{name}] {len(cases)} renders: {'OK' if bad == 0 else f'{bad} mismatches'}")
        failures += bad
    print("FAIL" if failures else "all chat template checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
