//! Why a merge failed.

use std::path::PathBuf;

use safetensors::Dtype;

/// Why [`merge`](crate::merge) refused or failed. Every variant names the file
/// (and, where one is involved, the tensor) as it was given.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// No copy was given.
    #[error("nothing to merge: give at least one copy")]
    NoInputs,
    /// The copies' iteration counts add up to zero, so no weights exist.
    #[error("the copies completed 0 iterations in all; weights are proportional to iterations, so at least one copy needs more than 0")]
    ZeroIterations,
    /// The output path names one of the inputs.
    #[error("the output {} is the input {}; write the merge to another path", out.display(), input.display())]
    OutputIsInput {
        /// The output path.
        out: PathBuf,
        /// The input it names.
        input: PathBuf,
    },
    /// An input could not be opened or read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The input.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// An input is not a valid safetensors file.
    #[error("{} is not a valid safetensors file: {reason}", path.display())]
    Invalid {
        /// The input.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A copy lacks a tensor that the first copy has.
    #[error("{}: has no tensor `{name}`, which {} has; the copies must hold the same tensors", path.display(), reference.display())]
    MissingTensor {
        /// The copy without the tensor.
        path: PathBuf,
        /// The tensor.
        name: String,
        /// The first copy, which has it.
        reference: PathBuf,
    },
    /// A copy has a tensor that the first copy lacks.
    #[error("{}: has tensor `{name}`, which {} has not; the copies must hold the same tensors", path.display(), reference.display())]
    ExtraTensor {
        /// The copy with the extra tensor.
        path: PathBuf,
        /// The tensor.
        name: String,
        /// The first copy, which lacks it.
        reference: PathBuf,
    },
    /// A tensor's shape differs from the first copy's.
    #[error("{}: tensor `{name}` has shape {shape:?}, {} has {reference_shape:?}", path.display(), reference.display())]
    ShapeMismatch {
        /// The copy that differs.
        path: PathBuf,
        /// The tensor.
        name: String,
        /// Its shape in `path`.
        shape: Vec<usize>,
        /// The first copy.
        reference: PathBuf,
        /// Its shape in the first copy.
        reference_shape: Vec<usize>,
    },
    /// A tensor's dtype differs from the first copy's.
    #[error("{}: tensor `{name}` has dtype {dtype}, {} has {reference_dtype}", path.display(), reference.display())]
    DtypeMismatch {
        /// The copy that differs.
        path: PathBuf,
        /// The tensor.
        name: String,
        /// Its dtype in `path`.
        dtype: Dtype,
        /// The first copy.
        reference: PathBuf,
        /// Its dtype in the first copy.
        reference_dtype: Dtype,
    },
    /// A floating-point tensor in a dtype that the merge cannot average
    /// (F4, F6, F8): refused rather than silently taken from one copy.
    #[error("{}: tensor `{name}` has dtype {dtype}, which merge cannot average (it averages F16, BF16, F32, F64 and C64, and takes integer and BOOL tensors from the copy with the most iterations)", path.display())]
    UnsupportedDtype {
        /// The first copy.
        path: PathBuf,
        /// The tensor.
        name: String,
        /// Its dtype.
        dtype: Dtype,
    },
    /// A copy holds NaN or infinite values: averaged, they would spread
    /// into every copy's share of the model.
    #[error("{}: tensor `{name}` holds NaN or infinite values (a diverged copy); averaged, they would spread into the whole model: merge the other copies", path.display())]
    NonFinite {
        /// The copy.
        path: PathBuf,
        /// The tensor.
        name: String,
    },
    /// Writing the output failed; nothing was left at the output path.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The output path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl MergeError {
    /// Whether writing the output failed (as opposed to the inputs being
    /// wrong): a CLI maps this to its "cannot write output" exit code.
    pub fn is_write_error(&self) -> bool {
        matches!(self, Self::Write { .. })
    }
}
