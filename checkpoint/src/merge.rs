//! The weighted average of several copies' checkpoints, streamed.

use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use half::{bf16, f16, slice::HalfFloatSliceExt};
use safetensors::Dtype;

use crate::header::{Checkpoint, Entry};
use crate::MergeError;

/// Tuning of [`merge_with`].
#[derive(Debug, Clone)]
pub struct MergeOptions {
    /// Elements of a tensor processed at a time (at least 1). The buffers
    /// hold a chunk of one copy, the accumulator and the output chunk, so
    /// memory does not grow with the number or size of the copies: at the
    /// default of 1 Mi elements, 12 MiB for an F32 checkpoint, 24 MiB for F64,
    /// 34 MiB at most for a mix of dtypes.
    pub chunk_elements: usize,
}

impl Default for MergeOptions {
    fn default() -> Self {
        Self {
            chunk_elements: 1 << 20,
        }
    }
}

/// What a merge did.
#[derive(Debug, Clone)]
pub struct MergeReport {
    /// The file written.
    pub out: PathBuf,
    /// Tensors written.
    pub tensors: usize,
    /// Of them, tensors averaged over the copies (floating point).
    pub averaged: usize,
    /// Of them, tensors taken as they are from the copy with the most
    /// iterations (integers, BOOL; every tensor when only one copy has
    /// iterations).
    pub copied: usize,
    /// The copy with the most iterations (the first of them on a tie): its
    /// integer tensors, its header's `__metadata__` and its tensor order are kept.
    pub base: PathBuf,
    /// Each input's weight, in the order given: its iterations over the total.
    pub weights: Vec<f64>,
    /// Tensor bytes read from the inputs.
    pub bytes_read: u64,
    /// Size of the file written, header included.
    pub bytes_written: u64,
    /// Wall time of the merge.
    pub elapsed: Duration,
}

impl MergeReport {
    /// Input bytes read per second, in GB/s (10^9 bytes).
    pub fn read_gb_per_s(&self) -> f64 {
        self.bytes_read as f64 / self.elapsed.as_secs_f64().max(1e-9) / 1e9
    }
}

/// How a dtype is merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// Averaged, element by element, as this scalar type.
    Average(Scalar),
    /// Taken from the copy with the most iterations.
    Take,
    /// Floating point the merge cannot average.
    Unsupported,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scalar {
    F16,
    Bf16,
    F32,
    F64,
}

impl Scalar {
    fn size(self) -> usize {
        match self {
            Self::F16 | Self::Bf16 => 2,
            Self::F32 => 4,
            Self::F64 => 8,
        }
    }
}

fn class(dtype: Dtype) -> Class {
    match dtype {
        Dtype::F16 => Class::Average(Scalar::F16),
        Dtype::BF16 => Class::Average(Scalar::Bf16),
        Dtype::F32 => Class::Average(Scalar::F32),
        // A complex number is a pair of F32; real weights average each part.
        Dtype::C64 => Class::Average(Scalar::F32),
        Dtype::F64 => Class::Average(Scalar::F64),
        Dtype::BOOL
        | Dtype::U8
        | Dtype::I8
        | Dtype::U16
        | Dtype::I16
        | Dtype::U32
        | Dtype::I32
        | Dtype::U64
        | Dtype::I64 => Class::Take,
        // F4, F6_*, F8_* and dtypes of later format versions.
        _ => Class::Unsupported,
    }
}

/// Merges the copies of a checkpoint into `out`: see [`merge_with`].
pub fn merge<P: AsRef<Path>>(inputs: &[(P, u64)], out: &Path) -> Result<MergeReport, MergeError> {
    merge_with(inputs, out, &MergeOptions::default())
}

