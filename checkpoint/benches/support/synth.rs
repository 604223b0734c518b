//! Synthetic checkpoints for the benchmark and the `merge_copies` example,
//! written a chunk at a time so that the generator stays small in memory.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

/// Bytes of each weight tensor (a 2048 x 2048 F32 matrix; 4096 x 2048 in 16 bits).
const TENSOR_BYTES: u64 = 16 << 20;

/// Writes a checkpoint of about `total_bytes` of weights in `dtype` (`F32`,
/// `BF16`, `F16` or `F64`): tensors `layer{i}.weight` of 16 MiB each, plus an
/// I64 tensor `step` holding `seed`. Values depend on `seed`. Returns the
/// file's size.
pub fn write_checkpoint(
    path: &Path,
    dtype: &str,
    total_bytes: u64,
    seed: u64,
) -> std::io::Result<u64> {
    let size: u64 = match dtype {
        "F32" => 4,
        "BF16" | "F16" => 2,
        "F64" => 8,
        _ => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("synthetic checkpoints are F32, BF16, F16 or F64, not {dtype}"),
            ))
        }
    };
    let tensors = total_bytes.div_ceil(TENSOR_BYTES).max(1);
    let cols = 2048u64;
    let rows = TENSOR_BYTES / size / cols;
    let mut header = String::from("{\"__metadata__\":{\"format\":\"pt\"}");
    let mut offset = 0u64;
    for i in 0..tensors {
        header += &format!(
            ",\"layer{i}.weight\":{{\"dtype\":\"{dtype}\",\"shape\":[{rows},{cols}],\"data_offsets\":[{offset},{}]}}",
            offset + TENSOR_BYTES
        );
        offset += TENSOR_BYTES;
    }
    header += &format!(
        ",\"step\":{{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[{offset},{}]}}}}",
        offset + 8
    );
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    let mut w = BufWriter::with_capacity(1 << 20, File::create(path)?);
    w.write_all(&(header.len() as u64).to_le_bytes())?;
    w.write_all(header.as_bytes())?;
    let mut chunk = Vec::with_capacity(1 << 20);
    let elements = TENSOR_BYTES / size;
    for t in 0..tensors {
        let mut e = 0;
        while e < elements {
            chunk.clear();
            let end = (e + (1 << 20) / size).min(elements);
            for k in e..end {
                let h = (k ^ (t << 32) ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15))
                    .wrapping_mul(0xff51_afd7_ed55_8ccd);
                let x = (h >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
                match dtype {
                    "F32" => chunk.extend(x.to_le_bytes()),
                    "BF16" => chunk.extend(half::bf16::from_f32(x).to_le_bytes()),
                    "F16" => chunk.extend(half::f16::from_f32(x).to_le_bytes()),
                    _ => chunk.extend(f64::from(x).to_le_bytes()),
                }
            }
            w.write_all(&chunk)?;
            e = end;
        }
    }
    w.write_all(&(seed as i64).to_le_bytes())?;
    // Synced, so that writing them back does not compete with what is timed.
    w.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    Ok(8 + header.len() as u64 + offset + 8)
}
