#!/usr/bin/env python3
"""benchstat.py: the statistics every scripts/bench-*.sh prints, in one place.

Side-by-side benchmarks against a peer tool (fio, perftest) run the two
tools interleaved and report the median and range of per-pair ratios. The
rules live here once, with their tests (``benchstat.py selftest``, run by
``cargo test -p dmalab --test benchstat``):

* **interleaving**: pair ``i`` runs A B B A when ``i`` is even and B A A B
  when it is odd (``order``); each tool's figure in a pair is the mean of
  its two runs, which cancels a steady drift of the device within the pair.
* **ratios**: one ratio per pair, dmalab's figure over the peer's; the
  summary is their median and range (``ratio``), never a ratio of medians.
* **rate error**: the worst whole 1-second window's ``|rate - target| /
  target`` from completion times, windows ending at least 100 ms before the
  stop (``window-error``).
* **CPU per GiB moved**: CPU seconds (``perf stat -e task-clock``, or
  where perf is missing the kernel's rusage of the child, ``rusage``: both
  count the process and every thread it starts, io_uring's SQPOLL poller
  and io-wq workers included, as those are threads of the process since
  Linux 5.12) over the bytes moved in GiB (``cpu-per-gib``).

Used as a module (``sys.path.insert(0, "scripts"); import benchstat``) or
as a command::

    benchstat.py order I                  # "A B B A" or "B A A B"
    benchstat.py ratio "D1 D2 .." "P1 P2 .."   # median [min..max] of Di/Pi
    benchstat.py median "X1 X2 .."
    benchstat.py window-error LOG TARGET SECS  # fio latency log, percent
    benchstat.py task-clock-s PERF_STAT_FILE   # CPU seconds from perf stat -x,
    benchstat.py rusage OUT -- CMD [ARG..]     # run CMD; its rusage as JSON in OUT
    benchstat.py selftest
"""

import statistics
import sys

GIB = float(1 << 30)


def median(xs):
    """Median of a non-empty sequence of numbers."""
    xs = [float(x) for x in xs]
    if not xs:
        raise ValueError("median of no values")
    return statistics.median(xs)


def order(i):
    """The run order of pair ``i``: A B B A for even pairs, B A A B for odd."""
    return ["A", "B", "B", "A"] if i % 2 == 0 else ["B", "A", "A", "B"]


def pair_mean(first, second):
    """One tool's figure in an interleaved pair: the mean of its two runs."""
    return (float(first) + float(second)) / 2.0


def ratios(ours, peers):
    """Per-pair ratios ours[i] / peers[i]; pairs whose peer figure is not
    positive are left out (no ratio exists)."""
    if len(ours) != len(peers):
        raise ValueError(f"{len(ours)} figures against {len(peers)}: pairs must match")
    return [float(a) / float(b) for a, b in zip(ours, peers) if float(b) > 0]


def summary(rs):
    """(median, min, max) of ratios."""
    if not rs:
        raise ValueError("no ratios")
    return median(rs), min(rs), max(rs)


def fmt_ratio(rs):
    """``1.012 [0.990..1.050]``: the median and range of ratios."""
    if not rs:
        return "n/a"
    m, lo, hi = summary(rs)
    return f"{m:.3f} [{lo:.3f}..{hi:.3f}]"


def cpu_per_gib(cpu_s, bytes_moved):
    """CPU seconds per GiB moved (None when nothing moved)."""
    if bytes_moved <= 0:
        return None
    return float(cpu_s) / (float(bytes_moved) / GIB)


def task_clock_s(perf_stat_text):
    """CPU seconds from ``perf stat -x, -e task-clock`` output (msec)."""
    for line in perf_stat_text.splitlines():
        f = line.split(",")
        if len(f) >= 3 and f[2].startswith("task-clock"):
            return float(f[0]) / 1000.0
    raise ValueError("no task-clock line in the perf stat output")


def rusage_run(argv):
    """Runs ``argv`` (stdin, stdout and stderr inherited) and returns its exit
    status (128 + N when killed by signal N) and the kernel's rusage of it,
    from ``wait4``: user and system CPU seconds of every thread the process
    ever had (a thread's time joins the process's when it exits, and all
    have exited once the process is reaped; io_uring's SQPOLL poller and
    io-wq workers are such threads on Linux >= 5.12), and its voluntary and
    involuntary context switches."""
    import os
    if not argv:
        raise ValueError("no command to run")
    pid = os.fork()
    if pid == 0:
        try:
            os.execvp(argv[0], argv)
        except OSError as e:
            print(f"benchstat.py: rusage: {argv[0]}: {e}", file=sys.stderr)
        os._exit(127)
    _, status, ru = os.wait4(pid, 0)
    rc = os.waitstatus_to_exitcode(status)
    rc = 128 - rc if rc < 0 else rc
    return rc, {
        "user_s": ru.ru_utime,
        "sys_s": ru.ru_stime,
        "cpu_s": ru.ru_utime + ru.ru_stime,
        "nvcsw": ru.ru_nvcsw,
        "nivcsw": ru.ru_nivcsw,
    }


