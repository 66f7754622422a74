//! Paging a big recording in and out around a pass over its records, on a thread of its own.
//!
//! A pass over a recording of stack copies (hundreds of MB, each record a few KB of which it reads a few hundred
//! bytes) can spend a third of its time in the kernel: a page fault every 64 KB or less (the kernel maps the file's
//! cached pages around each fault, fewer where they are cached as small pages) and, to keep memory flat, dropping
//! the pages behind it. Both only change which of the file's pages are mapped, never what the pass reads, so a
//! second thread can do them: it maps the next MB with one `MADV_POPULATE_READ` at a time and drops what the pass is
//! done with, while the pass names samples.

use super::PerfDataReader;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::thread::Thread;

/// How far ahead of the pass the data is mapped.
const AHEAD: u64 = 4 << 20;
/// How much is mapped, or dropped, at a time.
const STEP: u64 = 1 << 20;
/// How far behind the pass the paging thread may fall in dropping pages before the pass drops them itself: memory
/// stays bounded however the threads are scheduled.
const LAG: u64 = 4 * STEP;

/// Runs `pass` over `reader`'s records with a paging thread beside it, which `pass` keeps told where it is
/// ([`Pager::advance`]). Where no thread can be started, the pass drops the pages itself as it goes (the rule for a
/// thread that falls behind). The thread ends with `pass`, however it ends.
pub fn with_pager<T>(reader: &PerfDataReader, pass: impl FnOnce(&Pager) -> T) -> T {
    let pager = Pager::new(reader);
    std::thread::scope(|scope| {
        let thread = std::thread::Builder::new().name("perf-data-pager".into());
        let _ = thread.spawn_scoped(scope, || pager.run());
        // Dropped when `pass` returns or unwinds, before the scope waits for the thread.
        let _finish = Finish(&pager);
        pass(&pager)
    })
}

struct Finish<'p, 'r>(&'p Pager<'r>);

impl Drop for Finish<'_, '_> {
    fn drop(&mut self) {
        self.0.finished.store(true, Ordering::Release);
        self.0.wake();
        self.0.drop_before(self.0.done_before.load(Ordering::Acquire));
    }
}

/// What the pass tells the paging thread (offsets in the data section). Shared by the two threads.
pub struct Pager<'r> {
    reader: &'r PerfDataReader,
    /// Where the pass reads.
    at: AtomicU64,
    /// The pass needs nothing before this.
    done_before: AtomicU64,
    /// Pages before this were dropped.
    dropped_before: AtomicU64,
    /// Where the pass must be for the paging thread to have work again (it sleeps until then).
    wake_at: AtomicU64,
    finished: AtomicBool,
    thread: OnceLock<Thread>,
}

impl<'r> Pager<'r> {
    fn new(reader: &'r PerfDataReader) -> Pager<'r> {
        Pager {
            reader,
            at: AtomicU64::new(0),
            done_before: AtomicU64::new(0),
            dropped_before: AtomicU64::new(0),
            wake_at: AtomicU64::new(0),
            finished: AtomicBool::new(false),
            thread: OnceLock::new(),
        }
    }

    /// The paging thread's work, until the pass ends.
    fn run(&self) {
        let _ = self.thread.set(std::thread::current());
        let mut mapped_to = 0u64;
        while !self.finished.load(Ordering::Acquire) {
            let at = self.at.load(Ordering::Acquire);
            // What lies behind the pass it has read (it went on while this thread did not run): mapping it again
            // would keep it resident until the pass next drops pages.
            mapped_to = mapped_to.max(at);
            // A followed recording grows: only what is in the file yet can be mapped.
            let end = self.reader.data_len() as u64;
            if mapped_to < (at + AHEAD).min(end) {
                let to = (mapped_to + STEP).min(end);
                self.reader.map_data(mapped_to, to);
                mapped_to = to;
                continue;
            }
            let done_before = self.done_before.load(Ordering::Acquire);
            if done_before >= self.dropped_before.load(Ordering::Acquire) + STEP {
                self.drop_before(done_before);
                continue;
            }
            // Nothing to do until the pass has moved on: asleep until it passes the middle of what is mapped ahead,
            // and at least a step further (at the end of a followed recording, not woken by every record).
            self.wake_at.store((at + STEP).max(mapped_to.saturating_sub(AHEAD / 2)), Ordering::Release);
            if self.at.load(Ordering::Acquire) == at && !self.finished.load(Ordering::Acquire) {
                std::thread::park();
            }
        }
    }

    /// The pass reads at `at` and needs nothing before `done_before`.
    pub fn advance(&self, at: u64, done_before: u64) {
        self.at.store(at, Ordering::Release);
        self.done_before.store(done_before, Ordering::Release);
        if at >= self.wake_at.load(Ordering::Acquire) {
            self.wake();
        }
        if done_before > self.dropped_before.load(Ordering::Acquire) + LAG {
            self.drop_before(done_before);
        }
    }

    fn drop_before(&self, offset: u64) {
        self.reader.release_data_before(offset);
        self.dropped_before.fetch_max(offset, Ordering::AcqRel);
    }

    fn wake(&self) {
        if let Some(thread) = self.thread.get() {
            thread.unpark();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf_data::echoes::tests::{stack_copy_writer, write_stack_copies};

    /// Resident KB of this process's mapping of `path`, from /proc/self/smaps.
    fn resident_kb(path: &std::path::Path) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut lines = smaps.lines().skip_while(|l| !l.ends_with(path.to_str().unwrap()));
        assert!(lines.next().is_some(), "{} is not mapped", path.display());
        let rss = lines.find(|l| l.starts_with("Rss:")).unwrap();
        rss.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    /// A pass with the paging thread reads every record, and what it is done with does not stay mapped; the thread
    /// ends with the pass, also when the pass fails or panics.
    #[test]
    fn the_pass_reads_everything_and_memory_stays_flat() {
        let tmp = tempfile::tempdir().unwrap();
        let mut w = stack_copy_writer(tmp.path());
        // About 3 KB a sample: 30 MB, more than what is mapped ahead and behind.
        write_stack_copies(&mut w, 0..10_000);
        w.finish(&Default::default()).unwrap();
        let path = tmp.path().join("perf.data");
        let reader = PerfDataReader::from_file(&std::fs::File::open(&path).unwrap(), &path).unwrap();
        assert!(reader.data_len() as u64 > 3 * AHEAD);

        let mut seen = 0;
        let (paged, during) = with_pager(&reader, |pager| {
            let read = reader.skim_records(|offset, _| {
                seen += 1;
                pager.advance(offset, offset);
                Ok(())
            });
            (read, resident_kb(&path))
        });
        assert_eq!(paged.unwrap().records, 10_000);
        assert_eq!(seen, 10_000);
        let mb = reader.data_len() >> 20;
        assert!(during * 1024 <= AHEAD + LAG + 2 * STEP, "{during} KB of {mb} MB mapped at the end of the pass");
        let after = resident_kb(&path);
        assert!(after * 1024 <= 2 * STEP, "{after} KB of {mb} MB still mapped after the pass");

        let failed = with_pager(&reader, |_| reader.skim_records(|_, _| anyhow::bail!("stop")));
        assert!(failed.is_err());
        let panicked = std::panic::catch_unwind(|| with_pager(&reader, |_| panic!("a pass that panics")));
        assert!(panicked.is_err());
    }
}
