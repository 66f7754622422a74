"""Writes fuzz/seeds/<target>/ from the recordings and files fuzz/make-seeds.sh made in WORK.

Usage: make_seeds.py WORK DOTNET8_FRAMEWORK_DIR SEEDS_DIR

Inputs that stand for several files are parts joined by PART_MARK (fuzz/src/lib.rs). Binary layouts: perf.data
(tools/perf/Documentation/perf.data-file-format.txt), jitdump (tools/perf/Documentation/jitdump-specification.txt),
the .NET diagnostics IPC (dotnet/diagnostics documentation/design-docs/ipc-protocol.md).
"""

import glob
import io
import os
import shutil
import struct
import sys
import tarfile

work, framework, out = sys.argv[1:4]
PART_MARK = b"\0\0profcpu-fuzz-part "


def bundle(first, parts):
    return first + b"".join(PART_MARK + name.encode() + b"\n" + data for name, data in parts)


def seed(target, name, data):
    os.makedirs(os.path.join(out, target), exist_ok=True)
    with open(os.path.join(out, target, name), "wb") as f:
        f.write(data)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def run_dir(base):
    (found,) = glob.glob(os.path.join(work, base, "*", "perf.data"))
    return os.path.dirname(found)


def symbols(run, leave_out=()):
    """The files of a run's symbols/ folder, as (name, bytes), without the unwind info of libraries in leave_out."""
    folder = os.path.join(run, "symbols")
    files = {name: read(os.path.join(folder, name)) for name in sorted(os.listdir(folder))}
    if "unwind.txt" in files:
        kept = []
        for line in files["unwind.txt"].decode().splitlines(keepends=True):
            if any(lib in line for lib in leave_out):
                files.pop(line.split(" ")[0], None)
            else:
                kept.append(line)
        files["unwind.txt"] = "".join(kept).encode()
    return list(files.items())


# perf.data: header, attr section, records of the data section.
SAMPLE_BITS = ["IP", "TID", "TIME", "ADDR", "READ", "CALLCHAIN", "ID", "CPU", "PERIOD", "STREAM_ID", "RAW",
               "BRANCH_STACK", "REGS_USER", "STACK_USER", "WEIGHT", "DATA_SRC", "IDENTIFIER"]


def perf_data(path):
    b = read(path)
    attr_size, = struct.unpack_from("<Q", b, 16)
    attrs_off, attrs_size, data_off, data_size = struct.unpack_from("<QQQQ", b, 24)
    attr = b[attrs_off:attrs_off + attr_size - 16]
    records, pos = [], data_off
    while pos + 8 <= data_off + data_size:
        kind, _misc, size = struct.unpack_from("<IHH", b, pos)
        records.append((kind, b[pos:pos + size]))
        pos += size
    return attr, records


def sample_fields(attr, record):
    """The fields of a sample record that the unwind seeds need (sample types without READ/RAW/BRANCH_STACK)."""
    sample_type, = struct.unpack_from("<Q", attr, 24)
    regs_mask, = struct.unpack_from("<Q", attr, 80)
    has = lambda name: sample_type & (1 << SAMPLE_BITS.index(name))
    pos, f = 8, {}
    for name, fmt in [("IDENTIFIER", "Q"), ("IP", "Q"), ("TID", "II"), ("TIME", "Q"), ("ADDR", "Q"), ("ID", "Q"),
                      ("STREAM_ID", "Q"), ("CPU", "II"), ("PERIOD", "Q")]:
        if has(name):
            f[name] = struct.unpack_from("<" + fmt, record, pos)
            pos += struct.calcsize(fmt)
    f["CALLCHAIN"] = []
    if has("CALLCHAIN"):
        n, = struct.unpack_from("<Q", record, pos)
        f["CALLCHAIN"] = list(struct.unpack_from("<%dQ" % n, record, pos + 8))
        pos += 8 + 8 * n
    if has("REGS_USER"):
        abi, = struct.unpack_from("<Q", record, pos)
        pos += 8
        if abi:
            n = bin(regs_mask).count("1")
            regs = struct.unpack_from("<%dQ" % n, record, pos)
            pos += 8 * n
            # perf's x86 register numbers: BP 6, SP 7, IP 8; the sample holds those the mask selects, in order.
            index = lambda reg: bin(regs_mask & ((1 << reg) - 1)).count("1")
            f["REGS"] = {r: regs[index(r)] for r in (6, 7, 8)}
    if has("STACK_USER"):
        size, = struct.unpack_from("<Q", record, pos)
        stack = record[pos + 8:pos + 8 + size]
        dyn, = struct.unpack_from("<Q", record, pos + 8 + size) if size else (0,)
        f["STACK"] = stack[:dyn]
    return f


