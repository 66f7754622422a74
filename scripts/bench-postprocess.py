#!/usr/bin/env python3
"""postprocess benchmark: one recording turned into a flame graph two ways in the same session, alternating, RUNS times
each. The recording depends on --case:

  collect      the sample .NET web API under load, `profcpu collect -freq 9999` (>= 30k samples)     (default)
               with the default `-call-graph auto`: stack copies, which profcpu unwinds through the JIT's code while
               it records and writes into perf.data as callchains: both tools print the same stacks
  collect-kept the same with `-keep-stack-copies`: perf.data keeps the copies, which postprocess unwinds again and
               perf script cannot (it prints one frame for most samples: see the frames-per-sample line)
  collect-fp   the same with `-call-graph fp`: no stack copies, both tools print the same frame-pointer stacks
  perf-record  the same API recorded by `perf record -g -F 999` (~15k samples) into a folder holding only perf.data:
               both tools name frames live (the API keeps running, its /tmp/perf-PID.map, libcoreclr, kallsyms)
  short        the API, `profcpu collect` of ~1,000 samples: fixed costs dominate
  worst        examples/many_stacks.c (300 functions calling each other at random: nearly every stack distinct),
               `profcpu collect -freq 9999` (~40k samples)
  worst-kept   the same with `-keep-stack-copies` (what `worst` was before perf.data held the unwound stacks: perf
               script then unwinds every copy itself)

Before the timed runs it prints how many frames a sample has on average in each tool's perf script text, so that a
comparison of unequal work shows as such.

and the two ways are:

  profcpu postprocess -dir DIR
      (regenerates perf_script.out, folded_stacks.out, flamegraph.svg, metadata.txt and prof.tar.gz)
  perf script -i DIR/perf.data | inferno-collapse-perf | inferno-flamegraph > flamegraph.svg
      (the classic pipeline; the API keeps running so that perf finds its /tmp/perf-PID.map)

Prints every run's wall time and peak RSS (from wait4: the pipeline's per stage, its peak being the largest stage's
and at most their sum), the medians, and the ratios. Sets up what it needs first (idempotent): the inferno CLI
(`cargo install inferno --version 0.12.8` into the cache), the .NET runtime and the web API, and times the binary
users get (scripts/build-static.sh) unless --profcpu names another.

The timed runs regenerate the outputs of a folder that has them already (a warm-up run makes them), so postprocess
copies the compressed entries of perf.data, symbols/ and perf_script.out from the folder's prof.tar.gz where they are
unchanged, leaves the bytes of perf_script.out that are the same as they are, and leaves folded_stacks.out in place
when it holds the same stacks. --cold removes prof.tar.gz, perf_script.out, folded_stacks.out and flamegraph.svg
before each profcpu run: everything is compressed and written anew, as on a `perf record` folder's first
postprocess.

Usage: scripts/bench-postprocess.py [--case collect|collect-kept|collect-fp|perf-record|short|worst|worst-kept] [--dotnet 8|3.1] [--runs 3] [--seconds 2] [--freq 9999]
                                    [--profcpu BINARY] [--cold] [--dir EXISTING_COLLECTION [--hot FRAME]]
                                    [--keep] [--setup-only]
"""
import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.environ.get("PROFCPU_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "profcpu")
INFERNO_VERSION = "0.12.8"
INFERNO_BIN = os.path.join(CACHE, "inferno", "bin")
MIN_SAMPLES = 30000
# .NET 8.0.4 cuts the method's name in its perf map one letter short: this prefix is in both runtimes' names.
HOT_METHOD = "PricingEngine::ComputeDiscountCurv"
WORST_HOT = "call_next"


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def die(msg):
    print(f"bench: error: {msg}", file=sys.stderr)
    sys.exit(1)


def setup_inferno():
    collapse = os.path.join(INFERNO_BIN, "inferno-collapse-perf")
    if os.access(collapse, os.X_OK) and os.access(os.path.join(INFERNO_BIN, "inferno-flamegraph"), os.X_OK):
        return
    log(f"installing inferno {INFERNO_VERSION} into {os.path.dirname(INFERNO_BIN)} (once, ~1 min)")
    subprocess.run(["cargo", "install", "--quiet", "--locked", "inferno", "--version", INFERNO_VERSION,
                    "--root", os.path.dirname(INFERNO_BIN)], check=True)


def setup_dotnet(version):
    subprocess.run(["bash", os.path.join(REPO, "scripts/dotnet-runtime.sh"), version], check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run(["bash", os.path.join(REPO, "examples/webapi/build.sh"), version], check=True,
                   stdout=subprocess.DEVNULL)


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def samples_of(run_dir):
    with open(os.path.join(run_dir, "metadata.txt")) as f:
        for line in f:
            if line.startswith("samples: "):
                return int(line.split()[1])
    return 0


def start_api(version):
    """The web API on .NET `version` with its perf map on, so that perf names its JIT frames from /tmp/perf-PID.map
    as profcpu does. .NET 7+ runs JIT code from memfd:doublemapper mappings by default (W^X), which perf 6.1 does not
    look up in a perf map, so .NET 8 runs with DOTNET_EnableWriteXorExecute=0, as Microsoft's advice for perf users
    says."""
    port = free_port()
    env = dict(os.environ)
    if version != "3.1":
        env["DOTNET_EnableWriteXorExecute"] = "0"
        # run.sh leaves .NET 8's perf map off (profcpu switches it on over the IPC; perf cannot): on from the start.
        env["DOTNET_PerfMapEnabled"] = "1"
    api = subprocess.run(["bash", os.path.join(REPO, "examples/webapi/run.sh"), "--runtime", version, "--port",
                          str(port)], check=True, stdout=subprocess.PIPE, text=True, env=env)
    api_pid = int(api.stdout.strip())
    log(f"web API running as PID {api_pid} on port {port}")
    return port, api_pid


def under_load(port, seconds, action):
    """Runs `action()` while the API's CPU route is loaded."""
    env = dict(os.environ, PORT=str(port))
    # Its own process group: stopping it must stop wrk too, or the API stays busy during the timed runs.
    load = subprocess.Popen(["bash", os.path.join(REPO, "examples/webapi/load.sh"), "cpu", str(int(seconds) + 6), "4"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        time.sleep(1.5)
        return action()
    finally:
        os.killpg(load.pid, signal.SIGTERM)
        load.wait()


def collect(profcpu, work, target_args, seconds, freq):
    # The target last: after `--` everything belongs to the command.
    out = subprocess.run([profcpu, "collect", "-duration", str(seconds), "-freq", str(freq), "-output",
                          os.path.join(work, "collections"), *target_args], check=True, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    return out.stdout.strip().splitlines()[-1]


def perf_record(work, pid, seconds, freq):
    run_dir = os.path.join(work, f"perf-record-{len(os.listdir(work))}")
    os.makedirs(run_dir)
    done = subprocess.run(["perf", "record", "-q", "-g", "-F", str(freq), "-p", str(pid), "-o",
                           os.path.join(run_dir, "perf.data"), "--", "sleep", str(seconds)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        die(f"perf record -p {pid} failed (exit {done.returncode}): {done.stderr.strip()[-500:] or 'no message'}")
    return run_dir


def samples_in(run_dir):
    """Samples of a recording: from metadata.txt, else as perf counts them."""
    n = samples_of(run_dir) if os.path.exists(os.path.join(run_dir, "metadata.txt")) else 0
    if n:
        return n
    out = subprocess.run(["perf", "script", "-F", "tid", "-i", os.path.join(run_dir, "perf.data")],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    return len(out.splitlines())


def frames_per_sample(text):
    """The mean number of frame lines per sample in perf script text (a binary stream)."""
    samples = frames = 0
    for line in text:
        if line.startswith(b"\t"):
            frames += 1
        elif line.strip():
            samples += 1
    return frames / max(samples, 1)


def record_enough(make, seconds, wanted, tolerance):
    """Records with `make(seconds)` until the sample count is within `tolerance` (a factor) of `wanted`."""
    for _ in range(4):
        run_dir = make(seconds)
        n = samples_in(run_dir)
        log(f"recorded {n} samples in {seconds} s: {run_dir}")
        if wanted / tolerance <= n <= wanted * tolerance:
            return run_dir
        seconds = round(seconds * wanted / max(n, 1), 2)
        log(f"not about {wanted}: recording again for {seconds} s")
    return run_dir


def record(profcpu, work, port, api_pid, seconds, freq, stacks):
    """Collects the API under load; records longer until there are enough samples."""
    env = dict(os.environ, PORT=str(port))
    while True:
        # Its own process group: stopping it must stop wrk too, or the API stays busy during the timed runs.
        load = subprocess.Popen(["bash", os.path.join(REPO, "examples/webapi/load.sh"), "cpu",
                                 str(int(seconds) + 6), "4"], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            time.sleep(1.5)
            out = subprocess.run([profcpu, "collect", "-pid", str(api_pid), "-duration", str(seconds), "-freq",
                                  str(freq), *stacks, "-output", os.path.join(work, "collections")],
                                 check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        finally:
            os.killpg(load.pid, signal.SIGTERM)
            load.wait()
        run_dir = out.stdout.strip().splitlines()[-1]
        n = samples_of(run_dir)
        log(f"recorded {n} samples in {seconds} s at {freq} Hz: {run_dir}")
        if n >= MIN_SAMPLES:
            return run_dir
        seconds = round(seconds * MIN_SAMPLES / max(n, 1) * 1.2, 1)
        log(f"fewer than {MIN_SAMPLES}: recording again for {seconds} s")


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def settle(api_pid):
    """Waits until the API is idle after the load (its thread pool winds down) and the recording is on disk."""
    os.sync()
    if not api_pid:
        return
    hz = os.sysconf("SC_CLK_TCK")
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        before = cpu_ticks(api_pid)
        time.sleep(0.5)
        if (cpu_ticks(api_pid) - before) / hz < 0.02:
            return
    log("the API did not go idle; measuring anyway")


def timed(argv_list, stdout_path):
    """Runs a pipeline of commands (one command: a plain run); returns (wall s, [maxrss KB per stage], CPU s of all
    stages: user + system, which other load on the machine hardly changes)."""
    procs = []
    started = time.perf_counter()
    prev = None
    out = open(stdout_path, "wb")
    for i, argv in enumerate(argv_list):
        last = i == len(argv_list) - 1
        p = subprocess.Popen(argv, stdin=prev.stdout if prev else subprocess.DEVNULL,
                             stdout=out if last else subprocess.PIPE, stderr=subprocess.DEVNULL)
        if prev:
            prev.stdout.close()  # the next stage holds the only reader
        procs.append(p)
        prev = p
    rss = {}
    statuses = {}
    cpu = 0.0
    while len(rss) < len(procs):
        pid, status, usage = os.wait4(-1, 0)
        for p in procs:
            if p.pid == pid:
                rss[pid] = usage.ru_maxrss
                statuses[pid] = status
                cpu += usage.ru_utime + usage.ru_stime
    wall = time.perf_counter() - started
    out.close()
    for p in procs:
        p.returncode = os.waitstatus_to_exitcode(statuses[p.pid])
        if p.returncode != 0:
            die(f"{' '.join(p.args)} exited with {p.returncode}")
    return wall, [rss[p.pid] for p in procs], cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", choices=["collect", "collect-kept", "collect-fp", "perf-record", "short", "worst",
                                       "worst-kept"],
                    default="collect")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dotnet", choices=["8", "3.1"], default="8", help="the web API's .NET runtime (default 8)")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--freq", type=int, default=9999)
    ap.add_argument("--profcpu", help="the binary to time (default: the one we ship, built by scripts/build-static.sh)")
    ap.add_argument("--cold", action="store_true",
                    help="remove the folder's prof.tar.gz, perf_script.out, folded_stacks.out and flamegraph.svg "
                         "before each profcpu run (untimed), so that nothing is taken from an earlier run: "
                         "postprocess's first run on a folder")
    ap.add_argument("--dir", help="an existing profcpu collection of a running app (skips recording)")
    ap.add_argument("--hot", default=HOT_METHOD,
                    help=f"a frame name both flame graphs must contain (default {HOT_METHOD}, for --dir of another app)")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    ap.add_argument("--setup-only", action="store_true", help="install what the benchmark needs, then stop")
    args = ap.parse_args()

    setup_inferno()
    if not args.dir:
        setup_dotnet(args.dotnet)
    if args.setup_only:
        return
    for tool in ["perf"]:
        if not shutil.which(tool):
            die(f"{tool} is not installed (scripts/setup-deps.sh)")
    if not args.profcpu:
        built = subprocess.run(["bash", os.path.join(REPO, "scripts/build-static.sh")], stdout=subprocess.PIPE,
                               text=True)
        if built.returncode != 0:
            die("scripts/build-static.sh failed")
        args.profcpu = built.stdout.strip().splitlines()[-1]
    if not os.access(args.profcpu, os.X_OK):
        die(f"{args.profcpu} is not built (cargo build --release)")
    log(f"timing {args.profcpu}")

    work = tempfile.mkdtemp(prefix="bench-postprocess.", dir=os.environ.get("TMPDIR", "/tmp"))
    api_pid = None
    hot = args.hot
    try:
        if args.dir:
            run_dir = os.path.abspath(args.dir)
        elif args.case.startswith("worst"):
            hot = WORST_HOT
            kept = ["-keep-stack-copies"] if args.case == "worst-kept" else []
            binary = os.path.join(work, "many_stacks")
            subprocess.run(["cc", "-O1", "-fno-omit-frame-pointer", "-fno-optimize-sibling-calls", "-o", binary,
                            os.path.join(REPO, "examples/many_stacks.c")], check=True)
            run_dir = record_enough(
                lambda s: collect(args.profcpu, work, [*kept, "--", binary, str(s + 5)], s, args.freq), 4, 40000, 1.3)
        else:
            port, api_pid = start_api(args.dotnet)
            if args.case.startswith("collect"):
                stacks = {"collect": ["-call-graph", "auto"], "collect-kept": ["-keep-stack-copies"],
                          "collect-fp": ["-call-graph", "fp"]}[args.case]
                run_dir = record(args.profcpu, work, port, api_pid, args.seconds, args.freq, stacks)
            elif args.case == "short":
                run_dir = record_enough(lambda s: under_load(port, s, lambda: collect(
                    args.profcpu, work, ["-pid", str(api_pid)], s, 999)), 0.6, 1000, 1.3)
            else:
                run_dir = record_enough(lambda s: under_load(port, s, lambda: perf_record(work, api_pid, s, 999)),
                                        8, 15000, 1.3)
        perf_data = os.path.join(run_dir, "perf.data")
        n = samples_in(run_dir)
        size_mb = os.path.getsize(perf_data) / 1e6

        ours = [args.profcpu, "postprocess", "-dir", run_dir]
        pipeline = [["perf", "script", "-i", perf_data], [os.path.join(INFERNO_BIN, "inferno-collapse-perf")],
                    [os.path.join(INFERNO_BIN, "inferno-flamegraph")]]
        pipe_svg = os.path.join(work, "pipeline.svg")
        settle(api_pid)
        # Warm-up (page cache, perf's symbol loading), then alternate so both see the same machine state.
        timed([ours], os.devnull)
        timed(pipeline, pipe_svg)
        # The pipeline's graph must name the hot JIT method too, or at least show perf looked its frames up in the map.
        pipe_hot = [hot, f"perf-{api_pid}.map"] if api_pid and args.dotnet != "3.1" else [hot]
        for svg, wanted in [(pipe_svg, pipe_hot), (os.path.join(run_dir, "flamegraph.svg"), [hot])]:
            text = open(svg, encoding="utf-8", errors="replace").read()
            if not any(w in text for w in wanted):
                wanted = " or ".join(wanted)
                die(f"{svg} does not name {wanted}: frames unnamed, the comparison would be unfair")
        with open(os.path.join(run_dir, "perf_script.out"), "rb") as ours_text:
            depth_ours = frames_per_sample(ours_text)
        with subprocess.Popen(["perf", "script", "-i", perf_data], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL) as perf_script:
            depth_perf = frames_per_sample(perf_script.stdout)
        log(f"frames per sample: profcpu {depth_ours:.1f}, perf script {depth_perf:.1f}")
        rows = []
        for i in range(args.runs):
            if args.cold:
                for earlier in ("prof.tar.gz", "perf_script.out", "folded_stacks.out", "flamegraph.svg"):
                    os.unlink(os.path.join(run_dir, earlier))
            t_ours, rss_ours, cpu_ours = timed([ours], os.devnull)
            t_pipe, rss_pipe, cpu_pipe = timed(pipeline, pipe_svg)
            rows.append((t_ours, rss_ours[0], t_pipe, rss_pipe, cpu_ours, cpu_pipe))
            log(f"run {i + 1}: profcpu {t_ours * 1e3:.0f} ms (CPU {cpu_ours * 1e3:.0f} ms) {rss_ours[0] / 1024:.1f} MB | "
                f"pipeline {t_pipe * 1e3:.0f} ms (CPU {cpu_pipe * 1e3:.0f} ms), peak RSS per stage "
                f"{' / '.join(f'{r / 1024:.1f}' for r in rss_pipe)} MB; load {os.getloadavg()[0]:.1f}")

        med = statistics.median
        t_ours = med(r[0] for r in rows)
        t_pipe = med(r[2] for r in rows)
        rss_ours = max(r[1] for r in rows)
        rss_stage = max(max(r[3]) for r in rows)
        rss_sum = max(sum(r[3]) for r in rows)
        script_mb = os.path.getsize(os.path.join(run_dir, "perf_script.out")) / 1e6
        archive_mb = os.path.getsize(os.path.join(run_dir, "prof.tar.gz")) / 1e6
        api = f" (.NET {args.dotnet})" if api_pid else ""
        print(f"case {args.case if not args.dir else 'dir'}{api}: perf.data: {n} samples, {size_mb:.1f} MB ({run_dir})")
        print(f"frames per sample: profcpu {depth_ours:.1f}, perf script {depth_perf:.1f}")
        print(f"profcpu postprocess: median {t_ours * 1e3:.0f} ms (min {min(r[0] for r in rows) * 1e3:.0f}), "
              f"peak RSS {rss_ours / 1024:.1f} MB; writes perf_script.out {script_mb:.0f} MB, "
              f"prof.tar.gz {archive_mb:.1f} MB")
        print(f"perf script | inferno-collapse-perf | inferno-flamegraph: median {t_pipe * 1e3:.0f} ms "
              f"(min {min(r[2] for r in rows) * 1e3:.0f}), peak RSS {rss_stage / 1024:.1f} MB largest stage, "
              f"{rss_sum / 1024:.1f} MB all stages")
        cpu_ours = med(r[4] for r in rows)
        cpu_pipe = med(r[5] for r in rows)
        print(f"CPU time (user + system, all threads and stages): profcpu median {cpu_ours * 1e3:.0f} ms, pipeline "
              f"{cpu_pipe * 1e3:.0f} ms, {cpu_pipe / cpu_ours:.1f}x")
        target = 5 if args.case.startswith("worst") else 10
        print(f"speed-up {t_pipe / t_ours:.1f}x (target >= {target}x); RSS {rss_ours / rss_stage:.2f}x of the largest "
              f"stage, {rss_ours / rss_sum:.2f}x of all stages (target <= 1)")
    finally:
        if api_pid:
            os.kill(api_pid, signal.SIGTERM)
            for name in [f"/tmp/perf-{api_pid}.map", f"/tmp/perfinfo-{api_pid}.map", f"/tmp/jit-{api_pid}.dump"]:
                try:
                    os.unlink(name)
                except FileNotFoundError:
                    pass
        if args.keep:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
