//! Merges small safetensors files and checks the result element by element
//! against a straightforward reference, and every refusal.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::collections::HashMap;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use hadar_checkpoint::{merge, merge_with, Dtype, MergeError, MergeOptions};
use half::{bf16, f16};
use proptest::prelude::*;
use safetensors::tensor::TensorView;
use safetensors::SafeTensors;

/// A tensor to write: name, dtype, shape, little-endian bytes.
type T = (String, Dtype, Vec<usize>, Vec<u8>);

fn f32s(name: &str, shape: &[usize], xs: &[f32]) -> T {
    let b = xs.iter().flat_map(|x| x.to_le_bytes()).collect();
    (name.into(), Dtype::F32, shape.to_vec(), b)
}
fn f64s(name: &str, shape: &[usize], xs: &[f64]) -> T {
    let b = xs.iter().flat_map(|x| x.to_le_bytes()).collect();
    (name.into(), Dtype::F64, shape.to_vec(), b)
}
fn f16s(name: &str, shape: &[usize], xs: &[f32]) -> T {
    let b = xs
        .iter()
        .flat_map(|x| f16::from_f32(*x).to_le_bytes())
        .collect();
    (name.into(), Dtype::F16, shape.to_vec(), b)
}
fn bf16s(name: &str, shape: &[usize], xs: &[f32]) -> T {
    let b = xs
        .iter()
        .flat_map(|x| bf16::from_f32(*x).to_le_bytes())
        .collect();
    (name.into(), Dtype::BF16, shape.to_vec(), b)
}
fn i64s(name: &str, xs: &[i64]) -> T {
    let b = xs.iter().flat_map(|x| x.to_le_bytes()).collect();
    (name.into(), Dtype::I64, vec![xs.len()], b)
}
fn raw(name: &str, dtype: Dtype, bytes: &[u8]) -> T {
    (name.into(), dtype, vec![bytes.len()], bytes.to_vec())
}

fn write(path: &Path, tensors: &[T], metadata: Option<&[(&str, &str)]>) {
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    let meta = metadata.map(|m| {
        m.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<HashMap<_, _>>()
    });
    safetensors::serialize_to_file(views, meta, path).unwrap();
}

/// Reads a tensor of the file back: dtype, shape, bytes.
fn read(path: &Path, name: &str) -> (Dtype, Vec<usize>, Vec<u8>) {
    let bytes = std::fs::read(path).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let t = st.tensor(name).unwrap();
    (t.dtype(), t.shape().to_vec(), t.data().to_vec())
}

fn read_metadata(path: &Path) -> Option<HashMap<String, String>> {
    let bytes = std::fs::read(path).unwrap();
    let (_, m) = SafeTensors::read_metadata(&bytes).unwrap();
    m.metadata().clone()
}