/// Merges the copies `inputs` — `(path, iterations completed)` — into `out`.
///
/// Every floating-point tensor of the result is the weighted average of the
/// copies' tensors, each copy weighing its iterations over the total:
/// `out = w_1 x_1 + w_2 x_2 + ...`, summed in that order in f32 (f64 for F64
/// tensors), then rounded to nearest (ties to even) into the tensor's dtype.
/// F16, BF16, F32, F64 and C64 (per part) are averaged; integer and BOOL
/// tensors (step counters, masks) are taken from the copy with the most
/// iterations, the first of them on a tie, as is the header's `__metadata__`.
/// Copies with 0 iterations are checked but weigh nothing. F4, F6 and F8
/// tensors are refused when two or more copies have iterations, rather than
/// silently taken from one copy.
///
/// The copies must hold the same tensor names with the same shapes and
/// dtypes; the first copy is the reference the others are compared against.
///
/// The inputs are read a chunk at a time and never held in memory, so the
/// memory used is bounded by `options.chunk_elements` whatever the size and
/// number of copies. The result is written to a temporary file beside `out`,
/// synced and renamed over `out`: on any error, `out` is left as it was.
/// The inputs must not be modified while they are merged.
pub fn merge_with<P: AsRef<Path>>(
    inputs: &[(P, u64)],
    out: &Path,
    options: &MergeOptions,
) -> Result<MergeReport, MergeError> {
    let started = Instant::now();
    if inputs.is_empty() {
        return Err(MergeError::NoInputs);
    }
    let total: u128 = inputs.iter().map(|(_, n)| u128::from(*n)).sum();
    if total == 0 {
        return Err(MergeError::ZeroIterations);
    }
    check_output(inputs, out)?;
    let copies = inputs
        .iter()
        .map(|(p, _)| Checkpoint::open(p.as_ref()))
        .collect::<Result<Vec<_>, _>>()?;
    check_same_tensors(&copies)?;

    let weights: Vec<f64> = inputs
        .iter()
        .map(|(_, n)| *n as f64 / total as f64)
        .collect();
    let base = base_copy(inputs);
    let contributors: Vec<(usize, f64)> = weights
        .iter()
        .enumerate()
        .filter(|(_, w)| **w > 0.0)
        .map(|(i, w)| (i, *w))
        .collect();
    let averaging = contributors.len() > 1;
    let base_ckpt = &copies[base];

    // Decide every tensor before writing anything.
    let plan = plan_tensors(&copies, base_ckpt, averaging)?;

    let (tmp, parent) = temp_file_beside(out)?;
    let (bytes_read, averaged) = write_tensors(
        tmp.as_file(),
        &copies,
        base_ckpt,
        &plan,
        &contributors,
        out,
        options,
    )?;
    let bytes_written = persist(tmp, out, parent)?;
    Ok(MergeReport {
        out: out.to_path_buf(),
        tensors: plan.len(),
        averaged,
        copied: plan.len() - averaged,
        base: base_ckpt.path.clone(),
        weights,
        bytes_read,
        bytes_written,
        elapsed: started.elapsed(),
    })
}

/// An error unless `out` may be written: it is a regular file, a symlink
/// or nothing, and none of the inputs.
fn check_output<P: AsRef<Path>>(inputs: &[(P, u64)], out: &Path) -> Result<(), MergeError> {
    // The result is renamed into place: over a device, FIFO or directory
    // that would replace it (as root, /dev/full became a regular file).
    if let Ok(m) = std::fs::symlink_metadata(out) {
        if !m.is_file() && !m.file_type().is_symlink() {
            return Err(MergeError::Write {
                path: out.to_path_buf(),
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "it exists and is not a regular file (a device, FIFO, socket or \
                     directory), which the merge would replace; give a file's path",
                ),
            });
        }
    }
    for (path, _) in inputs {
        if same_file(out, path.as_ref()) {
            return Err(MergeError::OutputIsInput {
                out: out.to_path_buf(),
                input: path.as_ref().to_path_buf(),
            });
        }
    }
    Ok(())
}

/// The first copy with the most iterations.
fn base_copy<P>(inputs: &[(P, u64)]) -> usize {
    let mut base = 0;
    for (i, (_, n)) in inputs.iter().enumerate() {
        if *n > inputs[base].1 {
            base = i;
        }
    }
    base
}

