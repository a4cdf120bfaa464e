"""Assembles one variant of memories.wat.in into a component.

    python assemble.py TEMPLATE MEMORIES PAGES OUT.wasm

MEMORIES linear memories (the main one plus MEMORIES-1 that `check` grows by
PAGES pages each). Needs the `wasmtime` Python package (its WAT assembler):
tests/e2e/requirements.txt has it.
"""

import sys

import wasmtime


def main() -> None:
    src, memories, pages, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    hogs = range(memories - 1)
    text = open(src).read()
    for key, value in {
        "@MEMORIES@": str(memories),
        "@PAGES@": str(pages),
        "@HOGS@": "\n  ".join(f"(core instance $h{i} (instantiate $hog))" for i in hogs),
        "@IMPORTS@": "\n    ".join(f'(import "h{i}" "fill" (func $fill{i} (param i32)))' for i in hogs),
        "@CALLS@": "\n      ".join(f"(call $fill{i} (i32.const {pages}))" for i in hogs),
        "@WITH@": " ".join(f'(with "h{i}" (instance $h{i}))' for i in hogs),
    }.items():
        text = text.replace(key, value)
    with open(out, "wb") as f:
        f.write(wasmtime.wat2wasm(text))


if __name__ == "__main__":
    main()
