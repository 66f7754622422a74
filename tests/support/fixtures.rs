//! A hand-built, deliberately awkward profile for the report stage: named and unnamed frames of every kind, odd
//! thread names, Java and .NET spellings, and a generator of hostile samples.

use profcpu::symbolize::{Frame, FrameKind, ResolvedSample};
use std::sync::Arc;

pub fn frame(symbol: Option<&str>, module: &str, kind: FrameKind, addr: u64, offset: u64) -> Frame {
    Frame::new(addr, symbol.map(Arc::from), offset, Arc::from(module), kind)
}

pub fn jit(symbol: &str, addr: u64) -> Frame {
    frame(Some(symbol), "/tmp/perf-1.map", FrameKind::Jit, addr, 0x20)
}

pub fn native(symbol: &str, module: &str, addr: u64) -> Frame {
    frame(Some(symbol), module, FrameKind::Native, addr, 0x1f)
}

pub fn kernel(symbol: &str, addr: u64) -> Frame {
    frame(Some(symbol), "[kernel.kallsyms]", FrameKind::Kernel, addr, 0x12)
}

pub fn sample(comm: &str, tid: u32, time: u64, period: u64, frames_root_first: Vec<Frame>) -> ResolvedSample {
    let mut frames = frames_root_first;
    frames.reverse();
    ResolvedSample {
        pid: 4242,
        tid,
        cpu: tid % 2,
        time,
        period,
        off_cpu: None,
        comm: Arc::from(comm),
        event: Arc::from("cpu-clock"),
        frames: frames.into(),
    }
}

pub const CORELIB: &str = "/usr/share/dotnet/shared/Microsoft.NETCore.App/3.1.23/System.Private.CoreLib.dll";
pub const CORECLR: &str = "/usr/share/dotnet/shared/Microsoft.NETCore.App/3.1.23/libcoreclr.so";

/// The golden profile: .NET-style stacks plus every naming hazard the formats have.
pub fn golden_samples() -> Vec<ResolvedSample> {
    let main = || native("main", "/usr/share/dotnet/dotnet", 0x5555_0000_1000);
    let fib = |addr| jit("int64 [App] App::Fib(int32)[OptimizedTier1]", addr);
    let r2r = frame(None, CORELIB, FrameKind::Unknown, 0x7f10_0045_5d12, 0x455d12);
    let mut samples = vec![
        // Managed recursion under the host, twice (same stack, different addresses).
        sample("dotnet", 4242, 1_000_123_456_789, 10_101_010, vec![main(), fib(0x7f00_1000), fib(0x7f00_1010)]),
        sample("dotnet", 4242, 1_000_133_556_789, 10_101_010, vec![main(), fib(0x7f00_1004), fib(0x7f00_1018)]),
        // Same method, other tier: merges in folded output because the argument list is cut.
        sample(
            "dotnet",
            4242,
            1_000_143_656_789,
            10_101_011,
            vec![main(), jit("int64 [App] App::Fib(int32)[QuickJitted]", 0x7f00_2000)],
        ),
        // Thread name with a space; ReadyToRun frame without a symbol; kernel frames at the leaf.
        sample(
            ".NET ThreadPool",
            4250,
            1_000_150_000_001,
            10_101_010,
            vec![
                native("start_thread", "/usr/lib/x86_64-linux-gnu/libc.so.6", 0x7f20_0000_1234),
                native("ThreadNative::KickOffThread(void*)", CORECLR, 0x7f30_0000_1000),
                jit(
                    "void [System.Private.CoreLib] System.Threading.ThreadPoolWorkQueue::Dispatch()[OptimizedTier1]",
                    0x7f00_3000,
                ),
                r2r.clone(),
                kernel("entry_SYSCALL_64_after_hwframe", 0xffff_ffff_8100_0000),
                kernel("__x64_sys_read", 0xffff_ffff_8120_0000),
            ],
        ),
        // Thread name with a number word, C++ templates, lambdas, anonymous namespaces, operator->, semicolons.
        sample(
            "worker 2",
            4251,
            1_000_160_000_002,
            10_101_010,
            vec![
                native(
                    "std::vector<int, std::allocator<int> >::push_back(int const&)",
                    "/opt/app/libnative.so",
                    0x7f40_0000_0100,
                ),
                native("(anonymous namespace)::helper(int)", "/opt/app/libnative.so", 0x7f40_0000_0200),
                native("Foo<Bar;Baz>::run(std::pair<int, int>) const", "/opt/app/libnative.so", 0x7f40_0000_0300),
                native(
                    "std::unique_ptr<Widget, std::default_delete<Widget> >::operator->() const",
                    "/opt/app/libnative.so",
                    0x7f40_0000_0400,
                ),
                native("{lambda(int)#1}::operator()(int) const", "/opt/app/libnative.so", 0x7f40_0000_0500),
            ],
        ),
        // Empty thread name; Rust symbols (one half-demangled with a hash); a symbol that is literally [unknown];
        // an unnamed frame in a module whose path has spaces and parentheses; an unnamed frame with no module.
        sample(
            "",
            4252,
            1_000_170_000_003,
            10_101_010,
            vec![
                native("std::rt::lang_start_internal", "/opt/app/rusty", 0x5600_0000_0100),
                native(
                    "_$LT$alloc..vec..Vec$LT$T$GT$$u20$as$u20$core..ops..Drop$GT$::drop::h0123456789abcdef",
                    "/opt/app/rusty",
                    0x5600_0000_0200,
                ),
                native("[unknown]", "/opt/app/rusty", 0x5600_0000_0300),
                frame(None, "/memfd:doublemapper (deleted)", FrameKind::Unknown, 0x7f50_0000_1000, 0x1000),
                frame(None, "[unknown]", FrameKind::Unknown, 0x1234, 0x1234),
            ],
        ),
        // Java-style names on a java thread: descriptors, inlining with ->.
        sample(
            "java",
            4253,
            1_000_180_000_004,
            10_101_010,
            vec![
                jit("Lorg/example/Server;.handle(Ljava/lang/String;)V", 0x7f60_0000_0100),
                jit("Lorg/example/Parser;.parse()V->Lorg/example/Lexer;.next()I", 0x7f60_0000_0200),
            ],
        ),
        // Node-style JIT names with spaces, and a leaf whose name ends in a number.
        sample(
            "node",
            4254,
            1_000_190_000_005,
            5_000_000,
            vec![
                jit("LazyCompile:*handler /srv/app/server.js:10:3", 0x7f70_0000_0100),
                jit("Worker 2", 0x7f70_0000_0200),
            ],
        ),
        // A sample without a callchain and one whose only frame stackcollapse drops: no folded line.
        sample("dotnet", 4242, 1_000_200_000_000, 10_101_010, vec![]),
        sample(
            "dotnet",
            4242,
            1_000_210_000_000,
            10_101_010,
            vec![native("(anonymous namespace)::only()", "/opt/app/libnative.so", 0x7f40_0000_0600)],
        ),
        // Control characters and a name starting with '#'.
        sample(
            "#bad\tname",
            4255,
            1_000_220_000_000,
            10_101_010,
            vec![native("tab\there\nnewline", "/opt/app/lib\tweird.so", 0x7f80_0000_0100)],
        ),
    ];
    // A second event: inferno folds only the first event it sees, so must we.
    let mut other = sample("dotnet", 4242, 1_000_230_000_000, 1, vec![main(), fib(0x7f00_1000)]);
    other.event = Arc::from("task-clock");
    samples.push(other);
    samples
}