/// Each tensor of the base copy, in its order, with the scalar it is
/// averaged in (`None`: taken from the base copy); an error for a dtype that
/// cannot be averaged when `averaging` (two or more copies have iterations).
fn plan_tensors<'a>(
    copies: &[Checkpoint],
    base_ckpt: &'a Checkpoint,
    averaging: bool,
) -> Result<Vec<(&'a Entry, Option<Scalar>)>, MergeError> {
    let mut plan = Vec::with_capacity(base_ckpt.entries.len());
    for entry in &base_ckpt.entries {
        let c = match class(entry.dtype) {
            Class::Average(s) if averaging => Some(s),
            Class::Unsupported if averaging => {
                return Err(MergeError::UnsupportedDtype {
                    path: copies[0].path.clone(),
                    name: entry.name.clone(),
                    dtype: entry.dtype,
                })
            }
            _ => None,
        };
        plan.push((entry, c));
    }
    Ok(plan)
}

/// The error of writing `out`, from an I/O error.
fn write_error(out: &Path) -> impl Fn(std::io::Error) -> MergeError + '_ {
    |source| MergeError::Write {
        path: out.to_path_buf(),
        source,
    }
}

/// The temporary file the result is written to, in `out`'s directory
/// (returned too) so that it can be renamed over `out`.
fn temp_file_beside(out: &Path) -> Result<(tempfile::NamedTempFile, &Path), MergeError> {
    let write_err = write_error(out);
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = out.file_name().ok_or_else(|| {
        write_err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the output path names no file",
        ))
    })?;
    let prefix = format!(".{}.", name.to_string_lossy());
    let mut builder = tempfile::Builder::new();
    builder.prefix(&prefix).suffix(".partial");
    // A plain new file's permissions (0666 less the umask), not tempfile's 0600.
    #[cfg(unix)]
    builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
    let tmp = builder.tempfile_in(parent).map_err(&write_err)?;
    Ok((tmp, parent))
}

/// Writes the base copy's header, then each tensor of `plan` averaged over
/// the `contributors` (copy, weight) or taken from the base copy, to
/// `file`; the tensor bytes read and the number of tensors averaged.
fn write_tensors(
    file: &File,
    copies: &[Checkpoint],
    base_ckpt: &Checkpoint,
    plan: &[(&Entry, Option<Scalar>)],
    contributors: &[(usize, f64)],
    out: &Path,
    options: &MergeOptions,
) -> Result<(u64, usize), MergeError> {
    let write_err = write_error(out);
    let mut bufs = Buffers::default();
    let mut bytes_read = 0u64;
    let mut averaged = 0;
    let mut w = BufWriter::with_capacity(1 << 16, file);
    w.write_all(&base_ckpt.header).map_err(&write_err)?;
    for (entry, scalar) in plan {
        match scalar {
            Some(s) => {
                averaged += 1;
                let sources: Vec<(&Checkpoint, &Entry, f64)> = contributors
                    .iter()
                    .map(|&(i, wt)| {
                        let c = &copies[i];
                        // Checked by check_same_tensors.
                        let e = c.get(&entry.name).unwrap_or(entry);
                        (c, e, wt)
                    })
                    .collect();
                bytes_read += average(
                    *s,
                    entry.len,
                    &sources,
                    &mut w,
                    &mut bufs,
                    options.chunk_elements.max(1),
                )
                .map_err(|e| e.into_merge_error(out, &entry.name))?;
            }
            None => {
                bytes_read += take(
                    base_ckpt,
                    entry,
                    &mut w,
                    &mut bufs,
                    options.chunk_elements.max(1) * 4,
                )
                .map_err(|e| e.into_merge_error(out, &entry.name))?;
            }
        }
    }
    w.flush().map_err(&write_err)?;
    Ok((bytes_read, averaged))
}

/// Syncs the written `tmp` and renames it over `out` (in `parent`); the
/// size of the file written.
fn persist(tmp: tempfile::NamedTempFile, out: &Path, parent: &Path) -> Result<u64, MergeError> {
    let write_err = write_error(out);
    tmp.as_file().sync_all().map_err(&write_err)?;
    let bytes_written = tmp.as_file().metadata().map_err(&write_err)?.len();
    tmp.persist(out).map_err(|e| write_err(e.error))?;
    // Make the rename durable too. Best effort: `out` is complete either way.
    #[cfg(unix)]
    if let Ok(dir) = File::open(parent) {
        let _ = dir.sync_all();
    }
    Ok(bytes_written)
}

