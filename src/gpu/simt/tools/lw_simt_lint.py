#!/usr/bin/env python3
"""lw-simt-lint: wave64 hazards in CUDA/HIP kernel code that runs on 32- and 64-lane warps.

Installed with the lightwave-simt package as bin/lw-simt-lint (find_package sets LW_SIMT_LINT
to its path). It names the bug classes that give a wrong answer with no report from the host
emulator's sanitizer, so code without a reference result still learns of them. Raw intrinsics,
warpSize, __shared__ and <<< >>> are fine here; only these are reported:

  shuffle-32            __shfl_down/_up/_xor (and the _sync forms) with offsets laid out for
                        32 lanes and no width argument: a loop whose largest offset is 16
                        (`for (o = 16; o > 0; o /= 2)`, `for (o = 1; o < 32; o *= 2)`) or a
                        literal offset 16. On a 64-lane wavefront lanes 32..63 never reach
                        lane 0's result (an XOR butterfly leaves two half-wave results).
  lane-index-32         `% 32`, `/ 32`, `& 31` (0x1f), `>> 5` on a thread index: two lanes of
                        one 64-lane wave get the same lane number, or two warp numbers.
  ballot-narrowed       a ballot (or __activemask) result counted with __popc/__ffs/__clz/
                        __brev, cast to or stored in a 32-bit type (unsigned, int, uint32_t):
                        the votes of lanes 32..63 are lost.
  shuffle-beyond-width  an XOR mask or shuffle offset >= the width: a literal 32 or more, or a
                        loop reaching 32 (an XOR butterfly starting at 32), with no warp-size
                        guard; on a 32-lane warp every lane reads its own value.
  mask-literal          0xffffffff (or ~0u) as the mask of a _sync intrinsic, directly or
                        through a named constant: it names lanes 0..31 only.

Heuristics (to keep false reports rare):
  - shuffle rules look only at the offset argument of a shuffle call: a literal, or the
    variable of a `for` loop around the call whose start, bound and step are literals (the
    loop is simulated; a condition it cannot read is left alone). A width argument says a
    sub-warp group is meant: then only an offset >= a literal width is reported.
  - a warp-size guard excuses shuffle-32 and shuffle-beyond-width: `warpSize`, WARP_SIZE,
    kWarpSize, WAVEFRONT_SIZE, wave64 ... (any spelling of warp/wave size) in the loop
    header or body, in the statement before the call (`if (warpSize == 64) ...`), or in the
    header of an enclosing `if`/`else`/`switch` block. Code inside `#if`/`#ifdef` branches
    whose condition names a warp or wave size is taken as written for that width and skipped
    by every rule but mask-literal and ballot-narrowed.
  - lane-index-32 looks at the operand left of the operator: it must mention threadIdx, a
    variable assigned (in the same function) from an expression that does, or a name that
    reads as a thread or lane index (containing "thread" or "lane", or tid, tidx, gtid ...).
    `x / 32` on any other value is not reported.
  - ballot-narrowed follows variables assigned a ballot within the file; a variable whose
    upper half is taken apart (`b >> 32`) is taken as handled. Narrowing through a function
    parameter or a return type is not seen.
Comments and string literals are ignored. A line that means what it says carries the comment
`lint: not-a-warp`, which silences every rule on it.

Usage: lw-simt-lint PATH...               report findings as FILE:LINE: [rule] message, then the
                                          source line; exit 1 if any, 0 if clean. Directories
                                          are searched for .cu .cuh .hip .h .hh .hpp .cpp .cc
                                          .cxx .inl files.
       lw-simt-lint --self-test FIXTURE...  check that every line marked `expect: RULE[, RULE]`
                                          is reported with exactly those rules, and no other
"""
import bisect
import pathlib
import re
import sys

ALLOW = "lint: not-a-warp"
SOURCE_SUFFIXES = {".cu", ".cuh", ".hip", ".h", ".hh", ".hpp", ".cpp", ".cc", ".cxx", ".inl"}

