//! Generates synthetic copies of a checkpoint, or merges copies, printing
//! the report: a way to measure time and peak memory of big merges, e.g.
//!
//! ```text
//! cargo build --release -p hadar-checkpoint --example merge_copies
//! target/release/examples/merge_copies gen /tmp/ck 4 1024 F32
//! /usr/bin/time -v target/release/examples/merge_copies merge /tmp/ck/merged.safetensors \
//!     /tmp/ck/copy0.safetensors:100 /tmp/ck/copy1.safetensors:200 \
//!     /tmp/ck/copy2.safetensors:300 /tmp/ck/copy3.safetensors:400
//! ```

use std::path::{Path, PathBuf};

#[path = "../benches/support/synth.rs"]
mod synth;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const USAGE: &str = "usage: merge_copies gen DIR COPIES MIB [F32|BF16|F16|F64]\n       merge_copies merge OUT PATH:ITERS...";

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("gen") if args.len() >= 4 => {
            let dir = Path::new(&args[1]);
            let copies: u64 = args[2].parse()?;
            let mib: u64 = args[3].parse()?;
            let dtype = args.get(4).map_or("F32", String::as_str);
            std::fs::create_dir_all(dir)?;
            for i in 0..copies {
                let path = dir.join(format!("copy{i}.safetensors"));
                let bytes = synth::write_checkpoint(&path, dtype, mib << 20, i)?;
                println!("{} {bytes} bytes", path.display());
            }
            Ok(())
        }
        Some("merge") if args.len() >= 3 => {
            let inputs = args[2..]
                .iter()
                .map(|a| {
                    let (p, n) = a.rsplit_once(':').ok_or(format!("{a} is not PATH:ITERS"))?;
                    Ok((PathBuf::from(p), n.parse::<u64>()?))
                })
                .collect::<Result<Vec<_>>>()?;
            let r = hadar_checkpoint::merge(&inputs, Path::new(&args[1]))?;
            println!(
                "{} tensors ({} averaged, {} copied), read {} bytes, wrote {} bytes in {:.3} s: {:.2} GB/s read",
                r.tensors,
                r.averaged,
                r.copied,
                r.bytes_read,
                r.bytes_written,
                r.elapsed.as_secs_f64(),
                r.read_gb_per_s()
            );
            Ok(())
        }
        _ => Err(USAGE.into()),
    }
}
