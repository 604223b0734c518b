use super::*;

fn types() -> Vec<String> {
    ["v100", "p100", "k80"].map(String::from).to_vec()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9 * b.abs().max(1.0)
}

#[test]
fn a_measured_rate_is_the_median_of_the_latest_window() {
    let mut m = RateModel::default();
    let a = Kind::new("a", 1);
    for r in [10.0, 10.0, 1000.0, 10.0, 0.001] {
        m.observe(&a, "v100", r);
    }
    // Two outliers of five: the median stands.
    assert!(close(m.measured(&a, "v100").unwrap(), 10.0));
    assert_eq!(m.count(&a, "v100"), 5);
    // The window forgets: WINDOW fresh measurements of 20 replace them.
    for _ in 0..WINDOW {
        m.observe(&a, "v100", 20.0);
    }
    assert!(close(m.measured(&a, "v100").unwrap(), 20.0));
    assert_eq!(m.count(&a, "v100"), 5 + WINDOW as u64);
    // Nonsense is dropped.
    m.observe(&a, "v100", f64::NAN);
    m.observe(&a, "v100", -1.0);
    assert_eq!(m.count(&a, "v100"), 5 + WINDOW as u64);
}

#[test]
fn unseen_rates_come_through_type_ratios() {
    let mut m = RateModel::default();
    let (a, b, c) = (Kind::new("a", 1), Kind::new("b", 1), Kind::new("c", 2));
    // a: v100 10, k80 5; b: v100 4, p100 3. k80/v100 = 1/2, p100/v100 = 3/4.
    m.observe(&a, "v100", 10.0);
    m.observe(&a, "k80", 5.0);
    m.observe(&b, "v100", 4.0);
    m.observe(&b, "p100", 3.0);
    let kinds = vec![a.clone(), b.clone(), c.clone()];
    let e = m.estimate(&kinds, &types());
    assert_eq!(e.get(0, 0).source, Source::Measured);
    // b on k80: 4 * 1/2.
    let bk = e.get(1, 2);
    assert_eq!(bk.source, Source::Ratio);
    assert!(close(bk.rate, 2.0), "{bk:?}");
    // a on p100: 10 * 3/4.
    assert!(close(e.get(0, 1).rate, 7.5));
    // c, gang of 2, never measured and no kind of its size: the median of
    // every kind measured on the type (v100: 10 and 4 -> exp of mean log).
    let cv = e.get(2, 0);
    assert_eq!(cv.source, Source::Prior);
    assert!(close(cv.rate, (40.0f64).sqrt()), "{cv:?}");
}

#[test]
fn a_given_rate_holds_until_measured_and_anchors_ratios() {
    let mut m = RateModel::default();
    let (a, b) = (Kind::new("a", 1), Kind::new("b", 1));
    m.observe(&a, "v100", 10.0);
    m.observe(&a, "k80", 2.0);
    m.give(&b, "v100", 6.0);
    let e = m.estimate(&[a.clone(), b.clone()], &types());
    assert_eq!(
        e.get(1, 0),
        Estimate {
            rate: 6.0,
            source: Source::Given
        }
    );
    // b on k80 from its given v100 rate: 6 / 5.
    assert!(close(e.get(1, 2).rate, 1.2));
    assert_eq!(e.get(1, 2).source, Source::Ratio);
    // Measured wins.
    m.observe(&b, "v100", 8.0);
    let e = m.estimate(&[a, b], &types());
    assert_eq!(e.get(1, 0).source, Source::Measured);
    assert!(close(e.get(1, 0).rate, 8.0));
}

#[test]
fn without_a_ratio_a_kind_keeps_its_own_rate_and_nothing_gives_one() {
    let mut m = RateModel::default();
    let a = Kind::new("a", 1);
    let e = m.estimate(std::slice::from_ref(&a), &types());
    assert_eq!(
        e.get(0, 1),
        Estimate {
            rate: 1.0,
            source: Source::Prior
        }
    );
    m.observe(&a, "v100", 3.0);
    let e = m.estimate(std::slice::from_ref(&a), &types());
    assert_eq!(e.get(0, 2).source, Source::Ratio);
    assert!(close(e.get(0, 2).rate, 3.0));
}

#[test]
fn a_round_without_progress_means_it_cannot_run_there() {
    let mut m = RateModel::default();
    let a = Kind::new("a", 1);
    m.observe(&a, "k80", 0.0);
    let e = m.estimate(std::slice::from_ref(&a), &types());
    assert_eq!(
        e.get(0, 2),
        Estimate {
            rate: 0.0,
            source: Source::Measured
        }
    );
    // Zero rates teach no ratio.
    m.observe(&a, "v100", 5.0);
    let b = Kind::new("b", 1);
    m.observe(&b, "v100", 2.0);
    let e = m.estimate(&[a, b], &types());
    assert_eq!(e.get(1, 2).source, Source::Ratio);
    assert!(close(e.get(1, 2).rate, 2.0));
}