MESSAGES = {
    "shuffle-32": "shuffle offsets laid out for 32 lanes: on a 64-lane wavefront lanes 32..63 are "
                  "left out of the result (right only on 32-lane warps); start at warpSize / 2 "
                  "(or bound by warpSize), or pass a width if a 32-lane group is meant",
    "shuffle-beyond-width": "shuffle offset/XOR mask reaches {off}, not below the warp: on a 32-lane "
                            "warp each lane reads its own value (right only on 64-lane wavefronts); "
                            "start at warpSize / 2, or guard with `if (warpSize > {off})`",
    "shuffle-beyond-group": "shuffle offset/XOR mask reaches {off}, not below the width {width} passed: "
                            "each lane reads its own value on any warp size; keep offsets below the width",
    "lane-index-32": "lane/warp index from a literal 32 (`{op}`) on a thread index: on a 64-lane "
                     "wavefront two lanes of one wave get the same lane number or different warp "
                     "numbers (right only on 32-lane warps); use `% warpSize` / `/ warpSize`",
    "ballot-narrowed": "64-bit ballot narrowed to 32 bits ({how}): the votes of lanes 32..63 are "
                       "lost on a 64-lane wavefront (right only on 32-lane warps); keep it in a "
                       "64-bit integer ({fix})",
    "mask-literal": "a 32-bit all-lanes mask (0xffffffff) names lanes 0..31 only: on a 64-lane wavefront "
                    "lanes 32..63 are not in the mask; use a mask of the warp's lanes "
                    "(__activemask(), or ~0ull where all 64 take part)",
}

WIDTH_WORD = re.compile(r"(?i)warp_?size|wave(front)?_?size|wave64|wave32")
SHUFFLE = re.compile(r"\b__shfl_(down|up|xor)(_sync)?\s*\(")
SYNC_CALL = re.compile(r"\b(__shfl\w*_sync|__ballot_sync|__any_sync|__all_sync|__match_\w+_sync|"
                       r"__reduce_\w+_sync|__syncwarp)\s*\(")
BALLOT = re.compile(r"\b(__ballot(?:_sync)?|__activemask)\s*\(")
MASK32 = re.compile(r"(?<![\w.])(0[xX][fF]{8}(?![0-9a-fA-F])[uU]?|~\s*0[uU](?![lL\w]))")
NARROW_FN = {"__popc": "__popcll", "__ffs": "__ffsll", "__clz": "__clzll", "__brev": "__brevll"}
NARROW_TYPE = re.compile(r"^(?:unsigned(?:\s+int)?|int|uint32_t|int32_t|uint|std::uint32_t|std::int32_t)$")
KEYWORDS = {"if", "while", "for", "switch", "return", "sizeof", "else", "case", "do"}


def strip_code(text):
    """Blank out comments and string/char literals, keeping line structure."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + (c if j < n else ""))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def int_literal(s):
    m = re.fullmatch(r"\(?\s*(0[xX][0-9a-fA-F]+|\d+)[uUlL]*\s*\)?", s.strip())
    return int(m.group(1), 0) if m else None


def closing(code, i):
    """Index of the bracket closing the one at code[i] (len(code) if unbalanced)."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    depth = 0
    for j in range(i, len(code)):
        if code[j] in pairs:
            depth += 1
        elif code[j] in ")}]":
            depth -= 1
            if depth == 0:
                return j
    return len(code)


def opening(code, j):
    """Index of the bracket opening the one at code[j] (-1 if unbalanced)."""
    depth = 0
    for i in range(j, -1, -1):
        if code[i] in ")}]":
            depth += 1
        elif code[i] in "({[":
            depth -= 1
            if depth == 0:
                return i
    return -1


def split_top(s, sep):
    parts, depth, start = [], 0, 0
    for i, c in enumerate(s):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == sep and depth == 0:
            parts.append(s[start:i])
            start = i + 1
    parts.append(s[start:])
    return parts


def statement_start(code, pos):
    """Start of the statement holding pos: after the last ; { or } outside parentheses."""
    depth = 0
    for i in range(pos - 1, -1, -1):
        c = code[i]
        if c == ")":
            depth += 1
        elif c == "(":
            if depth == 0:
                continue
            depth -= 1
        elif c in ";{}" and depth == 0:
            return i + 1
    return 0


def enclosing_call(code, pos, start):
    """(name, '(' index) of the innermost call around pos, skipping plain parentheses; a
    static_cast's name is its whole `static_cast<T>`. None when there is none after start."""
    i = pos
    while True:
        depth = 0
        while i > start:
            i -= 1
            if code[i] == ")":
                depth += 1
            elif code[i] == "(":
                if depth == 0:
                    break
                depth -= 1
        else:
            return None
        before = code[start:i].rstrip()
        m = re.search(r"(static_cast\s*<[^<>]*>|[A-Za-z_][\w:]*)$", before)
        if m and m.group(1) not in KEYWORDS:
            return m.group(1), i


