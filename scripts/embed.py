#!/usr/bin/env python3
"""Writes a C file holding a file's bytes (the admin dashboard page is embedded in the binary):

    embed.py INPUT OUTPUT SYMBOL

defines `const char SYMBOL[]` (NUL-terminated) and `const size_t SYMBOL_len` (without the NUL)."""

import sys

src, out, name = sys.argv[1:4]
data = open(src, "rb").read()
with open(out, "w") as f:
    f.write(f"/* generated from {src.split('/')[-1]} by scripts/embed.py: do not edit */\n#include <stddef.h>\n")
    f.write(f"const char {name}[] = {{\n")
    for i in range(0, len(data), 16):
        f.write("    " + ", ".join(str(b) for b in data[i:i + 16]) + ",\n")
    f.write(f"    0}};\nconst size_t {name}_len = {len(data)};\n")
