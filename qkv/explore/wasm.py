"""The live page's one WebAssembly function, assembled here from its instructions (no
toolchain: the module is 360 bytes).

``matmat(w, x, y, rows, cols, count)`` computes ``y[t, r] = sum_c w[r, c] * x[t, c]`` for
``r < rows``, ``t < count`` over float64 numbers in the module's memory (byte offsets ``w``,
``x``, ``y``; row-major; ``cols`` even), with 128-bit SIMD: two f64x2 running sums over four
numbers a step.  It is nn.Linear's product in float64, what ``script/live/common.js``'s
``linear`` computes in JavaScript, five to ten times faster in V8 (measured in Node 20 on the
project's 2-core machine, matrices 96 to 768 wide: 1.4-2.3 billion multiply-adds a second
against 0.2-0.3 for the loop).  A browser without WebAssembly SIMD keeps the JavaScript loop.

The bytes follow the WebAssembly core specification 2.0 (binary format, chapter 5): a type
section (one function type), a function, a memory of one page (the page grows it), exports
``matmat`` and ``memory``, and the code.
"""

from __future__ import annotations

import base64
from functools import cache

__all__ = ["matmat_module", "matmat_base64"]

I32, V128 = 0x7F, 0x7B
# matmat's parameters, then its locals, by index
W, X, Y, ROWS, COLS, COUNT = range(6)
R, T, C, WROW, XROW, END = range(6, 12)
SUM0, SUM1 = 12, 13


def _unsigned(n: int) -> bytes:
    """LEB128, unsigned."""
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _signed(n: int) -> bytes:
    """LEB128, signed."""
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        if (n == 0 and not low & 0x40) or (n == -1 and low & 0x40):
            out.append(low)
            return bytes(out)
        out.append(low | 0x80)


def _vector(items: list[bytes]) -> bytes:
    return _unsigned(len(items)) + b"".join(items)


def _section(number: int, body: bytes) -> bytes:
    return bytes([number]) + _unsigned(len(body)) + body


def _get(index: int) -> bytes:
    return b"\x20" + _unsigned(index)  # local.get


def _set(index: int) -> bytes:
    return b"\x21" + _unsigned(index)  # local.set


def _const(n: int) -> bytes:
    return b"\x41" + _signed(n)  # i32.const


def _simd(opcode: int) -> bytes:
    return b"\xfd" + _unsigned(opcode)


ADD, MUL, SHL, AND, LESS, AT_LEAST = b"\x6a", b"\x6c", b"\x74", b"\x71", b"\x49", b"\x4f"
BLOCK, LOOP, IF, END_, BR, BR_IF = b"\x02\x40", b"\x03\x40", b"\x04\x40", b"\x0b", b"\x0c", b"\x0d"
F64_ADD, F64_STORE = b"\xa0", b"\x39" + _unsigned(3) + _unsigned(0)
V_ADD, V_MUL, V_ZERO = _simd(240), _simd(242), _simd(12) + bytes(16)  # f64x2.add/mul, v128.const


def _load(offset: int) -> bytes:
    return _simd(0) + _unsigned(3) + _unsigned(offset)  # v128.load, 8-byte aligned


def _lane(index: int) -> bytes:
    return _simd(33) + bytes([index])  # f64x2.extract_lane


def _address(base: int, index: int) -> bytes:
    """base + 8 * index (byte offsets of float64 numbers)."""
    return _get(base) + _get(index) + _const(3) + SHL + ADD


def _accumulate(total: int, offset: int) -> bytes:
    """total += w[wrow + c + offset/8 ..+2] * x[xrow + c + ..]."""
    return (
        _get(total)
        + _address(WROW, C)
        + _load(offset)
        + _address(XROW, C)
        + _load(offset)
        + V_MUL
        + V_ADD
        + _set(total)
    )


def _loop_until(counter: int, limit: int, body: bytes, step: int = 1) -> bytes:
    """for (counter = 0; counter < limit; counter += step) body"""
    return (
        _const(0)
        + _set(counter)
        + BLOCK
        + LOOP
        + _get(counter)
        + _get(limit)
        + AT_LEAST
        + BR_IF
        + _unsigned(1)
        + body
        + _get(counter)
        + _const(step)
        + ADD
        + _set(counter)
        + BR
        + _unsigned(0)
        + END_
        + END_
    )


def _body() -> bytes:
    row_of = lambda base, index: _get(base) + _get(index) + _get(COLS) + MUL + _const(3) + SHL + ADD  # noqa: E731
    dot = (
        row_of(X, T)
        + _set(XROW)
        + V_ZERO
        + _set(SUM0)
        + V_ZERO
        + _set(SUM1)
        + _get(COLS)
        + _const(-4)
        + AND
        + _set(END)  # four numbers a step up to cols & ~3 ...
        + _loop_until(C, END, _accumulate(SUM0, 0) + _accumulate(SUM1, 16), step=4)
        + _get(C)  # ... then the last two, where cols % 4 == 2
        + _get(COLS)
        + LESS
        + IF
        + _accumulate(SUM0, 0)
        + END_
        # y[t * rows + r] = the lanes of sum0 + sum1, added
        + _get(Y)
        + _get(T)
        + _get(ROWS)
        + MUL
        + _get(R)
        + ADD
        + _const(3)
        + SHL
        + ADD
        + _get(SUM0)
        + _get(SUM1)
        + V_ADD
        + _set(SUM0)
        + _get(SUM0)
        + _lane(0)
        + _get(SUM0)
        + _lane(1)
        + F64_ADD
        + F64_STORE
    )
    rows = row_of(W, R) + _set(WROW) + _loop_until(T, COUNT, dot)
    return _loop_until(R, ROWS, rows)


@cache
def matmat_module() -> bytes:
    """The module's bytes."""
    locals_ = _vector([_unsigned(6) + bytes([I32]), _unsigned(2) + bytes([V128])])
    code = locals_ + _body() + END_
    signature = b"\x60" + _vector([bytes([I32])] * 6) + _vector([])
    exports = [
        _unsigned(6) + b"matmat" + b"\x00" + _unsigned(0),
        _unsigned(6) + b"memory" + b"\x02" + _unsigned(0),
    ]
    return (
        b"\0asm"
        + (1).to_bytes(4, "little")
        + _section(1, _vector([signature]))
        + _section(3, _vector([_unsigned(0)]))
        + _section(5, _vector([b"\x00" + _unsigned(1)]))  # memory: at least one page
        + _section(7, _vector(exports))
        + _section(10, _vector([_unsigned(len(code)) + code]))
    )


def matmat_base64() -> str:
    """The module as base64, as the page carries it."""
    return base64.b64encode(matmat_module()).decode("ascii")