class Source:
    def __init__(self, text):
        self.raw = text.split("\n")
        self.code = strip_code(text)
        self.starts = [0] + [m.end() for m in re.finditer("\n", self.code)]
        self.width_specific = self._preprocessor_regions()
        self.found = {}

    def line(self, pos):
        return bisect.bisect_right(self.starts, pos)

    def report(self, pos, rule, message=None, **fmt):
        no = self.line(pos)
        if ALLOW not in self.raw[no - 1]:
            self.found.setdefault((no, rule), MESSAGES[message or rule].format(**fmt))

    def _preprocessor_regions(self):
        flags, stack = [], []
        for text in self.code.split("\n"):
            m = re.match(r"\s*#\s*(if|ifdef|ifndef|elif|else|endif)\b(.*)", text)
            if m:
                kind, cond = m.groups()
                if kind in ("if", "ifdef", "ifndef"):
                    stack.append(bool(WIDTH_WORD.search(cond)))
                elif kind == "elif" and stack:
                    stack[-1] = stack[-1] or bool(WIDTH_WORD.search(cond))
                elif kind == "endif" and stack:
                    stack.pop()
            flags.append(any(stack))
        return flags

    def in_width_branch(self, pos):
        return self.width_specific[self.line(pos) - 1]

    def guarded(self, pos, *extra):
        """A warp-size test in extra text, the statement before pos, or an enclosing if/else
        block's header (an else block's if too)."""
        code = self.code
        if self.in_width_branch(pos) or any(WIDTH_WORD.search(t) for t in extra):
            return True
        if WIDTH_WORD.search(code[statement_start(code, pos):pos]):
            return True
        i = pos
        while True:
            i = self._enclosing_brace(i)
            if i < 0:
                return False
            header_at = statement_start(code, i)
            header = code[header_at:i]
            while re.match(r"\s*else\b", header) and code[header_at - 1] == "}":
                prev = opening(code, header_at - 1)
                prev_at = statement_start(code, prev)
                header += code[prev_at:prev]
                header_at = prev_at
            if re.search(r"\b(if|else|switch|case)\b", header) and WIDTH_WORD.search(header):
                return True

    def function_body(self, pos):
        """(start, end) of the function body around pos: the outermost brace block that is not
        a namespace, extern "C", class, struct or union."""
        outer, i = None, pos
        while (i := self._enclosing_brace(i)) >= 0:
            header = self.code[statement_start(self.code, i):i]
            if not re.search(r"\b(namespace|extern|class|struct|union)\b", header):
                outer = i
        return (outer, closing(self.code, outer)) if outer is not None else (0, len(self.code))

    def _enclosing_brace(self, pos):
        depth = 0
        for i in range(pos - 1, -1, -1):
            if self.code[i] == "}":
                depth += 1
            elif self.code[i] == "{":
                if depth == 0:
                    return i
                depth -= 1
        return -1


def shuffle_calls(code, lo=0, hi=None):
    """(kind, call position, offset argument, width argument or None) for each shuffle call."""
    for m in SHUFFLE.finditer(code, lo, len(code) if hi is None else hi):
        open_at = m.end() - 1
        args = split_top(code[open_at + 1:closing(code, open_at)], ",")
        first = 1 if m.group(2) else 0
        if len(args) < first + 2:
            continue
        width = args[first + 2].strip() if len(args) > first + 2 else None
        yield m.group(1), m.start(), args[first + 1].strip(), width