/// Whether `a` and `b` are the same existing file.
fn same_file(a: &Path, b: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        match (std::fs::metadata(a), std::fs::metadata(b)) {
            (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
            _ => false,
        }
    }
    #[cfg(not(unix))]
    {
        match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
            (Ok(x), Ok(y)) => x == y,
            _ => false,
        }
    }
}

/// Checks that every copy holds the first copy's tensors, shapes and dtypes.
fn check_same_tensors(copies: &[Checkpoint]) -> Result<(), MergeError> {
    let Some((reference, others)) = copies.split_first() else {
        return Ok(());
    };
    for copy in others {
        for r in &reference.entries {
            let Some(e) = copy.get(&r.name) else {
                return Err(MergeError::MissingTensor {
                    path: copy.path.clone(),
                    name: r.name.clone(),
                    reference: reference.path.clone(),
                });
            };
            // The dtype first: a different dtype often comes with a different shape.
            if e.dtype != r.dtype {
                return Err(MergeError::DtypeMismatch {
                    path: copy.path.clone(),
                    name: r.name.clone(),
                    dtype: e.dtype,
                    reference: reference.path.clone(),
                    reference_dtype: r.dtype,
                });
            }
            if e.shape != r.shape {
                return Err(MergeError::ShapeMismatch {
                    path: copy.path.clone(),
                    name: r.name.clone(),
                    shape: e.shape.clone(),
                    reference: reference.path.clone(),
                    reference_shape: r.shape.clone(),
                });
            }
        }
        if let Some(e) = copy
            .entries
            .iter()
            .find(|e| reference.get(&e.name).is_none())
        {
            return Err(MergeError::ExtraTensor {
                path: copy.path.clone(),
                name: e.name.clone(),
                reference: reference.path.clone(),
            });
        }
    }
    Ok(())
}

/// Scratch space, grown to the largest chunk met and reused.
#[derive(Debug, Default)]
struct Buffers {
    read: Vec<u8>,
    write: Vec<u8>,
    acc32: Vec<f32>,
    acc64: Vec<f64>,
    /// F16 tensors: one copy's chunk, decoded.
    halves: Vec<f16>,
    /// F16 tensors: the same, widened to f32.
    widened: Vec<f32>,
}

fn grow<T: Clone + Default>(v: &mut Vec<T>, n: usize) -> &mut [T] {
    if v.len() < n {
        v.resize(n, T::default());
    }
    &mut v[..n]
}

/// An I/O failure while streaming: on which side.
enum StreamError {
    Read(PathBuf, std::io::Error),
    Write(std::io::Error),
    /// The copy whose values are not all finite.
    NonFinite(PathBuf),
}

impl StreamError {
    fn into_merge_error(self, out: &Path, tensor: &str) -> MergeError {
        match self {
            Self::Read(path, source) => MergeError::Read { path, source },
            Self::NonFinite(path) => MergeError::NonFinite {
                path,
                name: tensor.to_string(),
            },
            Self::Write(source) => MergeError::Write {
                path: out.to_path_buf(),
                source,
            },
        }
    }
}

fn read_at(ckpt: &Checkpoint, offset: u64, buf: &mut [u8]) -> Result<(), StreamError> {
    let mut f = &ckpt.file;
    f.seek(SeekFrom::Start(offset))
        .and_then(|_| f.read_exact(buf))
        .map_err(|e| StreamError::Read(ckpt.path.clone(), e))
}

/// Copies `entry` from `ckpt` to `w`; returns the bytes read.
fn take(
    ckpt: &Checkpoint,
    entry: &Entry,
    w: &mut impl Write,
    bufs: &mut Buffers,
    chunk_bytes: usize,
) -> Result<u64, StreamError> {
    let mut pos = 0u64;
    while pos < entry.len {
        let n = chunk_bytes.min((entry.len - pos) as usize);
        let buf = grow(&mut bufs.read, n);
        read_at(ckpt, entry.start + pos, buf)?;
        w.write_all(buf).map_err(StreamError::Write)?;
        pos += n as u64;
    }
    Ok(entry.len)
}