def exec_mappings(records, path_end):
    for kind, rec in records:
        if kind == 10:  # MMAP2
            _pid, _tid, addr, length, pgoff = struct.unpack_from("<IIQQQ", rec, 8)
            prot, = struct.unpack_from("<I", rec, 8 + 56)
            name = rec[8 + 64:].split(b"\0")[0].decode()
            if name.endswith(path_end) and prot & 4:
                yield addr, length, pgoff


# Everything but the inputs kept from fuzzing findings (`regression-*`), replayed by every run of their target.
for target in os.listdir(out) if os.path.isdir(out) else []:
    for name in os.listdir(os.path.join(out, target)):
        if not name.startswith("regression-"):
            os.remove(os.path.join(out, target, name))
fp_run, auto_run = run_dir("fp"), run_dir("auto")
recordings = {"perf-fp": os.path.join(work, "fp.data"), "perf-dwarf": os.path.join(work, "dwarf.data"),
              "profcpu-fp": os.path.join(fp_run, "perf.data"),
              "profcpu-wall": os.path.join(run_dir("wall"), "perf.data")}

# perf_data: whole recordings by perf (frame pointers; stack copies) and by profcpu.
for name, path in recordings.items():
    seed("perf_data", name, read(path))

# perf_record: the attr, then a few records of each kind (samples last).
for name, path in recordings.items():
    attr, records = perf_data(path)
    picked, seen = [], {}
    for kind, rec in records:
        if seen.get(kind, 0) < (3 if kind == 9 else 2):
            seen[kind] = seen.get(kind, 0) + 1
            picked.append(rec)
    seed("perf_record", name, bytes([len(attr) - 64]) + attr + b"".join(picked))

# unwind: samples of perf's stack-copy recording whose IP is in the workload, with the workload's unwind info as
# profcpu's capture saved it (same file, so the same mapping offsets).
attr, records = perf_data(recordings["perf-dwarf"])
(cfi_name,) = [line.split(" ")[0] for line in read(os.path.join(auto_run, "symbols/unwind.txt")).decode().splitlines()
               if line.endswith("/tiny")]
cfi = read(os.path.join(auto_run, "symbols", cfi_name))
mappings = list(exec_mappings(records, "/tiny"))
made = 0
for kind, rec in records:
    if kind != 9 or made >= 3:
        continue
    f = sample_fields(attr, rec)
    if "REGS" not in f:
        continue
    ip, sp, bp = f["REGS"][8], f["REGS"][7], f["REGS"][6]
    for start, length, pgoff in mappings:
        if start <= ip < start + length or made == 0:
            chain = f["CALLCHAIN"][:32]
            head = struct.pack("<6QHB", start, length, pgoff, ip, sp, bp, len(f["STACK"]), len(chain))
            seed("unwind", "sample-%d" % made, head + struct.pack("<%dQ" % len(chain), *chain) + f["STACK"] + cfi)
            made += 1
            break
assert made, "no sample with registers in the stack-copy recording"

# jit_frames: prologues RyuJIT emits (tier-1 Nap without a frame, rbp pushed as a callee-saved register, a frame
# pointer away from its slot), each with the stack of a sleep called through it and a saved table.
JIT = 0x7F0000000000
jit_table = (b"# profcpu JIT frames: START SIZE sp CFA [RBPSLOT] | START SIZE bp CFA RBPSLOT\n"
             b"7f0000000100 12 sp 10\n7f0000000200 40 sp 220 18\n7f0000000300 40 bp 28 10\n")
for name, code in [("nap", b"\x50\xbf\x14\x00\x00\x00\xff\x15\x00\x00\x00\x00\x90\x48\x83\xc4\x08\xc3"),
                   ("rbp-saved", b"\x41\x57\x55\x53\x48\x81\xec\x00\x02\x00\x00\x48\x8b\xef"),
                   ("lea-rbp", b"\x55\x53\x48\x83\xec\x20\x48\x8d\x6c\x24\x10\x33\xc0")]:
    code = (code + b"\xcc" * 32)[:32]
    words = [0x7000 + 0x20, JIT + 0x10, 0xdead, JIT + 0x110, 0x7000 + 0x40, JIT + 0x810, 0, 0, 0, 0]
    stack = struct.pack("<%dQ" % len(words), *words)
    seed("jit_frames", name, code + struct.pack("<3QH", JIT + 0x900, 0x7000, 0x7000, len(stack)) + stack + jit_table)

# elf: the workload with its symbol table; stripped, with its debug file; a stripped shared library (.dynsym and
# .eh_frame function bounds only).
seed("elf", "tiny", read(os.path.join(work, "tiny")))
seed("elf", "tiny-stripped+debug", bundle(read(os.path.join(work, "tiny.stripped")),
                                          [("debug", read(os.path.join(work, "tiny.debug")))]))