def simulate_loop(var, init, cond, step):
    """The values a `for` loop's variable takes, or None when start, bound or step is not a
    literal the lint can read."""
    start = int_literal(init)
    if start is None:
        return None
    cond = re.sub(r"\s+", " ", cond.strip())
    flip = {"<": ">", ">": "<", "<=": ">=", ">=": "<=", "!=": "!="}
    if cond == var:
        op, bound = "!=", 0
    elif m := re.fullmatch(rf"{var} ?(<=|>=|<|>|!=) ?(.+)", cond):
        op, bound = m.group(1), int_literal(m.group(2))
    elif m := re.fullmatch(rf"(.+?) ?(<=|>=|<|>|!=) ?{var}", cond):
        op, bound = flip[m.group(2)], int_literal(m.group(1))
    else:
        return None
    if bound is None:
        return None
    test = {"<": lambda v: v < bound, "<=": lambda v: v <= bound, ">": lambda v: v > bound,
            ">=": lambda v: v >= bound, "!=": lambda v: v != bound}[op]
    s = re.sub(r"\s+", "", step)
    steps = {
        rf"{var}/=(\d+)[uU]?|{var}={var}/(\d+)[uU]?": lambda v, k: v // k,
        rf"{var}>>=(\d+)[uU]?|{var}={var}>>(\d+)[uU]?": lambda v, k: v >> k,
        rf"{var}\*=(\d+)[uU]?|{var}={var}\*(\d+)[uU]?": lambda v, k: v * k,
        rf"{var}<<=(\d+)[uU]?|{var}={var}<<(\d+)[uU]?": lambda v, k: v << k,
        rf"{var}\+={var}": lambda v, k: v * 2,
        rf"\+\+{var}|{var}\+\+": lambda v, k: v + 1,
        rf"--{var}|{var}--": lambda v, k: v - 1,
    }
    for rx, fn in steps.items():
        m = re.fullmatch(rx, s)
        if m:
            k = next((int(g) for g in m.groups() if g), None)
            values, v = [], start
            while test(v) and len(values) < 256:
                values.append(v)
                v = fn(v, k)
                if v == values[-1]:
                    return None
            return values if len(values) < 256 else None
    return None


def check_shuffles(src):
    code = src.code
    in_loop = set()
    for m in re.finditer(r"\bfor\s*\(", code):
        open_at = m.end() - 1
        close_at = closing(code, open_at)
        parts = split_top(code[open_at + 1:close_at], ";")
        if len(parts) != 3:
            continue
        init = re.fullmatch(r"\s*(?:[\w:<>]+\s+)*?(\w+)\s*=\s*(.+?)\s*", parts[0], re.S)
        if not init:
            continue
        var = init.group(1)
        body_at = close_at + 1
        while body_at < len(code) and code[body_at].isspace():
            body_at += 1
        if body_at < len(code) and code[body_at] == "{":
            body_end = closing(code, body_at)
        else:
            body_end = body_at + len(split_top(code[body_at:], ";")[0])
        feeds = [(at, width) for _, at, off, width in shuffle_calls(code, body_at, body_end) if off == var]
        if not feeds:
            continue
        in_loop.update(at for at, _ in feeds)
        values = simulate_loop(var, init.group(2), parts[1], parts[2])
        if not values:
            continue
        top = max(values)
        body = code[body_at:body_end]
        for at, width in feeds:
            w = int_literal(width) if width is not None else None
            if w is not None:
                if top >= w:
                    src.report(m.start(), "shuffle-beyond-width", "shuffle-beyond-group", off=top, width=w)
            elif top >= 32 and not src.guarded(m.start(), parts[1], body):
                src.report(m.start(), "shuffle-beyond-width", off=top)
            elif top == 16 and width is None and not src.guarded(m.start(), parts[1], body):
                src.report(m.start(), "shuffle-32")
    literals = [(at, int_literal(off), width) for _, at, off, width in shuffle_calls(code)
                if at not in in_loop and int_literal(off) is not None]
    # A guarded 32 step before an unrolled 16, 8, ... makes the sequence width-aware.
    wide_steps = [at for at, value, width in literals if value >= 32 and width is None and src.guarded(at)]
    for at, value, width in literals:
        w = int_literal(width) if width is not None else None
        if w is not None:
            if value >= w:
                src.report(at, "shuffle-beyond-width", "shuffle-beyond-group", off=value, width=w)
        elif value >= 32 and not src.guarded(at):
            src.report(at, "shuffle-beyond-width", off=value)
        elif value == 16 and width is None and not src.guarded(at):
            body = src.function_body(at)
            if not any(body[0] < a < at for a in wide_steps):
                src.report(at, "shuffle-32")


def thread_like_name(name):
    low = name.lower()
    return ("thread" in low or "lane" in low or name == "threadIdx"
            or re.fullmatch(r"[a-z]{0,2}tid(x|_[xyz]|[xyz])?", low) is not None)


