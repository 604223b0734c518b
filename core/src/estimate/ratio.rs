//! The ratio model: an unseen rate is a measured rate of the same job on
//! another GPU type times the ratio of the two types' speeds, learned from
//! every job measured on both. All of it in log space, with medians, so
//! that one wild measurement moves nothing.

/// The median of `values` (sorted in place); `None` when empty. An even
/// count gives the mean of the middle two.
pub fn median(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    Some(if n % 2 == 1 {
        values[n / 2]
    } else {
        let (a, b) = (values[n / 2 - 1], values[n / 2]);
        // (-inf + -inf) / 2 stays -inf; a finite and an infinite middle
        // pair means half the evidence says "cannot run": keep the finite.
        if a.is_finite() != b.is_finite() {
            if a.is_finite() {
                a
            } else {
                b
            }
        } else {
            (a + b) / 2.0
        }
    })
}

/// Type-to-type log ratios: `out[s * types + t]` is the median, over the
/// kinds measured on both `s` and `t` (finite rates), of
/// `ln rate(t) - ln rate(s)`; `None` where no kind was measured on both.
/// `logs[k][t]` is kind `k`'s measured log rate on type `t`.
pub fn type_ratios(logs: &[Vec<Option<f64>>], types: usize) -> Vec<Option<f64>> {
    let mut out = vec![None; types * types];
    for s in 0..types {
        out[s * types + s] = Some(0.0);
        for t in 0..types {
            if s == t {
                continue;
            }
            let mut diffs: Vec<f64> = logs
                .iter()
                .filter_map(|row| match (row[s], row[t]) {
                    (Some(a), Some(b)) if a.is_finite() && b.is_finite() => Some(b - a),
                    _ => None,
                })
                .collect();
            out[s * types + t] = median(&mut diffs);
        }
    }
    out
}

/// A kind's log rate on type `t` from its own log rates on other types
/// (`anchors`, indexed by type) and the type ratios: the median over the
/// anchors with a known ratio to `t`. `None` when no anchor has one.
pub fn through_ratios(anchors: &[Option<f64>], ratios: &[Option<f64>], t: usize) -> Option<f64> {
    let types = anchors.len();
    let mut guesses: Vec<f64> = anchors
        .iter()
        .enumerate()
        .filter_map(|(s, a)| {
            let a = (*a).filter(|a| a.is_finite())?;
            Some(a + ratios[s * types + t]?)
        })
        .collect();
    median(&mut guesses)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_ignore_one_outlier() {
        assert_eq!(median(&mut []), None);
        assert_eq!(median(&mut [3.0]), Some(3.0));
        assert_eq!(median(&mut [1.0, 100.0, 2.0]), Some(2.0));
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&mut [f64::NEG_INFINITY, 2.0]), Some(2.0));
    }

    #[test]
    fn ratios_are_medians_of_log_differences() {
        let l = |x: f64| Some(x.ln());
        // Three kinds on (v100, k80): k80 is half, a third, a quarter as fast.
        let logs = vec![
            vec![l(10.0), l(5.0)],
            vec![l(9.0), l(3.0)],
            vec![l(8.0), l(2.0)],
            vec![l(7.0), None],
        ];
        let r = type_ratios(&logs, 2);
        assert_eq!(r[0], Some(0.0));
        let third = r[1].unwrap();
        assert!((third.exp() - 1.0 / 3.0).abs() < 1e-12, "{}", third.exp());
        assert!((r[2].unwrap().exp() - 3.0).abs() < 1e-12);
        // The fourth kind, never on k80: 7 / 3.
        let guess = through_ratios(&logs[3], &r, 1).unwrap().exp();
        assert!((guess - 7.0 / 3.0).abs() < 1e-12, "{guess}");
    }

    #[test]
    fn no_shared_measurement_no_ratio() {
        let logs = vec![vec![Some(1.0), None], vec![None, Some(2.0)]];
        let r = type_ratios(&logs, 2);
        assert_eq!(r[1], None);
        assert_eq!(through_ratios(&logs[0], &r, 1), None);
    }
}
