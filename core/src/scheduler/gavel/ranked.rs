//! Visiting a queue in sorted order without sorting all of it.
//!
//! A type's queue holds every active job, but the type is full after a few
//! dozen of them: sorting hundreds or thousands of entries per type and
//! round, to read the head, was a tenth of a continuous simulation. The
//! queue is sorted a block at a time instead (select the block's entries,
//! sort them, visit them; the next block twice as big), which visits the
//! entries in exactly the order a full sort gives when the order is total.
//! The first block is as big as the caller expects to read (a type's free
//! GPUs): most rounds sort nothing else.

use std::cmp::Ordering;

/// Calls `visit` on `items` in the order `cmp` sorts them, until it returns
/// `false`, sorting `first` of them (at least one) before the first visit,
/// twice as many after each block. `cmp` must be a total order (no two
/// items equal), or the order among equal items is unspecified. `items` is
/// left partly reordered.
pub(super) fn visit_in_order<T>(
    items: &mut [T],
    first: usize,
    cmp: impl Fn(&T, &T) -> Ordering,
    mut visit: impl FnMut(&T) -> bool,
) {
    let mut start = 0;
    let mut block = first.max(1);
    while start < items.len() {
        let rest = &mut items[start..];
        let end = if block.saturating_mul(2) >= rest.len() {
            // Most of what is left: sorted whole, by the merge sort, which
            // exploits runs (queues are built in id order, and long ones
            // are mostly jobs with equal keys).
            rest.sort_by(&cmp);
            rest.len()
        } else {
            // The `block` first entries of the rest, in any order, first.
            rest.select_nth_unstable_by(block - 1, &cmp);
            rest[..block].sort_unstable_by(&cmp);
            block
        };
        let head = &rest[..end];
        for item in head.iter() {
            if !visit(item) {
                return;
            }
        }
        start += end;
        block = block.saturating_mul(2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn visited(items: &[(u32, u32)], first: usize, stop_after: usize) -> Vec<(u32, u32)> {
        let mut items = items.to_vec();
        let mut out = Vec::new();
        let cmp = |a: &(u32, u32), b: &(u32, u32)| b.0.cmp(&a.0).then(a.1.cmp(&b.1));
        visit_in_order(&mut items, first, cmp, |&x| {
            out.push(x);
            out.len() < stop_after
        });
        out
    }

    #[test]
    fn visits_in_the_order_of_a_full_sort_and_stops_when_told() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for len in [0, 1, 2, 63, 64, 65, 200, 1000, 5000] {
            // Few distinct keys (many ties broken by the second field), as
            // in a queue of jobs with no allocation.
            let items: Vec<(u32, u32)> = (0..len).map(|i| (rng.random_range(0..5), i)).collect();
            let mut sorted = items.clone();
            sorted.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            for first in [0, 1, 7, 64] {
                assert_eq!(visited(&items, first, usize::MAX), sorted, "len {len}");
                for stop in [1, 10, 64, 65, 300] {
                    let n = stop.min(len as usize);
                    let seen = visited(&items, first, stop);
                    assert_eq!(seen, sorted[..n], "len {len}, first {first}, stop {stop}");
                }
            }
        }
    }
}
