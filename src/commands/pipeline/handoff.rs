//! Handing work between the output stage's threads: a thread that has to wait first yields its CPU for a while,
//! and sleeps only when the wait goes on.
//!
//! A thread that sleeps is woken by the thread that hands it work, and the kernel tends to wake it on that thread's
//! own CPU: on 2 CPUs, 80 % of the wake-ups traced put the woken thread behind its waker while the other CPU was
//! idle (docs/PERFORMANCE.md, twenty-third session). Yielding, a waiting thread keeps its CPU without taking it from
//! a thread that has work there. Waiting 50 µs so took a cold `postprocess` of a `perf record` folder 0.6–1.6 ms
//! less of 16–18 (docs/PERFORMANCE.md, twenty-fourth session); 20 µs was too short to matter, and 200 µs no better
//! than none.

use std::sync::mpsc::{Receiver, RecvError, SendError, SyncSender, TryRecvError, TrySendError};
use std::time::{Duration, Instant};

/// How long a waiting thread yields before it sleeps.
const PATIENCE: Duration = Duration::from_micros(50);

/// The next item from `from` (as [`Receiver::recv`]).
pub fn recv<T>(from: &Receiver<T>) -> Result<T, RecvError> {
    let mut waiting = Waiting::default();
    loop {
        match from.try_recv() {
            Ok(item) => return Ok(item),
            Err(TryRecvError::Disconnected) => return Err(RecvError),
            Err(TryRecvError::Empty) if waiting.yielded() => {}
            Err(TryRecvError::Empty) => return from.recv(),
        }
    }
}

/// Sends `item` on `to` once it has room (as [`SyncSender::send`]).
pub fn send<T>(to: &SyncSender<T>, mut item: T) -> Result<(), SendError<T>> {
    let mut waiting = Waiting::default();
    loop {
        match to.try_send(item) {
            Ok(()) => return Ok(()),
            Err(TrySendError::Disconnected(back)) => return Err(SendError(back)),
            Err(TrySendError::Full(back)) if waiting.yielded() => item = back,
            Err(TrySendError::Full(back)) => return to.send(back),
        }
    }
}

/// A wait under way: when it began (the clock is read only once a thread has to wait, not for each hand-over).
#[derive(Default)]
struct Waiting {
    since: Option<Instant>,
}

impl Waiting {
    /// Yields the CPU and says so, while the wait is within [`PATIENCE`]; false once it is time to sleep.
    fn yielded(&mut self) -> bool {
        let within = self.since.get_or_insert_with(Instant::now).elapsed() < PATIENCE;
        if within {
            std::thread::yield_now();
        }
        within
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn items_arrive_in_order_across_waits_and_a_closed_channel_ends_the_wait() {
        let (to, from) = mpsc::sync_channel::<u32>(1);
        let producer = std::thread::spawn(move || {
            for i in 0..100 {
                if i % 10 == 0 {
                    // Longer than the patience: the receiver falls asleep and must be woken.
                    std::thread::sleep(Duration::from_millis(1));
                }
                super::send(&to, i).unwrap();
            }
        });
        let mut got = Vec::new();
        while let Ok(i) = super::recv(&from) {
            got.push(i);
        }
        producer.join().unwrap();
        assert_eq!(got, (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn sending_to_a_receiver_that_is_gone_gives_the_item_back() {
        let (to, from) = mpsc::sync_channel::<String>(0);
        drop(from);
        assert_eq!(super::send(&to, "kept".to_string()).unwrap_err().0, "kept");
    }
}
