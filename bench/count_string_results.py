#!/usr/bin/env python3
"""Counts `Result<T, String>` in Rust files, across line breaks: each `Result<` whose
angle-bracketed arguments end, at the top level, in `String`."""
import re, sys, pathlib
def count(text):
    n = 0
    for m in re.finditer(r'\bResult\s*<', text):
        i, depth, args, cur = m.end(), 1, [], ''
        while i < len(text) and depth:
            c = text[i]
            if c == '<': depth += 1
            elif c == '>':
                depth -= 1
                if depth == 0: break
            if c == ',' and depth == 1: args.append(cur); cur = ''
            else: cur += c
            i += 1
        args.append(cur)
        if len(args) == 2 and re.sub(r'\s+', '', args[1]) == 'String':
            n += 1
    return n
total = 0
per = []
for root in sys.argv[1:]:
    for p in sorted(pathlib.Path(root).rglob('*.rs')):
        c = count(p.read_text())
        total += c
        if c: per.append((c, str(p)))
if '-v' in sys.argv[0:0] or False: pass
for c, p in sorted(per, reverse=True)[:60]: print(c, p, file=sys.stderr)
print(total)
