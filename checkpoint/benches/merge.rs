//! Merging 4 copies of a 256 MiB checkpoint. Run with
//! `cargo bench -p hadar-checkpoint --bench merge`.
//!
//! The copies are generated in a temporary directory before timing starts
//! (so they are in the page cache: this measures the merge, not the disk);
//! the timed part is the whole merge, fsync of the 256 MiB output included.
//! Throughput is input bytes read per second.

use divan::counter::BytesCount;
use divan::Bencher;
use hadar_checkpoint::merge;

#[path = "support/synth.rs"]
mod synth;

fn main() {
    divan::main();
}

const COPIES: u64 = 4;
const BYTES: u64 = 256 << 20;

#[divan::bench(args = ["F32", "BF16", "F16"], sample_count = 5, sample_size = 1)]
fn merge_4_copies_of_256_mib(bencher: Bencher, dtype: &str) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let inputs: Vec<_> = (0..COPIES)
        .map(|i| {
            let path = dir.path().join(format!("copy{i}.safetensors"));
            synth::write_checkpoint(&path, dtype, BYTES, i).expect("synthetic checkpoint");
            (path, 100 * (i + 1))
        })
        .collect();
    let out = dir.path().join("merged.safetensors");
    let report = merge(&inputs, &out).expect("merge");
    bencher
        .counter(BytesCount::new(report.bytes_read))
        .bench_local(|| merge(&inputs, &out).expect("merge").bytes_written);
}