fn as_f32(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// The reference: `acc = w1 x1; acc += w2 x2; ...` over copies with
/// iterations, in f32, `w = iters / total` (computed in f64).
fn reference_f32(xs: &[Vec<f32>], iters: &[u64]) -> Vec<f32> {
    let total: u64 = iters.iter().sum();
    let mut acc: Option<Vec<f32>> = None;
    for (x, &n) in xs.iter().zip(iters) {
        if n == 0 {
            continue;
        }
        let w = (n as f64 / total as f64) as f32;
        acc = Some(match acc {
            None => x.iter().map(|v| w * v).collect(),
            Some(a) => a.iter().zip(x).map(|(a, v)| a + w * v).collect(),
        });
    }
    acc.unwrap()
}

/// The exact weighted mean in f64, to check the reference means what it says.
fn exact_mean(xs: &[Vec<f32>], iters: &[u64]) -> Vec<f64> {
    let total: u64 = iters.iter().sum();
    (0..xs[0].len())
        .map(|j| {
            xs.iter()
                .zip(iters)
                .map(|(x, &n)| x[j] as f64 * n as f64)
                .sum::<f64>()
                / total as f64
        })
        .collect()
}

struct Dir(tempfile::TempDir);
impl Dir {
    fn new() -> Self {
        Self(tempfile::tempdir().unwrap())
    }
    fn p(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }
    /// Files in the directory (to see that nothing half-written is left).
    fn files(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.0.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

const A: [f32; 6] = [1.0, -2.0, 0.1, 1e-3, 3.25e4, -0.0];
const B: [f32; 6] = [3.0, 2.0, 0.7, -5e-4, -1.0e4, -0.0];
const C: [f32; 6] = [0.5, 0.25, -0.3, 2.0, 7.0, -0.0];

#[test]
fn f32_weighted_by_iterations() {
    let d = Dir::new();
    let xs = [A.to_vec(), B.to_vec(), C.to_vec()];
    let iters = [300, 100, 600];
    for (i, x) in xs.iter().enumerate() {
        write(&d.p(&format!("c{i}")), &[f32s("w", &[2, 3], x)], None);
    }
    let inputs: Vec<_> = (0..3).map(|i| (d.p(&format!("c{i}")), iters[i])).collect();
    let report = merge(&inputs, &d.p("out")).unwrap();
    let (dtype, shape, bytes) = read(&d.p("out"), "w");
    assert_eq!((dtype, shape), (Dtype::F32, vec![2, 3]));
    let got = as_f32(&bytes);
    let want = reference_f32(&xs, &iters);
    for (j, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g.to_bits(), w.to_bits(), "element {j}: {g} vs {w}");
    }
    for (g, m) in got.iter().zip(exact_mean(&xs, &iters)) {
        assert!(
            (*g as f64 - m).abs() <= 1e-6 * m.abs().max(1.0),
            "{g} vs {m}"
        );
    }
    assert!(got[5].is_sign_negative(), "-0 everywhere stays -0");
    assert_eq!(report.tensors, 1);
    assert_eq!(report.averaged, 1);
    assert_eq!(report.copied, 0);
    assert_eq!(report.weights, vec![0.3, 0.1, 0.6]);
    assert_eq!(report.base, d.p("c2"));
    assert_eq!(report.bytes_read, 3 * 24);
    assert_eq!(
        report.bytes_written,
        std::fs::metadata(d.p("out")).unwrap().len()
    );
    assert_eq!(d.files(), ["c0", "c1", "c2", "out"]);
}

#[test]
fn f16_and_bf16_round_trip() {
    let d = Dir::new();
    let xs = [A.to_vec(), B.to_vec()];
    let iters = [7, 3];
    for (i, x) in xs.iter().enumerate() {
        write(
            &d.p(&format!("c{i}")),
            &[f16s("h", &[6], x), bf16s("b", &[3, 2], x)],
            None,
        );
    }
    let inputs: Vec<_> = (0..2).map(|i| (d.p(&format!("c{i}")), iters[i])).collect();
    merge(&inputs, &d.p("out")).unwrap();

    // Decode, average in f32, round to nearest: f16 and bf16 alike.
    let f16_codec = Half {
        encode: |v| f16::from_f32(v).to_bits(),
        decode: |b| f16::from_bits(b).to_f32(),
    };
    check_half(
        &d.p("out"),
        "h",
        (Dtype::F16, vec![6]),
        f16_codec,
        &xs,
        &iters,
        1e-3,
    );
    let bf16_codec = Half {
        encode: |v| bf16::from_f32(v).to_bits(),
        decode: |b| bf16::from_bits(b).to_f32(),
    };
    check_half(
        &d.p("out"),
        "b",
        (Dtype::BF16, vec![3, 2]),
        bf16_codec,
        &xs,
        &iters,
        8e-3,
    );
}

/// A 16-bit float format: f32 to its bits (rounding to nearest) and back.
#[derive(Clone, Copy)]
struct Half {
    encode: fn(f32) -> u16,
    decode: fn(u16) -> f32,
}

/// Checks tensor `name` of the merge at `out`: its dtype and shape, that it is
/// the inputs `xs` (as stored in `half`) averaged in f32 with weights `iters`
/// and rounded once, and that it is within `tolerance` of the exact mean.
fn check_half(
    out: &Path,
    name: &str,
    want_meta: (Dtype, Vec<usize>),
    half: Half,
    xs: &[Vec<f32>],
    iters: &[u64],
    tolerance: f64,
) {
    let dec: Vec<Vec<f32>> = xs
        .iter()
        .map(|x| x.iter().map(|v| (half.decode)((half.encode)(*v))).collect())
        .collect();
    let want: Vec<u16> = reference_f32(&dec, iters)
        .iter()
        .map(|v| (half.encode)(*v))
        .collect();
    let (dtype, shape, bytes) = read(out, name);
    assert_eq!((dtype, shape), want_meta);
    let got: Vec<u16> = bytes
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    assert_eq!(got, want);
    for (g, m) in got.iter().zip(exact_mean(&dec, iters)) {
        let g = f64::from((half.decode)(*g));
        assert!((g - m).abs() <= tolerance * m.abs().max(1e-4), "{g} vs {m}");
    }
}

#[test]
fn half_precision_rounds_once_from_f32() {
    // 1 and 1 + 2^-10 (adjacent f16s) weighted 3:1 give 1 + 2^-12 exactly in
    // f32, which rounds to 1.0 in f16; 1:3 gives 1 + 3 * 2^-12, which rounds up.
    let d = Dir::new();
    let lo = 1.0f32;
    let hi = 1.0 + 2f32.powi(-10);
    write(&d.p("a"), &[f16s("h", &[2], &[lo, hi])], None);
    write(&d.p("b"), &[f16s("h", &[2], &[hi, lo])], None);
    merge(&[(d.p("a"), 3), (d.p("b"), 1)], &d.p("out")).unwrap();
    let (_, _, bytes) = read(&d.p("out"), "h");
    assert_eq!(f16::from_le_bytes([bytes[0], bytes[1]]).to_f32(), lo);
    assert_eq!(f16::from_le_bytes([bytes[2], bytes[3]]).to_f32(), hi);
}

#[test]
fn f64_averaged_in_f64() {
    let d = Dir::new();
    let a = [1.0f64 / 3.0, 1e300, -2.5, 1e-300];
    let b = [2.0f64 / 3.0, -1e300, 4.5, 3e-300];
    write(&d.p("a"), &[f64s("x", &[4], &a)], None);
    write(&d.p("b"), &[f64s("x", &[4], &b)], None);
    merge(&[(d.p("a"), 1), (d.p("b"), 2)], &d.p("out")).unwrap();
    let (dtype, _, bytes) = read(&d.p("out"), "x");
    assert_eq!(dtype, Dtype::F64);
    let got: Vec<f64> = bytes
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let (wa, wb) = (1.0 / 3.0, 2.0 / 3.0);
    let want: Vec<f64> = a.iter().zip(&b).map(|(x, y)| wa * x + wb * y).collect();
    assert_eq!(got, want);
    assert!(got[3] > 0.0, "no underflow: not computed in f32");
}

#[test]
fn c64_averaged_per_part() {
    let d = Dir::new();
    let a: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let b: Vec<u8> = [3.0f32, 6.0, -3.0, 0.0]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    write(&d.p("a"), &[("z".into(), Dtype::C64, vec![2], a)], None);
    write(&d.p("b"), &[("z".into(), Dtype::C64, vec![2], b)], None);
    merge(&[(d.p("a"), 1), (d.p("b"), 1)], &d.p("out")).unwrap();
    let (dtype, shape, bytes) = read(&d.p("out"), "z");
    assert_eq!((dtype, shape), (Dtype::C64, vec![2]));
    assert_eq!(as_f32(&bytes), [2.0, 4.0, 0.0, 2.0]);
}

#[test]
fn integers_and_bools_come_from_the_copy_with_most_iterations() {
    let d = Dir::new();
    let file = |step: i64, mask: u8, x: f32| {
        vec![
            i64s("step", &[step]),
            raw("mask", Dtype::BOOL, &[mask, 1 - mask]),
            raw("tokens", Dtype::U8, &[mask, 9]),
            (
                "idx".into(),
                Dtype::I32,
                vec![2],
                [step as i32, -1]
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect(),
            ),
            f32s("w", &[1], &[x]),
        ]
    };
    write(&d.p("a"), &file(10, 0, 1.0), None);
    write(&d.p("b"), &file(30, 1, 2.0), None);
    write(&d.p("c"), &file(20, 0, 4.0), None);
    let r = merge(
        &[(d.p("a"), 10), (d.p("b"), 30), (d.p("c"), 20)],
        &d.p("out"),
    )
    .unwrap();
    assert_eq!(r.base, d.p("b"));
    assert_eq!((r.tensors, r.averaged, r.copied), (5, 1, 4));
    let out = d.p("out");
    assert_eq!(read(&out, "step").2, 30i64.to_le_bytes());
    assert_eq!(read(&out, "mask"), (Dtype::BOOL, vec![2], vec![1, 0]));
    assert_eq!(read(&out, "tokens").2, [1, 9]);
    assert_eq!(read(&out, "idx").0, Dtype::I32);
    assert_eq!(
        as_f32(&read(&out, "w").2),
        reference_f32(&[vec![1.0], vec![2.0], vec![4.0]], &[10, 30, 20])
    );

    // A tie goes to the first copy given with the most iterations.
    merge(
        &[(d.p("a"), 5), (d.p("c"), 30), (d.p("b"), 30)],
        &d.p("out"),
    )
    .unwrap();
    assert_eq!(read(&out, "step").2, 20i64.to_le_bytes());
}

#[test]
fn metadata_and_layout_of_the_base_copy_are_kept() {
    let d = Dir::new();
    let tensors = |x: f32| {
        vec![
            f32s("a", &[1], &[x]),
            i64s("step", &[1]),
            f16s("z", &[2], &[x, x]),
        ]
    };
    write(
        &d.p("a"),
        &tensors(1.0),
        Some(&[("format", "pt"), ("round", "1")]),
    );
    write(
        &d.p("b"),
        &tensors(3.0),
        Some(&[("format", "pt"), ("round", "2")]),
    );
    merge(&[(d.p("a"), 1), (d.p("b"), 3)], &d.p("out")).unwrap();
    let m = read_metadata(&d.p("out")).unwrap();
    assert_eq!(m.get("round").map(String::as_str), Some("2"));
    assert_eq!(m.get("format").map(String::as_str), Some("pt"));
    // Same header, byte for byte, as the base copy; only the data differs.
    let out = std::fs::read(d.p("out")).unwrap();
    let b = std::fs::read(d.p("b")).unwrap();
    assert_eq!(out.len(), b.len());
    let n = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
    assert_eq!(out[..8 + n], b[..8 + n]);
    assert_eq!(as_f32(&read(&d.p("out"), "a").2), [2.5]);
}

#[test]
fn copies_may_order_their_tensors_differently() {
    // Hand-written headers: the same tensors at different offsets.
    let d = Dir::new();
    let file = |path: &Path, first: &str, second: &str, xs: [f32; 2]| {
        let header = format!(
            r#"{{"{first}":{{"dtype":"F32","shape":[1],"data_offsets":[0,4]}},"{second}":{{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}}}"#
        );
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend(header.as_bytes());
        bytes.extend(xs[0].to_le_bytes());
        bytes.extend(xs[1].to_le_bytes());
        std::fs::write(path, bytes).unwrap();
    };
    file(&d.p("a"), "x", "y", [1.0, 10.0]); // x = 1, y = 10
    file(&d.p("b"), "y", "x", [30.0, 3.0]); // y = 30, x = 3
    merge(&[(d.p("a"), 1), (d.p("b"), 1)], &d.p("out")).unwrap();
    assert_eq!(as_f32(&read(&d.p("out"), "x").2), [2.0]);
    assert_eq!(as_f32(&read(&d.p("out"), "y").2), [20.0]);
}

#[test]
fn chunking_does_not_change_the_result() {
    let d = Dir::new();
    let n = 1000;
    let xs: Vec<Vec<f32>> = (0..3)
        .map(|i| {
            (0..n)
                .map(|j| ((j * 7 + i * 13) % 101) as f32 / 7.0 - 5.0)
                .collect()
        })
        .collect();
    for (i, x) in xs.iter().enumerate() {
        write(
            &d.p(&format!("c{i}")),
            &[
                f32s("w", &[n], x),
                bf16s("b", &[n], x),
                i64s("s", &[i as i64; 37]),
            ],
            None,
        );
    }
    let inputs: Vec<_> = (0..3)
        .map(|i| (d.p(&format!("c{i}")), 10 + i as u64))
        .collect();
    merge(&inputs, &d.p("big")).unwrap();
    for chunk in [1, 3, 7, 999, 1000, 1001] {
        merge_with(
            &inputs,
            &d.p("small"),
            &MergeOptions {
                chunk_elements: chunk,
            },
        )
        .unwrap();
        assert_eq!(
            std::fs::read(d.p("small")).unwrap(),
            std::fs::read(d.p("big")).unwrap(),
            "chunk {chunk}"
        );
    }
    assert_eq!(
        as_f32(&read(&d.p("big"), "w").2),
        reference_f32(&xs, &[10, 11, 12])
    );
}

#[test]
fn one_copy_is_copied_byte_for_byte() {
    let d = Dir::new();
    write(
        &d.p("a"),
        &[
            f32s("w", &[3], &[1.0, f32::NAN, -0.0]),
            raw("f8", Dtype::F8_E4M3, &[1, 2]),
        ],
        Some(&[("k", "v")]),
    );
    let r = merge(&[(d.p("a"), 5)], &d.p("out")).unwrap();
    assert_eq!(
        std::fs::read(d.p("out")).unwrap(),
        std::fs::read(d.p("a")).unwrap()
    );
    assert_eq!((r.averaged, r.copied), (0, 2));
}

#[test]
fn copies_with_no_iterations_weigh_nothing() {
    let d = Dir::new();
    write(&d.p("a"), &[f32s("w", &[2], &[1.0, 2.0])], None);
    write(
        &d.p("z"),
        &[f32s("w", &[2], &[f32::INFINITY, f32::NAN])],
        None,
    );
    write(&d.p("b"), &[f32s("w", &[2], &[3.0, 4.0])], None);
    merge(&[(d.p("a"), 1), (d.p("z"), 0), (d.p("b"), 1)], &d.p("out")).unwrap();
    assert_eq!(as_f32(&read(&d.p("out"), "w").2), [2.0, 3.0]);
    // Only one copy with iterations: the result is that copy.
    merge(&[(d.p("z"), 0), (d.p("b"), 4)], &d.p("out")).unwrap();
    assert_eq!(
        std::fs::read(d.p("out")).unwrap(),
        std::fs::read(d.p("b")).unwrap()
    );
}

#[test]
fn empty_and_scalar_tensors() {
    let d = Dir::new();
    write(
        &d.p("a"),
        &[f32s("e", &[0, 3], &[]), f32s("s", &[], &[1.0])],
        None,
    );
    write(
        &d.p("b"),
        &[f32s("e", &[0, 3], &[]), f32s("s", &[], &[2.0])],
        None,
    );
    merge(&[(d.p("a"), 1), (d.p("b"), 1)], &d.p("out")).unwrap();
    assert_eq!(read(&d.p("out"), "e"), (Dtype::F32, vec![0, 3], vec![]));
    assert_eq!(
        read(&d.p("out"), "s"),
        (Dtype::F32, vec![], 1.5f32.to_le_bytes().to_vec())
    );
}

#[test]
fn an_existing_output_is_replaced() {
    let d = Dir::new();
    write(&d.p("a"), &[f32s("w", &[1], &[1.0])], None);
    write(&d.p("b"), &[f32s("w", &[1], &[3.0])], None);
    std::fs::write(d.p("out"), b"old").unwrap();
    merge(&[(d.p("a"), 1), (d.p("b"), 1)], &d.p("out")).unwrap();
    assert_eq!(as_f32(&read(&d.p("out"), "w").2), [2.0]);
    assert_eq!(d.files(), ["a", "b", "out"]);
    #[cfg(unix)]
    {
        // A plain file's permissions (as the umask makes them), not 0600.
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        std::fs::write(d.p("plain"), b"").unwrap();
        assert_eq!(mode(&d.p("out")), mode(&d.p("plain")));
    }
}

// Refusals: each leaves an existing output untouched and no temporary file.

/// Merges `inputs` into `dir/out` (which holds "old"), expects an error,
/// checks that `out` still holds "old" and that no other file appeared.
fn refused(d: &Dir, inputs: &[(PathBuf, u64)]) -> MergeError {
    std::fs::write(d.p("out"), b"old").unwrap();
    let before = d.files();
    let e = merge(inputs, &d.p("out")).unwrap_err();
    assert_eq!(std::fs::read(d.p("out")).unwrap(), b"old");
    assert_eq!(d.files(), before);
    assert!(!e.is_write_error());
    e
}

fn two(d: &Dir, a: &[T], b: &[T]) -> MergeError {
    write(&d.p("copy1.safetensors"), a, None);
    write(&d.p("copy2.safetensors"), b, None);
    refused(
        d,
        &[(d.p("copy1.safetensors"), 1), (d.p("copy2.safetensors"), 1)],
    )
}

#[test]
fn refuses_different_shapes() {
    let d = Dir::new();
    let e = two(
        &d,
        &[f32s("layer1.weight", &[4, 4], &[0.0; 16])],
        &[f32s("layer1.weight", &[4, 8], &[0.0; 32])],
    );
    assert!(matches!(e, MergeError::ShapeMismatch { .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        format!(
            "{}: tensor `layer1.weight` has shape [4, 8], {} has [4, 4]",
            d.p("copy2.safetensors").display(),
            d.p("copy1.safetensors").display()
        )
    );
    // Same element count, different shape: still refused.
    let e = two(
        &d,
        &[f32s("w", &[2, 3], &[0.0; 6])],
        &[f32s("w", &[3, 2], &[0.0; 6])],
    );
    assert!(matches!(e, MergeError::ShapeMismatch { .. }), "{e:?}");
}

#[test]
fn refuses_different_dtypes() {
    let d = Dir::new();
    let e = two(
        &d,
        &[f32s("w", &[2], &[0.0; 2])],
        &[f16s("w", &[2], &[0.0; 2])],
    );
    assert!(matches!(e, MergeError::DtypeMismatch { .. }), "{e:?}");
    assert!(e.to_string().contains("tensor `w` has dtype F16"), "{e}");
    assert!(e.to_string().contains("copy1.safetensors has F32"), "{e}");
    // Same bytes, different dtype and shape: the dtype is what is reported.
    let e = two(
        &d,
        &[f32s("w", &[2], &[0.0; 2])],
        &[bf16s("w", &[4], &[0.0; 4])],
    );
    assert!(matches!(e, MergeError::DtypeMismatch { .. }), "{e:?}");
}

#[test]
fn refuses_missing_and_extra_tensors() {
    let d = Dir::new();
    let e = two(
        &d,
        &[f32s("a", &[1], &[0.0]), f32s("b", &[1], &[0.0])],
        &[f32s("a", &[1], &[0.0])],
    );
    match &e {
        MergeError::MissingTensor { path, name, .. } => {
            assert_eq!((path, name.as_str()), (&d.p("copy2.safetensors"), "b"));
        }
        _ => panic!("{e:?}"),
    }
    assert!(e.to_string().contains("has no tensor `b`"), "{e}");
    let e = two(
        &d,
        &[f32s("a", &[1], &[0.0])],
        &[f32s("a", &[1], &[0.0]), f32s("c", &[1], &[0.0])],
    );
    assert!(
        matches!(&e, MergeError::ExtraTensor { name, .. } if name == "c"),
        "{e:?}"
    );
    // Different names altogether.
    let e = two(&d, &[f32s("a", &[1], &[0.0])], &[f32s("b", &[1], &[0.0])]);
    assert!(matches!(e, MergeError::MissingTensor { .. }), "{e:?}");
}

#[test]
fn refuses_zero_iterations_and_no_inputs() {
    let d = Dir::new();
    write(&d.p("a"), &[f32s("w", &[1], &[0.0])], None);
    write(&d.p("b"), &[f32s("w", &[1], &[0.0])], None);
    let e = refused(&d, &[(d.p("a"), 0), (d.p("b"), 0)]);
    assert!(matches!(e, MergeError::ZeroIterations), "{e:?}");
    let e = refused(&d, &[]);
    assert!(matches!(e, MergeError::NoInputs), "{e:?}");
}

#[test]
fn refuses_output_equal_to_an_input() {
    let d = Dir::new();
    write(&d.p("a"), &[f32s("w", &[1], &[1.0])], None);
    write(&d.p("b"), &[f32s("w", &[1], &[3.0])], None);
    let before = std::fs::read(d.p("b")).unwrap();
    for out in [d.p("b"), d.0.path().join(".").join("b")] {
        let e = merge(&[(d.p("a"), 1), (d.p("b"), 1)], &out).unwrap_err();
        assert!(matches!(e, MergeError::OutputIsInput { .. }), "{e:?}");
    }
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(d.p("b"), d.p("link")).unwrap();
        let e = merge(&[(d.p("a"), 1), (d.p("link"), 1)], &d.p("b")).unwrap_err();
        assert!(matches!(e, MergeError::OutputIsInput { .. }), "{e:?}");
    }
    assert_eq!(std::fs::read(d.p("b")).unwrap(), before);
}

#[test]
fn refuses_unreadable_and_invalid_files() {
    let d = Dir::new();
    write(&d.p("good"), &[f32s("w", &[2], &[1.0, 2.0])], None);
    let good = std::fs::read(d.p("good")).unwrap();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", vec![], "shorter than the 8-byte header length"),
        (
            "short",
            vec![1, 2, 3],
            "shorter than the 8-byte header length",
        ),
        (
            "huge",
            u64::MAX.to_le_bytes().to_vec(),
            "over the format's limit",
        ),
        (
            "past",
            [100u64.to_le_bytes().as_slice(), b"{}"].concat(),
            "runs past the end",
        ),
        (
            "json",
            [4u64.to_le_bytes().as_slice(), b"{{{{"].concat(),
            "bad header",
        ),
        (
            "truncated",
            good[..good.len() - 1].to_vec(),
            "header describes 8 bytes",
        ),
        (
            "longer",
            [good.as_slice(), &[0]].concat(),
            "the file holds 9",
        ),
        (
            "offsets",
            {
                let h = br#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}"#;
                [(h.len() as u64).to_le_bytes().as_slice(), h, &[0; 4]].concat()
            },
            "bad header",
        ),
    ];
    for (name, bytes, why) in cases {
        std::fs::write(d.p(name), &bytes).unwrap();
        let e = refused(&d, &[(d.p("good"), 1), (d.p(name), 1)]);
        match &e {
            MergeError::Invalid { path, reason } => {
                assert_eq!(path, &d.p(name));
                assert!(reason.contains(why), "{name}: {reason}");
            }
            _ => panic!("{name}: {e:?}"),
        }
        assert!(
            e.to_string().contains("is not a valid safetensors file"),
            "{e}"
        );
    }
    let e = refused(&d, &[(d.p("good"), 1), (d.p("missing"), 1)]);
    assert!(
        matches!(&e, MergeError::Read { path, .. } if path == &d.p("missing")),
        "{e:?}"
    );
    let e = refused(&d, &[(d.p("good"), 1), (d.0.path().to_path_buf(), 1)]);
    assert!(
        matches!(&e, MergeError::Read { .. } | MergeError::Invalid { .. }),
        "{e:?}"
    );
}

#[test]
fn refuses_to_average_fp8() {
    let d = Dir::new();
    let e = two(
        &d,
        &[raw("q", Dtype::F8_E4M3, &[1, 2]), f32s("w", &[1], &[0.0])],
        &[raw("q", Dtype::F8_E4M3, &[3, 4]), f32s("w", &[1], &[0.0])],
    );
    assert!(
        matches!(&e, MergeError::UnsupportedDtype { name, dtype: Dtype::F8_E4M3, .. } if name == "q"),
        "{e:?}"
    );
    assert!(e.to_string().contains("cannot average"), "{e}");
}

#[test]
fn write_failures_are_write_errors() {
    let d = Dir::new();
    write(&d.p("a"), &[f32s("w", &[1], &[1.0])], None);
    let e = merge(&[(d.p("a"), 1)], &d.p("no/such/dir/out")).unwrap_err();
    assert!(e.is_write_error(), "{e:?}");
    assert!(e.to_string().starts_with("cannot write"), "{e}");
    assert_eq!(d.files(), ["a"]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Random small F32 tensors, 1 to 4 copies, random iterations and chunk
    /// sizes: the merge equals the reference bit for bit.
    #[test]
    fn weighted_average_matches_reference(
        n in 0usize..40,
        copies in prop::collection::vec(
            (0u64..1_000_000, prop::collection::vec(-1e6f32..1e6, 40)),
            1..5,
        ),
        chunk in 1usize..50,
    ) {
        prop_assume!(copies.iter().any(|(it, _)| *it > 0));
        let d = Dir::new();
        let xs: Vec<Vec<f32>> = copies.iter().map(|(_, x)| x[..n].to_vec()).collect();
        let iters: Vec<u64> = copies.iter().map(|(it, _)| *it).collect();
        let inputs: Vec<_> = xs
            .iter()
            .enumerate()
            .map(|(i, x)| {
                let p = d.p(&format!("c{i}"));
                write(&p, &[f32s("w", &[n], x)], None);
                (p, iters[i])
            })
            .collect();
        merge_with(&inputs, &d.p("out"), &MergeOptions { chunk_elements: chunk }).unwrap();
        let got = as_f32(&read(&d.p("out"), "w").2);
        let want = reference_f32(&xs, &iters);
        prop_assert_eq!(
            got.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            want.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        );
        let scale = xs.iter().flatten().fold(1.0f64, |m, x| m.max(x.abs() as f64));
        for (g, m) in got.iter().zip(exact_mean(&xs, &iters)) {
            prop_assert!((*g as f64 - m).abs() <= 4.0 * xs.len() as f64 * f32::EPSILON as f64 * scale);
        }
    }
}

/// The output is renamed into place: a FIFO or directory there is refused,
/// not replaced (as root, a device node was); an input that is a FIFO is
/// refused unopened (opening it would wait for a writer forever).
#[cfg(unix)]
#[test]
fn refuses_an_output_or_input_that_is_not_a_regular_file() {
    let d = Dir::new();
    write(&d.p("a"), &[f32s("w", &[1], &[1.0])], None);
    write(&d.p("b"), &[f32s("w", &[1], &[3.0])], None);
    let fifo = d.p("fifo");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    std::fs::create_dir(d.p("dir")).unwrap();
    for out in [fifo.clone(), d.p("dir")] {
        let e = merge(&[(d.p("a"), 1), (d.p("b"), 1)], &out).unwrap_err();
        assert!(e.is_write_error(), "{e:?}");
        assert!(e.to_string().contains("not a regular file"), "{e}");
    }
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
    assert!(d.p("dir").is_dir());
    let e = merge(&[(d.p("a"), 1), (fifo, 1)], &d.p("out")).unwrap_err();
    assert!(e.to_string().contains("not a regular file"), "{e}");
}

/// A copy with NaN or infinite values is refused, named, at any weight
/// (a NaN at weight 1/101 made the whole average NaN).
#[test]
fn refuses_a_copy_with_values_that_are_not_finite() {
    let d = Dir::new();
    write(&d.p("a"), &[f32s("w", &[3], &[1.0, 2.0, 3.0])], None);
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        write(&d.p("b"), &[f32s("w", &[3], &[1.0, bad, 3.0])], None);
        let e = merge(&[(d.p("a"), 100), (d.p("b"), 1)], &d.p("out")).unwrap_err();
        match &e {
            MergeError::NonFinite { path, name } => {
                assert_eq!((path, name.as_str()), (&d.p("b"), "w"), "{e}");
            }
            other => panic!("{bad}: expected NonFinite, got {other:?}"),
        }
        assert!(!d.p("out").exists(), "nothing written");
    }
}

#[test]
fn the_step_is_set_in_place_and_only_where_its_dtype_holds_it() {
    use hadar_checkpoint::{read_step, write_step};
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.safetensors");
    write(
        &p,
        &[f32s("w", &[2], &[1.0, 2.0]), i64s("step", &[446])],
        None,
    );
    assert_eq!(read_step(&p).unwrap(), Some(446));
    assert!(write_step(&p, 800).unwrap());
    assert_eq!(read_step(&p).unwrap(), Some(800));
    // The rest of the file is untouched.
    assert_eq!(read(&p, "w").2, f32s("w", &[2], &[1.0, 2.0]).3);
    // An I32 step that cannot hold it, and a file without a step: left alone.
    let q = dir.path().join("i32.safetensors");
    let seven = (
        "step".to_string(),
        Dtype::I32,
        vec![1],
        7i32.to_le_bytes().to_vec(),
    );
    write(&q, &[seven], None);
    assert!(!write_step(&q, u64::from(u32::MAX)).unwrap());
    assert_eq!(read_step(&q).unwrap(), Some(7));
    let r = dir.path().join("none.safetensors");
    write(&r, &[f32s("w", &[1], &[1.0])], None);
    assert!(!write_step(&r, 5).unwrap());
}