def thread_vars(code):
    """Variables assigned from thread-index expressions in code (one function), to a fixed point."""
    assigns = [(m.group(1), m.group(2)) for m in
               re.finditer(r"(?<![\w.>])([A-Za-z_]\w*)\s*=(?!=)([^;{}]*)", code)]
    # Data loaded at a thread's index (in[threadIdx.x]) or read from another lane is a value,
    # not an index: subscripts and shuffle arguments do not make a variable thread-derived.
    assigns = [(lhs, re.sub(r"\[[^\]]*\]|\b__shfl\w*\s*\([^;]*", " ", rhs)) for lhs, rhs in assigns]
    names = set()
    changed = True
    while changed:
        changed = False
        for lhs, rhs in assigns:
            if lhs not in names and any(thread_like_name(t) or t in names
                                        for t in re.findall(r"[A-Za-z_]\w*", rhs)):
                names.add(lhs)
                changed = True
    return names


def left_operand(code, i):
    j = i - 1
    while j >= 0 and code[j].isspace():
        j -= 1
    end = j + 1
    while j >= 0:
        c = code[j]
        if c in ")]":
            j = opening(code, j) - 1
        elif c.isalnum() or c in "_.":
            j -= 1
        elif c == ">" and j > 0 and code[j - 1] == "-":
            j -= 2
        else:
            break
    return code[j + 1:end]


def check_lane_index(src):
    code = src.code
    derived = {}
    rx = re.compile(r"(?<![%/&>|<])(%|/)\s*(?:32|0x20)[uUlL]*(?![\w.])|(?<![&])&\s*(?:31|0x1[fF])[uUlL]*(?![\w.])"
                    r"|(?<![>])>>\s*5[uUlL]*(?![\w.])")
    for m in rx.finditer(code):
        if src.in_width_branch(m.start()):
            continue
        body = src.function_body(m.start())
        if body not in derived:
            derived[body] = thread_vars(code[body[0]:body[1]])
        operand = left_operand(code, m.start())
        names = re.findall(r"(?<![.>])\b[A-Za-z_]\w*", operand)
        if any(thread_like_name(n) or n in derived[body] for n in names):
            src.report(m.start(), "lane-index-32", op=re.sub(r"\s+", " ", m.group(0).strip()))


def decl_type(code, name, before):
    """The declared type text of name (the last declaration before `before`), or None."""
    found = None
    for m in re.finditer(rf"(?:^|[;{{}}(,])\s*((?:const\s+|constexpr\s+|static\s+|volatile\s+)*"
                         rf"[A-Za-z_][\w:]*(?:\s+[A-Za-z_][\w:]*)*?)\s+{name}\s*(?=[;=,)\[])",
                         code[:before]):
        if m.group(1).split()[-1] not in KEYWORDS:
            found = m.group(1)
    return found


def is_narrow(type_text):
    words = [w for w in (type_text or "").split() if w not in ("const", "constexpr", "static", "volatile")]
    return bool(words) and NARROW_TYPE.match(" ".join(words)) is not None


def narrowing_at(code, pos, start):
    """How the value at pos is narrowed by what directly surrounds it, or None."""
    before = code[start:pos]
    cast = re.search(r"\(\s*((?:const\s+)?[\w:]+(?:\s+int)?)\s*\)\s*$", before)
    if cast and is_narrow(cast.group(1)):
        return f"cast to {cast.group(1)}", "__popcll for counting"
    call = enclosing_call(code, pos, start)
    if call:
        name = call[0]
        if name in NARROW_FN:
            return f"passed to {name}", f"count with {NARROW_FN[name]}"
        m = re.fullmatch(r"static_cast\s*<\s*(.+?)\s*>", name)
        if (m and is_narrow(m.group(1))) or is_narrow(name):
            return f"cast to {m.group(1) if m else name}", "__popcll for counting"
    return None