/// A deterministic generator (xorshift) so the randomized comparison is reproducible.
pub struct Rng(pub u64);
impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[(self.next_u64() % items.len() as u64) as usize]
    }
}

/// `count` samples with names glued from pieces that each trip a rule of one of the readers (deterministic).
pub fn hostile_samples(count: u64) -> Vec<ResolvedSample> {
    // Names glued from pieces that each trip a rule of one of the readers.
    let pieces = [
        "Foo",
        "::",
        "bar",
        "(",
        ")",
        "<",
        ">",
        "[",
        "]",
        "{",
        "}",
        ";",
        " ",
        "  ",
        "+0x",
        "1f",
        "->",
        ".",
        "..",
        "$LT$",
        "$u20$",
        "h0123456789abcdef",
        "L",
        "/",
        ":",
        "#",
        "7",
        "é",
        "\t",
        "\n",
        "(anonymous namespace)",
        "[unknown]",
        "java",
        "-",
        "0",
        "ééé",
    ];
    let comms = ["java", "dotnet", "a b", "x 1", "#c", "", " java x", "w;x", "n/1", "12", "tab\tx", "ééé 3"];
    let modules = ["/usr/lib/libc.so.6", "[kernel.kallsyms]", "[unknown]", "/tmp/perf-1.map", "/a b/(c)", "", "x"];
    let kinds = [FrameKind::Kernel, FrameKind::Native, FrameKind::Jit, FrameKind::Unknown];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut samples = Vec::new();
    for i in 0..count {
        let depth = (rng.next_u64() % 8) as usize;
        let frames = (0..depth)
            .map(|_| {
                let symbol = match rng.next_u64() % 6 {
                    0 => None,
                    _ => Some((0..1 + rng.next_u64() % 6).map(|_| rng.pick(&pieces)).collect::<String>()),
                };
                let addr = rng.next_u64() >> 16;
                let offset = rng.next_u64() % 0x10000;
                Frame::new(
                    addr,
                    symbol.map(Arc::from),
                    offset,
                    Arc::from(rng.pick(&modules)),
                    kinds[(rng.next_u64() % 4) as usize],
                )
            })
            .collect();
        samples.push(ResolvedSample {
            pid: 1 + (rng.next_u64() % 3) as u32,
            tid: 1 + (rng.next_u64() % 5) as u32,
            cpu: (rng.next_u64() % 4) as u32,
            time: i * 1_000_000,
            period: 1 + rng.next_u64() % 1000,
            off_cpu: None,
            comm: Arc::from(rng.pick(&comms)),
            event: Arc::from("cpu-clock"),
            frames,
        });
    }
    samples
}
