//! A real .NET runtime for tests, fetched the way `scripts/dotnet-runtime.sh` does it (same cache layout, so either
//! one's download serves the other): the PyPI wheel `dotnetcore2==3.1.23` carries the linux-x64 runtime under
//! `dotnetcore2/bin/`. It is downloaded once into `${PROFCPU_CACHE:-$HOME/.cache/profcpu}/dotnet`; later calls only
//! check a stamp file. C# test programs are compiled with Debian's `mcs` (package `mono-mcs`).
//!
//! Include from a test with `#[path = "support/dotnet.rs"] mod dotnet;`.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

pub const VERSION: &str = "3.1.23";

fn cache_root() -> PathBuf {
    match std::env::var_os("PROFCPU_CACHE") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(std::env::var_os("HOME").expect("HOME is not set")).join(".cache/profcpu"),
    }
}

/// Serializes fetching within one test binary (tests run on threads); across binaries an flock does it.
static FETCH: Mutex<()> = Mutex::new(());

/// The directory holding the `dotnet` host, downloading the runtime on first use. Panics with the reason and the
/// fix when it cannot.
pub fn runtime_dir() -> PathBuf {
    let _guard = FETCH.lock().unwrap_or_else(|e| e.into_inner());
    let dest = cache_root().join("dotnet");
    let bin = dest.join(format!("dotnetcore2-{VERSION}/dotnetcore2/bin"));
    let stamp = dest.join(format!(".complete-{VERSION}"));
    if stamp.exists() && bin.join("dotnet").is_file() {
        return bin;
    }
    std::fs::create_dir_all(&dest).unwrap_or_else(|e| panic!("cannot create {}: {e}", dest.display()));
    let lock = std::fs::File::create(dest.join(".lock")).expect("cannot create the download lock file");
    // SAFETY: flock on a file descriptor we own; released when `lock` is dropped.
    unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) };
    if stamp.exists() && bin.join("dotnet").is_file() {
        return bin;
    }
    let wheel_dir = dest.join("wheel");
    std::fs::create_dir_all(&wheel_dir).unwrap();
    let find_wheel = || {
        std::fs::read_dir(&wheel_dir).ok()?.filter_map(|e| e.ok()).map(|e| e.path()).find(|p| {
            let n = p.file_name().unwrap_or_default().to_string_lossy();
            n.starts_with(&format!("dotnetcore2-{VERSION}-")) && n.ends_with(".whl")
        })
    };
    let wheel = match find_wheel() {
        Some(w) => w,
        None => {
            let out = Command::new("python3")
                .args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--platform", "manylinux1_x86_64"])
                .args(["--python-version", "3", "--implementation", "py", "--disable-pip-version-check", "--no-input"])
                .arg("-d")
                .arg(&wheel_dir)
                .arg(format!("dotnetcore2=={VERSION}"))
                .output()
                .unwrap_or_else(|e| panic!("cannot run python3 -m pip ({e}): install python3-pip"));
            assert!(
                out.status.success(),
                "pip download dotnetcore2=={VERSION} failed (is PyPI reachable?):\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            find_wheel().expect("pip reported success but no dotnetcore2 wheel was downloaded")
        }
    };
    let partial = dest.join(format!("dotnetcore2-{VERSION}.partial.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&partial);
    let out = Command::new("unzip").arg("-q").arg(&wheel).arg("-d").arg(&partial).output().expect("cannot run unzip");
    assert!(out.status.success(), "unzip {} failed: {}", wheel.display(), String::from_utf8_lossy(&out.stderr));
    // Wheels do not keep Unix modes: the host and native libraries must be executable.
    let pbin = partial.join("dotnetcore2/bin");
    let status = Command::new("sh")
        .arg("-c")
        .arg("chmod +x \"$1/dotnet\" && find \"$1\" -name '*.so' -exec chmod +x {} +")
        .arg("sh")
        .arg(&pbin)
        .status()
        .unwrap();
    assert!(status.success(), "chmod of the unpacked runtime failed");
    let final_dir = dest.join(format!("dotnetcore2-{VERSION}"));
    let _ = std::fs::remove_dir_all(&final_dir);
    std::fs::rename(&partial, &final_dir).unwrap();
    std::fs::File::create(&stamp).unwrap();
    bin
}

/// The framework directory (`shared/Microsoft.NETCore.App/3.1.23`) of a runtime directory.
pub fn framework_dir(runtime: &Path) -> PathBuf {
    runtime.join(format!("shared/Microsoft.NETCore.App/{VERSION}"))
}

const RUNTIME_CONFIG: &str =
    r#"{"runtimeOptions":{"tfm":"netcoreapp3.1","framework":{"name":"Microsoft.NETCore.App","version":"3.1.0"}}}"#;

/// Compiles a C# file into `App.dll` (+ runtimeconfig) under the cargo tmp dir, once per source content.
pub fn build_app(source: &Path) -> PathBuf {
    static BUILD: Mutex<()> = Mutex::new(());
    let _guard = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    let text = std::fs::read(source).unwrap_or_else(|e| panic!("cannot read {}: {e}", source.display()));
    let hash = text.iter().fold(0xcbf29ce484222325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x100000001b3));
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("dotnet-app-{hash:016x}"));
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
        .unwrap_or_else(|e| panic!("cannot run mcs ({e}): install the C# compiler with `apt-get install -y mono-mcs`"));
    assert!(
        out.status.success(),
        "mcs failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(dir.join("App.runtimeconfig.json"), RUNTIME_CONFIG).unwrap();
    std::fs::rename(&partial, &dll).unwrap();
    dll
}

/// The `dotnet` command for an app with perf maps on (the runtime writes `/tmp/perf-<pid>.map`).
pub fn dotnet_command(runtime: &Path, dll: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(runtime.join("dotnet"));
    cmd.arg(dll).args(args);
    cmd.env("DOTNET_SYSTEM_GLOBALIZATION_INVARIANT", "1").env("COMPlus_PerfMapEnabled", "1");
    cmd
}