#[test]
fn share_factors_are_measured_per_pair_else_additive_in_log_space() {
    let mut m = RateModel::default();
    let (a, b, c) = (Kind::new("a", 1), Kind::new("b", 1), Kind::new("c", 1));
    assert_eq!(
        m.sharing().factor(&a, "b", "v100", 10.0, 0.55),
        (0.55, false)
    );
    for (k, r) in [(&a, 10.0), (&b, 10.0), (&c, 10.0)] {
        m.observe(k, "v100", r);
    }
    // a keeps 0.8 beside b, 0.5 beside c; b keeps 0.4 beside c.
    m.observe_pair(&a, "b", "v100", 8.0);
    m.observe_pair(&a, "c", "v100", 5.0);
    m.observe_pair(&b, "c", "v100", 4.0);
    let s = m.sharing();
    assert!(s.any());
    let (f, measured) = s.factor(&a, "b", "v100", 10.0, 0.55);
    assert!(measured && close(f, 0.8), "{f}");
    // b beside a, never measured: b's row (0.4) times a's column (a was
    // never beside anyone measured: no column) -> the row alone.
    let (f, measured) = s.factor(&b, "a", "v100", 10.0, 0.55);
    assert!(!measured && close(f, 0.4), "{f}");
    // c beside b: no row for c; b's column holds a's 0.8.
    let (f, _) = s.factor(&c, "b", "v100", 10.0, 0.55);
    assert!(close(f, 0.8), "{f}");
    // b beside b: row of b (0.4) * column of b (0.8) / median of all (0.5).
    let (f, _) = s.factor(&b, "b", "v100", 10.0, 0.55);
    assert!(close(f, 0.4 * 0.8 / 0.5), "{f}");
}

#[test]
fn a_rate_alone_is_inferred_from_rates_beside_others() {
    let mut m = RateModel::default();
    let (a, b, g) = (Kind::new("a", 1), Kind::new("b", 1), Kind::new("guest", 1));
    let types = ["v100".to_string(), "k80".to_string()];
    // Nothing measured on v100 beside anyone yet: time-slicing's half.
    m.observe(&g, "k80", 1.0);
    m.observe_pair(&g, "a", "v100", 6.0);
    let e = m.estimate(std::slice::from_ref(&g), &types);
    assert_eq!(e.get(0, 0).source, Source::Shared);
    assert!(
        close(e.get(0, 0).rate, 6.0 / SHARE_PRIOR),
        "{:?}",
        e.get(0, 0)
    );
    // Pairs measured against rates alone: a keeps 0.8 beside b, b 0.5
    // beside a; the median factor (0.5 and 0.8: 0.632 in log space) is
    // the guest's too; two pairs of the guest: the median of its rates.
    m.observe(&a, "v100", 10.0);
    m.observe(&b, "v100", 10.0);
    m.observe_pair(&a, "b", "v100", 8.0);
    m.observe_pair(&b, "a", "v100", 5.0);
    m.observe_pair(&g, "b", "v100", 9.0);
    let e = m.estimate(std::slice::from_ref(&g), &types);
    let factor = (0.8f64.ln() + 0.5f64.ln()) / 2.0;
    let want = ((6.0f64.ln() + 9.0f64.ln()) / 2.0 - factor).exp();
    assert!(
        close(e.get(0, 0).rate, want),
        "{} vs {want}",
        e.get(0, 0).rate
    );
    // Never below a rate it ran at beside another job: where sharing costs
    // nothing (factor 1), pairs at 2 and 8 put it at 8, not at their 4.
    let mut free = RateModel::default();
    free.observe(&a, "v100", 10.0);
    free.observe_pair(&a, "b", "v100", 10.0);
    free.observe_pair(&g, "a", "v100", 2.0);
    free.observe_pair(&g, "b", "v100", 8.0);
    let e = free.estimate(std::slice::from_ref(&g), &types);
    assert!(close(e.get(0, 0).rate, 8.0), "{:?}", e.get(0, 0));
    // A rate the user gave is their word until measured, pairs or not.
    let mut given = m.clone();
    given.give(&g, "v100", 3.0);
    let e = given.estimate(std::slice::from_ref(&g), &types);
    assert_eq!(e.get(0, 0).source, Source::Given);
    assert!(close(e.get(0, 0).rate, 3.0));
    // Measured alone, the measurement is what counts.
    m.observe(&g, "v100", 7.0);
    let e = m.estimate(&[g], &types);
    assert_eq!(e.get(0, 0).source, Source::Measured);
    assert!(close(e.get(0, 0).rate, 7.0));
}

#[test]
fn estimates_move_by_relative_change_or_source() {
    let mut m = RateModel::default();
    let a = Kind::new("a", 1);
    m.observe(&a, "v100", 10.0);
    let before = m.estimate(std::slice::from_ref(&a), &types());
    m.observe(&a, "v100", 10.5);
    let after = m.estimate(std::slice::from_ref(&a), &types());
    // Median of 10 and 10.5: +2.5%.
    assert!(!after.moved(&before, 0.1));
    assert!(after.moved(&before, 0.01));
    m.observe(&a, "k80", 3.0);
    let later = m.estimate(std::slice::from_ref(&a), &types());
    assert!(later.moved(&after, 0.5), "k80 went from ratio to measured");
}

#[test]
fn the_model_round_trips_through_json() {
    let mut m = RateModel::default();
    m.observe(&Kind::new("a", 2), "v100", 3.0);
    m.give(&Kind::new("b", 1), "k80", 1.0);
    m.observe_pair(&Kind::new("a", 2), "c", "v100", 1.5);
    let text = serde_json::to_string(&m).unwrap();
    let back: RateModel = serde_json::from_str(&text).unwrap();
    assert_eq!(back, m);
}

#[test]
fn a_rate_of_zero_given_means_never_there() {
    let (a, b) = (Kind::new("a", 1), Kind::new("b", 1));
    let mut m = RateModel::default();
    m.give(&a, "v100", 4.0);
    m.give(&a, "k80", 0.0);
    m.give(&b, "v100", 2.0);
    m.give(&b, "k80", 1.0);
    let types = ["v100".to_string(), "k80".to_string()];
    let e = m.estimate(&[a, b], &types);
    assert_eq!(e.get(0, 1).rate, 0.0);
    assert_eq!(e.get(0, 1).source, Source::Given);
    // ... and it does not drag the type ratio: b's k80 stays as given.
    assert!(close(e.get(1, 1).rate, 1.0));
}