seed("elf", "libtiny.so", read(os.path.join(work, "libtiny.so")))


# jitdump: a header, code loads (one replacing another at the same address later), a move, debug info, close; in
# the writer's byte order (`e`: little- or big-endian).
def jitdump(flags=0, e="<"):
    def record(kind, time, body):
        return struct.pack(e + "IIQ", kind, 16 + len(body), time) + body

    def load(time, addr, size, name, index):
        body = struct.pack(e + "IIQQQQ", 42, 43, addr, addr, size, index) + name + b"\0" + b"\x90" * min(size, 8)
        return record(0, time, body)

    header = struct.pack(e + "IIIIIIQQ", 0x4A695444, 1, 40, 62, 0, 42, 1000, flags)
    return header + b"".join([
        load(1000, 0x7F0000001000, 0x40, b"int32 [App] App::Main(string[])[QuickJitted]", 1),
        load(1100, 0x7F0000001040, 0x20, b"instance void [System.Private.CoreLib] System.Object::.ctor()", 2),
        record(2, 1150, struct.pack(e + "QQQII", 0x7F0000001000, 1, 0x7F0000001004, 7, 0) + b"App.cs\0"),
        load(2000, 0x7F0000001000, 0x60, b"int32 [App] App::Main(string[])[OptimizedTier1]", 3),
        record(1, 2100, struct.pack(e + "IIQQQQQ", 42, 43, 0, 0x7F0000001040, 0x7F0000002000, 0x20, 2)),
        record(4, 2200, struct.pack(e + "QQQ", 0, 0, 0)),
        record(3, 3000, b""),
    ])


seed("jitdump", "dotnet", jitdump())
seed("jitdump", "tsc-timestamps", jitdump(flags=1))
seed("jitdump", "big-endian", jitdump(e=">"))
seed("jitdump", "cut-short", jitdump()[:-40])

# perf_map: the lines .NET, Node.js and the JVM's agents write.
seed("perf_map", "dotnet", b"00007F3157E40078 48 stub<1> AllocateTemporaryEntryPoints<PRECODE_FIXUP>\n"
     b"00007F3157E57800 28 int64 [App] Workload::Spin(int32)[Optimized]\n"
     b"00007F3157E57800 40 int64 [App] Workload::Spin(int32)[OptimizedTier1]\n")
seed("perf_map", "node", b"0x1a0e0bc0 0x2c Builtin:ArgumentsAdaptorTrampoline\n"
     b"0x1a0f2d80 0x98 LazyCompile:*fib /app/hot.js:3\r\n3d2a7f40\t1c\tStub:CEntryStub\n")
seed("perf_map", "odd", b"\n  1000 10 spaced name (with) [brackets]\nzz 10 bad\nffffffffffffff00 100 wraps\n1000 0 empty\n")

# r2rmap: crossgen2's header pseudo-RVAs, then methods.
seed("r2rmap", "crossgen2", b"FFFFFFFF 00 2EDFF7CA0D1A4F9C8B1F0E66A6F1C3D2\nFFFFFFFE 00 1\nFFFFFFFD 00 8\n"
     b"00001000 40 [System.Private.CoreLib]System.String.IndexOf(char)\n"
     b"00001040 10 [System.Private.CoreLib]Internal.Stub()\n00001038 20 overlapping\n")

# kallsyms: text, data and module symbols as /proc/kallsyms lists them; and hidden (every address zero).
with open("/proc/kallsyms", "rb") as f:
    lines = f.read().splitlines(keepends=True)
picked = lines[:30] + [l for l in lines if b"\t[" in l][:10]
seed("kallsyms", "live", b"".join(picked))
seed("kallsyms", "hidden", b"".join(b"0000000000000000" + l[16:] for l in picked[:10]))

# metadata_txt: a golden collection's, this recording's, and one with escapes and an unknown key.
seed("metadata_txt", "fp-run", read(os.path.join(fp_run, "metadata.txt")))
seed("metadata_txt", "escapes", b"# comment\nhost: h\\nx\\\\y\ncommand_line: /app/x 'a b'\nstart_time: "
     b"2026-11-22T14:03:22.5+01:00\nduration_secs: 1.25\nfuture_key: v\n")

# demangle: C++ and Rust (legacy and v0) manglings.
seed("demangle", "cpp", b"_ZNSt6vectorIiSaIiEE9push_backERKi")
seed("demangle", "cpp-template", b"_ZN9__gnu_cxx13new_allocatorIcE8allocateEmPKv")
seed("demangle", "rust-legacy", b"_ZN4core3fmt5write17h0123456789abcdefE")
seed("demangle", "rust-v0", b"_RNvCs15kBYyAo9fc_7mycrate4main")

