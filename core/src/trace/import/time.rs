//! The traces' time stamps, as seconds.
//!
//! Philly and Helios write local times with no zone (`2017-10-07 01:12:09`),
//! Acme ISO 8601 with an offset (`2023-03-01 00:18:22+08:00`). Only
//! differences matter to an import (arrivals and run times), so a time with
//! no zone is counted as if it were UTC: right except across a change of
//! daylight saving time, which shifts a difference by the hour the trace
//! does not tell (docs/traces.md says so for Philly).

/// Seconds since 1970-01-01 of `YYYY-MM-DD[ T]HH:MM:SS[.fff][Z|±HH:MM]`;
/// an offset is applied, a time with none taken as UTC. `None` when it is
/// not such a time.
pub fn seconds(text: &str) -> Option<f64> {
    let t = text.trim();
    let (date, rest) = (t.get(..10)?, t.get(10..)?);
    let sep = rest.chars().next()?;
    if sep != ' ' && sep != 'T' {
        return None;
    }
    let rest = &rest[1..];
    let (clock, offset_s) = split_offset(rest)?;
    let mut d = date.split('-');
    let year: i64 = number(d.next()?, 4)?;
    let month: i64 = number(d.next()?, 2)?;
    let day: i64 = number(d.next()?, 2)?;
    if d.next().is_some() || !(1..=12).contains(&month) || day < 1 || day > days_in(year, month) {
        return None;
    }
    let (hms, fraction) = match clock.split_once('.') {
        Some((hms, f)) if !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()) => {
            (hms, format!("0.{f}").parse::<f64>().ok()?)
        }
        Some(_) => return None,
        None => (clock, 0.0),
    };
    let mut c = hms.split(':');
    let h: i64 = number(c.next()?, 2)?;
    let m: i64 = number(c.next()?, 2)?;
    let s: i64 = number(c.next()?, 2)?;
    if c.next().is_some() || h > 23 || m > 59 || s > 60 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    Some((days * 86_400 + h * 3600 + m * 60 + s - offset_s) as f64 + fraction)
}

/// The clock part and the offset in seconds (`Z` and none are 0).
fn split_offset(rest: &str) -> Option<(&str, i64)> {
    if let Some(clock) = rest.strip_suffix('Z') {
        return Some((clock, 0));
    }
    match rest.rfind(['+', '-']) {
        Some(i) => {
            let (clock, off) = rest.split_at(i);
            let sign = if off.starts_with('-') { -1 } else { 1 };
            let (h, m) = off[1..].split_once(':').unwrap_or((&off[1..], "00"));
            let h: i64 = number(h, 2)?;
            let m: i64 = number(m, 2)?;
            if h > 14 || m > 59 {
                return None;
            }
            Some((clock, sign * (h * 3600 + m * 60)))
        }
        None => Some((rest, 0)),
    }
}

fn number(s: &str, digits: usize) -> Option<i64> {
    (s.len() == digits && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

fn days_in(year: i64, month: i64) -> i64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to a proleptic Gregorian date (H. Hinnant's
/// `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::seconds;

    #[test]
    fn naive_and_offset_times() {
        assert_eq!(seconds("1970-01-01 00:00:00"), Some(0.0));
        assert_eq!(seconds("2000-03-01 00:00:00"), Some(951_868_800.0));
        // Philly's example job: queued 30 s, its second attempt 193,182 s.
        let sub = seconds("2017-10-07 01:11:39").unwrap();
        let start = seconds("2017-10-07 01:12:09").unwrap();
        assert_eq!(start - sub, 30.0);
        let a = seconds("2017-10-07 01:13:30").unwrap();
        let b = seconds("2017-10-09 06:53:12").unwrap();
        assert_eq!(b - a, 193_182.0);
        // Acme: the offset counts; the same instant in two zones is equal.
        assert_eq!(
            seconds("2023-03-01 08:00:00+08:00"),
            seconds("2023-03-01T00:00:00Z")
        );
        assert_eq!(
            seconds("2023-05-17 11:01:16+00:00").unwrap()
                - seconds("2023-05-17 11:00:58+00:00").unwrap(),
            18.0
        );
        assert_eq!(
            seconds("2023-03-01 00:00:00.5-01:00"),
            Some(1_677_632_400.5)
        );
    }

    #[test]
    fn what_is_not_a_time() {
        for bad in [
            "",
            "None",
            "2017-10-07",
            "2017-13-07 01:00:00",
            "17-10-07 01:00:00",
            "2017-10-07 1:00:00",
            "2017-10-07 01:00:00+8",
        ] {
            assert_eq!(seconds(bad), None, "{bad}");
        }
    }
}
