//! Runs independent pieces of work on several threads, handing each result
//! to the caller's thread as it comes (so that the caller can save it, draw
//! progress, or stop the rest) instead of only at the end.

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;

/// Runs `work` on every item of `items` on up to `threads` threads (at
/// least one), taking the items in order, and calls `done` on the calling
/// thread with each item's index and result as it finishes. When `done`
/// breaks, no further item is started (those running finish, and their
/// results are dropped).
pub fn for_each<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    work: impl Fn(&T) -> R + Sync,
    mut done: impl FnMut(usize, R) -> ControlFlow<()>,
) {
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|s| {
        for _ in 0..threads.clamp(1, items.len().max(1)) {
            let (tx, next, stop, work) = (tx.clone(), &next, &stop, &work);
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(item) = items.get(i) else { break };
                    if tx.send((i, work(item))).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        for (i, r) in rx {
            if stop.load(Ordering::Relaxed) {
                continue;
            }
            if done(i, r).is_break() {
                stop.store(true, Ordering::Relaxed);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_item_is_done_once() {
        let items: Vec<u32> = (0..100).collect();
        let mut seen = vec![0; items.len()];
        for_each(
            &items,
            4,
            |x| x * 2,
            |i, r| {
                assert_eq!(r, items[i] * 2);
                seen[i] += 1;
                ControlFlow::Continue(())
            },
        );
        assert!(seen.iter().all(|&n| n == 1), "{seen:?}");
    }

    #[test]
    fn a_break_starts_nothing_more() {
        let items: Vec<u32> = (0..1000).collect();
        let started = AtomicUsize::new(0);
        let results = AtomicUsize::new(0);
        for_each(
            &items,
            2,
            |&i| {
                started.fetch_add(1, Ordering::Relaxed);
                // Items after the first three wait for the break, so
                // that the workers cannot run ahead of it.
                while i >= 3 && results.load(Ordering::Relaxed) < 3 {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            },
            |_, ()| {
                if results.fetch_add(1, Ordering::Relaxed) + 1 == 3 {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            },
        );
        assert_eq!(results.load(Ordering::Relaxed), 3);
        // The items taken when the break came, not the thousand.
        assert!(started.load(Ordering::Relaxed) < 100, "{started:?}");
    }

    #[test]
    fn no_items_and_zero_threads_are_fine() {
        let mut calls = 0;
        for_each(
            &[] as &[u32],
            0,
            |x| *x,
            |_, _| {
                calls += 1;
                ControlFlow::Continue(())
            },
        );
        assert_eq!(calls, 0);
        for_each(
            &[7u32],
            0,
            |x| *x,
            |_, r| {
                assert_eq!(r, 7);
                calls += 1;
                ControlFlow::Continue(())
            },
        );
        assert_eq!(calls, 1);
    }
}
