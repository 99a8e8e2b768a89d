"""A Python process whose position tests read from outside (tests/python_position_test.cpp).

    python_positions.py spin       waits in `while not done: pass` (the line marked SPIN-LINE), in wait_forever()
                                   called by outer() (the line marked CALL-LINE), far below wait_forever's first line
    python_positions.py compute    computes in pure Python for ever (a metric summed sample by sample)
    python_positions.py bigint     adds to a huge int in a loop whose only variable changes in its middle digits
    python_positions.py longcall   one long C call (a sum over a huge range, minutes)
    python_positions.py lines      prints, for code objects whose line tables use every entry form, the first line,
                                   the table (hex) and each code unit's line (0: none), one code object a line
    python_positions.py forever    `while True: pass`, one backward jump (the line marked FOREVER-LINE)
    python_positions.py genexpr    counts the ones in a long list with a generator expression (the innermost frame's
                                   locals repeat; only its iterator's position moves)
    python_positions.py deep       250 frames deep, the innermost holding 1,000 locals each bound to its own 64 KiB
                                   int, spinning (a state a reader must read within its bounds)
    python_positions.py reexec F [sleep]
                                   spins in before_exec() until the file F exists, then execs itself to spin in
                                   outer() (a Python that re-execs: the reader must find the new interpreter), or,
                                   with "sleep", execs /bin/sleep (no Python any more)
Each loop prints "ready" once it runs.
"""
import sys

done = False


def wait_forever():
    announced = print("ready", flush=True)
    # A long gap, so the spin's line is stored in the line table's long form.
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    while not done: pass  # SPIN-LINE
    return announced


def outer():
    return wait_forever()  # CALL-LINE


def compute():
    print("ready", flush=True)
    total = 0
    while True:
        for i in range(10000):
            total += (i * i) % 7


def bigint():
    print("ready", flush=True)
    x = 1 << 200000
    step = 1 << 100000
    while True:
        x += step


def longcall():
    print("ready", flush=True)
    return sum(range(10 ** 12))


def shapes(flag):
    x = [1,
         2]
    if flag:
        y = (x[0] +
             x[1])
    else:
        y = None
    for i in range(3):  # a backward jump: a negative line delta
        y = i
    try:
        raise ValueError
    except ValueError:
        pass
    return y


def lines():
    for code in (wait_forever.__code__, outer.__code__, compute.__code__, shapes.__code__, lines.__code__):
        units = [position[0] or 0 for position in code.co_positions()]
        print(code.co_firstlineno, code.co_linetable.hex(), ",".join(map(str, units)))


def forever():
    print("ready", flush=True)
    while True: pass  # FOREVER-LINE


def genexpr():
    data = [i % 10 for i in range(10 ** 7)] * 30
    print("ready", flush=True)
    while True:
        n = sum(1 for y in data if y == 1)  # GENEXPR-LINE


def deep():
    source = "def innermost(big):\n" + "".join(f"    v{i} = big + {i}\n" for i in range(1000)) + \
        "    print('ready', flush=True)\n    while True: pass\n"
    scope = {}
    exec(source, scope)

    def down(depth):
        if depth == 0:
            return scope["innermost"](1 << (64 * 1024 * 8 - 1))
        return down(depth - 1)
    down(248)


def before_exec():
    import os
    print("ready", flush=True)
    while not os.path.exists(sys.argv[2]): pass
    if sys.argv[3:] == ["sleep"]:
        os.execv("/bin/sleep", ["sleep", "3600"])
    os.execv(sys.executable, [sys.executable, __file__, "spin"])


if __name__ == "__main__":
    {"spin": outer, "compute": compute, "bigint": bigint, "longcall": longcall, "lines": lines, "forever": forever,
     "genexpr": genexpr, "deep": deep, "reexec": before_exec}[sys.argv[1]]()
