#!/usr/bin/env python3
"""A fuzzer for scripts/convert-config.py's evaluator (issue 35): random
configs from a small grammar of what configs write and what a hostile one
could (literals of every size, names used again and again, dict/list/tuple,
arithmetic and powers, %-formats and f-strings with widths, subscripts,
_base_ lists), each loaded and written out in this process. A finding is
any exception other than the converter's ConfigError (a traceback where a
message belongs), a case that takes more than 5 s of CPU (a bomb the bounds
missed), or an output over the converter's bound; its input is saved.

  python3 fuzz/fuzz_convert_config.py [SECONDS] [OUT_DIR]   (default 30, build-fuzz)
"""
import importlib.util
import os
import random
import signal
import sys
import tempfile
import time

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location(
    "convert_config", os.path.join(here, "..", "scripts", "convert-config.py"))
cc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cc)


class Slow(Exception):
    pass


def expr(rng, names, depth):
    if depth > 4 or rng.random() < 0.3:
        return rng.choice([
            str(rng.choice([0, 1, 7, 2**31, 2**63, 10**30, -5])),
            repr(rng.choice(["a", "%s", "%*d", "%0999999d", "x\x01\n", "é", ""])),
            repr(rng.choice([0.1, 1e308, -0.0])), "None", "True",
            rng.choice(names) if names else "1"])
    k = rng.randrange(9)
    sub = lambda: expr(rng, names, depth + 1)  # noqa: E731
    if k == 0:
        return "dict(%s)" % ", ".join("k%d=%s" % (i, sub()) for i in range(rng.randrange(4)))
    if k == 1:
        return "[%s]" % ", ".join(sub() for _ in range(rng.randrange(4)))
    if k == 2:
        return "(%s,)" % sub()
    if k == 3:
        return "(%s %s %s)" % (sub(), rng.choice("+-*/%") if rng.random() < 0.9 else "**", sub())
    if k == 4:
        return "(%s ** %s)" % (sub(), rng.choice(["2", "10**8", "64", sub()]))
    if k == 5:
        return "f'{%s%s%s}'" % (sub(), rng.choice(["", "!r", "!s"]),
                                rng.choice(["", ":.3f", ":>5", ":>99999999", ":%"]))
    if k == 6:
        return "%s[%s]" % (sub(), rng.choice(["0", "-1", "'k0'", "5"]))
    if k == 7:
        return "{%s: %s}" % (sub(), sub())
    return "'%%s-%%s' %% (%s, %s)" % (sub(), sub())


def config(rng):
    names, lines = [], []
    for i in range(rng.randrange(1, 8)):
        name = "v%d" % i
        lines.append("%s = %s" % (name, expr(rng, names, 0)))
        names.append(name)
    key = rng.choice(["model", "data", "total_iters", "exp_name", "optimizers"])
    lines.append("%s = %s" % (key, rng.choice(names)))
    return "\n".join(lines) + "\n"


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 30
    out = sys.argv[2] if len(sys.argv) > 2 else "build-fuzz"
    os.makedirs(out, exist_ok=True)
    rng = random.Random(int(os.environ.get("FUZZ_SEED", "0")) or None)

    def slow(*_):
        raise Slow()
    signal.signal(signal.SIGPROF, slow)
    end, cases, found = time.time() + seconds, 0, 0
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "c.py")
        while time.time() < end:
            text = config(rng)
            open(path, "w", encoding="utf-8").write(text)
            cc.LOADED.clear()
            what = None
            signal.setitimer(signal.ITIMER_PROF, 5)
            try:
                cfg, order = cc.load(path)
                kept = cc.convert(cfg, order, [], False)
                body = "".join("%s = %s;\n" % (k, cc.fmt(v, 0, k)) for k, v in kept.items())
                if len(body) > cc.MAX_OUTPUT:
                    what = "an output of %d bytes" % len(body)
            except cc.ConfigError:
                pass
            except Slow:
                what = "over 5 s of CPU"
            except RecursionError:
                pass  # the converter's main() turns it into a message
            except Exception as e:  # noqa: BLE001 - any other is a finding
                what = "%s: %s" % (type(e).__name__, str(e)[:200])
            finally:
                signal.setitimer(signal.ITIMER_PROF, 0)
            cases += 1
            if what is not None:
                found += 1
                f = os.path.join(out, "convert_config-finding-%d.py" % found)
                open(f, "w", encoding="utf-8").write(text)
                print("fuzz_convert_config: %s (input %s)" % (what, f))
    print("fuzz_convert_config: %d cases, %d findings" % (cases, found))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
