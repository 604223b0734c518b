//! Safetensors reading and writing for the MLP's checkpoints: f32 tensors
//! plus the `step` i64 tensor the runtime reads (docs/job-protocol.md).

use std::path::Path;

use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};

/// A named f32 tensor, encoded, with its shape.
pub struct Encoded {
    name: &'static str,
    bytes: Vec<u8>,
    shape: Vec<usize>,
}

/// Encodes `values` as the f32 tensor `name` of `shape`.
pub fn f32_tensor(name: &'static str, values: &[f32], shape: Vec<usize>) -> Encoded {
    Encoded {
        name,
        bytes: values.iter().flat_map(|x| x.to_le_bytes()).collect(),
        shape,
    }
}

/// Writes the tensors and `step` to `path` through a temporary file and a
/// rename, so that a task killed mid-write never leaves half a checkpoint.
pub fn write_atomically(path: &Path, tensors: Vec<Encoded>, step: u64) -> Result<(), String> {
    let err = |e: safetensors::SafeTensorError| format!("{}: {e}", path.display());
    let step = i64::try_from(step)
        .map_err(|_| format!("{}: step {step} does not fit an i64", path.display()))?
        .to_le_bytes();
    let mut views = vec![(
        "step",
        TensorView::new(Dtype::I64, vec![1], &step).map_err(err)?,
    )];
    for t in &tensors {
        views.push((
            t.name,
            TensorView::new(Dtype::F32, t.shape.clone(), &t.bytes).map_err(err)?,
        ));
    }
    let data = safetensors::serialize(views, None).map_err(err)?;
    let tmp = path.with_extension("safetensors.tmp");
    std::fs::write(&tmp, data).map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
}

/// The f32 tensor `name` of a checkpoint's `bytes`, which must hold `len`
/// values.
pub fn read_f32s(path: &Path, bytes: &[u8], name: &str, len: usize) -> Result<Vec<f32>, String> {
    let at = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let st = SafeTensors::deserialize(bytes).map_err(|e| at(&e))?;
    let t = st.tensor(name).map_err(|e| at(&e))?;
    if t.dtype() != Dtype::F32 || t.data().len() != len * 4 {
        return Err(at(&format!(
            "tensor `{name}` is not {len} f32 values (is this checkpoint from another model? \
             HADAR_TRAINER_MODEL must match the job's first run)"
        )));
    }
    Ok(t.data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// The `step` i64 tensor of a checkpoint's `bytes`.
pub fn read_step(path: &Path, bytes: &[u8]) -> Result<u64, String> {
    let at = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let st = SafeTensors::deserialize(bytes).map_err(|e| at(&e))?;
    let step = st.tensor("step").map_err(|e| at(&e))?;
    if step.dtype() != Dtype::I64 || step.data().len() != 8 {
        return Err(at(&"tensor `step` is not one i64"));
    }
    let mut s = [0u8; 8];
    s.copy_from_slice(step.data());
    Ok(u64::try_from(i64::from_le_bytes(s)).unwrap_or(0))
}