# procfs: what /proc/PID/ gives.
seed("procfs", "maps", read("/proc/self/maps")[:1500])
seed("procfs", "status", read("/proc/self/status")[:800])
seed("procfs", "environ", b"PATH=/bin\0DOTNET_PerfMapEnabled=1\0COMPlus_PerfMapEnabled=0\0TMPDIR=/var/tmp\0\xff=1\0")
seed("procfs", "cpus", b"0-1,4-7\n")

# dotnet_ipc: replies of a runtime (OK; unknown command from .NET < 8; an error) and of broken peers.
def ipc(command_set, command_id, payload):
    return b"DOTNET_IPC_V1\0" + struct.pack("<HBBH", 20 + len(payload), command_set, command_id, 0) + payload


seed("dotnet_ipc", "ok", ipc(0xFF, 0x00, struct.pack("<I", 0)))
seed("dotnet_ipc", "unknown-command", ipc(0xFF, 0xFF, struct.pack("<I", 0x80131385)))
seed("dotnet_ipc", "error-without-hresult", ipc(0xFF, 0xFF, b""))
seed("dotnet_ipc", "cut-short", ipc(0xFF, 0x00, struct.pack("<I", 0))[:22])


# tar_extract: tar streams (the target gzips them) like a profcpu archive, with links, long names and pax headers;
# and a real prof.tar.gz.
def tar(entries, fmt=tarfile.GNU_FORMAT):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as t:
        for name, kind, data in entries:
            info = tarfile.TarInfo(name)
            info.mtime = 1700000000
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                t.addfile(info)
            elif kind in ("sym", "hard"):
                info.type = tarfile.SYMTYPE if kind == "sym" else tarfile.LNKTYPE
                info.linkname = data
                t.addfile(info)
            else:
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    # Without the zeros tarfile pads a 10 KB record with: two zero blocks end the archive.
    data = buf.getvalue().rstrip(b"\0")
    return data + b"\0" * (-len(data) % 512 + 1024)


seed("tar_extract", "run", tar([("./", "dir", None), ("symbols/", "dir", None),
                                ("symbols/dsos.txt", "file", b"dso-0.syms 254:0:1 - /app/x\n"),
                                ("metadata.txt", "file", b"host: h\n")]))
seed("tar_extract", "links", tar([("a/", "dir", None), ("a/f", "file", b"x"), ("a/s", "sym", "f"),
                                  ("b", "hard", "a/f"), ("c", "sym", "a/../a/f")]))
seed("tar_extract", "long-name", tar([("d" * 120 + "/", "dir", None), ("d" * 120 + "/" + "f" * 130, "file", b"y")]))
seed("tar_extract", "pax", tar([("p/", "dir", None), ("p/" + "é" * 60, "file", b"z")], fmt=tarfile.PAX_FORMAT))
seed("tar_extract", "prof.tar.gz", read(os.path.join(fp_run, "prof.tar.gz")))

# r2r: small ReadyToRun images of .NET 8 (with code), one with an .r2rmap part.
xpath = read(os.path.join(framework, "System.Xml.XPath.XDocument.dll"))
seed("r2r", "System.Xml.XPath.XDocument", xpath)
seed("r2r", "System.Net.WebProxy+r2rmap", bundle(read(os.path.join(framework, "System.Net.WebProxy.dll")), [
    ("r2rmap", b"FFFFFFFF 00 00112233445566778899AABBCCDDEEFF\nFFFFFFFE 00 1\n00002000 10 [x]Y.Z()\n")]))

# symbols_dir: a capture's symbols/ (dsos.txt first, unwind.txt's lines appended: the target reads .cfi entries as
# unwind info), with a perf map and a jitdump for its process.
files = dict(symbols(auto_run, leave_out=("libc.so",)))
pid = files["processes.txt"].decode().splitlines()[-1].split(" ")[0]
files["perf-%s.map" % pid] = b"00007F3157E57800 28 int64 [App] Workload::Spin(int32)[Optimized]\n"
files["jit-%s.dump" % pid] = jitdump()
index = files.pop("dsos.txt") + files.pop("unwind.txt", b"")
seed("symbols_dir", "capture", bundle(index, sorted(files.items())))

# postprocess: run folders (perf.data, metadata.txt, symbols/): profcpu's own; perf's stack-copy recording with the
# capture's unwind info of the same program.
seed("postprocess", "profcpu-fp", bundle(read(recordings["profcpu-fp"]),
                                         [("metadata.txt", read(os.path.join(fp_run, "metadata.txt")))] +
                                         [("symbols/" + n, d) for n, d in symbols(fp_run)]))
seed("postprocess", "perf-dwarf", bundle(read(recordings["perf-dwarf"]),
                                         [("symbols/" + n, d) for n, d in symbols(auto_run, leave_out=("libc.so",))]))