def window_error(completion_ms, target, secs):
    """Worst whole 1-s window's |count - target| / target, percent, from
    completion times in ms since the start; windows end at least 100 ms
    before the stop."""
    whole = int((float(secs) - 0.1) // 1)
    if whole < 1:
        raise ValueError("a run shorter than 1.1 s has no whole window")
    w = [0] * whole
    for t in completion_ms:
        k = int(t) // 1000
        if 0 <= k < whole:
            w[k] += 1
    return max(abs(x - target) / target * 100.0 for x in w)


def fio_lat_log_ms(path):
    """Completion times (ms) from a fio ``--write_lat_log`` file."""
    with open(path) as f:
        return [int(line.split(",")[0]) for line in f if line.strip()]


def _nums(arg):
    return [float(x) for x in arg.split()]


def _selftest():
    import unittest

    class T(unittest.TestCase):
        def test_order_alternates(self):
            self.assertEqual(order(0), ["A", "B", "B", "A"])
            self.assertEqual(order(1), ["B", "A", "A", "B"])
            self.assertEqual(order(4), order(0))

        def test_abba_cancels_a_steady_drift(self):
            # A device 10% faster each run: A B B A at t = 0 1 2 3.
            rate = [100 * 1.1**t for t in range(4)]
            a = pair_mean(rate[0], rate[3])
            b = pair_mean(rate[1], rate[2])
            # Equal tools read as equal within 1% (A then B alone: 10% off).
            self.assertAlmostEqual(a / b, 1.0, delta=0.01)
            self.assertAlmostEqual(rate[1] / rate[0], 1.1)

        def test_ratio_median_and_range(self):
            rs = ratios([2, 3, 4, 10], [2, 2, 2, 2])
            self.assertEqual(rs, [1.0, 1.5, 2.0, 5.0])
            self.assertEqual(summary(rs), (1.75, 1.0, 5.0))
            self.assertEqual(fmt_ratio(rs), "1.750 [1.000..5.000]")

        def test_ratio_is_of_pairs_not_of_medians(self):
            # Medians 3 and 3 (ratio 1.0), but every pair is 0.5 or 2.
            rs = ratios([1, 3, 6], [2, 3, 3])
            self.assertEqual(median(rs), 1.0)
            rs = ratios([1, 6, 1], [2, 3, 2])
            self.assertEqual(median(rs), 0.5)

        def test_pairs_must_match_and_zero_peers_are_left_out(self):
            with self.assertRaises(ValueError):
                ratios([1, 2], [1])
            self.assertEqual(ratios([1, 2], [0, 4]), [0.5])
            self.assertEqual(fmt_ratio([]), "n/a")

        def test_cpu_per_gib(self):
            self.assertEqual(cpu_per_gib(2.0, 4 << 30), 0.5)
            self.assertIsNone(cpu_per_gib(1.0, 0))

        def test_task_clock_from_perf_stat(self):
            text = "# started on x\n\n1234.50,msec,task-clock,1234500000,100.00,0.999,CPUs utilized\n"
            self.assertAlmostEqual(task_clock_s(text), 1.2345)
            with self.assertRaises(ValueError):
                task_clock_s("nothing\n")

        def test_rusage_counts_every_thread_of_the_child(self):
            # Two threads each burn 0.2 s of CPU; the child's rusage holds
            # both, so it is at least 0.3 s (0.4 s less scheduler slack).
            burn = ("import threading,time\n"
                    "def b():\n"
                    "    t=time.thread_time()\n"
                    "    while time.thread_time()-t<0.2: pass\n"
                    "ts=[threading.Thread(target=b) for _ in range(2)]\n"
                    "[t.start() for t in ts]; [t.join() for t in ts]\n")
            rc, ru = rusage_run([sys.executable, "-c", burn])
            self.assertEqual(rc, 0)
            self.assertGreaterEqual(ru["cpu_s"], 0.3)
            self.assertAlmostEqual(ru["cpu_s"], ru["user_s"] + ru["sys_s"])
            rc, _ = rusage_run([sys.executable, "-c", "import sys; sys.exit(3)"])
            self.assertEqual(rc, 3)
            rc, _ = rusage_run(["/nonexistent/program"])
            self.assertEqual(rc, 127)

        def test_window_error(self):
            # 2.5 s: two whole windows; 100 and 90 completions for 100/s.
            t = [i * 10 for i in range(100)] + [1000 + i * 11 for i in range(90)]
            t += [2000 + i for i in range(400)]  # the partial window: ignored
            self.assertAlmostEqual(window_error(t, 100, 2.5), 10.0)
            with self.assertRaises(ValueError):
                window_error(t, 100, 1.0)

    suite = unittest.defaultTestLoader.loadTestsFromTestCase(T)
    ok = unittest.TextTestRunner(stream=sys.stderr, verbosity=1).run(suite).wasSuccessful()
    return 0 if ok else 1


def main(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, args = argv[0], argv[1:]
    try:
        if cmd == "selftest":
            return _selftest()
        if cmd == "rusage" and len(args) >= 3 and args[1] == "--":
            import json
            rc, ru = rusage_run(args[2:])
            with open(args[0], "w") as f:
                json.dump(ru, f)
                f.write("\n")
            return rc
        if cmd == "order" and len(args) == 1:
            print(" ".join(order(int(args[0]))))
        elif cmd == "ratio" and len(args) == 2:
            print(fmt_ratio(ratios(_nums(args[0]), _nums(args[1]))))
        elif cmd == "median" and len(args) == 1:
            print(f"{median(_nums(args[0])):.6g}")
        elif cmd == "window-error" and len(args) == 3:
            print(window_error(fio_lat_log_ms(args[0]), float(args[1]), float(args[2])))
        elif cmd == "task-clock-s" and len(args) == 1:
            with open(args[0]) as f:
                print(task_clock_s(f.read()))
        else:
            print(f"benchstat.py: unknown command or arguments: {' '.join(argv)}", file=sys.stderr)
            return 2
    except (ValueError, OSError) as e:
        print(f"benchstat.py: {cmd}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