/// Writes the weighted average of `sources` (each a tensor of `len` bytes
/// of `scalar`s, with its weight) to `w`; returns the bytes read.
fn average(
    scalar: Scalar,
    len: u64,
    sources: &[(&Checkpoint, &Entry, f64)],
    w: &mut impl Write,
    bufs: &mut Buffers,
    chunk_elements: usize,
) -> Result<u64, StreamError> {
    let size = scalar.size();
    let elements = len / size as u64;
    let mut pos = 0u64;
    while pos < elements {
        let m = chunk_elements.min((elements - pos) as usize);
        let bytes = m * size;
        for (k, &(ckpt, entry, weight)) in sources.iter().enumerate() {
            let first = k == 0;
            let buf = grow(&mut bufs.read, bytes);
            read_at(ckpt, entry.start + pos * size as u64, buf)?;
            let buf = &bufs.read[..bytes];
            match scalar {
                Scalar::F16 => {
                    let x = decode_f16(buf, &mut bufs.halves, &mut bufs.widened);
                    accumulate(grow(&mut bufs.acc32, m), x.iter().copied(), weight, first);
                }
                Scalar::Bf16 => accumulate(
                    grow(&mut bufs.acc32, m),
                    buf.as_chunks::<2>()
                        .0
                        .iter()
                        .map(|b| bf16::from_le_bytes(*b).to_f32()),
                    weight,
                    first,
                ),
                Scalar::F32 => accumulate(
                    grow(&mut bufs.acc32, m),
                    buf.as_chunks::<4>()
                        .0
                        .iter()
                        .map(|b| f32::from_le_bytes(*b)),
                    weight,
                    first,
                ),
                Scalar::F64 => accumulate64(grow(&mut bufs.acc64, m), buf, weight, first),
            }
            // The sum was finite before this copy (checked at each): a value
            // that is not now is this copy's, and would spread into the
            // average whatever its weight.
            let finite = match scalar {
                Scalar::F64 => bufs.acc64[..m].iter().all(|x| x.is_finite()),
                _ => bufs.acc32[..m].iter().all(|x| x.is_finite()),
            };
            if !finite {
                return Err(StreamError::NonFinite(ckpt.path.clone()));
            }
        }
        let out = grow(&mut bufs.write, bytes);
        match scalar {
            Scalar::F16 => {
                let h = grow(&mut bufs.halves, m);
                h.convert_from_f32_slice(&bufs.acc32[..m]);
                encode(h.iter(), out, |x| x.to_le_bytes());
            }
            Scalar::Bf16 => encode(bufs.acc32[..m].iter(), out, |x| {
                bf16::from_f32(*x).to_le_bytes()
            }),
            Scalar::F32 => encode(bufs.acc32[..m].iter(), out, |x| x.to_le_bytes()),
            Scalar::F64 => encode(bufs.acc64[..m].iter(), out, |x| x.to_le_bytes()),
        }
        w.write_all(out).map_err(StreamError::Write)?;
        pos += m as u64;
    }
    Ok(len * sources.len() as u64)
}

/// Decodes little-endian F16 `bytes` to f32 through half's slice conversion,
/// which uses F16C (x86) or FP16 (aarch64) where the CPU has them.
fn decode_f16<'a>(bytes: &[u8], halves: &mut Vec<f16>, widened: &'a mut Vec<f32>) -> &'a [f32] {
    let b = bytes.as_chunks::<2>().0;
    let h = grow(halves, b.len());
    for (d, b) in h.iter_mut().zip(b) {
        *d = f16::from_le_bytes(*b);
    }
    let x = grow(widened, b.len());
    h.convert_to_f32_slice(x);
    x
}

/// `acc = w x` (the first copy) or `acc += w x`, in f32.
#[inline]
fn accumulate(acc: &mut [f32], xs: impl Iterator<Item = f32>, weight: f64, first: bool) {
    let w = weight as f32;
    if first {
        for (a, x) in acc.iter_mut().zip(xs) {
            *a = w * x;
        }
    } else {
        for (a, x) in acc.iter_mut().zip(xs) {
            *a += w * x;
        }
    }
}

