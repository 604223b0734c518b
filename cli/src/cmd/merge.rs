//! `hadar merge`: one checkpoint from the copies of a forked (HadarE) job.

use std::path::PathBuf;

use clap::Args;
use hadar_checkpoint::MergeReport;

use crate::exit::CliError;
use crate::report::table::Table;

/// Merge the safetensors checkpoints of a job's copies into one.
///
/// Each copy weighs in proportion to the iterations it completed. Floating-point
/// tensors (F16, BF16, F32, F64, C64) become the weighted average of the copies',
/// computed in f32 (f64 for F64) and rounded back to their own dtype; integer
/// and BOOL tensors (step counters, masks) and the header's `__metadata__` are
/// taken from the copy with the most iterations (the first of them on a tie).
/// F4/F6/F8 tensors are refused. The copies must hold the same tensor names,
/// shapes and dtypes; a copy with 0 iterations is checked but weighs nothing.
///
/// The copies are streamed a chunk at a time (memory stays at a few tens of
/// MiB whatever their size), and the result is written to a temporary file
/// beside --out, synced and renamed: on error, --out is left as it was.
///
/// Examples:
///
///   hadar merge --out merged.safetensors copy1.safetensors:1200 copy2.safetensors:400
///
///   hadar merge --out round7.safetensors --json \
///       /ckpt/v100/model.safetensors:3000 /ckpt/k80/model.safetensors:900
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct MergeArgs {
    /// The merged checkpoint to write; replaced atomically. It must not be one of the copies.
    #[arg(long, short, value_name = "FILE")]
    pub out: PathBuf,

    /// The copies, each a safetensors file and the iterations it completed, as
    /// PATH:ITERATIONS (the count follows the last `:`, so paths may contain `:`).
    #[arg(required = true, value_name = "COPY:ITERS", value_parser = parse_copy)]
    pub copies: Vec<(PathBuf, u64)>,

    /// Print the report as a JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Parses `PATH:ITERATIONS`, splitting at the last `:`.
fn parse_copy(s: &str) -> Result<(PathBuf, u64), String> {
    let (path, iters) = s.rsplit_once(':').ok_or_else(|| {
        format!("`{s}` is not COPY:ITERS; add the iterations the copy completed, e.g. {s}:1200")
    })?;
    if path.is_empty() {
        return Err(format!("`{s}` names no file before the `:`"));
    }
    let iters: u64 = iters.trim().parse().map_err(|_| {
        format!(
            "`{iters}` (after the last `:` in `{s}`) is not a whole number of iterations, \
             e.g. {path}:1200"
        )
    })?;
    Ok((PathBuf::from(path), iters))
}

/// Runs the command.
pub fn run(args: MergeArgs) -> Result<(), CliError> {
    let report = hadar_checkpoint::merge(&args.copies, &args.out)?;
    if args.json {
        let text = serde_json::to_string_pretty(&to_json(&args.copies, &report))
            .map_err(|e| CliError::output("stdout", std::io::Error::other(e)))?;
        println!("{text}");
    } else {
        print_report(&args.copies, &report);
    }
    Ok(())
}

fn to_json(copies: &[(PathBuf, u64)], r: &MergeReport) -> serde_json::Value {
    serde_json::json!({
        "out": r.out.display().to_string(),
        "copies": copies
            .iter()
            .zip(&r.weights)
            .map(|((path, iters), w)| serde_json::json!({
                "path": path.display().to_string(),
                "iterations": iters,
                "weight": w,
            }))
            .collect::<Vec<_>>(),
        "base": r.base.display().to_string(),
        "tensors": r.tensors,
        "averaged": r.averaged,
        "copied": r.copied,
        "bytes_read": r.bytes_read,
        "bytes_written": r.bytes_written,
        "seconds": r.elapsed.as_secs_f64(),
        "read_gb_per_s": r.read_gb_per_s(),
    })
}

fn print_report(copies: &[(PathBuf, u64)], r: &MergeReport) {
    let mut t = Table::new(["copy", "iterations", "weight"]);
    for ((path, iters), w) in copies.iter().zip(&r.weights) {
        t.row([
            path.display().to_string(),
            iters.to_string(),
            format!("{w:.4}"),
        ]);
    }
    print!("{}", t.render());
    println!(
        "\nwrote {}: {} tensors, {} averaged, {} taken from {} (most iterations)",
        r.out.display(),
        r.tensors,
        r.averaged,
        r.copied,
        r.base.display()
    );
    println!(
        "read {:.3} GB, wrote {:.3} GB in {:.2} s ({:.2} GB/s read)",
        r.bytes_read as f64 / 1e9,
        r.bytes_written as f64 / 1e9,
        r.elapsed.as_secs_f64(),
        r.read_gb_per_s()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_parse() {
        assert_eq!(
            parse_copy("copy1.safetensors:1200"),
            Ok((PathBuf::from("copy1.safetensors"), 1200))
        );
        // The count follows the last `:`.
        assert_eq!(
            parse_copy("/mnt/a:b/c.safetensors:7"),
            Ok((PathBuf::from("/mnt/a:b/c.safetensors"), 7))
        );
        assert_eq!(parse_copy("c:0"), Ok((PathBuf::from("c"), 0)));
        assert!(parse_copy("copy1.safetensors").is_err());
        assert!(parse_copy(":12").is_err());
        assert!(parse_copy("c.safetensors:").is_err());
        assert!(parse_copy("c.safetensors:-3").is_err());
        assert!(parse_copy("c.safetensors:1e3").is_err());
        assert!(parse_copy("a:b")
            .unwrap_err()
            .contains("after the last `:`"));
    }

    /// A safetensors file holding one F32 tensor `w`.
    fn write_f32(path: &std::path::Path, xs: &[f32]) {
        let header = format!(
            r#"{{"w":{{"dtype":"F32","shape":[{}],"data_offsets":[0,{}]}}}}"#,
            xs.len(),
            4 * xs.len()
        );
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend(header.as_bytes());
        bytes.extend(xs.iter().flat_map(|x| x.to_le_bytes()));
        std::fs::write(path, bytes).unwrap();
    }

    #[test]
    fn merges_and_maps_errors_to_exit_codes() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, c) = (
            dir.path().join("a"),
            dir.path().join("b"),
            dir.path().join("c"),
        );
        write_f32(&a, &[1.0, 2.0]);
        write_f32(&b, &[3.0, 6.0]);
        write_f32(&c, &[0.0; 3]);
        let args = |copies: Vec<(PathBuf, u64)>, out: PathBuf| MergeArgs {
            out,
            copies,
            json: true,
        };
        let out = dir.path().join("out");
        run(args(vec![(a.clone(), 300), (b, 100)], out.clone())).unwrap();
        let bytes = std::fs::read(&out).unwrap();
        let tail: Vec<f32> = bytes[bytes.len() - 8..]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert_eq!(tail, [1.5, 3.0]);

        let e = run(args(vec![(a.clone(), 1), (c, 1)], out)).unwrap_err();
        assert_eq!(e.code(), crate::exit::EXIT_INPUT, "{e}");
        assert!(e.to_string().contains("has shape [3]"), "{e}");
        let e = run(args(vec![(a.clone(), 1)], a.clone())).unwrap_err();
        assert_eq!(e.code(), crate::exit::EXIT_INPUT, "{e}");
        let e = run(args(vec![(a, 1)], dir.path().join("no/dir/out"))).unwrap_err();
        assert_eq!(e.code(), crate::exit::EXIT_OUTPUT, "{e}");
    }
}