def check_ballots(src):
    code = src.code
    tracked = {}
    for m in BALLOT.finditer(code):
        start = statement_start(code, m.start())
        how = narrowing_at(code, m.start(), start)
        if how:
            src.report(m.start(), "ballot-narrowed", how=how[0], fix=how[1])
            continue
        stmt = code[start:m.start()]
        d = re.search(r"(?:^|\s)((?:[\w:]+\s+)*?)([A-Za-z_]\w*)\s*=\s*$", stmt)
        if not d or enclosing_call(code, m.start(), start):
            continue
        name, type_text = d.group(2), d.group(1).strip() or decl_type(code, d.group(2), start)
        if is_narrow(type_text):
            src.report(m.start(), "ballot-narrowed", how=f"stored in {type_text.split()[-1]}",
                       fix="unsigned long long or auto; count with __popcll")
        else:
            tracked.setdefault(name, m.end())
    for name, after in tracked.items():
        if re.search(rf"\b{name}\s*>>\s*32", code):
            continue  # the upper half is taken apart on purpose
        for u in re.finditer(rf"(?<![\w.>]){name}\b", code[after:]):
            pos = after + u.start()
            if re.match(r"\s*=(?!=)", code[pos + len(name):]):
                continue
            start = statement_start(code, pos)
            how = narrowing_at(code, pos, start)
            if how:
                src.report(pos, "ballot-narrowed", how=how[0], fix=how[1])
                continue
            d = re.search(r"(?:^|\s)((?:[\w:]+\s+)+)([A-Za-z_]\w*)\s*=\s*", code[start:pos])
            if d and is_narrow(d.group(1).strip()) and not enclosing_call(code, pos, start + d.end()):
                src.report(pos, "ballot-narrowed", how=f"stored in {d.group(1).split()[-1]}",
                           fix="unsigned long long or auto; count with __popcll")


def check_masks(src):
    code = src.code
    mask_args = []
    for m in SYNC_CALL.finditer(code):
        open_at = m.end() - 1
        args = split_top(code[open_at + 1:closing(code, open_at)], ",")
        if args and args[0].strip():
            mask_args.append((open_at + 1, args[0]))
    used = {a.strip() for _, a in mask_args}
    for at, arg in mask_args:
        lit = MASK32.search(code, at, at + len(arg))
        if lit and not WIDTH_WORD.search(arg):  # (warpSize == 64 ? ~0ull : 0xffffffff) is fine
            src.report(lit.start(), "mask-literal")
    for m in re.finditer(r"(?:#\s*define\s+(\w+)\s+|\b(\w+)\s*=\s*)\(?\s*" + MASK32.pattern, code):
        if (m.group(1) or m.group(2)) in used:
            src.report(m.start(), "mask-literal")


def check_text(text):
    """Findings in one source text: {(line, rule): message}."""
    src = Source(text)
    check_shuffles(src)
    check_lane_index(src)
    check_ballots(src)
    check_masks(src)
    return src.found


def check_file(path):
    """[(line, rule, message)] for one file, in line order."""
    found = check_text(pathlib.Path(path).read_text(encoding="utf-8", errors="replace"))
    return [(no, rule, msg) for (no, rule), msg in sorted(found.items())]


def source_files(root):
    root = pathlib.Path(root)
    if root.is_file():
        return [root]
    return [p for p in sorted(root.rglob("*")) if p.is_file() and p.suffix in SOURCE_SUFFIXES]


def self_test(files, check):
    """Every line marked `expect: RULE[, RULE]` reported with exactly those rules, no others."""
    ok = True
    for f in files:
        path = pathlib.Path(f)
        got = {}
        for no, name, _ in check(path):
            got.setdefault(no, set()).add(name)
        want = {}
        for no, line in enumerate(path.read_text().split("\n"), 1):
            m = re.search(r"expect:\s*([\w\-, ]+)", line)
            if m:
                want[no] = {r.strip() for r in m.group(1).split(",")}
        if got != want:
            ok = False
            for no in sorted(set(got) | set(want)):
                if got.get(no) != want.get(no):
                    print(f"{path}:{no}: expected {sorted(want.get(no, []))}, reported {sorted(got.get(no, []))}")
    print("lint self-test", "passed" if ok else "FAILED")
    return 0 if ok else 1


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    if argv[0] == "--self-test":
        return self_test(argv[1:], check_file)
    count = 0
    for root in argv:
        for path in source_files(root):
            raw = path.read_text(encoding="utf-8", errors="replace").split("\n")
            for no, rule, msg in check_file(path):
                print(f"{path}:{no}: [{rule}] {msg}\n    {raw[no - 1].strip()}")
                count += 1
    if count:
        print(f"{count} wave64 hazard(s); run lw-simt-lint --help for the rules")
        return 1
    print("lw-simt-lint: clean")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