/// `acc = w x` (the first copy) or `acc += w x`, in f64.
fn accumulate64(acc: &mut [f64], bytes: &[u8], weight: f64, first: bool) {
    let xs = bytes.as_chunks::<8>().0;
    if first {
        for (a, &b) in acc.iter_mut().zip(xs) {
            *a = weight * f64::from_le_bytes(b);
        }
    } else {
        for (a, &b) in acc.iter_mut().zip(xs) {
            *a += weight * f64::from_le_bytes(b);
        }
    }
}

/// Writes `f(x)` for every `x` into `out`, `N` bytes each.
#[inline]
fn encode<'a, const N: usize, T: 'a>(
    xs: impl Iterator<Item = &'a T>,
    out: &mut [u8],
    f: impl Fn(&T) -> [u8; N],
) {
    for (o, x) in out.as_chunks_mut::<N>().0.iter_mut().zip(xs) {
        *o = f(x);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtype_classes() {
        assert_eq!(class(Dtype::F32), Class::Average(Scalar::F32));
        assert_eq!(class(Dtype::C64), Class::Average(Scalar::F32));
        assert_eq!(class(Dtype::BF16), Class::Average(Scalar::Bf16));
        assert_eq!(class(Dtype::I64), Class::Take);
        assert_eq!(class(Dtype::BOOL), Class::Take);
        assert_eq!(class(Dtype::F8_E4M3), Class::Unsupported);
        assert_eq!(class(Dtype::F4), Class::Unsupported);
    }

    #[test]
    fn first_copy_sets_then_others_add() {
        let mut acc = [0f32; 3];
        let xs = [1.0f32, -0.0, 3.0];
        accumulate(&mut acc, xs.into_iter(), 0.5, true);
        assert_eq!(acc, [0.5, -0.0, 1.5]);
        assert!(acc[1].is_sign_negative(), "-0 kept when every copy has -0");
        accumulate(&mut acc, xs.into_iter(), 0.5, false);
        assert_eq!(acc, [1.0, 0.0, 3.0]);
    }

    #[test]
    fn half_encodings_round_to_nearest_even() {
        // 1 + 2^-11 is halfway between f16 1.0 and its successor: ties to
        // even (down); 1 + 3 * 2^-11 is halfway to the next: ties to even (up).
        let xs = [1.0 + 2f32.powi(-11), 1.0 + 3.0 * 2f32.powi(-11)];
        let mut h = [f16::ZERO; 2];
        h.convert_from_f32_slice(&xs);
        assert_eq!(h.map(f16::to_bits), [0x3c00, 0x3c02]);
        let mut out = [0u8; 4];
        let xs = [1.0 + 2f32.powi(-8), 1.0 + 3.0 * 2f32.powi(-8)];
        encode(xs.iter(), &mut out, |x| bf16::from_f32(*x).to_le_bytes());
        assert_eq!(out, [0x80, 0x3f, 0x82, 0x3f]);
    }

    #[test]
    fn f16_slices_encode_like_scalars() {
        let xs: Vec<f32> = (0..u32::MAX / 4099)
            .map(|i| f32::from_bits(i * 4099))
            .collect();
        let mut h = vec![f16::ZERO; xs.len()];
        h.convert_from_f32_slice(&xs);
        for (x, g) in xs.iter().zip(&h) {
            let want = f16::from_f32(*x);
            assert!(
                g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
                "{x:e}"
            );
        }
    }

    #[test]
    fn f16_slices_decode_like_scalars() {
        let bits: Vec<u16> = (0..=u16::MAX).collect();
        let bytes: Vec<u8> = bits.iter().flat_map(|b| b.to_le_bytes()).collect();
        let (mut h, mut x) = (Vec::new(), Vec::new());
        let got = decode_f16(&bytes, &mut h, &mut x);
        for (&b, g) in bits.iter().zip(got) {
            let want = f16::from_bits(b).to_f32();
            assert!(
                g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
                "{b:#06x}"
            );
        }
    }
}
