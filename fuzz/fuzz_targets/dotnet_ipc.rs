//! A reply on a .NET runtime's diagnostics socket, which `collect` talks to to switch perf maps on: the peer may be
//! whoever could plant a socket in the target's temporary folder. Input: the bytes the peer sends before it hangs up.
#![no_main]
use libfuzzer_sys::fuzz_target;
use profcpu::record::dotnet_ipc::{read_reply, IpcError};
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

fuzz_target!(|data: &[u8]| {
    let (mut peer, mut ours) = UnixStream::pair().expect("socketpair");
    peer.write_all(data).expect("the socket buffer holds any input");
    drop(peer);
    let timeout = Duration::from_secs(5);
    match read_reply(&mut ours, Instant::now() + timeout, "fuzz-socket", timeout) {
        Ok(_) | Err(IpcError::BadPeer { .. }) => {}
        Err(other) => panic!("a peer that hung up is a bad peer, not {other}"),
    }
});
